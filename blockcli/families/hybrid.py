"""The hybrid state-space families: Mamba-2 (SSD) mixers interleaved with attention layers (block.mamba).

Granite 4.0-H (`granitemoehybrid`): Granite MoE-shared's block (its four scalars, a softmax over the top-k router
logits, a shared SwiGLU expert; a dense SwiGLU of `shared_intermediate_size` when num_local_experts is 0) whose
token mixer is, per `layer_types`, a Mamba-2 layer ("mamba" / "linear_attention") or attention ("attention" /
"full_attention"), RoPE only with position_embedding_type "rope" (null or "nope": none). Every layer is pre-norm
with its MLP.

Bamba (`bamba`, IBM's Bamba-9B): Llama's block (GQA, RMSNorm, SwiGLU) whose RoPE turns half of each head (BambaConfig
hard-codes partial_rotary_factor 0.5; only rope_parameters' own overrides it), Mamba-2 on every layer but those in
`attn_layer_indices`; the MLP under `feed_forward`, its norm `pre_ff_layernorm`, the final norm `final_layernorm`.

Falcon-H1 (`falcon_h1`): every layer one pre-norm mixer of attention and Mamba-2 side by side (block.parts hybrid:
both read LN1's output, their outputs summed), then Llama's SwiGLU, Bamba's tensor names; the SSM mamba_d_ssm wide
(mamba_expand·d when null), no norm before W_out unless mamba_rms_norm (then before or after the gate, as
mamba_norm_before_gate says), W_out's bias projectors_bias; and its µP multipliers: the embeddings, the logits, K
(attention_scale), attention's and the SSM's input and output, W_in's five segments (ssm_multipliers), the MLP's gate
and output (mlp_multipliers).

Mamba-2 (`mamba2`): attention-free, every layer an RMSNorm and the Mamba-2 mixer alone (block.parts mixer), under
Mamba's names (`backbone.`, `norm_f`); its fields Mamba2Config's own (num_heads, head_dim, state_size, n_groups, ...).

The Mamba-2 mixer's fields (transformers' BambaMixer, which Granite's reuses): mamba_n_heads heads of
mamba_d_head ("auto": mamba_expand·hidden_size / mamba_n_heads), a mamba_d_state-wide state, mamba_n_groups
groups, a mamba_d_conv-tap conv (bias mamba_conv_bias), in/out projections with mamba_proj_bias, the gated
norm's eps rms_norm_eps. mamba_chunk_size only chunks the scan (the sums are the same); time_step_limit (low, ∞)
clamps Δ below at low (block.mamba.dt_min; the default 0 clamps nothing); a finite upper limit is refused.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from blockcli.families.common import (TRAINING_ONLY, Family, bias_groups, first_of, gated_rms, mlp_activation,
                                      model_section, override_layers, silu_gate, sliding_layers, with_data)
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA, granite_scalars, theta_default
from blockcli.families.moe import GRANITE_MOE_SHARED, MOE_TRAINING_ONLY, moe_tensors
from blockcli.activations import FROM_TRANSFORMERS
from blockcli.tensor_names import DEPTHWISE, EXPERTS, FUSED, LINEAR, TensorMap, tensor

_MAMBA_KINDS = {"mamba": True, "linear_attention": True, "attention": False, "full_attention": False}


def mamba_mixer(f: Fields, eps: float, defaults: dict[str, Any]) -> dict[str, Any]:
    """block.mamba from the mamba_* fields (`defaults`: the config class's n_heads, d_state, expand ...)."""
    d = f.int("hidden_size")
    heads = f.int("mamba_n_heads", defaults["n_heads"])
    expand = f.int("mamba_expand", defaults["expand"])
    head_dim = f.raw("mamba_d_head", "auto")
    if head_dim == "auto":
        if expand * d % heads:
            raise f.invalid("mamba_n_heads", heads, f"a divisor of mamba_expand·hidden_size = {expand * d}")
        head_dim = expand * d // heads
    else:
        head_dim = f.int("mamba_d_head")
    if head_dim * heads != expand * d:
        raise f.unrepresentable("mamba_d_head", head_dim, f"mamba_d_head·mamba_n_heads = {head_dim * heads} must be "
                                                          f"mamba_expand·hidden_size = {expand * d}, as transformers "
                                                          f"requires")
    groups = f.int("mamba_n_groups", 1)
    if heads % groups:
        raise f.invalid("mamba_n_groups", groups, f"a divisor of mamba_n_heads = {heads}")
    f.int("mamba_chunk_size", 256)  # chunks the scan only: every chunking gives the same sums
    return {"n_heads": heads, "head_dim": head_dim, "d_state": f.int("mamba_d_state", defaults["d_state"]),
            "n_groups": groups, "conv_kernel": f.int("mamba_d_conv", 4), "conv_bias": f.bool("mamba_conv_bias", True),
            "proj_bias": f.bool("mamba_proj_bias", False), "norm_eps": eps, **_dt_min(f)}


def _dt_min(f: Fields) -> dict[str, Any]:
    """time_step_limit (low, ∞): Δ clamped below at low (block.mamba.dt_min); a finite upper limit refused."""
    limit = f.raw("time_step_limit", None)
    if limit is not None and (not isinstance(limit, list) or len(limit) != 2 or isinstance(limit[0], bool)
                              or not isinstance(limit[0], (int, float)) or not 0 <= limit[0] < 1e6
                              or not _infinite(limit[1])):
        raise f.unrepresentable("time_step_limit", limit, "blockcli clamps Δ below only: (low, inf), low >= 0")
    return {"dt_min": float(limit[0])} if limit is not None and limit[0] else {}


def _infinite(value: Any) -> bool:
    """∞ as a JSON config holds it: a float, or transformers 5's {"__float__": "Infinity"}."""
    return (isinstance(value, float) and math.isinf(value) and value > 0) or value == {"__float__": "Infinity"}


def mamba_layers(f: Fields, block: dict, mixer: dict[str, Any], is_mamba: list[bool]) -> None:
    """The mixer of each layer: the base block takes layer 0's kind, the other layers an override. BambaMixer (and
    Granite's) runs hidden_act after its conv, blockcli's Mamba-2 SiLU alone: another is refused where a layer is
    Mamba-2."""
    if any(is_mamba) and f.str("hidden_act", "silu") != "silu":
        raise f.unrepresentable("hidden_act", f.data["hidden_act"], "the Mamba-2 layers' conv runs hidden_act, which "
                                                                    "blockcli runs as SiLU only")
    if is_mamba[0]:
        block["mamba"] = mixer
    others = [i for i, kind in enumerate(is_mamba) if kind != is_mamba[0]]
    if others:
        override_layers(f, others, {"mamba": None if is_mamba[0] else mixer})


def block_types(f: Fields, keys: tuple[str, ...], n_layers: int) -> list[bool]:
    """Which layers are Mamba-2 layers, from `layer_types` (or its alias): all of them when absent."""
    types = first_of(f, keys, lambda key: f.raw(key), None)
    if types is None:
        return [True] * n_layers
    if not isinstance(types, list) or len(types) != n_layers:
        raise f.invalid(keys[0], types, f"an array of {n_layers} layer types")
    for item in types:
        if item not in _MAMBA_KINDS:
            raise f.unrepresentable(keys[0], item, "a layer type blockcli knows: " + ", ".join(_MAMBA_KINDS))
    return [_MAMBA_KINDS[t] for t in types]


def _granitemoehybrid(f: Fields) -> tuple[dict, dict]:
    """Granite 4.0-H: Granite MoE-shared's block (shared_intermediate_size 1024 by default), Mamba-2 on the
    layers `layer_types` marks (all by default), RoPE only with position_embedding_type "rope"."""
    kind = f.raw("position_embedding_type", None)
    if kind not in (None, "nope", "rope"):
        raise f.unrepresentable("position_embedding_type", kind, "Granite 4.0-H's positions are none (null or "
                                                                  "\"nope\") or rope")
    kind = None if kind == "nope" else kind
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, mlp_bias=False)
    granite_scalars(f, block, model)
    if kind is None:  # GraniteMoeHybridModel builds no rotary embedding: attention without positions
        block["rope"], model["positions"] = False, "none"
        block.pop("rope_scaling", None)
    shared = f.int("shared_intermediate_size", 1024, minimum=0)
    experts = f.int("num_local_experts", 8, minimum=0)
    if experts == 0:  # a dense model (Granite 4.0-H-Micro): the shared MLP alone
        f.ignore("num_experts_per_tok")
        block["d_ff"] = shared
    else:  # Granite MoE's routing: the top k logits softmaxed; each expert intermediate_size wide
        block["moe"] = {"n_experts": experts, "top_k": f.int("num_experts_per_tok", 2), "d_expert": block["d_ff"],
                        "order": "topk_softmax", **({"d_shared": shared} if shared else {})}
    mixer = mamba_mixer(f, block["norm_eps"], {"n_heads": 128, "expand": 2, "d_state": 256})
    mamba_layers(f, block, mixer, block_types(f, ("layer_types", "layers_block_type"), model["n_layers"]))
    return block, model


def _bamba(f: Fields) -> tuple[dict, dict]:
    """Bamba: Llama's block with half of each head rotated, Mamba-2 but on `attn_layer_indices`."""
    f.ignore("partial_rotary_factor")  # BambaConfig sets 0.5 over it; rope_parameters' own is read below
    f.neutral("z_loss_coefficient", 0.0, "blockcli's loss has no z-loss term (Bamba's z_loss_coefficient)")
    f.ignore("num_logits_to_keep")  # which positions' logits generate() computes: the network is the same
    rope = f.data.get("rope_parameters")
    if f.data.get("rope_theta") is not None and not isinstance(rope, dict):
        rope = {"rope_type": "default", "rope_theta": f.data["rope_theta"]}
    if not isinstance(rope, dict) or "partial_rotary_factor" not in rope:  # the config class's 0.5
        rope = {"rope_type": "default", "rope_theta": 10000.0, **(rope if isinstance(rope, dict) else {}),
                "partial_rotary_factor": 0.5}
    g = with_data(f, {**f.data, "rope_parameters": rope})
    block, model = gated_rms(g, silu_gate, kv_default=8, tie_default=False, eps_default=1e-5, mlp_bias=None)
    n_layers = model["n_layers"]
    attention = f.raw("attn_layer_indices", None) or []
    if not isinstance(attention, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in attention):
        raise f.invalid("attn_layer_indices", attention, "an array of layer indices")
    mixer = mamba_mixer(f, block["norm_eps"], {"n_heads": 128, "expand": 2, "d_state": 256})
    mamba_layers(f, block, mixer, [i not in attention for i in range(n_layers)])
    return block, model


def _falcon_h1(f: Fields) -> tuple[dict, dict]:
    """Falcon-H1: every layer one pre-norm mixer of attention and Mamba-2 side by side (block.parts hybrid), then
    Llama's SwiGLU; µP multipliers on the embeddings, the logits, each mixer's input and output, K, the MLP's gate
    and output, and W_in's five segments (z, x, B, C, dt: ssm_multipliers)."""
    types = first_of(f, ("layers_block_type", "layer_types"), lambda key: f.raw(key), None)
    if types is not None and (not isinstance(types, list) or any(t != "hybrid" for t in types)):
        raise f.invalid("layers_block_type", types, "every layer \"hybrid\" (FalconH1Config's own value)")
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False, eps_default=1e-5, mlp_bias=None)
    f.ignore("num_logits_to_keep")  # which positions' logits generate() computes: the network is the same
    d = block["d_model"]
    expand = f.int("mamba_expand", 2)  # read only with mamba_d_ssm null
    if f.has("mamba_d_ssm") and f.data["mamba_d_ssm"] is None:  # null: mamba_expand·hidden_size
        f.ignore("mamba_d_ssm")
        d_ssm = expand * d
    else:
        d_ssm = f.int("mamba_d_ssm", 1024)
    heads = f.int("mamba_n_heads", 128)
    head_dim = f.raw("mamba_d_head", "auto")
    head_dim = d_ssm // heads if head_dim == "auto" else f.int("mamba_d_head")
    if head_dim * heads != d_ssm:
        raise f.unrepresentable("mamba_d_head", head_dim, f"mamba_d_head·mamba_n_heads = {head_dim * heads} must be "
                                                          f"the SSM width mamba_d_ssm = {d_ssm}, as transformers "
                                                          f"requires")
    groups = f.int("mamba_n_groups", 1)
    if heads % groups:
        raise f.invalid("mamba_n_groups", groups, f"a divisor of mamba_n_heads = {heads}")
    f.int("mamba_chunk_size", 256)  # chunks the scan only: every chunking gives the same sums
    rms = f.bool("mamba_rms_norm", False)
    before = f.bool("mamba_norm_before_gate", True)  # read only with mamba_rms_norm
    ssm = f.raw("ssm_multipliers", None)
    if ssm is not None and (not isinstance(ssm, list) or len(ssm) != 5):
        raise f.invalid("ssm_multipliers", ssm, "a list of 5 numbers (z, x, B, C, dt)")
    mlp = f.raw("mlp_multipliers", None)
    if mlp is not None and (not isinstance(mlp, list) or len(mlp) != 2):
        raise f.invalid("mlp_multipliers", mlp, "a list of 2 numbers (gate, down)")
    mixer = {"n_heads": heads, "head_dim": head_dim, "d_state": f.int("mamba_d_state", 256), "n_groups": groups,
             "conv_kernel": f.int("mamba_d_conv", 4), "conv_bias": f.bool("mamba_conv_bias", True),
             "proj_bias": f.bool("mamba_proj_bias", False), "out_bias": f.bool("projectors_bias", False),
             "norm_eps": block["norm_eps"], "norm": ("norm_gate" if before else "gated") if rms else "none",
             "in_multiplier": f.float("ssm_in_multiplier", 1.0, high=1e6),
             "out_multiplier": f.float("ssm_out_multiplier", 1.0, high=1e6), **_dt_min(f)}
    if ssm is not None:
        mixer["multipliers"] = ssm
    if f.str("hidden_act", "silu") != "silu":
        raise f.unrepresentable("hidden_act", f.data["hidden_act"], "the Mamba-2 mixer's conv runs hidden_act, which "
                                                                    "blockcli runs as SiLU only")
    key = f.float("key_multiplier", 1.0, high=1e6)  # K·m_k: the scores times m_k, RoPE being linear
    if key != 1.0:
        block["attention_scale"] = key / math.sqrt(block["head_dim"])
    block.update(parts="hybrid", mamba=mixer,
                 attention_in_multiplier=f.float("attention_in_multiplier", 1.0, high=1e6),
                 attention_out_multiplier=f.float("attention_out_multiplier", 1.0, high=1e6))
    if mlp is not None:
        block["mlp_multipliers"] = mlp
    model["embedding_multiplier"] = f.float("embedding_multiplier", 1.0, high=1e6)
    model["logit_multiplier"] = f.float("lm_head_multiplier", 1.0, high=1e6)
    return block, model


_NEMOTRON_KINDS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def _nemotron_h(f: Fields) -> tuple[dict, dict]:
    """Nemotron-H (NVIDIA-Nemotron-Nano-9B-v2, Nemotron 3 Nano): every layer one norm, one part and a residual add
    (block.parts): a Mamba-2 mixer, attention without positions (no biases), a plain ReLU² MLP, or DeepSeek-V3's
    routed ReLU² experts with one shared expert; per `layers_block_type` (or the legacy `hybrid_override_pattern`,
    M * - E), by default the config class's [linear_attention, moe, full_attention, mlp]."""
    types = first_of(f, ("layers_block_type", "layer_types"), lambda key: f.raw(key), None)
    pattern = f.raw("hybrid_override_pattern", None)
    if types is None and pattern is not None:
        if not isinstance(pattern, str) or not pattern or any(c not in _NEMOTRON_KINDS for c in pattern):
            raise f.invalid("hybrid_override_pattern", pattern, "a string of M, *, - and E")
        types = [_NEMOTRON_KINDS[c] for c in pattern]
    types = types if types is not None else ["linear_attention", "moe", "full_attention", "mlp"]
    kinds = ("linear_attention", "full_attention", "mlp", "moe")
    if not isinstance(types, list) or not types or any(t not in kinds for t in types):
        raise f.invalid("layers_block_type", types, "an array of " + ", ".join(kinds))
    f.ignore("num_hidden_layers")  # transformers derives the depth from layers_block_type (it warns on a mismatch)
    heads = f.int("num_attention_heads", 32)
    kv = f.int("num_key_value_heads", 8)
    if heads % kv:
        raise f.invalid("num_key_value_heads", kv, f"a divisor of num_attention_heads = {heads}")
    eps = f.float("layer_norm_epsilon", 1e-5)
    act = f.str("mlp_hidden_act", "relu2")
    f.neutral("mamba_hidden_act", "silu", "blockcli's Mamba-2 conv is followed by SiLU")
    f.neutral("moe_latent_size", None, "blockcli's experts read the model width (no latent projection)")
    f.neutral("num_nextn_predict_layers", 0, "the multi-token-prediction layers are not part of the causal LM")
    f.ignore("mtp_layers_block_type")  # read only with num_nextn_predict_layers
    if f.data.get("sliding_window") is not None:
        raise f.unrepresentable("sliding_window", f.data["sliding_window"], "Nemotron-H's attention is full")
    f.ignore("sliding_window")
    mlp_bias = f.bool("mlp_bias", False)
    block = {"d_model": f.int("hidden_size", 4096), "n_heads": heads, "n_kv_heads": kv,
             "head_dim": f.int("head_dim", 128), "d_ff": f.int("intermediate_size", 21504), "norm": "rmsnorm",
             "norm_eps": eps, **mlp_activation(f, "mlp_hidden_act", act, gated=False),
             "bias": bias_groups(False, False, mlp_bias, False), "placement": "pre", "rope": False}
    model = model_section(len(types), f.int("vocab_size", 131072), "none", f.int("max_position_embeddings", 4096),
                          False)  # NemotronHForCausalLM ties nothing (its _tied_weights_keys is empty)
    # NemotronHMamba2Mixer clamps Δ to (time_step_min, ∞), not to time_step_limit; time_step_max and _floor are
    # init, chunk_size chunks the scan, expand and mamba_proj_bias it never reads (its width is mamba_num_heads ·
    # mamba_head_dim, its projections' biases use_bias), the kernels and the cache's dtype change no sum
    f.ignore("time_step_limit", "time_step_max", "time_step_floor", "chunk_size", "use_mamba_kernels", "expand",
             "mamba_proj_bias", "mamba_ssm_cache_dtype")
    heads_m = f.int("mamba_num_heads", 128)
    groups = f.int("n_groups", 8)
    if heads_m % groups:
        raise f.invalid("n_groups", groups, f"a divisor of mamba_num_heads = {heads_m}")
    mixer = {"n_heads": heads_m, "head_dim": f.int("mamba_head_dim", 64), "d_state": f.int("ssm_state_size", 128),
             "n_groups": groups, "conv_kernel": f.int("conv_kernel", 4), "conv_bias": f.bool("use_conv_bias", True),
             "proj_bias": f.bool("use_bias", False), "norm_eps": eps,
             "dt_min": f.float("time_step_min", 0.001, low=0.0, low_open=False, high=1e6)}
    moe = None
    if "moe" in types:
        if mlp_bias:
            raise f.unrepresentable("mlp_bias", True, "blockcli's routed experts take bias.mlp too; Nemotron-H's "
                                                      "have no biases")
        moe = {"n_experts": f.int("n_routed_experts", 8), "top_k": f.int("num_experts_per_tok", 2),
               "d_expert": f.int("moe_intermediate_size", 7688), "scoring": "sigmoid", "selection_bias": True,
               "group_score": "top2_sum", "renormalize": f.bool("norm_topk_prob", True),
               "n_groups": f.int("n_group", 1), "top_groups": f.int("topk_group", 1),
               "routed_scaling": f.float("routed_scaling_factor", 1.0, high=1e6),
               "d_shared": f.int("moe_shared_expert_intermediate_size", 7688, minimum=0)}
    f.ignore("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob", "n_group",
             "topk_group", "routed_scaling_factor", "moe_shared_expert_intermediate_size", "n_shared_experts",
             "moe_shared_expert_overlap", "output_router_logits", "num_logits_to_keep", "residual_in_fp32",
             "rescale_prenorm_residual")
    parts = {"linear_attention": {"parts": "mixer", "mamba": mixer, "moe": None},
             "full_attention": {"parts": "mixer", "mamba": None, "moe": None},
             "mlp": {"parts": "mlp", "mamba": None, "moe": None},
             "moe": {"parts": "mlp", "mamba": None, "moe": moe}}
    block.update({k: v for k, v in parts[types[0]].items() if v is not None})
    for kind in kinds:
        others = [i for i, t in enumerate(types) if t == kind and kind != types[0]]
        if others:
            override_layers(f, others, parts[kind])
    return block, model


def _lfm2(f: Fields) -> tuple[dict, dict]:
    """LFM2 (Liquid AI): Llama's block with per-head q/k RMSNorms, RoPE (base 1e6 by default) and a SwiGLU MLP whose
    width is adjusted as Lfm2MLP does (block_auto_adjust_ff_dim: ⌊2·d_ff/3⌋, times block_ffn_dim_multiplier, rounded up
    to block_multiple_of); the layers `layer_types` marks "conv" (or those not in full_attn_idxs; by default none) mix
    tokens by a gated short convolution (block.short_conv, conv_L_cache taps, biases conv_bias). Its norms' eps is
    norm_eps; tie_embedding and block_ff_dim are the legacy names transformers reads first."""
    if f.has("rms_norm_eps"):
        raise f.unrepresentable("rms_norm_eps", f.data["rms_norm_eps"], "LFM2's norms read norm_eps")
    data = dict(f.data)
    for legacy, key in (("tie_embedding", "tie_word_embeddings"), ("block_ff_dim", "intermediate_size")):
        if legacy in data:  # Lfm2Config reads the legacy name over the current one
            data[key] = data[legacy]
    g = with_data(f, {"tie_word_embeddings": True, "intermediate_size": 12288, "num_key_value_heads": 8, **data})
    f.ignore("tie_embedding", "block_ff_dim")
    block, model = gated_rms(g, silu_gate, kv_default=8, tie_default=True, qkv_bias=False, out_bias=False,
                             mlp_bias=False)
    theta_default(f, block, 1e6)
    block.update(norm_eps=f.float("norm_eps", 1e-5), qk_norm="head")
    d_ff = block["d_ff"]
    if f.bool("block_auto_adjust_ff_dim", True):
        d_ff = int(2 * d_ff / 3)
        multiplier = f.raw("block_ffn_dim_multiplier", 1.0)
        if multiplier is not None:
            multiple = f.int("block_multiple_of", 256)
            d_ff = multiple * ((int(f.float("block_ffn_dim_multiplier", 1.0, high=1e6) * d_ff) + multiple - 1)
                               // multiple)
    f.ignore("block_multiple_of", "block_ffn_dim_multiplier")
    block["d_ff"] = d_ff
    n_layers = model["n_layers"]
    types = f.raw("layer_types", None)
    if types is None:
        attention = f.raw("full_attn_idxs", None)
        attention = list(range(n_layers)) if attention is None else attention
        if not isinstance(attention, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in attention):
            raise f.invalid("full_attn_idxs", attention, "an array of layer indices")
        conv = [i not in attention for i in range(n_layers)]
    else:
        f.ignore("full_attn_idxs")  # read only without layer_types
        conv = _lfm2_conv_layers(f, n_layers)
    _lfm2_short_convs(f, block, conv)
    return block, model


def _lfm2_conv_layers(f: Fields, n_layers: int) -> list[bool]:
    """Which layers `layer_types` marks "conv" (the others "full_attention")."""
    types = f.raw("layer_types", why="each layer's mixer, conv or full_attention")
    if not isinstance(types, list) or len(types) != n_layers or any(t not in ("conv", "full_attention")
                                                                     for t in types):
        raise f.invalid("layer_types", types, f"an array of {n_layers} of conv, full_attention")
    return [t == "conv" for t in types]


def _lfm2_short_convs(f: Fields, block: dict, conv: list[bool], kernel_default: int = 3) -> None:
    """LFM2's gated short convolution (conv_L_cache taps, biases conv_bias) on the `conv` layers."""
    mixer = {"kernel": f.int("conv_L_cache", kernel_default), "bias": f.bool("conv_bias", False)}
    if conv[0]:
        block["short_conv"] = mixer
    others = [i for i, kind in enumerate(conv) if kind != conv[0]]
    if others:
        override_layers(f, others, {"short_conv": None if conv[0] else mixer})


_LFM3_KINDS = ("conv", "full_attention", "sliding_attention")
_LFM3_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
              "full_attention": {"rope_type": "proportional", "rope_theta": 1_000_000.0, "partial_rotary_factor": 0.5}}


def _lfm3(f: Fields) -> tuple[dict, dict]:
    """LFM3 (Liquid AI): LFM2's layers, as Lfm3Config and modeling_lfm3.py build them, with OLMo 3's parts: `layer_types`
    of conv, full_attention and sliding_attention (by default layer i full when i % 4 == 2, sliding when i % 4 == 0 and
    i > 0, else conv), the sliding layers' window `sliding_window` (256), one RoPE per attention kind from
    `rope_parameters` (sliding: default, base 10⁴; full: proportional, base 10⁶, half of each head's pairs turning;
    a missing rope_theta is Lfm3Config's default_theta 10⁶); Qwen3's attention (head_dim 128, per-head q/k RMSNorms,
    attention_bias on q/k/v/o) whose heads are each scaled by σ(x·W_g) (use_attention_gate: g_proj, d → h, no bias:
    block.attention_gate_form sigmoid_head); LFM2-MoE's SwiGLU MLP intermediate_size wide as given; a norm after each
    branch too (use_sandwich_norm: placement sandwich); the short convs conv_L_cache (7) taps. Its norms' eps is
    norm_eps."""
    if f.has("rms_norm_eps"):
        raise f.unrepresentable("rms_norm_eps", f.data["rms_norm_eps"], "LFM3's norms read norm_eps")
    data = {k: v for k, v in f.data.items() if k != "rope_parameters"}
    g = with_data(f, {"vocab_size": 128_000, "hidden_size": 2048, "intermediate_size": 7680, "num_hidden_layers": 24,
                      "num_attention_heads": 16, "num_key_value_heads": 4, "max_position_embeddings": 128_000,
                      "tie_word_embeddings": True, **data})
    gate = f.bool("use_attention_gate", True)
    if gate and f.bool("attention_bias", False):  # q/k/v/o biased, but g_proj never is
        raise f.unrepresentable("attention_bias", True, "LFM3's g_proj has no bias beside biased q/k/v; blockcli's "
                                                        "attention gate takes the q/k/v bias setting")
    block, model = gated_rms(g, lambda _: {"activation": "swiglu"}, kv_default=4, tie_default=True,
                             head_dim_default=128, mlp_bias=False)
    f.used.discard("rope_parameters")
    block.update(norm_eps=f.float("norm_eps", 1e-5), qk_norm="head")
    if gate:
        block.update(attention_gate=True, attention_gate_form="sigmoid_head")
    if f.bool("use_sandwich_norm", True):
        block["placement"] = "sandwich"
    n_layers = model["n_layers"]
    types = f.raw("layer_types", None)
    if types is None:
        types = ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv"
                 for i in range(n_layers)]
    elif not isinstance(types, list) or len(types) != n_layers or any(t not in _LFM3_KINDS for t in types):
        raise f.invalid("layer_types", types, f"an array of {n_layers} of {', '.join(_LFM3_KINDS)}")
    f.ignore("layer_types")
    sliding_layers(f, block, [t == "sliding_attention" for t in types], default=256)
    _lfm3_ropes(f, block, types)
    _lfm2_short_convs(f, block, [t == "conv" for t in types], kernel_default=7)
    return block, model


def _lfm3_ropes(f: Fields, block: dict, types: list[str]) -> None:
    """Each attention kind's RoPE from `rope_parameters` (Lfm3Config's two when null): rope_theta (default_theta 10⁶
    when missing) and rope_type default (over the whole head) or proportional (its partial_rotary_factor and factor);
    any other rope_type or key is refused, named. The base block takes the first attention layer's; the layers of the
    other kind an override."""
    params = f.raw("rope_parameters", None)
    params = _LFM3_ROPE if params is None else params
    if not isinstance(params, dict):
        raise f.invalid("rope_parameters", params, "an object with one RoPE object per attention layer type")
    for name in params:
        if name not in ("full_attention", "sliding_attention"):
            raise f.unrepresentable(f"rope_parameters.{name}", params[name], "LFM3's RoPE is set per attention layer "
                                                                             "type: full_attention, sliding_attention")
    ropes: dict[str, dict[str, Any]] = {}
    for kind in ("full_attention", "sliding_attention"):
        if kind not in types:
            continue
        own, key = params.get(kind), f"rope_parameters.{kind}"
        if not isinstance(own, dict):
            raise f.invalid(key, own, f"an object: the RoPE of the {kind} layers")
        inner = Fields(own, f.where, f.family)
        rope_type = own.get("rope_type", "default")
        inner.ignore("rope_type")
        rope: dict[str, Any] = {"rope_theta": inner.float("rope_theta", 1_000_000.0, low=0.0, high=1e12),
                                "rope_scaling": None}
        if rope_type == "proportional":
            rope["rope_scaling"] = {"type": "proportional",
                                    "fraction": inner.float("partial_rotary_factor", 1.0, low=0.0, high=1.0,
                                                            low_open=False),
                                    "factor": inner.float("factor", 1.0, low=0.0, high=1e6)}
        elif rope_type != "default":
            raise f.unrepresentable(f"{key}.rope_type", rope_type, "LFM3's layers rotate by the default or the "
                                                                   "proportional RoPE here")
        for name, value in own.items():
            if name not in inner.used:
                raise f.unrepresentable(f"{key}.{name}", value, f"not a parameter of LFM3's {rope_type} RoPE")
        ropes[kind] = rope
    attention = [t for t in types if t != "conv"]
    if not attention:
        return
    base = ropes[attention[0]]
    block["rope_theta"] = base["rope_theta"]
    if base["rope_scaling"]:
        block["rope_scaling"] = base["rope_scaling"]
    for kind, rope in ropes.items():
        override = {name: value for name, value in rope.items() if value != base[name]}
        layers = [i for i, t in enumerate(types) if t == kind]
        if override and kind != attention[0]:
            override_layers(f, layers, override)


def _lfm2_moe(f: Fields) -> tuple[dict, dict]:
    """LFM2-MoE (Liquid AI's LFM2-8B-A1B): LFM2's layers (short convs and attention by `layer_types`, which it
    needs: Lfm2MoeConfig derives none), its SwiGLU MLP intermediate_size wide as given (no width adjustment) on the
    first num_dense_layers layers, and on the others num_experts SwiGLU experts of moe_intermediate_size: sigmoid
    scores, the top num_experts_per_tok chosen by the scores plus the expert_bias buffer (use_expert_bias), the chosen
    scores divided by their sum + 1e-6 (norm_topk_prob), times routed_scaling_factor; no shared expert. The MLP runs
    SiLU (no hidden_act); tie_embedding is the legacy name transformers reads first."""
    if f.has("rms_norm_eps"):
        raise f.unrepresentable("rms_norm_eps", f.data["rms_norm_eps"], "LFM2-MoE's norms read norm_eps")
    data = dict(f.data)
    if "tie_embedding" in data:  # Lfm2MoeConfig pops the legacy name over the current one
        data["tie_word_embeddings"] = data["tie_embedding"]
    g = with_data(f, {"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
                      "intermediate_size": 7168, "num_hidden_layers": 32, "vocab_size": 65536,
                      "max_position_embeddings": 128000, **data})
    f.ignore("tie_embedding")
    block, model = gated_rms(g, lambda _: {"activation": "swiglu"}, kv_default=8, tie_default=True, qkv_bias=False,
                             out_bias=False, mlp_bias=False)
    theta_default(f, block, 1e6)
    block.update(norm_eps=f.float("norm_eps", 1e-5), qk_norm="head")
    n_layers = model["n_layers"]
    _lfm2_short_convs(f, block, _lfm2_conv_layers(f, n_layers))
    experts = f.int("num_experts", 32)
    top_k = f.int("num_experts_per_tok", 4)
    if top_k > experts:
        raise f.invalid("num_experts_per_tok", top_k, f"at most num_experts = {experts}")
    moe = {"n_experts": experts, "top_k": top_k, "d_expert": f.int("moe_intermediate_size", 1792),
           "scoring": "sigmoid", "selection_bias": f.bool("use_expert_bias", True),
           "renormalize": f.bool("norm_topk_prob", True), "renormalize_eps": 1e-6,
           "routed_scaling": f.float("routed_scaling_factor", 1.0, high=1e6)}
    f.ignore("output_router_logits")  # Lfm2MoeForCausalLM adds no auxiliary loss (DeepSeek-V2's causal LM)
    dense = f.int("num_dense_layers", 2, minimum=0)
    routed = [i for i in range(n_layers) if i >= dense]
    if routed:
        if dense == 0:
            block["moe"] = moe
        else:
            override_layers(f, routed, {"moe": moe})
    return block, model


def _mamba2(f: Fields) -> tuple[dict, dict]:
    """Mamba-2 (`mamba2`, state-spaces' mamba2-*, Mistral's Mamba-Codestral): attention-free, every layer an RMSNorm
    and a Mamba-2 mixer (block.parts mixer, no MLP), the final norm `norm_f`, the head untied by default. The mixer
    (transformers' Mamba2Mixer): num_heads heads of head_dim (num_heads·head_dim must be expand·hidden_size, as
    Mamba2Config requires), a state_size-wide state, n_groups groups of B and C (the gated norm over each group),
    a conv_kernel-tap conv (bias use_conv_bias), in/out projections with use_bias, the norms' eps layer_norm_epsilon.
    time_step_rank sizes nothing (Mamba-2 has no Δ projection), chunk_size only chunks the scan, the time_step_*
    fields but the limit are initialisation, residual_in_fp32 a precision choice."""
    d = f.int("hidden_size", 4096)
    eps = f.float("layer_norm_epsilon", 1e-5)
    if f.str("hidden_act", "silu") != "silu":
        raise f.unrepresentable("hidden_act", f.data["hidden_act"], "the Mamba-2 layers' conv runs hidden_act, which "
                                                                    "blockcli runs as SiLU only")
    heads, head_dim = f.int("num_heads", 128), f.int("head_dim", 64)
    expand = f.int("expand", 2)
    if heads * head_dim != expand * d:  # Mamba2Config.validate_architecture refuses it
        raise f.invalid("num_heads", heads, f"num_heads·head_dim = {heads * head_dim} equal to expand·hidden_size = "
                                            f"{expand * d}, as transformers requires")
    groups = f.int("n_groups", 8)
    if heads % groups:
        raise f.invalid("n_groups", groups, f"a divisor of num_heads = {heads}")
    rank = f.raw("time_step_rank", "auto")
    if rank != "auto":
        f.int("time_step_rank")  # an integer, which sizes nothing
    f.int("chunk_size", 256)  # chunks the scan only: every chunking gives the same sums
    f.ignore("residual_in_fp32", "time_step_min", "time_step_max", "time_step_floor", "rescale_prenorm_residual")
    mixer = {"n_heads": heads, "head_dim": head_dim, "d_state": f.int("state_size", 128), "n_groups": groups,
             "conv_kernel": f.int("conv_kernel", 4), "conv_bias": f.bool("use_conv_bias", True),
             "proj_bias": f.bool("use_bias", False), "norm_eps": eps, **_dt_min(f)}
    block = {"d_model": d, "n_heads": 1, "n_kv_heads": 1, "head_dim": d, "d_ff": d, "norm": "rmsnorm",
             "norm_eps": eps, "activation": "silu", "bias": False, "placement": "pre", "rope": False,
             "parts": "mixer", "mamba": mixer}
    # no positions and no context limit of its own: max_positions only bounds blockcli's default sweeps
    model = model_section(f.int("num_hidden_layers", 64), f.int("vocab_size", 32768), "none", 1 << 20,
                          f.bool("tie_word_embeddings", False))
    f.notes.append("attention-free: every layer a Mamba-2 (SSD) mixer, no MLP")
    return block, model


_ZAMBA2_KINDS = {"linear_attention": False, "mamba": False, "hybrid": True}  # True: the shared block runs first


def _zamba2_types() -> list[str]:
    """Zamba2Config's layers_block_type when null (its Zamba2-2.7B's 54 layers)."""
    return (["linear_attention"] + (["linear_attention"] * 5 + ["hybrid"]) * 7 + ["linear_attention"] * 4
            + ["hybrid"] + ["linear_attention"] * 3 + ["hybrid"] + ["linear_attention"] * 2)


def _zamba2(f: Fields) -> tuple[dict, dict]:
    """Zamba2 (Zyphra): every layer a pre-norm Mamba-2 mixer alone (block.parts mixer); the layers
    `layers_block_type` marks "hybrid" first run one of num_mem_blocks shared transformer blocks (block.shared, used
    in turn) on [h | token embeddings], its output through the layer's own linear added to the mixer's input. The
    shared blocks' attention has no biases and RoPE only with use_mem_rope; each use has its own LoRA adapters (rank
    adapter_rank) on the MLP's gate | up, and on Q, K, V with use_shared_attention_adapter."""
    types = first_of(f, ("layers_block_type", "layer_types"), lambda key: f.raw(key), None)
    types = _zamba2_types() if types is None else types
    if not isinstance(types, list) or not types or any(t not in _ZAMBA2_KINDS for t in types):
        raise f.invalid("layers_block_type", types, "an array of " + ", ".join(_ZAMBA2_KINDS))
    n_layers = f.int("num_hidden_layers", 54)
    if n_layers != len(types):
        raise f.unrepresentable("num_hidden_layers", n_layers, f"Zamba2Model builds one layer per layers_block_type "
                                                               f"entry ({len(types)})")
    d = f.int("hidden_size", 2560)
    heads = f.int("num_attention_heads", 32)
    kv = f.int("num_key_value_heads", heads) if f.data.get("num_key_value_heads") is not None else heads
    f.ignore("num_key_value_heads")
    if heads % kv:
        raise f.invalid("num_key_value_heads", kv, f"a divisor of num_attention_heads = {heads}")
    if 2 * d % heads:
        raise f.unrepresentable("num_attention_heads", heads, f"a divisor of 2·hidden_size = {2 * d} (the shared "
                                                              f"attention's heads split its 2·hidden_size input)")
    d_ff = f.raw("intermediate_size", None)
    d_ff = f.int("intermediate_size") if d_ff is not None else 4 * d
    f.ignore("intermediate_size")
    expand = f.int("mamba_expand", 2)
    m_heads = f.int("n_mamba_heads", 8)
    if expand * d % m_heads:
        raise f.invalid("n_mamba_heads", m_heads, f"a divisor of mamba_expand·hidden_size = {expand * d}")
    groups = f.int("mamba_ngroups", 1)
    if m_heads % groups:
        raise f.invalid("mamba_ngroups", groups, f"a divisor of n_mamba_heads = {m_heads}")
    bias = f.bool("add_bias_linear", False)
    # Zamba2MambaMixer: the conv always has its bias (use_conv_bias is stored, never read), Δ clamped below at
    # time_step_min, the gated norm's eps 1e-5 whatever rms_norm_eps says, SiLU after the conv whatever hidden_act says
    f.ignore("use_conv_bias", "time_step_max", "time_step_floor", "chunk_size", "use_mamba_kernels",
             "use_mem_eff_path", "num_logits_to_keep")
    # written into config.json by Zamba2Config, recomputed from the fields above whatever they say
    f.ignore("attention_head_dim", "attention_hidden_size", "mamba_headdim", "hybrid_layer_ids", "kv_channels",
             "num_query_groups")
    mixer = {"n_heads": m_heads, "head_dim": expand * d // m_heads, "d_state": f.int("mamba_d_state", 64),
             "n_groups": groups, "conv_kernel": f.int("mamba_d_conv", 4), "conv_bias": True, "proj_bias": bias,
             "norm_eps": 1e-5, "dt_min": f.float("time_step_min", 0.001, low=0.0, low_open=False, high=1e6)}
    act = f.str("hidden_act", "gelu")
    activation = FROM_TRANSFORMERS.get(act)
    if activation is None or activation == "xielu":
        raise f.unrepresentable("hidden_act", act, "an activation of the shared MLP's act(gate) ⊙ up that blockcli "
                                                   "knows: " + ", ".join(sorted(FROM_TRANSFORMERS)))
    rope = f.bool("use_mem_rope", False)
    theta = 10000.0
    params = f.raw("rope_parameters", None)
    if params is not None:
        if not isinstance(params, dict) or params.get("rope_type", "default") != "default" \
                or set(params) - {"rope_type", "rope_theta"}:
            raise f.unrepresentable("rope_parameters", params, "Zamba2's shared attention rotates by rope_theta "
                                                               "alone (rope_type default)")
        theta = f.float("rope_theta", 10000.0, low=0.0, high=1e12) if f.has("rope_theta") else 10000.0
        nested = params.get("rope_theta", theta)
        if isinstance(nested, bool) or not isinstance(nested, (int, float)) or not 0 < nested <= 1e12:
            raise f.invalid("rope_parameters.rope_theta", nested, "a positive number")
        theta = float(nested)
    f.ignore("rope_theta")
    n_blocks = f.int("num_mem_blocks", 1)
    shared = {"n_heads": heads, "n_kv_heads": kv, "head_dim": 2 * d // heads, "d_ff": d_ff, "activation": activation,
              "adapter_rank": f.int("adapter_rank", 128),
              "attention_adapters": f.bool("use_shared_attention_adapter", False), "rope": rope, "rope_theta": theta,
              "bias": bias}
    if shared["attention_adapters"] and kv != heads:
        raise f.unrepresentable("use_shared_attention_adapter", True, "Zamba2's K and V adapters are 2·hidden_size "
                                                                      "wide, which needs num_key_value_heads = "
                                                                      "num_attention_heads")
    max_positions = f.int("max_position_embeddings", 4096)
    if f.bool("use_long_context", False):  # Zamba2Config sets max_position_embeddings to 16384 over it
        max_positions = 16384
    block = {"d_model": d, "n_heads": heads, "n_kv_heads": kv, "d_ff": d_ff, "norm": "rmsnorm",
             "norm_eps": f.float("rms_norm_eps", 1e-5), "activation": activation, "gated": True,
             "bias": bias_groups(False, False, bias, False), "placement": "pre", "rope": False, "parts": "mixer",
             "mamba": mixer}
    if not f.bool("tie_word_embeddings", True):  # PreTrainedModel ties none of _tied_weights_keys then
        raise f.unrepresentable("tie_word_embeddings", False, "transformers ties Zamba2's shared blocks only when it "
                                                              "is true (false gives every use a block of its own, with "
                                                              "adapters it never runs); blockcli reads the tied model")
    model = model_section(n_layers, f.int("vocab_size", 32000), "none", max_positions, True)
    uses = [i for i, t in enumerate(types) if _ZAMBA2_KINDS[t]]
    for use, i in enumerate(uses):  # the uses take the blocks in turn: use j runs block j mod num_mem_blocks
        override_layers(f, [i], {"shared": {"index": use % n_blocks, **shared}})
    return block, model


def _bamba_name(name: str) -> str:
    """Llama's tensor name as Bamba's modules call it."""
    if name == "norm.weight":
        return "final_layernorm.weight"
    return name.replace(".mlp.", ".feed_forward.").replace("post_attention_layernorm", "pre_ff_layernorm")


def mamba_tensors(path: str) -> tuple:
    """A Mamba-2 mixer's tensors under `path` (transformers' BambaMixer names)."""
    return (tensor("blocks.{i}.w_ssm_in", f"{path}.in_proj.weight", LINEAR),
            tensor("blocks.{i}.b_ssm_in", f"{path}.in_proj.bias"),
            tensor("blocks.{i}.ssm_conv", f"{path}.conv1d.weight", DEPTHWISE),
            tensor("blocks.{i}.b_ssm_conv", f"{path}.conv1d.bias"),
            tensor("blocks.{i}.ssm_dt_bias", f"{path}.dt_bias"),
            tensor("blocks.{i}.ssm_A_log", f"{path}.A_log"),
            tensor("blocks.{i}.ssm_D", f"{path}.D"),
            tensor("blocks.{i}.ssm_norm_gamma", f"{path}.norm.weight"),
            tensor("blocks.{i}.w_ssm_out", f"{path}.out_proj.weight", LINEAR),
            tensor("blocks.{i}.b_ssm_out", f"{path}.out_proj.bias"))


# Granite MoE-shared's names, the Mamba-2 mixer under `mamba.`, and a dense model's shared MLP as its MLP
GRANITE_HYBRID = TensorMap("model.", GRANITE_MOE_SHARED.tensors + mamba_tensors("layers.{i}.mamba") + (
    tensor("blocks.{i}.w_gate blocks.{i}.w_up", "layers.{i}.shared_mlp.input_linear.weight", FUSED),
    tensor("blocks.{i}.w_down", "layers.{i}.shared_mlp.output_linear.weight", LINEAR),
), buffers=GRANITE_MOE_SHARED.buffers)

# Bamba: Llama's attention names, the mixer under `mamba.`, the MLP under `feed_forward.` after `pre_ff_layernorm`
BAMBA = TensorMap("model.", tuple(replace(t, name=_bamba_name(t.name)) for t in LLAMA.tensors)
                  + mamba_tensors("layers.{i}.mamba"), buffers=LLAMA.buffers)


# Nemotron-H: `backbone.`, one `norm` per layer (LN1 before a mixer, LN2 before an MLP), every part under `mixer.`
_N = "layers.{i}.mixer"
NEMOTRON_H = TensorMap("backbone.", (
    tensor("wte", "embeddings.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.norm.weight"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.norm.weight"),
    *mamba_tensors(_N),
    *(tensor(f"blocks.{{i}}.w_{x}", f"{_N}.{x}_proj.weight", LINEAR) for x in "qkvo"),
    tensor("blocks.{i}.w_up", f"{_N}.up_proj.weight", LINEAR), tensor("blocks.{i}.b_up", f"{_N}.up_proj.bias"),
    tensor("blocks.{i}.w_down", f"{_N}.down_proj.weight", LINEAR), tensor("blocks.{i}.b_down", f"{_N}.down_proj.bias"),
    tensor("blocks.{i}.router", f"{_N}.gate.weight", LINEAR),
    tensor("blocks.{i}.router_bias", f"{_N}.gate.e_score_correction_bias"),
    tensor("blocks.{i}.experts.{e}.w_up", f"{_N}.experts.{{e}}.up_proj.weight", LINEAR),
    tensor("blocks.{i}.experts.{e}.w_down", f"{_N}.experts.{{e}}.down_proj.weight", LINEAR),
    tensor("blocks.{i}.experts.{e}.w_up", f"{_N}.experts.up_proj", EXPERTS),
    tensor("blocks.{i}.experts.{e}.w_down", f"{_N}.experts.down_proj", EXPERTS),
    tensor("blocks.{i}.shared_w_up", f"{_N}.shared_experts.up_proj.weight", LINEAR),
    tensor("blocks.{i}.shared_w_down", f"{_N}.shared_experts.down_proj.weight", LINEAR),
    tensor("ln_f_gamma", "norm_f.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))

# Mamba-2: Mamba's names (`backbone.`, one `norm` per layer, the mixer under `mixer.`, the final `norm_f`;
# `embedding.` is the name Mamba2Model's load hook renames to `embeddings.`)
MAMBA2 = TensorMap("backbone.", (
    tensor("wte", "embeddings.weight|embedding.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.norm.weight"),
    *mamba_tensors("layers.{i}.mixer"),
    tensor("ln_f_gamma", "norm_f.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))

# LFM2: Llama's names with its own for the norms (operator_norm, ffn_norm, q_/k_layernorm, embedding_norm last), the
# MLP's w1/w3/w2, attention's out_proj, and the short conv under `conv.`
LFM2 = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.operator_norm.weight"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkv"),
    tensor("blocks.{i}.w_o", "layers.{i}.self_attn.out_proj.weight", LINEAR),
    tensor("blocks.{i}.q_norm_gamma", "layers.{i}.self_attn.q_layernorm.weight"),
    tensor("blocks.{i}.k_norm_gamma", "layers.{i}.self_attn.k_layernorm.weight"),
    tensor("blocks.{i}.w_conv_in", "layers.{i}.conv.in_proj.weight", LINEAR),
    tensor("blocks.{i}.b_conv_in", "layers.{i}.conv.in_proj.bias"),
    tensor("blocks.{i}.short_conv", "layers.{i}.conv.conv.weight", DEPTHWISE),
    tensor("blocks.{i}.b_short_conv", "layers.{i}.conv.conv.bias"),
    tensor("blocks.{i}.w_conv_out", "layers.{i}.conv.out_proj.weight", LINEAR),
    tensor("blocks.{i}.b_conv_out", "layers.{i}.conv.out_proj.bias"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.ffn_norm.weight"),
    tensor("blocks.{i}.w_gate", "layers.{i}.feed_forward.w1.weight", LINEAR),
    tensor("blocks.{i}.w_up", "layers.{i}.feed_forward.w3.weight", LINEAR),
    tensor("blocks.{i}.w_down", "layers.{i}.feed_forward.w2.weight", LINEAR),
    tensor("ln_f_gamma", "embedding_norm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=LLAMA.buffers)

# LFM3: LFM2's names, with Qwen3's attention (o_proj, q_norm, k_norm; biases), the gate and the sandwich norms
_LFM3_RENAMED = ("blocks.{i}.w_o", "blocks.{i}.q_norm_gamma", "blocks.{i}.k_norm_gamma")
LFM3 = TensorMap("model.", tuple(t for t in LFM2.tensors if t.keys[0] not in _LFM3_RENAMED) + (
    *(tensor(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkvo"),
    tensor("blocks.{i}.w_o", "layers.{i}.self_attn.o_proj.weight", LINEAR),
    tensor("blocks.{i}.q_norm_gamma", "layers.{i}.self_attn.q_norm.weight"),
    tensor("blocks.{i}.k_norm_gamma", "layers.{i}.self_attn.k_norm.weight"),
    # the checkpoint's name (transformers renames it g_proj on loading, back on saving), or the module's
    tensor("blocks.{i}.w_attn_gate", "layers.{i}.self_attn.gate_proj.weight|layers.{i}.self_attn.g_proj.weight",
           LINEAR),
    tensor("blocks.{i}.ln1_post_gamma", "layers.{i}.post_operator_norm.weight"),
    tensor("blocks.{i}.ln2_post_gamma", "layers.{i}.post_ffn_norm.weight"),
), buffers=LLAMA.buffers)

# LFM2-MoE: LFM2's names, the router feed_forward.gate and its expert_bias buffer, the experts one tensor each as
# published (w1 gate, w3 up, w2 down) or transformers 5's fused gate_up_proj / down_proj
_FF = "layers.{i}.feed_forward"
LFM2_MOE = TensorMap("model.", LFM2.tensors + moe_tensors(f"{_FF}.gate", f"{_FF}.experts", ("w1", "w3", "w2"),
                                                          f"{_FF}.experts") + (
    tensor("blocks.{i}.router_bias", f"{_FF}.expert_bias"),
), buffers=LLAMA.buffers)
# Zamba2: a Mamba-2 layer's mixer under `mamba.` (`mamba_decoder.mamba.` in a hybrid layer), its norm input_layernorm;
# shared block k's weights under the first layer `{home}` that uses it (`shared_transformer.`: save_pretrained keeps
# one copy of tied weights), each use's adapters there too, at its place `{use}` among all uses; the layer's own linear
_Z = "layers.{home}.shared_transformer"
_ZAMBA2_MAMBA = tuple(replace(t, name=f"{t.name}|{t.name.replace('.mamba.', '.mamba_decoder.mamba.')}")
                      for t in mamba_tensors("layers.{i}.mamba"))
ZAMBA2 = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("shared.{block}.ln_attn_gamma", f"{_Z}.input_layernorm.weight"),
    *(tensor(f"shared.{{block}}.w_{x}", f"{_Z}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(t for x in "qkv" for t in (
        tensor(f"blocks.{{i}}.adapter_{x}_a", f"{_Z}.self_attn.linear_{x}_adapter_list.{{use}}.0.weight", LINEAR),
        tensor(f"blocks.{{i}}.adapter_{x}_b", f"{_Z}.self_attn.linear_{x}_adapter_list.{{use}}.1.weight", LINEAR))),
    tensor("shared.{block}.ln_mlp_gamma", f"{_Z}.pre_ff_layernorm.weight"),
    tensor("shared.{block}.w_gate shared.{block}.w_up", f"{_Z}.feed_forward.gate_up_proj.weight", FUSED),
    tensor("shared.{block}.b_gate shared.{block}.b_up", f"{_Z}.feed_forward.gate_up_proj.bias", FUSED),
    tensor("shared.{block}.w_down", f"{_Z}.feed_forward.down_proj.weight", LINEAR),
    tensor("shared.{block}.b_down", f"{_Z}.feed_forward.down_proj.bias"),
    tensor("blocks.{i}.adapter_mlp_a", f"{_Z}.feed_forward.gate_up_proj_adapter_list.{{use}}.0.weight", LINEAR),
    tensor("blocks.{i}.adapter_gate_b blocks.{i}.adapter_up_b",
           f"{_Z}.feed_forward.gate_up_proj_adapter_list.{{use}}.1.weight", FUSED),
    tensor("blocks.{i}.w_shared_out", "layers.{i}.linear.weight", LINEAR),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight|layers.{i}.mamba_decoder.input_layernorm.weight"),
    *_ZAMBA2_MAMBA,
    tensor("ln_f_gamma", "final_layernorm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))

FAMILIES = (
    Family("granitemoehybrid", "Granite 4.0-H (Granite MoE hybrid)", _granitemoehybrid, GRANITE_HYBRID,
           MOE_TRAINING_ONLY, aux_loss=True),
    Family("bamba", "Bamba", _bamba, BAMBA, TRAINING_ONLY),
    # Falcon-H1: Bamba's names (mamba., self_attn., feed_forward., pre_ff_layernorm, final_layernorm)
    Family("falcon_h1", "Falcon-H1", _falcon_h1, BAMBA, TRAINING_ONLY, unread={
        # fields of the released configs (written by the original FalconH1Config) that transformers 5.24's
        # configuration_falcon_h1.py and modeling_falcon_h1.py never read
        "attn_layer_indices": "FalconH1Model builds attention beside the Mamba-2 mixer on every layer whatever it says",
        "mamba_use_mlp": "every FalconH1DecoderLayer has its MLP whatever it says",
        "mlp_expansion_factor": "the MLP is intermediate_size wide whatever it says",
        "time_step_min": "Δ's initialisation range only (FalconH1Mixer clamps by time_step_limit)",
        "time_step_max": "Δ's initialisation range only (FalconH1Mixer clamps by time_step_limit)",
        "time_step_floor": "Δ's initialisation only"}),
    Family("nemotron_h", "Nemotron-H", _nemotron_h, NEMOTRON_H, TRAINING_ONLY | {"hidden_dropout"},
           unread={"attention_bias": "NemotronHAttention (Jamba's) builds q/k/v/o without biases whatever it says",
                   "tie_word_embeddings": "NemotronHForCausalLM ties nothing: its LM head is its own whatever it says"}),
    Family("lfm2", "LFM2", _lfm2, LFM2, TRAINING_ONLY),
    # Mamba2Model's embedding has no padding_idx: every row of it would get its gradient
    Family("mamba2", "Mamba-2", _mamba2, MAMBA2, frozenset(), padding_idx=False),
    Family("lfm2_moe", "LFM2-MoE", _lfm2_moe, LFM2_MOE),
    Family("lfm3", "LFM3", _lfm3, LFM3, TRAINING_ONLY),
    Family("zamba2", "Zamba2", _zamba2, ZAMBA2, TRAINING_ONLY),
)
