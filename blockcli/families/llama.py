"""Llama and the families that share its module names: Mistral, Ministral, Qwen2, Qwen3, Gemma, Granite,
OLMo 2 and 3, SmolLM3.

All are `gated_rms` blocks (RMSNorm, gated MLP, RoPE over the whole head) with a few switches each.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from blockcli.families.common import (TRAINING_ONLY, Composite, Family, divides, gated_rms, mlp_activation,
                                      layer_types, with_data,
                                      layer_type_ropes, override_layers, silu_gate, sliding_layers,
                                      window_by_key)
from blockcli.config import ConfigError
from blockcli.families.fields import Fields, short
from blockcli.tensor_names import LINEAR, TensorMap, tensor


def _llama(f: Fields) -> tuple[dict, dict]:
    f.ignore("pretraining_tp")  # splits the same matmuls into slices: the same function
    # nanotron's exports (SmolLM2) say which RoPE layout they use; true would be GPT-J's interleaved pairs
    f.neutral("rope_interleaved", False, "transformers' Llama rotates halves (i, i + r/2) whatever it says, so "
                                         "interleaved-pair weights would not give the model it describes")
    return gated_rms(f, silu_gate, kv_default=None, tie_default=False)


def _mistral(f: Fields) -> tuple[dict, dict]:
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False,
                             qkv_bias=False, out_bias=False, mlp_bias=False)
    # MistralForCausalLM masks by sliding_window alone (MistralConfig defaults it to 4096) and only
    # warns about layer_types, which Ministral reads
    f.ignore("layer_types")
    window_by_key(f, block, default=4096)
    return block, model


def _ministral(f: Fields) -> tuple[dict, dict]:
    """Ministral: Mistral's block, with the window on the layers `layer_types` marks sliding (absent:
    every layer, unless `sliding_window` is null)."""
    # MinistralAttention's scale is config.head_dim ** -0.5 (getattr finds the class's null): transformers fails without it
    f.int("head_dim", why="transformers' Ministral attention reads it and fails on null")
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False,
                             qkv_bias=False, out_bias=False, mlp_bias=False)
    n_layers = model["n_layers"]
    window_on = f.data.get("sliding_window") is not None if f.has("sliding_window") else True  # default 4096
    sliding_layers(f, block, layer_types(f, n_layers) or [window_on] * n_layers, default=4096)
    return block, model


# Ministral3Config.__post_init__'s RoPE when the config gives none (its max_position_embeddings copy aside)
MINISTRAL3_ROPE = {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0, "original_max_position_embeddings": 16384,
                   "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0,
                   "llama_4_scaling_beta": 0.1}


def _ministral3(f: Fields) -> tuple[dict, dict]:
    """Ministral 3 (and the language model of Mistral 3's later releases): Mistral's block with 8 K/V heads of 128,
    yarn RoPE by default, a window on every layer when `sliding_window` is set, and each query times
    1 + β·ln(1 + ⌊t / L⌋) after RoPE (`block.query_scale`: β `rope_parameters.llama_4_scaling_beta`, L its
    `original_max_position_embeddings`)."""
    params = f.raw("rope_parameters", None)
    if params is None:
        params = MINISTRAL3_ROPE
    elif not isinstance(params, Mapping):
        raise f.invalid("rope_parameters", params, "an object")
    inner = Fields(params, f.where, f.family)
    # Ministral3Attention multiplies by 1 + beta·log(1 + floor(t / length)): without either it fails
    beta = inner.float("llama_4_scaling_beta", low=0.0, high=1e6, low_open=False)
    length = inner.int("original_max_position_embeddings")
    # the config class's copy of max_position_embeddings, which transformers' yarn does not read (it reads the top level's)
    # (without a scaling, the original length is the query scale's alone)
    scaled = params.get("rope_type", params.get("type", "default")) != "default"
    rope = {k: v for k, v in params.items() if k not in ("llama_4_scaling_beta", "max_position_embeddings")
            and (scaled or k != "original_max_position_embeddings")}
    g = with_data(f, {**f.data, "rope_parameters": rope})
    block, model = gated_rms(g, silu_gate, kv_default=8, tie_default=False, head_dim_default=128,
                             qkv_bias=False, out_bias=False, mlp_bias=False, eps_default=1e-5)
    f.ignore("layer_types")  # Ministral3Config only warns about it: every layer masks by sliding_window
    window_by_key(f, block, default=None)
    if beta:
        block.update(query_scale=beta, query_scale_length=length)
    return block, model


def _qwen2(f: Fields) -> tuple[dict, dict]:
    f.neutral("use_mrope", False, "multimodal RoPE (Qwen2-VL) splits positions over time, height and width")
    block, model = gated_rms(f, silu_gate, kv_default=32, tie_default=False,
                             qkv_bias=True, out_bias=False, mlp_bias=False)
    _qwen_window(f, block, model)
    return block, model


def _qwen_window(f: Fields, block: dict, model: dict, max_window_default: int = 28) -> None:
    """Qwen2/Qwen3: `use_sliding_window` puts the window on layers max_window_layers and up."""
    # a null sliding_window leaves every layer full, whatever use_sliding_window and layer_types say
    null_window = f.has("sliding_window") and f.data["sliding_window"] is None
    use_window = f.bool("use_sliding_window", False) and not null_window
    f.ignore("max_window_layers")  # read only when the window is on
    n_layers = model["n_layers"]
    # Qwen2Config/Qwen3Config: sliding_window is None unless use_sliding_window; layer_types defaults to
    # sliding for the layers i >= max_window_layers; a layer slides only with a window
    sliding = layer_types(f, n_layers)
    if sliding is None:
        first = f.int("max_window_layers", max_window_default, minimum=0) if use_window else n_layers
        sliding = [i >= first for i in range(n_layers)]
    sliding = [use_window and kind for kind in sliding]
    sliding_layers(f, block, sliding, default=4096)  # Qwen2Config/Qwen3Config: sliding_window 4096


def text_only_mrope(f: Fields) -> tuple[Fields, tuple[str, list[int] | None] | None]:
    """The fields with M-RoPE's keys taken out of the RoPE dict (`mrope_section`, `mrope_interleaved`; a
    `type: mrope` is the default RoPE), and the section's key with its value (None: no M-RoPE). Qwen-VL's
    multimodal RoPE turns each of three frequency sections by its own position (time, height, width); for
    text alone the three are the same position, so it is RoPE itself."""
    for key in ("rope_scaling", "rope_parameters"):
        params = f.data.get(key)
        if isinstance(params, Mapping) and ("mrope_section" in params or "mrope_interleaved" in params
                                            or "mrope" in (params.get("type"), params.get("rope_type"))):
            section = params.get("mrope_section")
            if section is not None and (not isinstance(section, list) or not section or not all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in section)):
                raise ConfigError(f"{f.where}: field '{key}.mrope_section' = {short(section)}: expected an array of "
                                  f"integers >= 0 (rotary pairs per position axis)")
            interleaved = params.get("mrope_interleaved", False)
            if not isinstance(interleaved, bool):
                raise f.invalid(f"{key}.mrope_interleaved", interleaved, "true or false")
            rest = {k: v for k, v in params.items() if k not in ("mrope_section", "mrope_interleaved")}
            if "mrope" in (rest.get("type"), rest.get("rope_type")):
                rest = {k: v for k, v in rest.items() if k not in ("type", "rope_type")}
            f.notes.append("multimodal RoPE (mrope_section) runs as plain RoPE: text positions are the same "
                           "on its three axes")
            return with_data(f, {**f.data, key: rest}), (f"{key}.mrope_section", section)
    return f, None


def _mrope_pairs(f: Fields, found: tuple[str, list[int] | None] | None, block: dict) -> None:
    """Qwen2-VL's M-RoPE cuts each head's rotary pairs into its sections one after another, so they must add up
    to d_h / 2 (transformers fails otherwise); Qwen3-VL's interleaving has no such need."""
    if found is None or found[1] is None:
        return
    (key, section), pairs = found, block["head_dim"] // 2
    if sum(section) != pairs:
        raise f.unrepresentable(key, section, f"its sections add up to {sum(section)} rotary pairs, but a head of "
                                              f"{block['head_dim']} has {pairs}")


def theta_default(f: Fields, block: dict, theta: float) -> None:
    """The config class's RoPE base when the config gives none (its `default_theta`); a null one is refused,
    as transformers fails on it."""
    if f.has("rope_theta") and f.data["rope_theta"] is None:
        raise f.invalid("rope_theta", None, "a number (null makes transformers fail)")
    for key in ("rope_parameters", "rope_scaling"):
        nested = f.data.get(key)
        if isinstance(nested, Mapping) and "rope_theta" in nested and nested["rope_theta"] is None:
            raise f.invalid(f"{key}.rope_theta", None, "a number (null makes transformers fail)")
    params = f.data.get("rope_parameters") or f.data.get("rope_scaling")
    if f.data.get("rope_theta") is None and not (isinstance(params, Mapping) and params.get("rope_theta") is not None):
        block["rope_theta"] = theta


def _qwen_vl_text(f: Fields) -> tuple[dict, dict]:
    """Qwen2-VL's and Qwen2.5-VL's language model (Qwen2VLTextConfig, Qwen2_5_VLTextConfig): Qwen2's block,
    q/k/v biases always, head_dim = hidden_size / heads whatever the config says, RoPE base 1e6 by default,
    the window from `max_window_layers` (default 80) up when `use_sliding_window`; M-RoPE, which text-only
    input turns into RoPE."""
    f, section = text_only_mrope(f)
    d, heads = f.int("hidden_size"), f.int("num_attention_heads")
    divides(f, "hidden_size", d, "num_attention_heads", heads)  # Qwen2-VL's attention refuses anything else
    if f.data.get("head_dim") is not None:
        f.neutral("head_dim", d // heads, "Qwen2-VL's attention computes head_dim as hidden_size / num_attention_heads")
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False, qkv_bias=True, out_bias=False,
                             mlp_bias=False, eps_default=1e-5)
    theta_default(f, block, 1e6)
    _mrope_pairs(f, section, block)
    _qwen_window(f, block, model, max_window_default=80)
    return block, model


def _qwen3_vl_text(f: Fields) -> tuple[dict, dict]:
    """Qwen3-VL's language model (Qwen3VLTextConfig): Qwen3's block (per-head q/k RMSNorm, `attention_bias`),
    32 K/V heads of 128 and RoPE base 5e5 by default, no sliding window; interleaved M-RoPE, which text-only
    input turns into RoPE (its deepstack adds visual features to early layers only when there is an image)."""
    f, _ = text_only_mrope(f)  # interleaved sections: any split of the pairs runs
    block, model = gated_rms(f, silu_gate, kv_default=32, tie_default=False, head_dim_default=128,
                             mlp_bias=False, eps_default=1e-6)
    block["qk_norm"] = "head"
    theta_default(f, block, 5e5)
    return block, model


def _qwen3(f: Fields) -> tuple[dict, dict]:
    block, model = gated_rms(f, silu_gate, kv_default=32, tie_default=False, head_dim_default=128,
                             mlp_bias=False)
    block["qk_norm"] = "head"  # q_norm and k_norm: RMSNorm over each head's d_h, before RoPE
    _qwen_window(f, block, model)
    return block, model


def _smollm3(f: Fields) -> tuple[dict, dict]:
    """SmolLM3: Llama with no positions at all in every fourth layer (NoPE: `no_rope_layers` lists 1
    for a layer that rotates, 0 for one that does not; absent, every `no_rope_layer_interval`-th layer
    is NoPE), and with `use_sliding_window`, a window on the NoPE layers (as `layer_types` may say)."""
    f.ignore("pretraining_tp", "max_window_layers")  # carried by the published configs, read by no SmolLM3 code
    block, model = gated_rms(f, silu_gate, kv_default=4, tie_default=True)
    n_layers = model["n_layers"]
    rotates = f.raw("no_rope_layers", None)
    if rotates is None:
        interval = f.int("no_rope_layer_interval", 4)
        rotates = [int((i + 1) % interval != 0) for i in range(n_layers)]
    else:
        f.ignore("no_rope_layer_interval")
        if (not isinstance(rotates, list) or len(rotates) != n_layers
                or any(isinstance(r, bool) or r not in (0, 1) for r in rotates)):
            raise f.invalid("no_rope_layers", rotates, f"an array of {n_layers} flags, 1 (RoPE) or 0 (NoPE)")
    sliding = layer_types(f, n_layers)
    if sliding is None:  # SmolLM3Config: the NoPE layers slide when the window is on and has a size
        window_on = f.bool("use_sliding_window", False) and f.data.get("sliding_window") is not None
        sliding = [window_on and not r for r in rotates]
    else:
        f.ignore("use_sliding_window")
    sliding_layers(f, block, sliding)
    override_layers(f, [i for i, r in enumerate(rotates) if not r], {"rope": False})
    return block, model


def _olmo2(f: Fields) -> tuple[dict, dict]:
    """OLMo 2: Llama's gated MLP and RMSNorm, but each branch's output is normalised before its residual
    add (no norm on the branch inputs), and Q and K are normalised over the whole projection."""
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, mlp_bias=False, eps_default=1e-5)
    block.update(placement="post_branch", qk_norm="projection")
    return block, model


_TYPED_ROPE_KEYS = ("rope_theta", "rope_scaling", "rope_parameters")


def _olmo3(f: Fields) -> tuple[dict, dict]:
    """OLMo 3: OLMo 2's block with sliding-window layers (`layer_types`, default all but every fourth,
    window 4096) and one RoPE per layer type: both rotate with `rope_theta`, and `rope_scaling` (in
    transformers 5, `rope_parameters.full_attention`) scales the global layers only."""
    rest = Fields({k: v for k, v in f.data.items() if k not in _TYPED_ROPE_KEYS}, f.where, f.family)
    block, model = _olmo2(rest)
    f.used |= rest.used
    n_layers = model["n_layers"]
    sliding = layer_types(f, n_layers) or [bool((i + 1) % 4) for i in range(n_layers)]
    sliding_layers(f, block, sliding, default=4096)
    layer_type_ropes(f, block, model, sliding, (10000.0, "rope_theta", 10000.0), "OLMo 3")
    return block, model


def _exaone4(f: Fields) -> tuple[dict, dict]:
    """EXAONE 4.0: OLMo 2's placement (each branch's output normalised before its residual add), a per-head
    q/k RMSNorm, and hybrid attention: layers slide (`layer_types`, or all but every
    `sliding_window_pattern`-th, default 4; a pattern may also be written "LLLG") and, when the config
    sets a window, the global layers have no positions (Exaone4Attention rotates only without a window
    or in a sliding layer)."""
    block, model = gated_rms(f, silu_gate, kv_default=32, tie_default=False, qkv_bias=False, out_bias=False,
                             mlp_bias=False, eps_default=1e-5)
    block.update(placement="post_branch", qk_norm="head")
    n_layers = model["n_layers"]
    window_set = f.data.get("sliding_window") is not None if f.has("sliding_window") else True  # default 4096
    sliding = layer_types(f, n_layers)
    pattern = f.raw("sliding_window_pattern", 4)
    if sliding is None:
        if not window_set:
            sliding = [False] * n_layers
        elif isinstance(pattern, str) and pattern and set(pattern) <= {"L", "G"}:
            sliding = [pattern[i % len(pattern)] == "L" for i in range(n_layers)]
        elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern >= 1:
            sliding = [bool((i + 1) % pattern) for i in range(n_layers)]
        else:
            raise f.invalid("sliding_window_pattern", pattern, "a period of at least 1, or a pattern of L (local) "
                                                               "and G (global) layers such as \"LLLG\"")
    sliding_layers(f, block, sliding, default=4096)
    if window_set:
        override_layers(f, [i for i, kind in enumerate(sliding) if not kind], {"rope": False})
    return block, model


def _seed_oss(f: Fields) -> tuple[dict, dict]:
    """Seed-OSS: Llama's block with biases on q, k and v (`attention_bias`, default true) and on o_proj by
    its own switch (`attention_out_bias`), head width 128 by default."""
    f.ignore("residual_dropout", "pretraining_tp")  # dropout on the branch outputs, in training only; slices
    return gated_rms(f, silu_gate, kv_default=8, tie_default=False, head_dim_default=128,
                     qkv_bias=f.bool("attention_bias", True), out_bias=f.bool("attention_out_bias", False))


def _ernie4_5(f: Fields) -> tuple[dict, dict]:
    """ERNIE 4.5 (dense): Llama's block with RoPE on interleaved pairs (2i, 2i + 1), and `use_bias` on every
    projection, the MLP's included; tied by default."""
    bias = f.bool("use_bias", False)
    block, model = gated_rms(f, silu_gate, kv_default=2, tie_default=True, head_dim_default=128, qkv_bias=bias,
                             out_bias=bias, mlp_bias=bias, eps_default=1e-5)
    block["rope_layout"] = "interleaved"
    theta_default(f, block, 500000.0)  # Ernie4_5Config.default_theta
    return block, model


def _olmo(f: Fields) -> tuple[dict, dict]:
    """OLMo (v1): Llama's pre-norm block with a parameter-free LayerNorm (no scale, no shift, eps 1e-5
    fixed in OlmoLayerNorm), `attention_bias` on q/k/v and o, and `clip_qkv`: q, k and v clamped to
    [-clip_qkv, clip_qkv] after their projections (null: no clamp)."""
    f.ignore("pretraining_tp")  # copied from Llama's config class by the conversion script; never read
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, mlp_bias=False)
    block.update(norm="layernorm", norm_eps=1e-5, norm_scale=False)
    read_clip_qkv(f, block)
    return block, model


def read_clip_qkv(f: Fields, block: dict) -> None:
    """OLMo's `clip_qkv` into block.clip_qkv: a positive bound, or null for no clamp."""
    clip = f.raw("clip_qkv", None)
    if clip is not None:
        block["clip_qkv"] = f.float("clip_qkv", low=0.0, high=1e6)
        if not block["clip_qkv"]:
            raise f.invalid("clip_qkv", clip, "a positive bound (or null for no clamp)")


def written_by_major(f: Fields) -> int:
    """The major version of the transformers that saved the config (`transformers_version`); 0 when unknown."""
    match = re.match(r"\s*(\d+)\.", str(f.data.get("transformers_version", "")))
    return int(match.group(1)) if match else 0


def _gemma_gate(f: Fields) -> dict[str, Any]:
    """Which gated activation Gemma runs, where transformers' versions agree on it.

    transformers 5 runs `hidden_act` (default gelu_pytorch_tanh; the legacy "gelu" of the original
    releases means the tanh approximation) and ignores `hidden_activation`; transformers 4 ran
    `hidden_activation`, or gelu_pytorch_tanh when it was absent. A config on which the two
    disagree is refused, naming the field, unless its `transformers_version` says transformers 5 or later
    wrote it: then hidden_act is what its writer ran.
    """
    act = mlp_activation(f, "hidden_act", "gelu_pytorch_tanh", gated=True, exact_gelu_is_tanh=True)  # transformers 5
    if written_by_major(f) >= 5:
        f.ignore("hidden_activation")
        return act
    if f.data.get("hidden_activation") is None:
        f.ignore("hidden_activation")
        older = {"activation": "geglu"}  # transformers 4 without hidden_activation: gelu_pytorch_tanh
    else:
        older = mlp_activation(f, "hidden_activation", "gelu_pytorch_tanh", gated=True)
    if act != older:
        key = "hidden_activation" if f.data.get("hidden_activation") is not None else "hidden_act"
        raise f.unrepresentable(key, f.data[key], "transformers 5 runs hidden_act (gelu_pytorch_tanh by default) and "
                                                  "transformers 4 ran hidden_activation (gelu_pytorch_tanh by default): "
                                                  "on this config they run different activations")
    return act


def _gemma(f: Fields) -> tuple[dict, dict]:
    # transformers 5 writes `use_bidirectional_attention: null`; true would make attention non-causal
    if f.data.get("use_bidirectional_attention") is not None:
        f.neutral("use_bidirectional_attention", False, "blockcli's attention is causal")
    f.ignore("use_bidirectional_attention")
    block, model = gated_rms(f, _gemma_gate, kv_default=16, tie_default=True, head_dim_default=256, mlp_bias=False)
    block["norm_unit_offset"] = True  # RMSNorm scales by (1 + w)
    model["embedding_multiplier"] = math.sqrt(block["d_model"])
    return block, model


def _granite(f: Fields) -> tuple[dict, dict]:
    """Granite: Llama with four scalars. Token embeddings times `embedding_multiplier`, each branch
    output times `residual_multiplier` before its add, attention scores Q·Kᵀ times
    `attention_multiplier` (in place of 1/√d_h; its default 1.0 is used as given), logits divided by
    `logits_scaling` (`model.logit_multiplier` = 1 / logits_scaling)."""
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False)
    granite_scalars(f, block, model)
    return block, model


def granite_scalars(f: Fields, block: dict, model: dict) -> None:
    """Granite's four scalars (Granite and Granite MoE): attention_multiplier, residual_multiplier,
    embedding_multiplier and 1 / logits_scaling."""
    block["attention_scale"] = f.float("attention_multiplier", 1.0, high=1e6)
    block["residual_multiplier"] = f.float("residual_multiplier", 1.0, high=1e6)
    model["embedding_multiplier"] = f.float("embedding_multiplier", 1.0, high=1e6)
    model["logit_multiplier"] = 1.0 / f.float("logits_scaling", 1.0, low=1e-6, high=1e6)


# Llama, Mistral, Qwen2, Qwen3, Gemma, Granite and Cohere (with no post_attention_layernorm) share their
# module names; Gemma's norm weights are the
# offset w of its (1 + w) scale, which `block.norm_unit_offset` says.
LLAMA = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkvo"),
    tensor("blocks.{i}.q_norm_gamma", "layers.{i}.self_attn.q_norm.weight"),  # qwen3, olmo2
    tensor("blocks.{i}.k_norm_gamma", "layers.{i}.self_attn.k_norm.weight"),  # qwen3, olmo2
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.w_gate", "layers.{i}.mlp.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.b_gate", "layers.{i}.mlp.gate_proj.bias"),
    tensor("blocks.{i}.w_up", "layers.{i}.mlp.up_proj.weight", LINEAR),
    tensor("blocks.{i}.b_up", "layers.{i}.mlp.up_proj.bias"),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.down_proj.weight", LINEAR),
    tensor("blocks.{i}.b_down", "layers.{i}.mlp.down_proj.bias"),
    tensor("ln_f_gamma", "norm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=("layers.{i}.self_attn.rotary_emb.inv_freq",))

# OLMo 2: Llama's names, but its two norms follow the branches (post_attention_layernorm normalises
# the attention output, post_feedforward_layernorm the MLP's), and q/k norms span the projection
OLMO2 = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkvo"),
    tensor("blocks.{i}.q_norm_gamma", "layers.{i}.self_attn.q_norm.weight"),
    tensor("blocks.{i}.k_norm_gamma", "layers.{i}.self_attn.k_norm.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.w_gate", "layers.{i}.mlp.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.w_up", "layers.{i}.mlp.up_proj.weight", LINEAR),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.down_proj.weight", LINEAR),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.post_feedforward_layernorm.weight"),
    tensor("ln_f_gamma", "norm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))
LLAMA_MLP = tuple(t for t in LLAMA.tensors if ".mlp." in t.name)  # gate_proj, up_proj, down_proj (and biases)


# the top-level fields of a Qwen-VL config beside its language model's: the vision side and its token ids
QWEN_VL_TOP = frozenset({"vision_config", "image_token_id", "video_token_id", "vision_start_token_id",
                          "vision_end_token_id", "vision_token_id"})
# where Qwen-VL checkpoints keep the language model (transformers 5's path, and transformers 4's model.), its
# LM head, and the vision tower they set aside
QWEN_VL_PATHS = {"bases": ("model.language_model.", "model."), "heads": ("",), "aside": ("visual.", "model.visual.")}
# Qwen2VLTextConfig's and Qwen2_5_VLTextConfig's sizes (their other defaults are _qwen_vl_text's)
_QWEN2_VL_SIZES = {"vocab_size": 152064, "hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
                   "num_attention_heads": 64, "max_position_embeddings": 32768}

# Qwen2Config's sizes (its other defaults are _qwen2's): what a GOT-OCR 2.0 text_config leaves out
_QWEN2_SIZES = {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
                "num_attention_heads": 32, "max_position_embeddings": 32768}

COMPOSITES = (
    # GOT-OCR 2.0: a SAM-style vision encoder and a projector beside a Qwen2 language model (model.language_model.,
    # the LM head tied by the top level's field, true by default)
    Composite("got_ocr2", "GOT-OCR 2.0 (vision-language)", "qwen2", True,
              frozenset({"vision_config", "image_token_index", "image_token_id", "image_seq_length"}), _QWEN2_SIZES),
    # Mistral Small 3.1/3.2, Magistral: a Pixtral vision tower and a projector beside a Mistral model
    Composite("mistral3", "Mistral 3 (vision-language)", "mistral", True, frozenset({
        "vision_config", "image_token_index", "image_token_id", "projector_hidden_act", "vision_feature_layer",
        "multimodal_projector_bias", "spatial_merge_size"}),
              # MistralConfig's sizes (its other defaults are _mistral's)
              {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
               "num_attention_heads": 32, "max_position_embeddings": 131072}, tie="text",
              # Ministral 3 (3B, 8B, 14B): a ministral3 text_config, with Ministral3Config's sizes
              others={"ministral3": {"vocab_size": 131072, "hidden_size": 4096, "intermediate_size": 14336,
                                     "num_hidden_layers": 34, "num_attention_heads": 32,
                                     "max_position_embeddings": 262144}}),
    # Qwen2-VL, Qwen2.5-VL, Qwen3-VL: the language model under model.language_model. (transformers 5) or model.
    # (transformers 4's checkpoints), the vision tower under visual. or model.visual.; Qwen2-VL's and Qwen2.5-VL's
    # config classes tie the top level when text_config ties (either level's true ties), Qwen3-VL's does not
    *(Composite(model_type, title, f"{model_type}_text", False, QWEN_VL_TOP, sizes, tie=tie, flat=flat,
                **QWEN_VL_PATHS)
      for model_type, title, sizes, tie, flat in (
          ("qwen2_vl", "Qwen2-VL (vision-language)", _QWEN2_VL_SIZES, "either", True),
          ("qwen2_5_vl", "Qwen2.5-VL (vision-language)", _QWEN2_VL_SIZES, "either", True),
          # Qwen3VLTextConfig's sizes; Qwen3VLConfig has no flat layout
          ("qwen3_vl", "Qwen3-VL (vision-language)", {
              "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32, "max_position_embeddings": 128000}, "top", False))),
)

FAMILIES = (
    Family("llama", "LLaMA", _llama, LLAMA, TRAINING_ONLY),
    Family("mistral", "Mistral", _mistral, LLAMA, TRAINING_ONLY),
    Family("ministral", "Ministral", _ministral, LLAMA, TRAINING_ONLY),
    Family("ministral3", "Ministral 3", _ministral3, LLAMA, TRAINING_ONLY),
    Family("qwen2", "Qwen2", _qwen2, LLAMA, TRAINING_ONLY),
    Family("qwen2_vl_text", "Qwen2-VL's language model", _qwen_vl_text, LLAMA, TRAINING_ONLY),
    Family("qwen2_5_vl_text", "Qwen2.5-VL's language model", _qwen_vl_text, LLAMA, TRAINING_ONLY),
    Family("qwen3_vl_text", "Qwen3-VL's language model", _qwen3_vl_text, LLAMA, TRAINING_ONLY),
    Family("qwen3", "Qwen3", _qwen3, LLAMA, TRAINING_ONLY),
    Family("olmo2", "OLMo 2", _olmo2, OLMO2, TRAINING_ONLY),
    Family("olmo3", "OLMo 3", _olmo3, OLMO2, TRAINING_ONLY),
    Family("smollm3", "SmolLM3", _smollm3, LLAMA, TRAINING_ONLY),
    Family("exaone4", "EXAONE 4.0", _exaone4, OLMO2, TRAINING_ONLY),  # its q/k norms per head: (d_h,) each
    Family("seed_oss", "Seed-OSS", _seed_oss, LLAMA, TRAINING_ONLY),
    Family("ernie4_5", "ERNIE 4.5", _ernie4_5, LLAMA, TRAINING_ONLY),
    # OLMo's norms have no parameters: only Llama's projections and embeddings are stored
    Family("olmo", "OLMo", _olmo, LLAMA, TRAINING_ONLY),
    Family("gemma", "Gemma", _gemma, LLAMA, TRAINING_ONLY),
    Family("granite", "Granite", _granite, LLAMA, TRAINING_ONLY),
)
