"""The mixtures of experts that are a diff of a family blockcli already reads (blockcli/families/moe_relatives.py):
HunYuan MoE, ERNIE 4.5 MoE. Their parameter counts against transformers 5.24's own totals (the causal LM built on
the meta device from the config, sum of numel over parameters(), tied weights once) and a hand count, for the config
class's defaults (its sizes written out, as blockcli asks for them) and for a random config with other switches set;
the torch-marked test at the end recomputes every total and reads the sizes from the config class itself. Their
forward, decode step and gradients are held to transformers by tests/test_checkpoint.py and tests/test_gradients.py
on the fixtures tests/fixtures/hf/generate.py writes."""

from __future__ import annotations

import pytest

from conftest import config_error_message
from test_dense_families import _sizes, assert_totals_are_transformers_own, mapped, total


def hunyuan_moe_by_hand(d: int, f: int, layers: int, q: int, kv: int, d_h: int, experts: int, vocab: int,
                        tied: bool, bias: bool) -> int:
    """Q, K, V, O (biases with attention_bias), query_layernorm and key_layernorm (d_h each), two RMSNorms, the
    router (E·d), E SwiGLU experts and the shared SwiGLU MLP, all intermediate_size wide; embedding, final norm,
    an untied head."""
    attention = 2 * d * q + 2 * d * kv + (q + 2 * kv + d if bias else 0) + 2 * d_h
    return layers * (attention + 2 * d + experts * d + (experts + 1) * 3 * d * f) + vocab * d * (1 if tied else 2) + d


_HUNYUAN_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, head_dim=12, intermediate_size=40,
                       num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, tie_word_embeddings=True,
                       attention_bias=True, num_experts=5, moe_topk=2, pad_token_id=0, rope_parameters={
                           "rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0})

# model_type → (the config class's sizes (with what it leaves null that transformers needs), transformers' total for
#               them, the total by hand, a random config, transformers' total for it, its total by hand)
CASES: dict[str, tuple[dict, int, int, dict, int, int]] = {
    # HunYuanMoEV1Config's sizes with the head_dim transformers needs (its default null fails): one expert, top 1,
    # every head its own K/V, untied
    "hunyuan_v1_moe": ({**_sizes(4096, 11008, 32, 32, 290943, 2048), "head_dim": 128}, 13_188_337_664,
                       hunyuan_moe_by_hand(4096, 11008, 32, 4096, 4096, 128, 1, 290943, False, False),
                       _HUNYUAN_RANDOM, 147_360, hunyuan_moe_by_hand(48, 40, 3, 72, 24, 12, 5, 300, True, True)),
}

# fields a config class leaves null that transformers cannot build the model without (set in CASES' sizes)
NEEDED = {"hunyuan_v1_moe": ("head_dim",)}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_config_class_defaults_count_as_transformers_and_by_hand(model_type: str) -> None:
    sizes, transformers_total, by_hand, _, _, _ = CASES[model_type]
    assert total(model_type, sizes) == transformers_total == by_hand


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_a_random_config_counts_as_transformers_and_by_hand(model_type: str) -> None:
    _, _, _, fields, transformers_total, by_hand = CASES[model_type]
    assert total(model_type, fields) == transformers_total == by_hand


def test_hunyuan_moe_is_hunyuan_dense_with_a_shared_mlp_beside_renormalised_experts() -> None:
    block = mapped("hunyuan_v1_moe", _HUNYUAN_RANDOM)["block"]
    assert block["moe"] == {"n_experts": 5, "top_k": 2, "d_expert": 40, "renormalize": True, "d_shared": 40}
    assert (block["qk_norm"], block["qk_norm_after_rope"]) == ("head", True)
    assert block["rope_theta"] == pytest.approx(10000.0 * 1000.0 ** (12 / 10), rel=1e-15)


@pytest.mark.parametrize("key", ["num_experts", "moe_topk"])
def test_hunyuan_moe_per_layer_expert_arrays_are_refused_naming_the_field(key: str) -> None:
    data = {**_HUNYUAN_RANDOM, key: [2, 2, 2]}
    assert f"field '{key}'" in config_error_message(lambda: mapped("hunyuan_v1_moe", data))


# ----------------------------------------------------------------------------- against transformers itself


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_totals_and_sizes_here_are_transformers_own(model_type: str) -> None:
    """The config class's sizes are the ones written above, and transformers on the meta device counts the
    totals written above, for them and for the random config; blockcli reads the whole of the config class's
    to_dict() (every default spelled out) to the same total."""
    sizes, defaults_total, _, fields, random_total, _ = CASES[model_type]
    assert_totals_are_transformers_own(model_type, sizes, NEEDED.get(model_type, ()), defaults_total, fields,
                                       random_total)
