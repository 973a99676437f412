"""Families built on DeepSeek-V3's latent attention (issue #28), each a diff of a family blockcli has: Youtu-LLM
(DeepSeek-V3's attention on every layer with Qwen3's dense MLP).

Every expected total is transformers 5.24's own (the *ForCausalLM on the meta device, sum of numel over
parameters()), for the config class's defaults (as the census holds them) and a random config; the defaults' totals
are derived by hand too. The fixtures (tests/fixtures/hf/generate.py) check logits, every layer, a decode step and
the gradients against transformers (tests/test_checkpoint.py, tests/test_gradients.py); the fuzz draws
(tests/fixtures/cases/draws.py) random configs (tests/test_random_configs.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blockcli import Model
from blockcli.config import ConfigError, parse_config
from blockcli.hf import hf_to_mapping
from conftest import ROOT
from test_dense_families import _sizes, assert_totals_are_transformers_own, mapped, total

FIXTURES = ROOT / "tests" / "fixtures" / "hf"


def _youtu_by_hand() -> int:
    """32 layers of q_a (2048·1536) and its norm (1536), q_b (1536·16·192), kv_a (2048·(512 + 64)) and its norm
    (512), kv_b (512·16·(128 + 128)), o (16·128·2048), the MLP (3·2048·6144), two norms (2·2048); tied embeddings
    (128256·2048); the final norm."""
    d, f, h = 2048, 6144, 16
    layer = d * 1536 + 1536 + 1536 * h * 192 + d * 576 + 512 + 512 * h * 256 + h * 128 * d + 3 * d * f + 2 * d
    return 32 * layer + 128256 * d + d


# YoutuConfig's sizes (Youtu-LLM-2B)
_YOUTU_SIZES = _sizes(2048, 6144, 32, 16, 128256, 131072)
# a random Youtu: 5 heads (48 is not a multiple), queries through one q_proj (q_lora_rank null), attention biases,
# rotate-half RoPE, untied
_YOUTU_RANDOM = dict(hidden_size=48, num_attention_heads=5, num_key_value_heads=5, intermediate_size=80,
                     num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, tie_word_embeddings=False,
                     q_lora_rank=None, kv_lora_rank=10, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=7,
                     attention_bias=True, rope_interleave=False)

# model_type → (sizes, the config class's nulls blockcli needs, transformers' total for the defaults, by hand,
# random config, transformers' total for it)
CASES = {
    "youtu": (_YOUTU_SIZES, (), 1_961_560_064, _youtu_by_hand(), _YOUTU_RANDOM, 80_118),
}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_counts_equal_transformers_totals(model_type: str) -> None:
    sizes, _, defaults_total, by_hand, fields, random_total = CASES[model_type]
    assert by_hand == defaults_total
    assert total(model_type, sizes) == defaults_total
    assert total(model_type, fields) == random_total


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_totals_and_sizes_here_are_transformers_own(model_type: str) -> None:
    sizes, needed, defaults_total, _, fields, random_total = CASES[model_type]
    assert_totals_are_transformers_own(model_type, sizes, needed, defaults_total, fields, random_total)


def _switched(tmp_path: Path, name: str, switch: dict) -> Model:
    """The fixture's model with `switch` merged into its block: a feature turned off."""
    data = hf_to_mapping(json.loads((FIXTURES / name / "config.json").read_text()), "config.json")
    data["block"] = {**data["block"], **switch}
    return Model.from_config(parse_config(data), weights=FIXTURES / name, dtype="float64")


def _far(model: Model, name: str) -> float:
    with np.load(FIXTURES / name / "expected.npz") as want:
        got, ref = model(want["input_ids"]), want["logits_float64"]
    return float(np.abs(got - ref).max() / np.abs(ref).max())


# ----------------------------------------------------------------------------- Youtu-LLM


def test_youtu_reads_latent_attention_and_a_dense_mlp_on_every_layer() -> None:
    data = mapped("youtu", _YOUTU_SIZES)
    block, model = data["block"], data["model"]
    assert block["mla"] == {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                            "v_head_dim": 128} and block["rope_layout"] == "interleaved"
    assert "moe" not in block and "layers" not in data and block["activation"] == "swiglu" and block["bias"] is False
    assert model["tie_embeddings"] is True
    random = mapped("youtu", _YOUTU_RANDOM)["block"]
    assert random["mla"]["q_lora_rank"] == 0 and random["rope_layout"] == "half"
    assert random["bias"] == {"qkv": True, "out": True, "mlp": False, "norm": False}


@pytest.mark.parametrize("field, value", [
    ("n_routed_experts", 8),  # YoutuConfig removes DeepSeek-V3's expert fields: not a field of its
    ("first_k_dense_replace", 1),
    ("mlp_bias", True),  # Qwen3's MLP has no biases and YoutuConfig no such field
    ("num_key_value_heads", 1),  # latent attention: one K and V per query head
])
def test_youtu_refuses_what_its_config_class_does_not_have(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_config(mapped("youtu", {**_YOUTU_SIZES, field: value}))


def test_youtu_notes_that_transformers_zeroes_the_pad_row_on_loading() -> None:
    said = mapped("youtu", {**_YOUTU_SIZES, "pad_token_id": 128001})["about"]["description"]
    assert "zeroes embedding row 128001 (pad_token_id)" in said
    assert "zeroes" not in mapped("youtu", _YOUTU_SIZES)["about"]["description"]  # YoutuConfig's: no pad token


def test_the_youtu_fixture_exercises_its_attention_biases_and_interleaved_rope(tmp_path: Path) -> None:
    assert _far(_switched(tmp_path, "youtu", {}), "youtu") < 1e-9
    assert _far(_switched(tmp_path, "youtu", {"rope_layout": "half"}), "youtu") > 1e-3
