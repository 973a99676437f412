"""The long tail of issue #28, each a small diff of a block blockcli already has: BitNet (Llama's attention, Gemma's
gated ReLU² MLP, RMSNorms before o_proj and down_proj), Persimmon (GPT-NeoX's fused QKV, pre-norm, per-head q/k
LayerNorms, ReLU²), OpenAI GPT (GPT-2's layers, post-norm, no final norm), BioGPT (OPT's block, √d embeddings), NanoChat
(parameter-free RMSNorms, RoPE turned by −θ, ReLU², soft-capped logits), Granite MoE SWA (Granite MoE with Granite
SWA's attention), MiniCPM3 (DeepSeek-V2's latent attention with rotate-half RoPE and MiniCPM's scalars), XGLM
(BioGPT's block with fairseq's sinusoidal positions), CTRL (GPT-2's block with a ReLU MLP, CTRL's sinusoidal table,
√d embeddings, a biased head), GPT-NeoX Japanese (GPT-NeoX's fused QKV, sequential pre-norm, the last layer's
dense_bias alone), DBRX (a mixture with clip_qkv, its fields nested in attn_config and ffn_config).

Every expected total is transformers 5.24's own (the *ForCausalLM on the meta device, sum of numel over
parameters()), for the config class's defaults and a random config; the defaults' totals are derived by hand too.
The fixtures (tests/fixtures/hf/generate.py) check logits, every layer, a decode step and the gradients against
transformers (tests/test_checkpoint.py, tests/test_gradients.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from blockcli import Model, load_config
from blockcli.config import ConfigError, parse_config
from blockcli.count import count_parameters
from test_dense_families import _sizes, assert_totals_are_transformers_own, mapped, total

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


def _bitnet_by_hand() -> int:
    """30 layers of q and o (2560² each), k and v (2560·640: 5 K/V heads of 128), gate, up, down (2560·6912
    each), two norms (2560), attn_sub_norm (2560) and ffn_sub_norm (6912); embeddings and an untied head
    (128256·2560 each); the final norm."""
    d, f, kv = 2560, 6912, 640
    layer = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d + d + f
    return 30 * layer + 2 * 128256 * d + d


# BitNetConfig's sizes (bitnet-b1.58-2B-4T)
_BITNET_SIZES = _sizes(2560, 6912, 30, 20, 128256, 2048)
# a random BitNet: 6 heads over 3 K/V heads, tied, q/k/v/o biases, a linear RoPE scaling
_BITNET_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, intermediate_size=80,
                      num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, tie_word_embeddings=True,
                      attention_bias=True, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
                      rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})

def _persimmon_by_hand() -> int:
    """36 layers of the fused QKV (3·4096² + 3·4096) and dense (4096² + 4096), the q/k LayerNorms (weight and bias
    over each head's 64 dims: 4·64), two LayerNorms (4·4096), the MLP (2·4096·16384 + 16384 + 4096); embeddings and
    an untied head (262144·4096 each); the final LayerNorm (2·4096)."""
    d, f = 4096, 16384
    layer = 3 * d * d + 3 * d + d * d + d + 4 * 64 + 4 * d + 2 * d * f + f + d
    return 36 * layer + 2 * 262144 * d + 2 * d


# PersimmonConfig's sizes (Persimmon-8B)
_PERSIMMON_SIZES = _sizes(4096, 16384, 36, 64, 262144, 16384)
# a random Persimmon: heads of 12 rotating 6, no q/k norms, GELU, untied, a linear RoPE scaling
_PERSIMMON_RANDOM = dict(hidden_size=48, num_attention_heads=4, intermediate_size=80, num_hidden_layers=3,
                         vocab_size=300, max_position_embeddings=96, tie_word_embeddings=False, qk_layernorm=False,
                         layer_norm_eps=1e-6, hidden_act="gelu", bos_token_id=1, eos_token_id=2,
                         rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0,
                                          "partial_rotary_factor": 0.5})

def _openai_gpt_by_hand() -> int:
    """12 layers of c_attn (3·768² + 3·768), c_proj (768² + 768), the MLP (2·4·768² + 4·768 + 768), two LayerNorms
    (4·768); token and position embeddings (40478·768, 512·768), the head tied; no final norm."""
    d = 768
    return 12 * (12 * d * d + 13 * d) + 40478 * d + 512 * d


# OpenAIGPTConfig's sizes (openai-gpt); its keys are GPT-2's
_OPENAI_GPT_SIZES = dict(n_embd=768, n_head=12, n_layer=12, vocab_size=40478, n_positions=512)
# a random OpenAI GPT: 6 heads of 8, ReLU, untied
_OPENAI_GPT_RANDOM = dict(n_embd=48, n_head=6, n_layer=3, vocab_size=300, n_positions=40, afn="relu",
                          tie_word_embeddings=False, layer_norm_epsilon=1e-6)

def _biogpt_by_hand() -> int:
    """24 layers of q, k, v, out_proj (4·1024² + 4·1024), fc1 and fc2 (2·1024·4096 + 4096 + 1024), two LayerNorms
    (4·1024); token embeddings (42384·1024, the head tied), positions (1024 + 2 rows: the offset), the final
    LayerNorm (2·1024)."""
    d, f = 1024, 4096
    return 24 * (4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d) + 42384 * d + 1026 * d + 2 * d


# BioGptConfig's sizes (microsoft/biogpt)
_BIOGPT_SIZES = _sizes(1024, 4096, 24, 16, 42384, 1024)
# a random BioGPT: 6 heads of 8, ReLU, untied, unscaled embeddings
_BIOGPT_RANDOM = dict(hidden_size=48, num_attention_heads=6, intermediate_size=80, num_hidden_layers=3, vocab_size=300,
                      max_position_embeddings=40, tie_word_embeddings=False, scale_embedding=False, hidden_act="relu",
                      pad_token_id=1)

def _nanochat_by_hand() -> int:
    """12 layers of q, k, v, o (768² each: 6 heads of 128, as many K/V heads) and fc1, fc2 (768·8192 each), no norm
    weights at all; embeddings and an untied head (50304·768 each)."""
    d, f = 768, 8192
    return 12 * (4 * d * d + 2 * d * f) + 2 * 50304 * d


# NanoChatConfig's sizes (nanochat d12)
_NANOCHAT_SIZES = _sizes(768, 8192, 12, 6, 50304, 2048)
# a random NanoChat: 6 heads over 2 K/V heads, q/k/v/o biases, tied, no soft-cap
_NANOCHAT_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, intermediate_size=80,
                        num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, tie_word_embeddings=True,
                        attention_bias=True, final_logit_softcapping=None, pad_token_id=1)

def _granitemoe_swa_by_hand() -> int:
    """32 layers of q, k, v, o (4096² each: 32 K/V heads of 128), the router (4096·8), 8 experts of gate, up, down
    (3·4096·11008 each), two norms (2·4096), 32 sinks; embeddings and an untied head (32000·4096 each); the final
    norm."""
    d, f = 4096, 11008
    return 32 * (4 * d * d + 8 * d + 8 * 3 * d * f + 2 * d + 32) + 2 * 32000 * d + d


# GraniteMoeSWAConfig's sizes
_GRANITEMOE_SWA_SIZES = _sizes(4096, 11008, 32, 32, 32000, 2048)
# a random Granite MoE SWA: 5 experts of 20 top 2, a shared expert of 24, windowed layers 0 and 2, layer 1 NoPE
_GRANITEMOE_SWA_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, intermediate_size=20,
                              shared_intermediate_size=24, num_local_experts=5, num_experts_per_tok=2,
                              num_hidden_layers=3, vocab_size=300, max_position_embeddings=96,
                              tie_word_embeddings=False, sliding_window=16,
                              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                              layer_rope_theta=[1e4, 0, 5e5], pad_token_id=0)

def _minicpm3_by_hand() -> int:
    """62 layers of q_a (2560·768) and its norm (768), q_b (768·40·96), kv_a (2560·(256 + 32)) and its norm (256),
    kv_b (256·40·(64 + 64)), o (40·64·2560), the MLP (3·2560·6400), two norms (2·2560); tied embeddings
    (73448·2560); the final norm."""
    d, f, h = 2560, 6400, 40
    layer = d * 768 + 768 + 768 * h * 96 + d * 288 + 256 + 256 * h * 128 + h * 64 * d + 3 * d * f + 2 * d
    return 62 * layer + 73448 * d + d


# MiniCPM3Config's sizes (MiniCPM3-4B)
_MINICPM3_SIZES = _sizes(2560, 6400, 62, 40, 73448, 32768)
# a random MiniCPM3: queries through one q_proj (q_lora_rank null), its scalars null (no-ops), biases, untied
_MINICPM3_RANDOM = dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=4, intermediate_size=80,
                        num_hidden_layers=3, vocab_size=300, max_position_embeddings=96, tie_word_embeddings=False,
                        q_lora_rank=None, kv_lora_rank=10, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=8,
                        scale_depth=None, dim_model_base=None, mlp_bias=True, attention_bias=True, pad_token_id=0)

def _xglm_by_hand() -> int:
    """24 layers of q, k, v, out_proj (4·1024² + 4·1024), fc1 and fc2 (2·1024·4096 + 4096 + 1024), two LayerNorms
    (4·1024); token embeddings (256008·1024, the head tied); no position parameters (a buffer); the final LayerNorm
    (2·1024)."""
    d, f = 1024, 4096
    return 24 * (4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d) + 256008 * d + 2 * d


# XGLMConfig's sizes (facebook/xglm-564M), under XGLM's own keys
_XGLM_SIZES = dict(d_model=1024, ffn_dim=4096, num_layers=24, attention_heads=16, vocab_size=256008,
                   max_position_embeddings=2048)
# a random XGLM: 6 heads of 8, ReLU, untied, unscaled embeddings, pad 7
_XGLM_RANDOM = dict(d_model=48, attention_heads=6, ffn_dim=80, num_layers=3, vocab_size=300,
                    max_position_embeddings=40, tie_word_embeddings=False, scale_embedding=False,
                    activation_function="relu", pad_token_id=7)

def _ctrl_by_hand() -> int:
    """48 layers of Wq, Wk, Wv, dense (4·1280² + 4·1280), the MLP (2·1280·8192 + 8192 + 1280), two LayerNorms
    (4·1280); token embeddings (246534·1280, the head tied) and the head's own bias (246534); no position parameters
    (a buffer); the final LayerNorm (2·1280)."""
    d, f, v = 1280, 8192, 246534
    return 48 * (4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d) + v * d + v + 2 * d


# CTRLConfig's sizes (Salesforce/ctrl), under CTRL's own keys
_CTRL_SIZES = dict(n_embd=1280, dff=8192, n_layer=48, n_head=16, vocab_size=246534, n_positions=256)
# a random CTRL: 6 heads of 8, untied (the head's weight and its bias both counted)
_CTRL_RANDOM = dict(n_embd=48, n_head=6, dff=80, n_layer=3, vocab_size=300, n_positions=40, tie_word_embeddings=False)

def _neox_japanese_by_hand() -> int:
    """32 layers of query_key_value (3·2560²) and dense (2560²), both bias-free, the MLP (2·2560·10240, no biases), two
    LayerNorms (4·2560); the last layer's dense_bias (2560); token embeddings (32000·2560, the head tied); the final
    LayerNorm (2·2560)."""
    d, f = 2560, 10240
    return 32 * (4 * d * d + 2 * d * f + 4 * d) + d + 32000 * d + 2 * d


# GPTNeoXJapaneseConfig's sizes (abeja/gpt-neox-japanese-2.7b)
_NEOX_JAPANESE_SIZES = dict(hidden_size=2560, intermediate_multiple_size=4, num_hidden_layers=32,
                            num_attention_heads=32, vocab_size=32000, max_position_embeddings=2048)
# a random GPT-NeoX Japanese: 6 heads of 8, an MLP 3·48 wide of ReLU, untied, RoPE on half of each head, scaled
_NEOX_JAPANESE_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_hidden_layers=3, intermediate_multiple_size=3,
                             vocab_size=300, max_position_embeddings=96, tie_word_embeddings=False, layer_norm_eps=1e-6,
                             hidden_act="relu", rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                                                 "factor": 2.0, "partial_rotary_factor": 0.5})

# model_type → (sizes, the config class's nulls blockcli needs, transformers' total for the defaults, by hand,
# random config, transformers' total for it)
CASES = {
    "bitnet": (_BITNET_SIZES, (), 2_741_155_840, _bitnet_by_hand(), _BITNET_RANDOM, 70_848),
    "persimmon": (_PERSIMMON_SIZES, (), 9_397_175_296, _persimmon_by_hand(), _PERSIMMON_RANDOM, 81_120),
    "openai-gpt": (_OPENAI_GPT_SIZES, (), 116_534_784, _openai_gpt_by_hand(), _OPENAI_GPT_RANDOM, 115_536),
    "biogpt": (_BIOGPT_SIZES, (), 346_763_264, _biogpt_by_hand(), _BIOGPT_RANDOM, 83_136),
    "nanochat": (_NANOCHAT_SIZES, (), 256_573_440, _nanochat_by_hand(), _NANOCHAT_RANDOM, 56_256),
    "granitemoe_swa": (_GRANITEMOE_SWA_SIZES, (), 37_039_117_312, _granitemoe_swa_by_hand(), _GRANITEMOE_SWA_RANDOM,
                       104_178),
    "minicpm3": (_MINICPM3_SIZES, (), 4_073_875_968, _minicpm3_by_hand(), _MINICPM3_RANDOM, 78_600),
    "xglm": (_XGLM_SIZES, (), 564_463_616, _xglm_by_hand(), _XGLM_RANDOM, 81_120),
    "ctrl": (_CTRL_SIZES, (), 1_637_964_550, _ctrl_by_hand(), _CTRL_RANDOM, 81_420),
    "gpt_neox_japanese": (_NEOX_JAPANESE_SIZES, (), 2_598_837_760, _neox_japanese_by_hand(), _NEOX_JAPANESE_RANDOM,
                          98_640),
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


# ----------------------------------------------------------------------------- BitNet


def test_bitnet_reads_its_block() -> None:
    block = mapped("bitnet", _BITNET_SIZES)["block"]
    assert (block["activation"], block["gated"], block["norm"], block["sub_norms"]) == ("relu2", True, "rmsnorm", True)
    assert (block["n_kv_heads"], block["rope_theta"], block["bias"]) == (5, 500_000.0, False)  # no biases at all
    assert mapped("bitnet", {**_BITNET_SIZES, "attention_bias": True})["block"]["bias"]["mlp"] is False
    assert mapped("bitnet", {**_BITNET_SIZES, "num_key_value_heads": None})["block"]["n_kv_heads"] == 20


def test_bitnet_counts_its_sub_norms_as_rows_of_their_own() -> None:
    result = count_parameters(parse_config(mapped("bitnet", _BITNET_SIZES)))
    rows = {c.name: c for c in result.components}
    assert (rows["attn.sub_norm"].count, rows["attn.sub_norm"].keys) == (2560, ("attn_sub_norm_gamma",
                                                                              "attn_sub_norm_beta"))
    assert (rows["mlp.sub_norm"].count, rows["mlp.sub_norm"].keys) == (6912, ("mlp_sub_norm_gamma",
                                                                            "mlp_sub_norm_beta"))


@pytest.mark.parametrize("fields, named", [
    ({"head_dim": 64}, "hidden_size"),  # attn_sub_norm is hidden_size wide: 20 × 64 is not 2560
    ({"mlp_bias": True}, "mlp_bias"),  # not BitNetConfig's: Gemma's MLP has no biases
])
def test_bitnet_refuses_what_transformers_cannot_build(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        mapped("bitnet", {**_BITNET_SIZES, **fields})


@pytest.mark.parametrize("other", [{"moe": {"n_experts": 2, "top_k": 1, "d_expert": 4}}, {"attention_gate": True},
                                   {"short_conv": {}}, {"parts": "mlp"}])
def test_sub_norms_are_refused_beside_a_part_they_do_not_fit(other: dict) -> None:
    block = {"d_model": 16, "n_heads": 4, "d_ff": 8, "sub_norms": True, **other}
    with pytest.raises(ConfigError, match="sub_norms"):
        parse_config({"block": block})


def test_a_packed_bitnet_checkpoint_is_refused_naming_its_quantization() -> None:
    """The published bitnet-b1.58-2B-4T stores packed ternary weights: its quant_method is named, not misread."""
    from blockcli.hf import hf_to_mapping

    quantized = {"model_type": "bitnet", **_BITNET_SIZES, "quantization_config": {
        "quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "offline"}}
    with pytest.raises(ConfigError, match="bitnet"):
        parse_config(hf_to_mapping(quantized, "config.json"))


@pytest.mark.parametrize("attention", ["full", "chunked"])
@pytest.mark.parametrize("block", [
    {"norm": "rmsnorm", "activation": "relu2", "gated": True, "bias": False},  # BitNet's
    {"norm": "layernorm", "activation": "gelu_tanh", "placement": "post"},  # with the norms' shifts
])
def test_the_sub_norms_analytic_rows_equal_the_executed_ones(block: dict, attention: str) -> None:
    from blockcli.trace import analytic_trace, run_trace

    cfg = parse_config({"block": {"d_model": 16, "n_heads": 4, "n_kv_heads": 2, "d_ff": 12, "sub_norms": True,
                                  **block}, "run": {"batch": 2, "seq_len": 5}})
    executed = run_trace(cfg, attention=attention).rows
    assert executed == analytic_trace(cfg, attention).rows
    assert [r.key for r in executed].count("attn_sub_norm") == [r.key for r in executed].count("mlp_sub_norm") == 1


def test_the_sub_norms_gradients_equal_central_differences() -> None:
    """LayerNorm sub-norms with shifts (the fixture's are RMSNorms without): every parameter's gradient against
    central differences of the loss in float64."""
    import numpy as np

    from blockcli.block import Model

    cfg = parse_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 6, "norm": "layernorm", "sub_norms": True,
                                  "activation": "gelu_tanh", "gated": True},
                        "model": {"n_layers": 1, "vocab_size": 11, "max_positions": 8}, "run": {"dtype": "float64"}})
    model = Model.from_config(cfg, seed=3)
    ids = np.array([[1, 4, 2, 9, 3]])
    _, grads = model.loss_and_grads(ids)
    for key in ("blocks.0.attn_sub_norm_gamma", "blocks.0.attn_sub_norm_beta", "blocks.0.mlp_sub_norm_gamma",
                "blocks.0.mlp_sub_norm_beta", "blocks.0.w_o", "blocks.0.w_gate", "blocks.0.w_up", "blocks.0.ln1_gamma"):
        param = model.params[key]
        flat, numeric = param.reshape(-1), np.empty(param.size)
        for i in range(param.size):
            keep = flat[i]
            flat[i] = keep + 1e-6
            up = model.loss(ids)
            flat[i] = keep - 1e-6
            down = model.loss(ids)
            flat[i] = keep
            numeric[i] = (up - down) / 2e-6
        assert np.max(np.abs(grads[key].reshape(-1) - numeric)) <= 1e-7 * max(1.0, np.max(np.abs(numeric))), key


# ----------------------------------------------------------------------------- Persimmon


def test_persimmon_reads_its_block() -> None:
    block = mapped("persimmon", _PERSIMMON_SIZES)["block"]
    assert (block["placement"], block["norm"], block["qk_norm"], block["rope"], block["activation"]) == \
        ("pre", "layernorm", "head", 0.5, "relu2")
    assert block["bias"] is True and block["n_kv_heads"] == 64  # biases on every projection and norm; no GQA
    assert "qk_norm" not in mapped("persimmon", {**_PERSIMMON_SIZES, "qk_layernorm": False})["block"]


@pytest.mark.parametrize("fields, named", [
    ({"num_key_value_heads": 8}, "num_key_value_heads"),  # not PersimmonConfig's: every head has its K and V
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.3}},
     "partial_rotary_factor"),  # 19 of 64 dims: an odd number
])
def test_persimmon_refuses_what_it_has_not(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        mapped("persimmon", {**_PERSIMMON_SIZES, **fields})


# ----------------------------------------------------------------------------- OpenAI GPT


def test_openai_gpt_reads_its_block() -> None:
    data = mapped("openai-gpt", _OPENAI_GPT_SIZES)
    block, model = data["block"], data["model"]
    assert (block["placement"], block["activation"], block["d_ff"], block["bias"]) == ("post", "gelu_tanh", 3072, True)
    assert (model["positions"], model["final_norm"], model["tie_embeddings"]) == ("learned", False, True)
    assert mapped("openai-gpt", {**_OPENAI_GPT_SIZES, "afn": "swish"})["block"]["activation"] == "silu"


def test_openai_gpt_refuses_an_activation_outside_its_table() -> None:
    with pytest.raises(ConfigError, match="afn"):
        mapped("openai-gpt", {**_OPENAI_GPT_SIZES, "afn": "gelu_new"})  # ACT_FNS has gelu, relu, silu, swish only


# ----------------------------------------------------------------------------- BioGPT


def test_biogpt_reads_its_block() -> None:
    data = mapped("biogpt", _BIOGPT_SIZES)
    block, model = data["block"], data["model"]
    assert (block["placement"], block["activation"], block["norm_eps"], block["bias"]) == ("pre", "gelu", 1e-5, True)
    assert (model["position_offset"], model["embedding_multiplier"], model["tie_embeddings"]) == (2, 32.0, True)
    assert "embedding_multiplier" not in mapped("biogpt", {**_BIOGPT_SIZES, "scale_embedding": False})["model"]
    # layer_norm_eps is never read by BioGPT's modelling code: any value, the LayerNorms' eps stays 1e-5
    assert mapped("biogpt", {**_BIOGPT_SIZES, "layer_norm_eps": 1e-12})["block"]["norm_eps"] == 1e-5


# ----------------------------------------------------------------------------- NanoChat


def test_nanochat_reads_its_block() -> None:
    data = mapped("nanochat", _NANOCHAT_SIZES)
    block, model = data["block"], data["model"]
    assert (block["norm_scale"], block["qk_norm"], block["qk_norm_after_rope"], block["rope_layout"]) == \
        (False, "head_unscaled", True, "half_reversed")
    assert (block["activation"], block.get("gated", False), block["bias"]) == ("relu2", False, False)
    assert (model["embedding_norm"], model["logit_softcap"], model["tie_embeddings"]) == (True, 15.0, False)
    assert "logit_softcap" not in mapped("nanochat", {**_NANOCHAT_SIZES, "final_logit_softcapping": None})["model"]


def test_half_reversed_rope_turns_each_pair_by_minus_theta() -> None:
    """By hand, one pair (x1, x2) at angle θ: the half layout gives (x1·cos − x2·sin, x2·cos + x1·sin), NanoChat's
    rotate_half cat(x2, −x1) gives (x1·cos + x2·sin, x2·cos − x1·sin)."""
    import numpy as np

    from blockcli.ops import ROPE_LAYOUTS

    x = np.array([0.3, -1.2]).reshape(1, 1, 1, 2)
    cos, sin = np.array([[np.cos(0.7)]]), np.array([[np.sin(0.7)]])
    got = ROPE_LAYOUTS["half_reversed"](x, cos, sin).reshape(2)
    want = [0.3 * np.cos(0.7) - 1.2 * np.sin(0.7), -1.2 * np.cos(0.7) - 0.3 * np.sin(0.7)]
    assert np.allclose(got, want, rtol=0, atol=1e-15)


# ----------------------------------------------------------------------------- Granite MoE SWA


def test_granitemoe_swa_reads_sinks_windows_and_layer_bases() -> None:
    data = mapped("granitemoe_swa", _GRANITEMOE_SWA_RANDOM)
    block = data["block"]
    assert block["attention_sinks"] is True and block["moe"]["d_shared"] == 24 and block["sliding_window"] == 16
    assert data["layers"] == [{"indices": [1], "block": {"sliding_window": 0, "rope": False}},  # full, NoPE
                              {"indices": [2], "block": {"rope_theta": 500000.0}}]  # its own base


# ----------------------------------------------------------------------------- MiniCPM3


def test_minicpm3_reads_its_latent_attention_and_scalars() -> None:
    data = mapped("minicpm3", _MINICPM3_SIZES)
    block, model = data["block"], data["model"]
    assert block["mla"] == {"q_lora_rank": 768, "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
                            "v_head_dim": 64} and block["rope_layout"] == "half"
    assert block["residual_multiplier"] == 1.4 / 62 ** 0.5
    assert (model["embedding_multiplier"], model["logit_multiplier"]) == (12.0, 256 / 2560)
    plain = mapped("minicpm3", _MINICPM3_RANDOM)
    assert "residual_multiplier" not in plain["block"] and "logit_multiplier" not in plain["model"]


# ----------------------------------------------------------------------------- XGLM


def test_xglm_reads_its_block() -> None:
    data = mapped("xglm", _XGLM_SIZES)
    block, model = data["block"], data["model"]
    assert (block["placement"], block["activation"], block["norm_eps"], block["bias"]) == ("pre", "gelu", 1e-5, True)
    assert (model["positions"], model["sinusoidal_layout"], model["position_offset"]) == ("sinusoidal", "fairseq", 2)
    assert (model["embedding_multiplier"], model["tie_embeddings"], model["max_positions"]) == (32.0, True, 2048)
    assert "embedding_multiplier" not in mapped("xglm", {**_XGLM_SIZES, "scale_embedding": False})["model"]
    assert mapped("xglm", {**_XGLM_SIZES, "pad_token_id": 5})["model"]["padding_idx"] == 5  # the table's zero row


@pytest.mark.parametrize("fields, named", [
    ({"add_cross_attention": True}, "add_cross_attention"),  # an encoder_attn per layer: not a decoder-only block
    ({"pad_token_id": -1}, "pad_token_id"),  # a row counted from the end of a table that grows
    ({"pad_token_id": 256008}, "pad_token_id"),  # nn.Embedding refuses a padding_idx past the vocabulary
    ({"pad_token_id": 9, "max_position_embeddings": 6}, "pad_token_id"),  # past the 8 rows of the table
    ({"attention_heads": 24}, "d_model"),  # 1024 is not 24 heads wide
    ({"hidden_size": 1024}, "hidden_size"),  # an alias XGLM's config.json never holds
])
def test_xglm_refuses_what_it_does_not_model(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        mapped("xglm", {**_XGLM_SIZES, **fields})


def _far_from_transformers(name: str, change: dict) -> bool:
    """The fixture's float64 logits with a model field changed, against transformers': far apart?"""
    folder = FIXTURES / name
    config = load_config(folder)
    changed = replace(config, model=replace(config.model, **change))
    with np.load(folder / "expected.npz") as want:
        got = Model.from_config(changed, weights=folder, dtype="float64")(want["input_ids"])
        return bool(np.max(np.abs(got - want["logits_float64"])) / np.max(np.abs(want["logits_float64"])) > 1e-3)


@pytest.mark.parametrize("change", [{"sinusoidal_layout": "interleaved"}, {"position_offset": 0},
                                    {"padding_idx": None}])
def test_xglm_fixtures_positions_matter(change: dict) -> None:
    """fairseq's layout, the offset of 2 and the pad row (pad_token_id 4: position 2 reads a zero row): each
    changes the fixture's logits far past float64's agreement with transformers."""
    model = load_config(FIXTURES / "xglm").model
    assert (model.sinusoidal_layout, model.position_offset, model.padding_idx) == ("fairseq", 2, 4)
    assert _far_from_transformers("xglm", change)


# ----------------------------------------------------------------------------- CTRL


def test_ctrl_reads_its_block() -> None:
    data = mapped("ctrl", _CTRL_SIZES)
    block, model = data["block"], data["model"]
    assert (block["placement"], block["activation"], block["norm_eps"], block["bias"]) == ("pre", "relu", 1e-6, True)
    assert (model["positions"], model["sinusoidal_layout"], model["max_positions"]) == ("sinusoidal", "halves", 256)
    assert (model["embedding_multiplier"], model["tie_embeddings"], model["lm_head_bias"]) == (1280 ** 0.5, True, True)
    assert "padding_idx" not in mapped("ctrl", {**_CTRL_SIZES, "pad_token_id": 3})["model"]  # nn.Embedding has none


@pytest.mark.parametrize("fields, named", [
    ({"layer_norm_epsilon": 1e-5}, "layer_norm_epsilon"),  # the final LayerNorm's alone: the layers' stay 1e-6
    ({"n_head": 24}, "n_embd"),  # 1280 is not 24 heads wide
    ({"hidden_size": 1280}, "hidden_size"),  # an alias CTRL's config.json never holds
])
def test_ctrl_refuses_what_it_does_not_model(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        mapped("ctrl", {**_CTRL_SIZES, **fields})


@pytest.mark.parametrize("change", [{"sinusoidal_layout": "interleaved"}, {"embedding_multiplier": 1.0},
                                    {"lm_head_bias": False}])
def test_ctrl_fixtures_positions_scale_and_head_bias_matter(change: dict) -> None:
    """CTRL's halves layout, the √16 on the embeddings and the head's bias: each changes the fixture's logits."""
    if "lm_head_bias" in change:  # without the bias the folder's lm_head.bias is an unexpected tensor: drop it
        folder = FIXTURES / "ctrl"
        config = load_config(folder)
        params = {k: v for k, v in Model.from_config(config, weights=folder, dtype="float64").params.items()
                  if k != "lm_head_bias"}
        changed = replace(config, model=replace(config.model, **change))
        with np.load(folder / "expected.npz") as want:
            got = Model.from_config(changed, weights=params, dtype="float64")(want["input_ids"])
            assert np.max(np.abs(got - want["logits_float64"])) > 1e-3 * np.max(np.abs(want["logits_float64"]))
        return
    assert _far_from_transformers("ctrl", change)


# ----------------------------------------------------------------------------- GPT-NeoX Japanese


def test_gpt_neox_japanese_reads_its_block() -> None:
    data = mapped("gpt_neox_japanese", _NEOX_JAPANESE_SIZES)
    block = data["block"]
    assert (block["placement"], block["activation"], block["d_ff"], block["rope"]) == ("pre", "gelu", 10240, 1.0)
    assert block["bias"] == {"qkv": False, "out": False, "mlp": False, "norm": True}
    # the last layer's attention alone adds dense_bias after its dense
    assert data["layers"] == [{"indices": [31], "block": {"bias": {"qkv": False, "out": True, "mlp": False,
                                                                    "norm": True}}}]
    one = mapped("gpt_neox_japanese", {**_NEOX_JAPANESE_SIZES, "num_hidden_layers": 1})
    assert one["block"]["bias"]["out"] is True and "layers" not in one
    # the legacy keys GPTNeoXJapaneseConfig takes as rope_parameters' defaults
    legacy = mapped("gpt_neox_japanese", {**_NEOX_JAPANESE_SIZES, "rotary_emb_base": 500, "rotary_pct": 0.5})["block"]
    assert (legacy["rope_theta"], legacy["rope"]) == (500.0, 0.5)


@pytest.mark.parametrize("fields, named", [
    ({"rotary_pct": 0.0125}, "rotary_pct"),  # one dimension of 80: rotary pairs need an even number
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.0125}},
     "rope_parameters"),
    ({"num_attention_heads": 24}, "hidden_size"),  # 2560 is not 24 heads wide
    ({"intermediate_size": 4096}, "intermediate_size"),  # not GPTNeoXJapaneseConfig's: its MLP is d · multiple
])
def test_gpt_neox_japanese_refuses_what_it_does_not_model(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        mapped("gpt_neox_japanese", {**_NEOX_JAPANESE_SIZES, **fields})


def test_gpt_neox_japanese_fixtures_last_layer_dense_bias_matters() -> None:
    """The fixture's last layer (of 2) adds dense_bias: without it the logits are far from transformers'."""
    folder = FIXTURES / "gpt_neox_japanese"
    config = load_config(folder)
    assert config.for_layer(1).block.bias.out and not config.for_layer(0).block.bias.out
    params = dict(Model.from_config(config, weights=folder, dtype="float64").params)
    params["blocks.1.b_o"] = np.zeros_like(params["blocks.1.b_o"])
    with np.load(folder / "expected.npz") as want:
        got = Model.from_config(config, weights=params, dtype="float64")(want["input_ids"])
        assert np.max(np.abs(got - want["logits_float64"])) > 1e-3 * np.max(np.abs(want["logits_float64"]))


# ----------------------------------------------------------------------------- DBRX

# DbrxConfig's defaults do not build in transformers (DbrxAttention reads attn_config.rope_theta, which
# DbrxAttentionConfig lacks) nor run (clip_qkv null: torch's clamp without a bound fails); these two make them do both
_DBRX_SIZES = dict(d_model=2048, n_heads=16, n_layers=24, max_seq_len=2048, vocab_size=32000)
_DBRX_BUILDS = {**_DBRX_SIZES, "attn_config": {"clip_qkv": 8, "rope_theta": 10000.0}}
# a random DBRX: 6 heads over 2 K/V heads, 5 GELU GLU experts of 20, top 2, clip 2.5, RoPE base 5e5 in
# attn_config (never applied: rope_parameters' 10000 is)
_DBRX_RANDOM = dict(d_model=48, n_heads=6, n_layers=3, vocab_size=300, max_seq_len=96,
                    attn_config={"rope_theta": 5e5, "clip_qkv": 2.5, "kv_n_heads": 2},
                    ffn_config={"ffn_hidden_size": 20, "moe_num_experts": 5, "moe_top_k": 2, "ffn_act_fn": {"name": "gelu"}})


def _dbrx_by_hand() -> int:
    """24 layers of Wqkv (2048·(2048 + 2·128): one K/V head of 128), out_proj (2048²), the router (2048·4), 4 experts
    of w1, v1, w2 (3·3584·2048 each), two LayerNorms without a bias (2·2048); token embeddings and an untied head
    (32000·2048 each); the final LayerNorm (2048)."""
    d, f = 2048, 3584
    return 24 * (d * (d + 256) + d * d + 4 * d + 4 * 3 * f * d + 2 * d) + 2 * 32000 * d + d


def test_dbrx_counts_equal_transformers_totals() -> None:
    assert _dbrx_by_hand() == 2_459_207_680
    assert total("dbrx", _DBRX_BUILDS) == 2_459_207_680  # the config class's sizes
    assert total("dbrx", _DBRX_RANDOM) == 91_488


@pytest.mark.torch
def test_dbrx_totals_here_are_transformers_own() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"), pytest.raises(AttributeError, match="rope_theta"):
        transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model("dbrx"))
    for fields, want in ((_DBRX_BUILDS, 2_459_207_680), (_DBRX_RANDOM, 91_488)):
        config = transformers.AutoConfig.for_model("dbrx", **fields)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        assert sum(p.numel() for p in model.parameters()) == want
        data = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}
        assert total("dbrx", data) == want  # the whole config.json transformers writes, nested dicts and all


def test_dbrx_reads_its_block() -> None:
    block = mapped("dbrx", _DBRX_RANDOM)["block"]
    assert (block["n_kv_heads"], block["clip_qkv"], block["rope_theta"], block["norm"], block["bias"]) == (
        2, 2.5, 10000.0, "layernorm", False)
    assert block["moe"] == {"n_experts": 5, "top_k": 2, "d_expert": 20, "renormalize": True}
    assert (block["activation"], block["gated"]) == ("gelu", True)
    plain = {**_DBRX_RANDOM, "ffn_config": {**_DBRX_RANDOM["ffn_config"], "moe_normalize_expert_weights": None}}
    assert mapped("dbrx", plain)["block"]["moe"]["renormalize"] is False


@pytest.mark.parametrize("change, named", [
    ({"attn_config": {"rope_theta": 1e4}}, "attn_config.clip_qkv"),  # null: transformers' forward fails
    ({"attn_config": {"clip_qkv": 8}}, "attn_config.rope_theta"),  # missing: transformers cannot build
    ({"ffn_config": {"moe_normalize_expert_weights": 2.0}}, "moe_normalize_expert_weights"),  # an L2 norm
    ({"ffn_config": {"ffn_act_fn": {"name": "silu", "alpha": 2}}}, "ffn_act_fn"),
    ({"ffn_config": {"moe_top_k": 9}}, "moe_top_k"),
    ({"attn_config": {**_DBRX_BUILDS["attn_config"], "kv_n_heads": 3}}, "kv_n_heads"),  # 16 heads
    ({"attn_config": {**_DBRX_BUILDS["attn_config"], "alibi": True}}, "attn_config.alibi"),  # not DBRX's
    ({"tie_word_embeddings": True}, "tie_word_embeddings"),  # DbrxConfig refuses it
    ({"output_router_logits": True}, "output_router_logits"),  # its load-balancing loss is not checked here
])
def test_dbrx_refuses_what_it_does_not_model(change: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        mapped("dbrx", {**_DBRX_BUILDS, **change})


@pytest.mark.parametrize("block_change", [{"clip_qkv": 0.0}, {"moe": "no renormalize"}])
def test_dbrx_fixtures_clip_and_renormalisation_matter(block_change: dict) -> None:
    """The fixture clamps Q, K, V to ±0.8 and renormalises its top 2: without either the logits are far off."""
    folder = FIXTURES / "dbrx"
    config = load_config(folder)
    assert config.block.clip_qkv == 0.8 and config.block.moe.renormalize
    if block_change.get("moe"):
        block_change = {"moe": replace(config.block.moe, renormalize=False)}
    changed = replace(config, block=replace(config.block, **block_change))
    with np.load(folder / "expected.npz") as want:
        got = Model.from_config(changed, weights=folder, dtype="float64")(want["input_ids"])
        assert np.max(np.abs(got - want["logits_float64"])) > 1e-3 * np.max(np.abs(want["logits_float64"]))
