"""The dense decoder families of issue #28 (GLM-4, GLM-4-0414, …): config.json read with each config class's
defaults, counted exactly.

Every expected total is transformers 5.24's own: the family's *ForCausalLM built on the meta device from the
config (sum of numel over model.parameters(), tied weights once), for the config class's defaults (its sizes
written out, as blockcli asks for them) and for a random config that sets every switch away from its default.
The torch-marked test at the end recomputes each of those totals and reads the sizes from the config class
itself, so none of the figures here rests on blockcli. The defaults' totals are also derived by hand. The
fixtures in tests/fixtures/hf/<family>/ (tests/fixtures/hf/generate.py) check logits, every layer, a decode
step and the gradients against transformers (tests/test_checkpoint.py, tests/test_gradients.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from blockcli.config import parse_config
from blockcli.count import count_parameters
from blockcli.hf import hf_to_mapping

# the sizes of GlmConfig and Glm4Config (GLM-4-9B): the same
_GLM_SIZES = dict(hidden_size=4096, intermediate_size=13696, num_hidden_layers=40, num_attention_heads=32,
                  vocab_size=151552, max_position_embeddings=131072)


def _glm_by_hand(sandwich: bool) -> int:
    d, f, kv, layers, vocab = 4096, 13696, 2 * 128, 40, 151552
    attention = d * d + d + 2 * (d * kv + kv) + d * d  # q/k/v with biases, o_proj without
    layer = attention + 3 * d * f + (4 if sandwich else 2) * d  # gate | up, down; the norms
    return layers * layer + 2 * vocab * d + d  # embeddings, untied head, final norm


# model_type → (the config class's sizes, transformers' total for them, the total by hand,
#               a random config, transformers' total for it)
CASES: dict[str, tuple[dict, int, int, dict, int]] = {
    # head_dim 10 with 0.4 of it rotated (4 dims), no q/k/v biases, tied head
    "glm": (_GLM_SIZES, 9_399_951_360, _glm_by_hand(False),
            dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=10, partial_rotary_factor=0.4,
                 attention_bias=False, intermediate_size=70, num_hidden_layers=3, vocab_size=300, max_position_embeddings=96,
                 tie_word_embeddings=True, pad_token_id=0), 70_896),
    "glm4": (_GLM_SIZES, 9_400_279_040, _glm_by_hand(True),
             dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=10, partial_rotary_factor=0.4,
                  attention_bias=False, intermediate_size=70, num_hidden_layers=3, vocab_size=300, max_position_embeddings=96,
                  tie_word_embeddings=True, pad_token_id=0), 71_184),
}


def mapped(model_type: str, fields: dict[str, Any]) -> dict[str, Any]:
    return hf_to_mapping({"model_type": model_type, **fields}, f"{model_type}.json")


def total(model_type: str, fields: dict[str, Any]) -> int:
    return count_parameters(parse_config(mapped(model_type, fields))).total


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_config_class_defaults_count_as_transformers_and_by_hand(model_type: str) -> None:
    sizes, transformers_total, by_hand, _, _ = CASES[model_type]
    assert total(model_type, sizes) == transformers_total == by_hand


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_a_random_config_counts_as_transformers(model_type: str) -> None:
    _, _, _, fields, transformers_total = CASES[model_type]
    assert total(model_type, fields) == transformers_total


# ----------------------------------------------------------------------------- what each family maps onto


@pytest.mark.parametrize("model_type, placement", [("glm", "pre"), ("glm4", "sandwich")])
def test_glm_rotates_half_of_each_head_in_interleaved_pairs_with_qkv_biases(model_type: str, placement: str) -> None:
    block = mapped(model_type, _GLM_SIZES)["block"]
    assert (block["rope"], block["rope_layout"], block["head_dim"], block["n_kv_heads"]) == (0.5, "interleaved", 128, 2)
    assert block["bias"] == {"qkv": True, "out": False, "mlp": False, "norm": False}
    assert block["placement"] == placement and block["norm_eps"] == 1.5625e-07
    assert mapped(model_type, {**_GLM_SIZES, "attention_bias": False})["block"]["bias"] is False


# ----------------------------------------------------------------------------- against transformers itself


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_totals_and_sizes_here_are_transformers_own(model_type: str) -> None:
    """The config class's sizes are the ones written above, and transformers on the meta device counts the
    totals written above, for them and for the random config; blockcli reads the whole of the config class's
    to_dict() (every default spelled out) to the same total."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    sizes, defaults_total, _, fields, random_total = CASES[model_type]
    defaults = transformers.AutoConfig.for_model(model_type)
    assert {key: getattr(defaults, key) for key in sizes} == sizes
    for config, want in ((defaults, defaults_total), (transformers.AutoConfig.for_model(model_type, **fields),
                                                      random_total)):
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        assert sum(p.numel() for p in model.parameters()) == want
        data = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}
        assert count_parameters(parse_config(hf_to_mapping(data, "x.json"))).total == want
