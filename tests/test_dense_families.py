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

from blockcli.config import ConfigError, parse_config
from blockcli.count import count_parameters
from blockcli.hf import hf_to_mapping

def _sizes(d: int, f: int, layers: int, heads: int, vocab: int, positions: int) -> dict[str, int]:
    """A config class's sizes, as blockcli asks for them."""
    return dict(hidden_size=d, intermediate_size=f, num_hidden_layers=layers, num_attention_heads=heads,
                vocab_size=vocab, max_position_embeddings=positions)


# the sizes of GlmConfig and Glm4Config (GLM-4-9B): the same
_GLM_SIZES = _sizes(4096, 13696, 40, 32, 151552, 131072)


def _glm_by_hand(sandwich: bool) -> int:
    d, f, kv, layers, vocab = 4096, 13696, 2 * 128, 40, 151552
    attention = d * d + d + 2 * (d * kv + kv) + d * d  # q/k/v with biases, o_proj without
    layer = attention + 3 * d * f + (4 if sandwich else 2) * d  # gate | up, down; the norms
    return layers * layer + 2 * vocab * d + d  # embeddings, untied head, final norm


# Ministral3Config's sizes (Ministral 3 8B): 8 K/V heads of 128, untied
_MINISTRAL3_SIZES = _sizes(4096, 14336, 34, 32, 131072, 262144)
_MINISTRAL3_BY_HAND = 34 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 2 * 131072 * 4096 + 4096
# a random Ministral 3: multi-query heads of 12, tied, a window, the query scale without a RoPE scaling
_MINISTRAL3_RANDOM = dict(hidden_size=40, num_attention_heads=5, num_key_value_heads=1, head_dim=12,
                          intermediate_size=72, num_hidden_layers=3, vocab_size=200, max_position_embeddings=128,
                          tie_word_embeddings=True, sliding_window=16, pad_token_id=0, rope_parameters={
                              "rope_type": "default", "rope_theta": 500000.0, "llama_4_scaling_beta": 0.2,
                              "original_max_position_embeddings": 32})

# a random Llama-like config: 6 heads over 2 K/V heads, tied, every bias the family has switched on
_RANDOM = dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, intermediate_size=80, num_hidden_layers=3,
               vocab_size=300, max_position_embeddings=96, tie_word_embeddings=True, pad_token_id=0)


def _llama_by_hand(d: int, f: int, layers: int, vocab: int, q: int, kv: int, matrices: int = 3) -> int:
    """A pre-norm block without biases: q, k, v, o; `matrices` of the MLP; two norms; untied head."""
    return layers * (2 * d * q + 2 * d * kv + matrices * d * f + 2 * d) + 2 * vocab * d + d


# Hunyuan's checkpoints' RoPE: "dynamic" with an alpha, a fixed base θ·α^(d_h/(d_h − 2))
_NTK_ALPHA = {"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0}

def _gpt_neo_by_hand(d: int, f: int, layers: int, vocab: int, positions: int, tied: bool) -> int:
    """q, k, v without biases, out_proj with one; c_fc, c_proj with theirs; two LayerNorms with shifts a layer;
    token and position embeddings, a final LayerNorm, the head if untied."""
    layer = 3 * d * d + d * d + d + 2 * d * f + f + d + 4 * d
    return layers * layer + (1 if tied else 2) * vocab * d + positions * d + 2 * d


def _mpt_by_hand(d: int, layers: int, vocab: int, tied: bool) -> int:
    """Wqkv, out_proj, up_proj and down_proj (4·d wide) without biases, two shift-free LayerNorms a layer; the
    embeddings, a final LayerNorm, the head if untied."""
    return layers * (12 * d * d + 2 * d) + (1 if tied else 2) * vocab * d + d


def _codegen_by_hand(d: int, f: int, layers: int, vocab: int, tied: bool) -> int:
    """qkv_proj and out_proj without biases, fc_in and fc_out with them, one LayerNorm a layer; the embeddings, a
    final LayerNorm, the head (if untied) and its bias."""
    return layers * (4 * d * d + 2 * d * f + f + d + 2 * d) + (1 if tied else 2) * vocab * d + vocab + 2 * d


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
    # Helium 2B: 20 heads of 128, every one its own K/V
    "helium": (_sizes(2560, 7040, 24, 20, 48000, 4096), 2_172_643_840,
               _llama_by_hand(2560, 7040, 24, 48000, 2560, 2560),
               dict(_RANDOM, head_dim=8, attention_bias=True, mlp_bias=True), 68_592),
    # AFM-4.5B: 32 heads of 80, a plain MLP (two matrices)
    "arcee": (_sizes(2560, 18432, 32, 32, 32000, 4096), 4_022_766_080,
              _llama_by_hand(2560, 18432, 32, 32000, 2560, 2560, matrices=2),
              dict(_RANDOM, head_dim=12, attention_bias=True, mlp_bias=True, hidden_act="gelu"), 66_312),
    # EXAONE-3.0-7.8B: LlamaConfig's sizes, 8 K/V heads, ExaoneConfig's vocabulary
    "exaone": (_sizes(4096, 14336, 32, 32, 102400, 4096), 7_818_448_896,
               _llama_by_hand(4096, 14336, 32, 102400, 4096, 1024),
               dict(_RANDOM, head_dim=12, attention_bias=True, mlp_bias=True), 78_072),
    # InternLM3-8B: 2 K/V heads of 128
    "internlm3": (_sizes(4096, 10240, 48, 32, 128512, 32768), 8_804_241_408,
                  _llama_by_hand(4096, 10240, 48, 128512, 4096, 256),
                  dict(_RANDOM, head_dim=12, attention_bias=True, mlp_bias=True), 78_072),
    # HunYuanDenseV1Config's sizes with the head_dim transformers needs (its default null fails): every head its own
    # K/V, q/k norms (d_h,) each
    "hunyuan_v1_dense": ({**_sizes(4096, 11008, 32, 32, 290943, 2048), "head_dim": 128}, 8_859_684_864,
                         _llama_by_hand(4096, 11008, 32, 290943, 4096, 4096) + 32 * 2 * 128,
                         dict(_RANDOM, head_dim=12, attention_bias=True, rope_parameters=_NTK_ALPHA), 77_520),
    # VaultGemma 1B: Gemma 2's sizes and attention (8 heads of 256, 4 K/V heads), two norms a layer (no norm after
    # either branch), tied head; the random config with q/k/v/o biases, an untied head and other soft caps
    "vaultgemma": (_sizes(2304, 9216, 26, 8, 256000, 8192), 2_614_222_080,
                   _llama_by_hand(2304, 9216, 26, 256000, 8 * 256, 4 * 256) - 256000 * 2304,
                   dict(_RANDOM, num_key_value_heads=3, head_dim=12, intermediate_size=70, attention_bias=True,
                        tie_word_embeddings=False, query_pre_attn_scalar=20, attn_logit_softcapping=None,
                        final_logit_softcapping=5.0, sliding_window=16, hidden_activation="gelu"), 91_056),
    # NemotronConfig's sizes (Nemotron-4 15B's width) with the K/V heads transformers needs (its default null fails):
    # every head its own K/V; a plain MLP (two matrices), LayerNorm1P's weight and bias on the three kinds of norm
    "nemotron": ({**_sizes(6144, 24576, 32, 48, 256000, 4096), "num_key_value_heads": 48}, 17_642_041_344,
                 _llama_by_hand(6144, 24576, 32, 256000, 6144, 6144, matrices=2) + 32 * 2 * 6144 + 6144,
                 dict(_RANDOM, head_dim=12, attention_bias=True, mlp_bias=True, hidden_act="gelu", norm_eps=1e-4),
                 66_648),
    "ministral3": (_MINISTRAL3_SIZES, 8_489_553_920, _MINISTRAL3_BY_HAND, _MINISTRAL3_RANDOM, 51_480),
    # GPT-Neo 1.3B's sizes: 24 layers alternating global and local (a window of 256), MLP 4·2048
    "gpt_neo": (dict(hidden_size=2048, num_heads=16, num_layers=24, intermediate_size=None, vocab_size=50257,
                     max_position_embeddings=2048), 1_315_575_808, _gpt_neo_by_hand(2048, 8192, 24, 50257, 2048, True),
                dict(hidden_size=48, num_heads=6, num_layers=3, intermediate_size=100, window_size=5,
                     attention_types=[[["local"], 1], [["global", "local"], 1]], vocab_size=300,
                     max_position_embeddings=96, tie_word_embeddings=False, activation_function="relu"), 91_116),
    # MptConfig's defaults (MPT-1B's sizes); the random config's expansion_ratio 2 is not read (4·d_model all the same)
    "mpt": (dict(d_model=2048, n_heads=16, n_layers=24, vocab_size=50368, max_seq_len=2048), 1_311_213_568,
            _mpt_by_hand(2048, 24, 50368, True),
            dict(d_model=48, n_heads=8, n_layers=3, vocab_size=300, max_seq_len=96, tie_word_embeddings=False,
                 expansion_ratio=2, attn_config={"clip_qkv": 3.0, "softmax_scale": 0.2}), 112_080),
    # CodeGen-6B's sizes (CodeGenConfig's defaults); the random config ties the head (its bias stays)
    "codegen": (dict(n_embd=4096, n_head=16, n_layer=28, rotary_dim=64, n_inner=None, vocab_size=50400,
                     n_positions=2048), 6_050_882_784, _codegen_by_hand(4096, 16384, 28, 50400, False),
                dict(n_embd=48, n_head=4, n_layer=3, rotary_dim=8, n_inner=100, vocab_size=300, n_positions=96,
                     tie_word_embeddings=True, activation_function="relu"), 71_976),
    # IQuest-Coder-V1-40B: 40 heads over 8 K/V heads of 128; the random config's null head_dim is hidden_size // heads
    "iquestcoder": (_sizes(5120, 27648, 80, 40, 76800, 131072), 39_794_283_520,
                    _llama_by_hand(5120, 27648, 80, 76800, 5120, 1024),
                    dict(_RANDOM, head_dim=None, attention_bias=True, mlp_bias=True), 68_736),
    # HyperCLOVAXConfig's sizes (Llama 2 7B's): four norms a layer (the two after the branches, use_post_norm)
    "hyperclovax": (_sizes(4096, 11008, 32, 32, 32000, 2048), 6_738_677_760,
                    _llama_by_hand(4096, 11008, 32, 32000, 4096, 4096) + 32 * 2 * 4096,
                    dict(_RANDOM, head_dim=12, attention_bias=True, mlp_bias=True, use_post_norm=False), 78_072),
    # Jais-2-8B: 26 heads of 128, each its own K/V; biases on q/k/v/o and the plain ReLU² MLP, LayerNorms with biases
    "jais2": (_sizes(3328, 26624, 32, 26, 150272, 8192), 8_090_401_280,
              _llama_by_hand(3328, 26624, 32, 150272, 3328, 3328, matrices=2) + 32 * (4 * 3328 + 26624 + 3328 + 2 * 3328)
              + 3328,
              dict(_RANDOM, head_dim=12, attention_bias=False, mlp_bias=False, hidden_act="gelu", layer_norm_eps=1e-4),
              65_760),
    # CWM 32B: 48 heads over 8 K/V heads of 128, no biases
    "cwm": (_sizes(6144, 21504, 64, 48, 128256, 131072), 32_581_097_472,
            _llama_by_hand(6144, 21504, 64, 128256, 6144, 1024),
            dict(_RANDOM, head_dim=12, mlp_bias=True, sliding_window=16,
                 layer_types=["sliding_attention", "full_attention", "sliding_attention"]), 77_568),
    # GraniteSWAConfig's sizes: 20 heads of 128 over 4 K/V heads, a sink per head, tied
    "granite_swa": (_sizes(2560, 8192, 24, 20, 100352, 8192), 2_144_463_840,
                    _llama_by_hand(2560, 8192, 24, 100352, 2560, 512) - 100352 * 2560 + 24 * 20,
                    dict(_RANDOM, head_dim=12, attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                         sliding_window=16, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                         layer_rope_theta=[10000.0, 0, 50000.0]), 92_490),
}


# fields a config class leaves null that transformers cannot build the model without (set in CASES' sizes)
NEEDED = {"hunyuan_v1_dense": ("head_dim",), "nemotron": ("num_key_value_heads",)}


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


def test_ministral3_scales_its_queries_as_its_rope_parameters_say() -> None:
    block = mapped("ministral3", _MINISTRAL3_SIZES)["block"]  # Ministral3Config's RoPE: yarn ×16 over 16,384
    assert (block["query_scale"], block["query_scale_length"], block["rope_theta"]) == (0.1, 16384, 1e6)
    assert block["rope_scaling"]["type"] == "yarn" and block["rope_scaling"]["factor"] == 16.0
    assert "sliding_window" not in block  # Ministral3Config: no window unless sliding_window is set
    random = mapped("ministral3", _MINISTRAL3_RANDOM)["block"]
    assert (random["query_scale"], random["query_scale_length"], random["sliding_window"]) == (0.2, 32, 16)
    assert "rope_scaling" not in random


@pytest.mark.parametrize("rope, field", [
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}, "llama_4_scaling_beta"),
    ({"rope_type": "default", "llama_4_scaling_beta": 0.1}, "original_max_position_embeddings"),
])
def test_ministral3_without_what_its_query_scale_reads_is_refused(rope: dict, field: str) -> None:
    """Ministral3Attention computes 1 + beta·log(1 + floor(t / length)) from both: without either it fails."""
    with pytest.raises(ConfigError, match=f"field '{field}'"):
        mapped("ministral3", {**_MINISTRAL3_SIZES, "rope_parameters": rope})


def test_mistral3_with_a_ministral3_text_config_counts_its_language_model() -> None:
    """Ministral 3's release: a Mistral 3 vision-language config whose text_config is a ministral3, whose
    sizes it leaves out are Ministral3Config's. 8,489,553,920: transformers 5.24's
    Mistral3ForConditionalGeneration on the meta device, its parameters outside the vision tower and the
    projector, with both levels untied (the top level's default true would tie it there: see the README)."""
    data = {"model_type": "mistral3", "text_config": {"model_type": "ministral3"}, "tie_word_embeddings": False}
    assert count_parameters(parse_config(hf_to_mapping(data, "m.json"))).total == 8_489_553_920
    with pytest.raises(ConfigError, match="'mistral' or 'ministral3'"):
        hf_to_mapping({**data, "text_config": {"model_type": "llama"}}, "m.json")


def test_helium_rotates_interleaved_pairs_and_needs_an_o_proj_as_wide_as_the_model() -> None:
    block = mapped("helium", dict(_RANDOM, head_dim=8, attention_bias=True))["block"]
    assert block["rope_layout"] == "interleaved" and block["norm_eps"] == 1e-8
    assert block["bias"] == {"qkv": True, "out": False, "mlp": False, "norm": False}
    with pytest.raises(ConfigError, match="must equal 'hidden_size' = 48"):
        mapped("helium", dict(_RANDOM, head_dim=16))


def test_arcee_runs_a_plain_relu2_mlp() -> None:
    block = mapped("arcee", _RANDOM)["block"]
    assert block["activation"] == "relu2" and "gated" not in block


def test_exaone_reads_its_own_spellings_of_llamas_fields() -> None:
    own = {k: v for k, v in _RANDOM.items() if k != "num_hidden_layers"}
    data = mapped("exaone", {**own, "num_layers": 3, "layer_norm_epsilon": 1e-6, "activation_function": "gelu"})
    assert (data["model"]["n_layers"], data["block"]["norm_eps"], data["block"]["activation"]) == (3, 1e-6, "gelu")
    assert data["block"]["rope_theta"] == 500_000.0  # ExaoneConfig's default_theta
    with pytest.raises(ConfigError, match="field 'num_layers' = 4 .*disagrees with 'num_hidden_layers' = 3"):
        mapped("exaone", {**_RANDOM, "num_layers": 4})


def test_internlm3_qkv_bias_and_bias_are_attention_bias_and_mlp_bias_which_must_agree() -> None:
    bias = mapped("internlm3", {**_RANDOM, "qkv_bias": True, "bias": True})["block"]["bias"]
    assert bias == {"qkv": True, "out": True, "mlp": True, "norm": False}  # RMSNorm has no shift
    with pytest.raises(ConfigError, match="field 'qkv_bias' = True"):
        mapped("internlm3", {**_RANDOM, "qkv_bias": True, "bias": False})


def test_hunyuan_normalises_the_rotated_queries_and_keys_and_reads_alpha_as_a_base() -> None:
    block = mapped("hunyuan_v1_dense", dict(_RANDOM, head_dim=12, rope_parameters=_NTK_ALPHA))["block"]
    assert (block["qk_norm"], block["qk_norm_after_rope"]) == ("head", True)
    assert block["rope_theta"] == pytest.approx(10000.0 * 1000.0 ** (12 / 10), rel=1e-15) and "rope_scaling" not in block
    dynamic = mapped("hunyuan_v1_dense", dict(_RANDOM, head_dim=12, rope_parameters={
        "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}))["block"]  # no alpha: dynamic NTK itself
    assert dynamic["rope_scaling"]["type"] == "dynamic" and dynamic["rope_theta"] == 10000.0
    with pytest.raises(ConfigError, match="field 'head_dim' is missing"):
        mapped("hunyuan_v1_dense", _RANDOM)


def test_vaultgemma_is_gemma2_with_the_norms_before_the_branches_only() -> None:
    """VaultGemmaDecoderLayer: input_layernorm → attention → residual, pre_feedforward_layernorm → MLP →
    residual; Gemma's (1 + w) RMSNorm, attention scale and soft caps as Gemma 2's defaults."""
    block = mapped("vaultgemma", _sizes(2304, 9216, 26, 8, 256000, 8192))["block"]
    assert (block["placement"], block["norm_unit_offset"]) == ("pre", True)
    assert (block["attention_softcap"], block["head_dim"], block["n_kv_heads"]) == (50.0, 256, 4)


def test_nemotron_is_a_layernorm_with_unit_offset_and_bias_rotating_half_of_each_head() -> None:
    """NemotronLayerNorm1P: F.layer_norm with weight + 1 and a bias, eps norm_eps; a plain ReLU² MLP; RoPE on the
    first partial_rotary_factor (0.5) of each head; rms_norm_eps is not Nemotron's field."""
    block = mapped("nemotron", CASES["nemotron"][0])["block"]
    assert (block["norm"], block["norm_unit_offset"], block["norm_eps"]) == ("layernorm", True, 1e-5)
    assert block["bias"] == {"qkv": False, "out": False, "mlp": False, "norm": True}
    assert (block["rope"], block["activation"]) == (0.5, "relu2")  # relu2 is not gated: up_proj and down_proj
    with pytest.raises(Exception, match="rms_norm_eps"):
        mapped("nemotron", {**_sizes(48, 80, 2, 6, 300, 96), "num_key_value_heads": 2, "rms_norm_eps": 1e-6})


@pytest.mark.parametrize("model_type, field", [("nemotron", "num_key_value_heads"), ("ministral", "head_dim")])
def test_a_field_transformers_attention_needs_and_the_config_class_leaves_null_is_required(model_type: str,
                                                                                          field: str) -> None:
    """NemotronAttention divides the heads by num_key_value_heads, MinistralAttention scales by head_dim ** -0.5:
    both config classes default them to null, and transformers 5.24 fails to build the model from the defaults
    (tests/fixtures/census/census.json.gz's errors)."""
    sizes = {**_sizes(48, 80, 2, 6, 300, 96), "num_key_value_heads": 2, "head_dim": 8}
    for absent in ({k: v for k, v in sizes.items() if k != field}, {**sizes, field: None}):
        with pytest.raises(ConfigError, match=f"field '{field}' is (missing|null); .*fails on null"):
            mapped(model_type, absent)
    assert total(model_type, sizes) > 0


# ----------------------------------------------------------------------------- against transformers itself


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_totals_and_sizes_here_are_transformers_own(model_type: str) -> None:
    """The config class's sizes are the ones written above, and transformers on the meta device counts the
    totals written above, for them and for the random config; blockcli reads the whole of the config class's
    to_dict() (every default spelled out) to the same total."""
    sizes, defaults_total, _, fields, random_total = CASES[model_type]
    assert_totals_are_transformers_own(model_type, sizes, NEEDED.get(model_type, ()), defaults_total, fields,
                                       random_total)


def assert_totals_are_transformers_own(model_type: str, sizes: dict, needed_keys: tuple[str, ...], defaults_total: int,
                                       fields: dict, random_total: int) -> None:
    """The body of the test above, for any family's sizes and random config (tests/test_moe_relatives.py too)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    needed = {key: sizes[key] for key in needed_keys}  # what the config class leaves null
    assert all(getattr(transformers.AutoConfig.for_model(model_type), key) is None for key in needed)
    defaults = transformers.AutoConfig.for_model(model_type, **needed)
    assert {key: getattr(defaults, key) for key in sizes} == sizes
    for config, want in ((defaults, defaults_total), (transformers.AutoConfig.for_model(model_type, **fields),
                                                      random_total)):
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        assert sum(p.numel() for p in model.parameters()) == want
        data = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}
        assert count_parameters(parse_config(hf_to_mapping(data, "x.json"))).total == want


# ----------------------------------------------------------------------------- Cohere Compass's language model

# a random config (CohereCompassTextConfig's defaults hold no RoPE for their full_attention layers: transformers cannot
# build them, tests/test_census.py): GQA 6/2 of 20, q/k/v/o biased, untied, windows on three layers with RoPE, the two
# global ones without positions
COHERE_COMPASS = {"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 20,
                  "num_hidden_layers": 5, "intermediate_size": 200, "attention_bias": True,
                  "tie_word_embeddings": False, "vocab_size": 1000, "max_position_embeddings": 4096,
                  "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                                  "full_attention"],
                  "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                      "full_attention": None}}


def test_cohere_compass_text_counts_as_transformers_and_by_hand() -> None:
    d, h, kv, d_h, layers, d_ff, vocab = 96, 6, 2, 20, 5, 200, 1000
    # Q, K, V with biases, O with its bias, the one shared LayerNorm (no shift), the SwiGLU MLP
    layer = (d * h * d_h + h * d_h) + 2 * (d * kv * d_h + kv * d_h) + (h * d_h * d + d) + d + 3 * d * d_ff
    assert total("cohere_compass_text", COHERE_COMPASS) == layers * layer + 2 * vocab * d + d == 635_656


def test_cohere_compass_text_rotates_by_layer_type_in_the_half_layout() -> None:
    config = parse_config(mapped("cohere_compass_text", {**COHERE_COMPASS, "logit_scale": None}))
    sliding, full = config.layer_block(0), config.layer_block(1)
    assert (sliding.rope, sliding.rope_theta, sliding.rope_layout, sliding.sliding_window) == (1.0, 1e4, "half", 4096)
    assert (full.rope, full.sliding_window, full.placement) == (0.0, 0, "parallel_shared")
    assert config.model.logit_multiplier == 1.0  # null, the config class's default: unscaled


@pytest.mark.parametrize("rope_parameters", [
    {"rope_type": "default", "rope_theta": 1e4},  # one RoPE for every layer: kept flat, so transformers fails
    {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},  # none for the full_attention layers
    {"sliding_attention": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}, "full_attention": None},
    {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4, "rope_scale": 2.0}, "full_attention": None},
])
def test_cohere_compass_text_refuses_a_rope_it_cannot_run_naming_the_field(rope_parameters: dict) -> None:
    with pytest.raises(ConfigError, match="field 'rope_parameters"):
        mapped("cohere_compass_text", {**COHERE_COMPASS, "rope_parameters": rope_parameters})


def test_cohere_compass_text_rotates_the_whole_head_whatever_partial_rotary_factor_says() -> None:
    # CohereCompassRotaryEmbedding's default RoPE takes head_dim frequencies' worth and never reads the factor
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5},
            "full_attention": None}
    import json

    from blockcli.hf import read_hf_text

    data = {"model_type": "cohere_compass_text", **COHERE_COMPASS, "rope_parameters": rope}
    config = read_hf_text(json.dumps(data), "x.json")[1]
    assert config.layer_block(0).rope_dims == 20
    assert any("partial_rotary_factor 0.5 is not applied" in note for note in config.notes)


@pytest.mark.torch
def test_cohere_compass_text_total_is_transformers_own() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model("cohere_compass_text", **COHERE_COMPASS)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == total("cohere_compass_text", COHERE_COMPASS)


# ----------------------------------------------------------------------------- GOT-OCR 2.0's language model


@pytest.mark.parametrize("top, text, transformers_total", [
    (True, False, 343_680), (False, True, 439_680), (True, True, 343_680),  # the top level's field ties the head
])
def test_got_ocr2_counts_its_qwen2_language_model_tied_by_the_top_level(top: bool, text: bool,
                                                                        transformers_total: int) -> None:
    """transformers' GotOcr2ForConditionalGeneration on the meta device, its vision tower and projector left out."""
    data = {"tie_word_embeddings": top, "text_config": {
        "model_type": "qwen2", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
        "num_hidden_layers": 3, "intermediate_size": 200, "vocab_size": 1000, "tie_word_embeddings": text}}
    d, kv_width, layers, d_ff, vocab = 96, 32, 3, 200, 1000  # Qwen2: q/k/v biased, o not; two RMSNorms; SwiGLU
    layer = (d * d + d) + 2 * (d * kv_width + kv_width) + d * d + 2 * d + 3 * d * d_ff
    assert total("got_ocr2", data) == layers * layer + vocab * d * (1 if top else 2) + d == transformers_total


# ----------------------------------------------------------------------------- Emu3's language model


@pytest.mark.parametrize("top, text, biased, transformers_total", [
    (True, False, False, 343_200), (False, True, True, 441_456), (False, False, True, 441_456),
])
def test_emu3_counts_its_language_model_tied_by_the_top_level(top: bool, text: bool, biased: bool,
                                                              transformers_total: int) -> None:
    """transformers' Emu3ForConditionalGeneration on the meta device, its VQ-VAE left out; attention_bias and mlp_bias
    are attributes Emu3TextConfig does not declare and Emu3Attention/Emu3MLP read."""
    data = {"tie_word_embeddings": top, "vocabulary_map": {"<image>": 5}, "text_config": {
        "model_type": "emu3_text_model", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
        "num_hidden_layers": 3, "intermediate_size": 200, "vocab_size": 1000, "tie_word_embeddings": text,
        "attention_bias": biased, "mlp_bias": biased}}
    d, kv_width, layers, d_ff, vocab = 96, 32, 3, 200, 1000  # Llama's block: two RMSNorms, SwiGLU
    layer = 2 * d * d + 2 * d * kv_width + 2 * d + 3 * d * d_ff
    if biased:
        layer += 2 * d + 2 * kv_width + 2 * d_ff + d
    assert total("emu3", data) == layers * layer + vocab * d * (1 if top else 2) + d == transformers_total


def test_emu3_defaults_are_emu3_text_configs() -> None:
    """Emu3TextConfig's defaults (8 K/V heads, eps 1e-5, RoPE base 1e6) where a text_config leaves them out."""
    mapping = hf_to_mapping({"model_type": "emu3", "text_config": {
        "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, "intermediate_size": 96,
        "vocab_size": 100, "num_key_value_heads": 2}}, "config.json")
    block = mapping["block"]
    assert (block["n_kv_heads"], block["norm_eps"], block["rope_theta"]) == (2, 1e-5, 1_000_000.0)


# ----------------------------------------------------------------------------- Phi-4-multimodal's language model


@pytest.mark.parametrize("extra, transformers_total", [({}, 508_544), ({"num_key_value_heads": 2,
                                                                          "tie_word_embeddings": True}, 355_968)])
def test_phi4_multimodal_counts_its_phi3_language_model_at_the_top_level(extra: dict, transformers_total: int) -> None:
    """transformers' Phi4MultimodalForCausalLM on the meta device without model.embed_tokens_extend. (its image and
    audio encoders); 8 K/V heads when the config gives none (Phi4MultimodalConfig's default; Phi3Config's is every
    head)."""
    data = {"hidden_size": 128, "num_attention_heads": 16, "num_hidden_layers": 2, "intermediate_size": 200,
            "vocab_size": 1000, "max_position_embeddings": 4096, "vision_config": {}, "audio_config": {}, **extra}
    d, layers, d_ff, vocab = 128, 2, 200, 1000
    kv_width = 8 * extra.get("num_key_value_heads", 8)  # heads of 128 / 16
    layer = d * (d + 2 * kv_width) + d * d + 2 * d + 3 * d * d_ff  # fused Q | K | V, o, two RMSNorms, gate | up, down
    tied = extra.get("tie_word_embeddings", False)
    assert total("phi4_multimodal", data) == layers * layer + vocab * d * (1 if tied else 2) + d == transformers_total


# ----------------------------------------------------------------------------- Llama 3.2 Vision's language model


@pytest.mark.parametrize("cross", [[1, 4], [0, 2, 9]])  # 9: past the last layer, which transformers never meets
def test_mllama_counts_its_cross_attention_layers_and_the_8_extra_embedding_rows(cross: list[int]) -> None:
    """transformers' MllamaForConditionalGeneration on the meta device without its vision model and projector: 604,772
    for both (two cross-attention layers of five)."""
    data = {"text_config": {"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
                            "num_hidden_layers": 5, "intermediate_size": 200, "vocab_size": 1000,
                            "cross_attention_layers": cross}}
    d, d_h, kv_width, d_ff, vocab = 96, 16, 32, 200, 1000
    self_layer = 2 * d * d + 2 * d * kv_width + 2 * d + 3 * d * d_ff  # Llama's: Q, K, V, O, two RMSNorms, SwiGLU
    cross_layer = self_layer + 2 * d_h + 2  # and per-head q/k norms, a tanh gate on each branch
    by_hand = 3 * self_layer + 2 * cross_layer + (vocab + 8) * d + vocab * d + d
    assert total("mllama", data) == by_hand == 604_772


def test_mllama_refuses_a_tied_head_and_cross_attention_on_every_layer() -> None:
    text = {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2,
            "intermediate_size": 64, "vocab_size": 100}
    with pytest.raises(ConfigError, match="tie_word_embeddings.*8 rows more"):
        mapped("mllama", {"text_config": {**text, "tie_word_embeddings": True}})
    with pytest.raises(ConfigError, match="cross_attention_layers' names every layer"):
        mapped("mllama", {"text_config": {**text, "cross_attention_layers": [0, 1]}})
    with pytest.raises(ConfigError, match="head_dim"):
        mapped("mllama", {"text_config": {**text, "head_dim": 8}})


# ----------------------------------------------------------------------------- GIT's text decoder


@pytest.mark.parametrize("tied, transformers_total", [(False, 434_464), (True, 338_464)])
def test_git_counts_its_post_norm_text_decoder(tied: bool, transformers_total: int) -> None:
    """transformers' GitForCausalLM on the meta device without its image encoder and visual projection."""
    data = {"hidden_size": 96, "num_attention_heads": 6, "num_hidden_layers": 3, "intermediate_size": 200,
            "vocab_size": 1000, "max_position_embeddings": 128, "tie_word_embeddings": tied, "vision_config": {}}
    d, d_ff, vocab, positions = 96, 200, 1000, 128
    layer = 4 * (d * d + d) + 2 * 2 * d + (d * d_ff + d_ff) + (d_ff * d + d)  # biased Q, K, V, O; two LayerNorms; MLP
    embeddings = vocab * d + positions * d + 2 * d  # tokens, positions, their LayerNorm
    head = vocab + (0 if tied else vocab * d)  # the head's bias stays its own when its weight is tied
    assert total("git", data) == 3 * layer + embeddings + head == transformers_total


def test_a_flat_phi4_multimodal_config_is_named_in_its_messages() -> None:
    """Its fields sit at the top level: a message names the config the user gave, not the Phi-3 read from it."""
    with pytest.raises(ConfigError, match="field 'hidden_size' is missing; a Phi-4-multimodal config.json needs it"):
        mapped("phi4_multimodal", {"num_attention_heads": 4})
