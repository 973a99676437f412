"""Llama 4 (llama4_text, and the llama4 vision-language composite) read from config.json: parameter counts against
transformers 5.24's own totals (Llama4ForCausalLM built on the meta device from the config, sum of numel over
parameters()) and a hand count, for the config class's defaults and a random config; the per-layer settings its
config fields give (iRoPE, chunks, q/k norms, temperature tuning, dense and mixture layers); the two query-scale
formulas by hand; the chunked layers' K/V-cache sizing; the presets against their published configs. The forward,
every layer, the decode step and the gradients are held to transformers by tests/test_checkpoint.py and
tests/test_gradients.py on the llama4_text fixture generate.py writes."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

from blockcli.block import query_scales
from blockcli.config import BlockConfig, ConfigError, parse_config
from blockcli.count import count_parameters
from blockcli.hf import hf_to_mapping
from blockcli.sizing import Dims, inference, score_pairs
from blockcli.sources import load_config
from conftest import config_error_message


def total(data: dict) -> int:
    return count_parameters(parse_config(hf_to_mapping(data, "x.json"))).total


def llama4_by_hand(d: int, layers: int, heads: int, kv: int, d_h: int, d_e: int, d_dense: int, experts: int,
                   vocab: int, moe_layers: set[int], tied: bool, bias: bool) -> int:
    """Q, K, V, O (with biases if attention_bias), two RMSNorms; a mixture layer: the router (E·d), E SwiGLU experts
    and the shared one, all d_e wide; a dense layer: a SwiGLU MLP d_dense wide (the L2 q/k norms have no weights);
    the embedding, the final norm and an untied head."""
    attention = 2 * d * heads * d_h + 2 * d * kv * d_h + (heads * d_h + 2 * kv * d_h + d if bias else 0)
    mixture = experts * d + (experts + 1) * 3 * d * d_e
    dense = 3 * d * d_dense
    blocks = sum(attention + 2 * d + (mixture if i in moe_layers else dense) for i in range(layers))
    return blocks + vocab * d * (1 if tied else 2) + d


# Llama4TextConfig's sizes (blockcli asks for the sizes themselves; every other field takes the class's default)
SIZES = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "num_hidden_layers": 48,
         "num_attention_heads": 40, "vocab_size": 202048, "max_position_embeddings": 131072}
# a random config: GQA 6/2 of 20 (not hidden_size / heads), 7 experts of 40 on the odd layers (interleave step 2),
# dense layers 56 wide, every third layer NoPE, chunks of 16, no q/k norm, biases on q/k/v/o, tied
RANDOM = {"model_type": "llama4_text", "hidden_size": 96, "intermediate_size": 40, "intermediate_size_mlp": 56,
          "num_hidden_layers": 5, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 20,
          "vocab_size": 1000, "num_local_experts": 7, "num_experts_per_tok": 2, "interleave_moe_layer_step": 2,
          "no_rope_layer_interval": 3, "attention_chunk_size": 16, "use_qk_norm": False, "tie_word_embeddings": True,
          "attention_bias": True, "max_position_embeddings": 4096}


@pytest.mark.parametrize("data, transformers_total, by_hand", [
    # Llama4TextConfig() on the meta device: Scout's shapes (48 mixture layers of 16 experts, GQA 40/8 of 128)
    (SIZES, 107_769_861_120,
     llama4_by_hand(5120, 48, 40, 8, 128, 8192, 16384, 16, 202048, set(range(48)), False, False)),
    (RANDOM, 486_184, llama4_by_hand(96, 5, 6, 2, 20, 40, 56, 7, 1000, {1, 3}, True, True)),
])
def test_llama4_text_counts_as_transformers(data: dict, transformers_total: int, by_hand: int) -> None:
    assert total(data) == by_hand == transformers_total


def test_llama4_composite_counts_its_language_model() -> None:
    """Llama4ForConditionalGeneration() on the meta device: 108,225,039,360 parameters, 107,769,861,120 of them
    outside vision_model. and multi_modal_projector."""
    mapping = hf_to_mapping({"model_type": "llama4", "text_config": {}}, "x.json")
    assert count_parameters(parse_config(mapping)).total == 107_769_861_120
    assert "vision tower" in mapping["about"]["description"]


def layer_blocks(data: dict) -> list[BlockConfig]:
    config = parse_config(hf_to_mapping(data, "x.json"))
    return [config.layer_block(i) for i in range(config.model.n_layers)]


def test_defaults_give_irope_chunks_l2_norms_and_temperature_tuning() -> None:
    """Every fourth layer NoPE (full attention, queries × 1 + 0.1·ln(1 + ⌊(p + 1) / 8192⌋)); the others rotate the
    pairs (2i, 2i + 1), attend in chunks of 8192 and L2-normalise their rotated q and k; every layer a mixture of
    16 experts (top 1, sigmoid weight on the input) and a shared expert 8192 wide."""
    for i, b in enumerate(layer_blocks(SIZES)):
        nope = (i + 1) % 4 == 0
        assert b.moe is not None and (b.moe.n_experts, b.moe.top_k, b.moe.d_expert, b.moe.d_shared) == (16, 1, 8192,
                                                                                                       8192)
        assert b.moe.scoring == "sigmoid" and b.moe.scale_input and not b.moe.renormalize
        assert (b.rope, b.rope_theta, b.norm_eps) == ((0.0 if nope else 1.0), 5e5, 1e-5)
        if nope:
            assert (b.attention_chunk, b.qk_norm) == (0, "none")
            assert (b.query_scale, b.query_scale_length, b.query_scale_offset) == (0.1, 8192, 1)
        else:
            assert (b.attention_chunk, b.qk_norm, b.qk_norm_after_rope, b.rope_layout) == (
                8192, "head_unscaled", True, "interleaved")
            assert b.query_scale == 0.0


def test_layer_pattern_fields_override_the_intervals() -> None:
    """no_rope_layers (1 RoPE, 0 NoPE) and moe_layers win over their intervals; layer_types says which layers are
    chunked; attn_temperature_tuning false leaves the NoPE queries alone."""
    data = {**RANDOM, "num_hidden_layers": 4, "no_rope_layers": [0, 1, 1, 0, 1], "moe_layers": [0, 2],
            "layer_types": ["full_attention", "chunked_attention", "full_attention", "full_attention"],
            "attn_temperature_tuning": False}
    blocks = layer_blocks(data)
    assert [b.rope > 0 for b in blocks] == [False, True, True, False]
    assert [b.attention_chunk for b in blocks] == [0, 16, 0, 0]
    assert [b.moe is not None for b in blocks] == [True, False, True, False]
    assert [b.d_ff for b in blocks if b.moe is None] == [56, 56]
    assert all(b.query_scale == 0.0 for b in blocks)
    tuned = layer_blocks({**data, "attn_temperature_tuning": True, "attn_scale": 0.3, "floor_scale": 5})
    assert [(b.query_scale, b.query_scale_length) for b in tuned] == [(0.3, 5), (0.0, 0), (0.0, 0), (0.3, 5)]


def test_without_a_chunk_size_every_layer_attends_fully() -> None:
    assert all(b.attention_chunk == 0 for b in layer_blocks({**SIZES, "attention_chunk_size": None}))


@pytest.mark.parametrize("change, field, words", [
    ({"no_rope_layers": [1, 0]}, "no_rope_layers", "at least 5 flags"),
    ({"no_rope_layers": [1, 2, 1, 1, 1]}, "no_rope_layers", "flags"),
    ({"layer_types": ["sliding_attention"] * 5}, "layer_types", "full or chunked"),
    ({"layer_types": ["chunked_attention"] * 5, "attention_chunk_size": None}, "attention_chunk_size", "chunk size"),
    ({"moe_layers": "all"}, "moe_layers", "layer indices"),
    # transformers 5.24's strict Llama4TextConfig refuses a number here too ("expected bool, got int")
    ({"attn_temperature_tuning": 4}, "attn_temperature_tuning", "true or false"),
])
def test_malformed_layer_fields_are_refused_naming_the_field(tmp_path: Path, change: dict, field: str,
                                                             words: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**RANDOM, **change}))
    message = config_error_message(lambda: load_config(path), path)
    assert f"field '{field}'" in message and words in message


@pytest.mark.parametrize("offset, length, want", [
    # Ministral 3: 1 + β·ln(1 + ⌊p / L⌋), a step at p = 2, 4, 6
    (0, 2, [1.0, 1.0, 1 + 0.5 * math.log(2), 1 + 0.5 * math.log(2), 1 + 0.5 * math.log(3), 1 + 0.5 * math.log(3),
            1 + 0.5 * math.log(4)]),
    # Llama 4: 1 + β·ln(1 + ⌊(p + 1) / L⌋), a step at p = 1, 3, 5
    (1, 2, [1.0, 1 + 0.5 * math.log(2), 1 + 0.5 * math.log(2), 1 + 0.5 * math.log(3), 1 + 0.5 * math.log(3),
            1 + 0.5 * math.log(4), 1 + 0.5 * math.log(4)]),
])
def test_query_scale_formulas_by_hand(offset: int, length: int, want: list[float]) -> None:
    cfg = BlockConfig(query_scale=0.5, query_scale_length=length, query_scale_offset=offset)
    np.testing.assert_allclose(query_scales(cfg, np.arange(7), np.float64), want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("block, message", [
    ({"query_scale_offset": 1}, "block.query_scale_offset: a setting of block.query_scale"),
    ({"attention_chunk": 4, "sliding_window": 8}, "block.attention_chunk: chunked attention and a sliding window"),
    ({"qk_norm_after_rope": True, "qk_norm": "projection"}, "block.qk_norm_after_rope"),
    ({"moe": {"n_experts": 2, "top_k": 1, "d_expert": 4, "scale_input": True}}, "block.moe.scale_input"),
])
def test_new_block_fields_refuse_what_no_model_has(block: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_config({"block": {"d_model": 16, "n_heads": 4, **block}})


def test_chunked_score_pairs_and_kv_cache_by_hand() -> None:
    """Chunks of 4 over 10 tokens: queries see 1, 2, 3, 4, 1, 2, 3, 4, 1, 2 keys (23 pairs); the cache of a chunked
    layer keeps at most 4 tokens; a decode step at context 10 (position 9) sees 2 keys."""
    assert score_pairs(10, True, chunk=4) == sum([1, 2, 3, 4, 1, 2, 3, 4, 1, 2]) == 23
    config = parse_config({"block": {"d_model": 16, "n_heads": 4, "rope": True, "attention_chunk": 4},
                           "model": {"n_layers": 2, "vocab_size": 32, "positions": "rope"}})
    dims = Dims.of(config)
    assert (dims.keys_seen(10), dims.decode_keys(10), dims.decode_keys(8), dims.keys_seen(3)) == (4, 2, 4, 3)
    # K and V of 2 layers × 16 features × 4 tokens in float32, batch 1
    assert inference(config, 0, 10, 1, "float32").kv_bytes == 2 * 2 * 16 * 4 * 4


SCOUT = {"architectures": ["Llama4ForConditionalGeneration"], "boi_token_index": 200080, "eoi_token_index": 200081,
         "image_token_index": 200092, "model_type": "llama4", "tie_word_embeddings": False,
         "torch_dtype": "bfloat16", "transformers_version": "4.51.0.dev0",
         "text_config": {
             "attention_bias": False, "attention_chunk_size": 8192, "attention_dropout": 0.0, "attn_scale": 0.1,
             "attn_temperature_tuning": True, "bos_token_id": 200000, "eos_token_id": [200001, 200007, 200008],
             "floor_scale": 8192, "for_llm_compressor": False, "head_dim": 128, "hidden_act": "silu",
             "hidden_size": 5120, "initializer_range": 0.02, "interleave_moe_layer_step": 1,
             "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 10485760,
             "model_type": "llama4_text", "no_rope_layers": [], "num_attention_heads": 40,
             "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
             "output_router_logits": False, "pad_token_id": 200018, "rms_norm_eps": 1e-05,
             "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                              "original_max_position_embeddings": 8192, "rope_type": "llama3"},
             "rope_theta": 500000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
             "torch_dtype": "bfloat16", "use_cache": True, "use_qk_norm": True, "vocab_size": 202048},
         "vision_config": {"hidden_size": 1408, "image_size": 336, "intermediate_size": 5632,
                           "model_type": "llama4_vision_model", "num_attention_heads": 16, "num_hidden_layers": 34,
                           "patch_size": 14, "vision_output_dim": 4096}}
# Maverick's text_config differs in these: 128 experts on the odd layers, dense ones between, no q/k norm, no RoPE
# scaling, 1M positions; its no_rope_layers written out
MAVERICK = copy.deepcopy(SCOUT)
MAVERICK["text_config"].update({
    "interleave_moe_layer_step": 2, "moe_layers": list(range(1, 48, 2)), "num_local_experts": 128,
    "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(48)], "use_qk_norm": False, "rope_scaling": None,
    "max_position_embeddings": 1048576})


@pytest.mark.parametrize("preset, published, transformers_total", [
    # transformers 5.24 Llama4ForCausalLM of the text_config on the meta device (sum of numel): Meta's "109B total"
    # counts the vision tower and projector too (Llama4ForConditionalGeneration: 108,225,039,360)
    ("llama-4-scout-17b-16e", SCOUT, 107_769_861_120),
    # Meta's "400B total"
    ("llama-4-maverick-17b-128e-instruct", MAVERICK, 400_711_848_960),
])
def test_published_configs_map_to_the_presets_and_count_as_transformers(tmp_path: Path, preset: str, published: dict,
                                                                         transformers_total: int) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(published))
    imported, packaged = load_config(path), load_config(preset)
    assert imported.block == packaged.block and imported.model == packaged.model
    assert [imported.layer_block(i) for i in range(48)] == [packaged.layer_block(i) for i in range(48)]
    assert count_parameters(packaged).total == transformers_total == packaged.about.parameters
    by_hand = llama4_by_hand(5120, 48, 40, 8, 128, 8192, 16384, published["text_config"]["num_local_experts"],
                             202048, set(range(48)) if preset.endswith("16e") else set(range(1, 48, 2)), False, False)
    assert by_hand == transformers_total


def test_scout_activates_17b_per_token() -> None:
    """Top 1 of 16 routed experts and the shared one per layer: 17,172,894,720 active (Meta's "17B active")."""
    active = llama4_by_hand(5120, 48, 40, 8, 128, 8192, 16384, 1, 202048, set(range(48)), False, False) - 48 * 5120
    assert count_parameters(load_config("llama-4-scout-17b-16e")).active_total == active + 48 * 16 * 5120


# ----------------------------------------------------------------------------- against transformers itself


@pytest.mark.torch
@pytest.mark.parametrize("data, want", [(SIZES, 107_769_861_120), (RANDOM, 486_184),
                                        (SCOUT["text_config"], 107_769_861_120),
                                        (MAVERICK["text_config"], 400_711_848_960)])
def test_the_totals_here_are_transformers_own(data: dict, want: int) -> None:
    """transformers on the meta device counts the totals written above; blockcli reads the whole of the config's
    to_dict() (every default spelled out, no_rope_layers, moe_layers and layer_types filled in) to the same total
    and the same layers."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**copy.deepcopy({k: v for k, v in data.items() if k != "torch_dtype"}))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == want
    spelled = {k: v for k, v in config.to_dict().items() if k not in ("transformers_version", "dtype")}
    assert total(spelled) == want
    assert layer_blocks(spelled) == layer_blocks({**data, "max_position_embeddings": config.max_position_embeddings})


def test_scouts_llama3_rope_with_equal_factors_has_no_blend_band() -> None:
    """Scout's rope_scaling has low_freq_factor = high_freq_factor = 1: no frequency lies strictly between the two
    wavelengths, so each is kept (wavelength < 8192) or divided by 16 (> 8192), with no division warning."""
    import warnings

    from blockcli.config import RopeScaling
    from blockcli.ops import rope_frequencies

    scaling = RopeScaling("llama3", factor=16.0, original_max_positions=8192, low_freq_factor=1.0, high_freq_factor=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, attention = rope_frequencies(128, 5e5, scaling, 16)
    plain = 1.0 / 5e5 ** (np.arange(0, 128, 2) / 128)
    want = np.where(2 * math.pi / plain > 8192, plain / 16, plain)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    assert attention == 1.0
