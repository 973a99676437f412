"""Gemma 4 (gemma4_text, and the gemma4 composite's language model) read from config.json: parameter counts against
transformers 5.24's own totals (Gemma4ForCausalLM / Gemma4ForConditionalGeneration built on the meta device from the
config, the sum of numel over parameters(), the towers left out) and a hand count, for the config class's defaults and
a random config; the per-layer settings its fields give (layer kinds, global heads, k = v, K/V sharing, the wide MLP,
experts beside the dense MLP, per-layer embeddings); proportional RoPE's frequencies by hand; the refusals. The forward,
every layer and the decode step are held to transformers by tests/test_checkpoint.py on the gemma4_text and gemma4
fixtures tests/fixtures/hf/generate.py writes (K/V sharing, k = v, the experts, the per-layer inputs and a random layer
scalar all in them)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blockcli import Model
from blockcli.config import BlockConfig, ConfigError, InputError, RopeScaling, parse_config
from blockcli.count import count_parameters
from blockcli.hf import hf_to_mapping
from blockcli.ops import rope_frequencies
from blockcli.sources import load_config
from conftest import config_error_message

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


def config_of(data: dict):
    return parse_config(hf_to_mapping(data, "x.json"))


def total(data: dict) -> int:
    return count_parameters(config_of(data)).total


def gemma4_by_hand(d: int, L: int, h: int, kv: int, d_h: int, d_ff: int, V: int, types: list[str], *,
                   global_d_h: int, global_kv: int | None, k_eq_v: bool, shared: int, double: bool,
                   experts: tuple[int, int] = (0, 0), ple: tuple[int, int] = (0, 0), tied: bool = True,
                   bias: bool = False) -> int:
    """Per layer: W_Q, W_O; W_K, W_V (W_K alone on a full layer with k = v; neither on a layer reusing another's K/V),
    q and k norms (d_h each; no k norm when shared), four RMSNorms d, the gated MLP 3·d·d_ff (twice as wide on a
    shared layer with the double-wide MLP), with experts: router d·E, its scale d, the per-expert scale E, E experts
    3·d·d_e and three more norms; with per-layer inputs: gate and projection d·d_p each and a norm d. The model: the
    embedding V·d, the per-layer table V_p·L·d_p, its projection d·L·d_p and norm d_p, the final norm, the head."""
    first_shared = L - shared
    n = 0
    for i, kind in enumerate(types):
        full = kind == "full_attention"
        width = global_d_h if full else d_h
        heads_kv = (global_kv if full and k_eq_v and global_kv else kv)
        own_kv = i < first_shared
        n += 2 * d * h * width + (h * width + d if bias else 0)
        if own_kv:
            matrices = 1 if (full and k_eq_v) else 2
            n += matrices * (d * heads_kv * width + (heads_kv * width if bias else 0)) + width
        n += width + 4 * d
        n += 3 * d * d_ff * (2 if double and not own_kv else 1)
        E, d_e = experts
        if E:
            n += d * E + d + E + 3 * E * d * d_e + 3 * d
        d_p, _ = ple
        if d_p:
            n += 2 * d * d_p + d
    d_p, V_p = ple
    return n + V * d * (1 if tied else 2) + d + (V_p * L * d_p + d * L * d_p + d_p if d_p else 0)


# Gemma4TextConfig(): 30 layers, five sliding (256-wide heads, 4 K/V heads) to one full (512-wide heads), per-layer
# embeddings 256 wide over 262,144 tokens, tied
DEFAULT_TYPES = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(30)]
# a random config: 7 layers of two kinds, global heads 20 wide with one K/V head and k = v, the last 3 layers reusing
# the K/V of the last sliding (3) and full (1) layer before them, MLPs twice as wide there,
# 5 experts (top 2, 14 wide) beside every MLP, per-layer inputs 6 wide over 200 tokens, biases, an untied head
RANDOM_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention",
                "sliding_attention", "full_attention"]
RANDOM = {"model_type": "gemma4_text", "hidden_size": 48, "intermediate_size": 40, "num_hidden_layers": 7,
          "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 12, "vocab_size": 300,
          "layer_types": RANDOM_TYPES, "global_head_dim": 20, "num_global_key_value_heads": 1,
          "attention_k_eq_v": True, "num_kv_shared_layers": 3, "use_double_wide_mlp": True, "enable_moe_block": True,
          "num_experts": 5, "top_k_experts": 2, "moe_intermediate_size": 14, "hidden_size_per_layer_input": 6,
          "vocab_size_per_layer_input": 200, "attention_bias": True, "tie_word_embeddings": False}


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    ({"model_type": "gemma4_text"}, 5_077_177_856,
     gemma4_by_hand(2304, 30, 8, 4, 256, 9216, 262_144, DEFAULT_TYPES, global_d_h=512, global_kv=None, k_eq_v=False,
                    shared=0, double=False, ple=(256, 262_144))),
    (RANDOM, 247_593,
     gemma4_by_hand(48, 7, 6, 2, 12, 40, 300, RANDOM_TYPES, global_d_h=20, global_kv=1, k_eq_v=True, shared=3,
                    double=True, experts=(5, 14), ple=(6, 200), tied=False, bias=True)),
])
def test_gemma4_text_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    result = count_parameters(config_of(data))
    assert result.total == by_hand == transformers_total
    assert result.reconciled.match
    assert result.buffers == data.get("num_hidden_layers", 30)  # one layer scalar per layer, not a parameter


def test_the_composite_counts_its_language_model() -> None:
    """Gemma4ForConditionalGeneration(Gemma4Config()) on the meta device: 5,077,177,856 parameters (the default has
    no vision or audio tower), the text model's."""
    mapping = hf_to_mapping({"model_type": "gemma4", "text_config": {}}, "x.json")
    assert count_parameters(parse_config(mapping)).total == 5_077_177_856
    assert "vision tower" in mapping["about"]["description"]


def layers(data: dict) -> list[BlockConfig]:
    config = config_of(data)
    return [config.layer_block(i) for i in range(config.model.n_layers)]


def test_the_random_configs_layers() -> None:
    blocks = layers(RANDOM)
    full = [b for b, kind in zip(blocks, RANDOM_TYPES) if kind == "full_attention"]
    sliding = [b for b, kind in zip(blocks, RANDOM_TYPES) if kind == "sliding_attention"]
    assert {(b.head_dim, b.sliding_window, b.rope_theta) for b in full} == {(20, 0, 1e6)}
    assert {(b.head_dim, b.sliding_window, b.rope_theta) for b in sliding} == {(12, 512, 1e4)}
    assert all(b.rope_scaling == RopeScaling("proportional", fraction=0.25) for b in full)
    assert all(b.rope_scaling is None and b.rope == 1.0 for b in sliding)
    # layers 4 and 5, 6 reuse the K/V of the last layer of their kind before layer 4: 3 (sliding) and 1 (full)
    assert [b.kv_from for b in blocks] == [-1, -1, -1, -1, 1, 3, 1]
    assert [b.k_eq_v for b in blocks] == [False, True, False, False, False, False, False]
    assert [b.n_kv_heads for b in blocks] == [2, 1, 2, 2, 1, 2, 1]
    assert [b.d_ff for b in blocks] == [40] * 4 + [80] * 3
    assert all(b.v_norm and b.layer_scalar and b.per_layer_input == 6 and b.qk_norm == "head"
               and b.attention_scale == 1.0 and b.placement == "sandwich" and not b.norm_unit_offset for b in blocks)
    moe = blocks[0].moe
    assert (moe.n_experts, moe.top_k, moe.d_expert, moe.renormalize, moe.beside_dense, moe.router_norm,
            moe.expert_scale) == (5, 2, 14, True, True, True, True)


def test_saved_per_layer_config_is_read() -> None:
    """transformers 5 saves the full layers' head_dim and K/V heads as per_layer_config (the fixture's config.json)."""
    config = load_config(FIXTURES / "gemma4_text")
    assert [(config.layer_block(i).head_dim, config.layer_block(i).n_kv_heads) for i in range(4)] == [
        (8, 2), (12, 1), (8, 2), (12, 1)]
    assert [config.layer_block(i).kv_from for i in range(4)] == [-1, -1, 0, 1]


def test_proportional_rope_by_hand() -> None:
    """_compute_proportional_rope_parameters: the first int(fraction·d_h // 2) pairs turn by θ^(−2i/d_h), the others
    not at all, all divided by factor."""
    inv, attention = rope_frequencies(16, 100.0, RopeScaling("proportional", factor=2.0, fraction=0.25))
    assert attention == 1.0
    np.testing.assert_allclose(inv, [1 / 2, 100 ** (-2 / 16) / 2, 0, 0, 0, 0, 0, 0], rtol=1e-15)


def test_last_layer_is_forced_full_with_a_note() -> None:
    data = {**RANDOM, "layer_types": RANDOM_TYPES[:-1] + ["sliding_attention"], "num_kv_shared_layers": 0}
    mapping = hf_to_mapping(data, "x.json")
    config = parse_config(mapping)
    assert config.layer_block(6).sliding_window == 0 and config.layer_block(6).head_dim == 20


@pytest.mark.parametrize("change, field", [
    ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    ({"num_kv_shared_layers": 7}, "num_kv_shared_layers"),
    ({"num_kv_shared_layers": 6}, "num_kv_shared_layers"),  # the one full layer before the shared ones is gone
    ({"num_experts": None}, "num_experts"),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0},
                          "full_attention": {"rope_type": "default", "rope_theta": 1e6}}},
     "rope_parameters.sliding_attention.rope_type"),
    ({"per_layer_config": {"1": {"intermediate_size": 8}}}, "per_layer_config.1.intermediate_size"),
    ({"unknown_field": 1}, "unknown_field"),
])
def test_refusals_name_the_field(tmp_path: Path, change: dict, field: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**RANDOM, **change}))
    message = config_error_message(lambda: load_config(path))
    assert f"'{field}'" in message, message


def test_a_layer_alone_and_its_gradients_are_refused_in_one_line() -> None:
    folder = FIXTURES / "gemma4_text"
    config = load_config(folder)
    model = Model.from_config(config, weights=folder, dtype="float64")
    with pytest.raises(InputError, match="per-layer input"):
        model.blocks[0](np.zeros((1, 3, 16)))  # no per-layer input: it runs only inside its model
    with pytest.raises(InputError, match="gradients through Gemma 4"):
        model.loss_and_grads(np.array([[1, 2, 3]]))
    fresh = Model.from_config(config, weights=folder, dtype="float64")
    fresh.embed(np.array([[1, 2, 3]]))
    with pytest.raises(InputError, match="layer 1"):  # layer 3 reads layer 1's keys, which has not run
        fresh.blocks[3](np.zeros((1, 3, 16)))


@pytest.mark.parametrize("mapping, field", [
    ({"block": {"d_model": 8, "n_heads": 2, "kv_from": 0}, "model": {"n_layers": 2, "vocab_size": 10}}, "kv_from"),
    ({"block": {"d_model": 8, "n_heads": 2, "per_layer_input": 4}, "model": {"n_layers": 2, "vocab_size": 10}},
     "per_layer_input"),
    ({"block": {"d_model": 8, "n_heads": 2, "k_eq_v": True, "clip_qkv": 1.0}}, "k_eq_v"),
    ({"block": {"d_model": 8, "n_heads": 2, "moe": {"n_experts": 2, "top_k": 1, "d_expert": 4,
                                                     "beside_dense": True}}}, "moe.beside_dense"),
    ({"block": {"d_model": 8, "n_heads": 2, "rope": 0.5, "rope_scaling": {"type": "proportional", "fraction": 0.5}}},
     "rope_scaling"),
])
def test_schema_checks(mapping: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_config(mapping)


@pytest.mark.parametrize("name", ["gemma4_text", "gemma4"])
def test_token_by_token_decoding_gives_transformers_full_pass_logits(name: str) -> None:
    """Decoding one token at a time after a 2-token prompt (the shared layers reading their source layer's growing
    cache, the per-layer inputs of each new token, the window of 4 passed after 4 tokens) gives, at every position,
    the logits of transformers' full pass (the fixture's)."""
    folder = FIXTURES / name
    with np.load(folder / "expected.npz") as data:
        ids, want = data["input_ids"], data["logits_float64"]
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64")
    caches = model.new_cache()
    got = [model.step(ids[:, :2], caches)]
    got += [model.step(ids[:, t:t + 1], caches) for t in range(2, ids.shape[1])]
    logits = np.concatenate(got, axis=1)
    assert np.max(np.abs(logits - want)) / np.max(np.abs(want)) <= 1e-9


def test_gemma4_unified_text_is_gemma4s_block_without_per_layer_inputs_or_experts() -> None:
    """Gemma4UnifiedTextConfig(): Gemma 4's 30 layers (512-wide heads on the full ones) with neither per-layer
    embeddings nor experts, a window of 1024: 3,010,758,400 on transformers' meta device, and by hand."""
    unified = {"model_type": "gemma4_unified_text"}
    assert total(unified) == 3_010_758_400 == gemma4_by_hand(
        2304, 30, 8, 4, 256, 9216, 262_144, DEFAULT_TYPES, global_d_h=512, global_kv=None, k_eq_v=False, shared=0,
        double=False)
    config = config_of(unified)
    assert config.block.sliding_window == 1024 and config.model.max_positions == 262_144
    assert not config.model.per_layer_dim and config.block.moe is None
    assert 'use_bidirectional_attention "vision"' in config.about.description
    for field, value in (("enable_moe_block", True), ("hidden_size_per_layer_input", 4)):
        message = config_error_message(lambda: hf_to_mapping({**unified, field: value}, "x.json"), field)
        assert f"'{field}'" in message
