"""Apertus (Swiss AI) and Apertus 1.5's language model: Arcee's plain MLP with xIELU, whose two learned scalars per
layer (a_p, a_n) are parameters and whose β and ε are stored buffers; per-head q/k RMSNorm before RoPE; llama3 RoPE
on base 1.2e7 by default.

Every expected total is transformers 5.24's own (the *ForCausalLM on the meta device, sum of numel over
parameters()), for ApertusConfig()'s defaults and a random config; the defaults' totals are derived by hand too. The
fixtures tests/fixtures/hf/apertus and apertus1p5_text (tests/fixtures/hf/generate.py) check logits, every layer, a
decode step and the gradients against transformers (tests/test_checkpoint.py, tests/test_gradients.py).
"""

from __future__ import annotations

import pytest

from blockcli.config import ConfigError, parse_config
from blockcli.count import count_parameters
from test_dense_families import _sizes, assert_totals_are_transformers_own, mapped, total

# ApertusConfig's sizes (Apertus-8B): as many K/V heads as heads (32 of 128), untied; Apertus 1.5's vocabulary
_APERTUS_SIZES = _sizes(4096, 14336, 32, 32, 131072, 65536)
_APERTUS1P5_SIZES = _sizes(4096, 14336, 32, 32, 266752, 65536)


def _by_hand(vocab: int) -> int:
    """32 layers of q, k, v, o (4096² each), up and down (4096·14336 each), two norms (4096), q/k norms (128 each)
    and xIELU's a_p, a_n; embeddings and an untied head (V·4096 each); the final norm."""
    d, f, d_h = 4096, 14336, 128
    layer = 4 * d * d + 2 * d * f + 2 * d + 2 * d_h + 2
    return 32 * layer + 2 * vocab * d + d


# a random config: 6 heads over 2 K/V heads, tied, q/k/v/o biases, its own llama3 RoPE
_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, intermediate_size=80, num_hidden_layers=3,
               vocab_size=300, max_position_embeddings=96, tie_word_embeddings=True, pad_token_id=0, attention_bias=True,
               rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 4.0,
                                "original_max_position_embeddings": 32, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0})

# model_type → (sizes, transformers' total for the defaults, by hand, random config, transformers' total for it)
CASES = {
    "apertus": (_APERTUS_SIZES, 6_979_596_352, _by_hand(131072), _RANDOM, 56_646),
    "apertus1p5_text": (_APERTUS1P5_SIZES, 8_091_086_912, _by_hand(266752), _RANDOM, 56_646),
}


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_counts_equal_transformers_totals(model_type: str) -> None:
    sizes, defaults_total, by_hand, fields, random_total = CASES[model_type]
    assert by_hand == defaults_total
    assert total(model_type, sizes) == defaults_total
    assert total(model_type, fields) == random_total


def test_the_xielu_rows_name_two_parameters_and_two_buffers_per_layer() -> None:
    result = count_parameters(parse_config(mapped("apertus", _APERTUS_SIZES)))
    scalars = next(c for c in result.components if c.name == "mlp.act")
    constants = next(c for c in result.components if c.name == "mlp.act_buffers")
    assert (scalars.count, scalars.kind, scalars.keys) == (2, "tensor", ("act_alpha_p", "act_alpha_n"))
    assert (constants.count, constants.kind, constants.keys) == (2, "buffer", ("act_beta", "act_eps"))
    assert result.buffers == 32 * 2  # β and ε of each layer: stored, not parameters


def test_apertus_reads_its_block() -> None:
    block = mapped("apertus", _APERTUS_SIZES)["block"]
    assert (block["activation"], block.get("gated", False), block["qk_norm"], block["norm"]) == \
        ("xielu", False, "head", "rmsnorm")
    assert block["rope_theta"] == 12_000_000.0 and block["rope_scaling"]["type"] == "llama3"
    assert block["bias"] is False  # attention_bias false; ApertusMLP builds up_proj and down_proj without biases
    assert mapped("apertus", {**_APERTUS_SIZES, "attention_bias": True})["block"]["bias"]["mlp"] is False
    with pytest.raises(ConfigError, match="mlp_bias"):
        mapped("apertus", {**_APERTUS_SIZES, "mlp_bias": True})  # not ApertusConfig's


def test_apertus1p5_text_refuses_a_pruned_head() -> None:
    assert mapped("apertus1p5_text", {**_APERTUS1P5_SIZES, "output_vocab_size": None})["model"]["vocab_size"] == 266752
    with pytest.raises(ConfigError, match="output_vocab_size"):
        mapped("apertus1p5_text", {**_APERTUS1P5_SIZES, "output_vocab_size": 131072})


def test_xielu_is_refused_with_experts() -> None:
    block = {"d_model": 16, "n_heads": 4, "d_ff": 8, "activation": "xielu",
             "moe": {"n_experts": 2, "top_k": 1, "d_expert": 4}}
    with pytest.raises(ConfigError, match="xielu"):
        parse_config({"block": block})


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_totals_and_sizes_here_are_transformers_own(model_type: str) -> None:
    sizes, defaults_total, _, fields, random_total = CASES[model_type]
    assert_totals_are_transformers_own(model_type, sizes, (), defaults_total, fields, random_total)


def test_a_trained_apertus_saves_its_buffers_0_dimensional_as_transformers_does(tmp_path) -> None:
    """train --save writes β and ε back as the 0-dimensional tensors transformers loads (and blockcli reads again)."""
    from safetensors.numpy import load_file

    from test_checkpoint import FIXTURES, cli

    proc = cli("train", FIXTURES / "apertus", "--steps", "2", "--save", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    stored = load_file(tmp_path / "out" / "model.safetensors")
    original = load_file(FIXTURES / "apertus" / "model.safetensors")
    assert {k: v.shape for k, v in stored.items()} == {k: v.shape for k, v in original.items()}
    assert stored["model.layers.0.mlp.act_fn.beta"].shape == () and stored["model.layers.0.mlp.act_fn.beta"] == 0.5
    assert stored["model.layers.1.mlp.act_fn.alpha_p"] != original["model.layers.1.mlp.act_fn.alpha_p"]  # trained
    assert cli("count", tmp_path / "out").returncode == 0
