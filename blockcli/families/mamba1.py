"""The Mamba-1 families: the selective scan (block.mamba with version 1) alone or interleaved with attention.

Mamba (`mamba`, state-spaces' mamba-*-hf): attention-free, every layer one RMSNorm and a Mamba-1 mixer (block.parts
mixer, no MLP), the final norm `norm_f`, the head tied by default. The mixer's fields (transformers' MambaMixer):
d_in = intermediate_size channels (by default expand·hidden_size; a stored intermediate_size wins, as in
transformers, whose config class sets it after deriving it: Falcon-Mamba-7B stores expand 16 beside 8192), a
state_size-wide state, a conv_kernel-tap conv (bias use_conv_bias), Δ through time_step_rank ("auto":
⌈hidden_size / 16⌉), in/out projections with use_bias. The time_step_* fields (but the rank) are initialisation,
residual_in_fp32 a precision choice (blockcli keeps the residual at the run's dtype), use_mambapy and
use_associative_scan the implementation of the same sums.

Falcon-Mamba (`falcon_mamba`): Mamba with RMS norms without weights (mixer_rms_eps) on Δ's low-rank input and on B
and C, before Δ's projection and the scan; its head untied by default only where the config says so.

Jamba (`jamba`, AI21's Jamba): Llama's pre-norm block (RMSNorm, GQA without biases, SwiGLU) without positions, whose
token mixer is Mamba-1 (learned RMS norms on Δ's input, B and C, eps rms_norm_eps) but on the layers i with
i % attn_layer_period == attn_layer_offset, and whose MLP is a mixture of num_experts SwiGLU experts (softmax over
the router's logits, top num_experts_per_tok, the weights not renormalised) on the layers i with
i % expert_layer_period == expert_layer_offset. mamba_d_state, mamba_d_conv, mamba_expand, mamba_dt_rank,
mamba_conv_bias and mamba_proj_bias are the mixer's.
"""

from __future__ import annotations

import math
from typing import Any

from blockcli.families.common import Family, model_section, override_layers, silu_gate
from blockcli.families.fields import Fields
from blockcli.families.moe import MOE_TRAINING_ONLY, moe_tensors
from blockcli.tensor_names import DEPTHWISE, LINEAR, TensorMap, tensor

# the Mamba-1 keys of each family: d_state, conv kernel, expand, Δ rank, conv bias, projection bias
_MAMBA_KEYS = ("state_size", "conv_kernel", "expand", "time_step_rank", "use_conv_bias", "use_bias")
_JAMBA_KEYS = ("mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_dt_rank", "mamba_conv_bias", "mamba_proj_bias")

# Mamba's and Falcon-Mamba's fields read only at initialisation or choosing an implementation of the same sums
_INIT_ONLY = ("time_step_scale", "time_step_min", "time_step_max", "time_step_init_scheme", "time_step_floor",
              "rescale_prenorm_residual", "use_mambapy", "use_associative_scan", "use_falcon_mambapy")


def mamba1_mixer(f: Fields, d: int, keys: tuple[str, ...], defaults: tuple[int, int, int], norm: str,
                 eps: float, width_key: str | None = None, used: bool = True) -> dict[str, Any]:
    """block.mamba (version 1) from the family's keys (`defaults`: the config class's state, kernel and expand). With
    `width_key` (Mamba's intermediate_size) a stored width wins over expand·hidden_size, as transformers reads it: its
    config class derives the width from expand, then sets the stored one over it. `used`: some layer is Mamba-1
    (only then does the conv's hidden_act matter)."""
    state, kernel, expand, rank, conv_bias, proj_bias = keys
    if used and f.str("hidden_act", "silu") != "silu":
        raise f.unrepresentable("hidden_act", f.data["hidden_act"], "the Mamba-1 layers' conv runs hidden_act, which "
                                                                    "blockcli runs as SiLU only")
    dt_rank = f.raw(rank, "auto")
    dt_rank = math.ceil(d / 16) if dt_rank == "auto" else f.int(rank)
    d_inner = f.int(expand, defaults[2]) * d
    if width_key is not None and f.raw(width_key, None) is not None:
        stored = f.int(width_key)
        if stored != d_inner:  # Falcon-Mamba-7B: expand 16, intermediate_size 8192 = 2·4096
            f.notes.append(f"Mamba-1 width {width_key} = {stored:,} (not {expand}·hidden_size = {d_inner:,}: "
                           f"transformers reads the stored width)")
        d_inner = stored
    return {"version": 1, "d_inner": d_inner, "d_state": f.int(state, defaults[0]),
            "dt_rank": dt_rank, "conv_kernel": f.int(kernel, defaults[1]), "conv_bias": f.bool(conv_bias, True),
            "proj_bias": f.bool(proj_bias, False), "bc_norm": norm, **({"bc_norm_eps": eps} if norm != "none" else {})}


def _mamba_block(f: Fields, norm: str, eps_key: str | None) -> tuple[dict, dict]:
    """Mamba's and Falcon-Mamba's: every layer an RMSNorm and the mixer (block.parts mixer)."""
    d = f.int("hidden_size", 768)
    f.ignore("residual_in_fp32", *_INIT_ONLY)  # see the docstring
    eps = f.float(eps_key, 1e-6) if eps_key else 0.0
    mixer = mamba1_mixer(f, d, _MAMBA_KEYS, (16, 4, 2), norm, eps, width_key="intermediate_size")
    block = {"d_model": d, "n_heads": 1, "n_kv_heads": 1, "head_dim": d, "d_ff": d, "norm": "rmsnorm",
             "norm_eps": f.float("layer_norm_epsilon", 1e-5), "activation": "silu", "bias": False, "placement": "pre",
             "rope": False, "parts": "mixer", "mamba": mixer}
    # no positions and no context limit of its own: max_positions only bounds blockcli's default sweeps
    model = model_section(f.int("num_hidden_layers", 32), f.int("vocab_size", 50280), "none", 1 << 20,
                          f.bool("tie_word_embeddings", True))
    f.notes.append("attention-free: every layer a Mamba-1 (selective scan) mixer, no MLP")
    return block, model


def _mamba(f: Fields) -> tuple[dict, dict]:
    return _mamba_block(f, "none", None)


def _falcon_mamba(f: Fields) -> tuple[dict, dict]:
    """Falcon-Mamba: Mamba with weightless RMS norms of δ, B and C (mixer_rms_eps)."""
    return _mamba_block(f, "weightless", "mixer_rms_eps")


def _periodic(f: Fields, period_key: str, offset_key: str, period: int, offset: int, n_layers: int) -> list[bool]:
    """The layers i with i % period == offset (JambaConfig's layers_block_type and layers_num_experts)."""
    p, o = f.int(period_key, period), f.int(offset_key, offset, minimum=0)
    if o >= p:  # JambaConfig.validate_architecture refuses it
        raise f.invalid(offset_key, o, f"an integer below {period_key} = {p}")
    return [i % p == o for i in range(n_layers)]


def _jamba(f: Fields) -> tuple[dict, dict]:
    """Jamba: Mamba-1 and attention layers (attn_layer_period/offset), experts every expert_layer_period layers."""
    d = f.int("hidden_size", 4096)
    heads = f.int("num_attention_heads", 32)
    kv = f.raw("num_key_value_heads", None)
    kv = heads if kv is None else f.int("num_key_value_heads")
    if heads % kv or d % heads:
        raise f.invalid("num_key_value_heads" if heads % kv else "num_attention_heads", kv if heads % kv else heads,
                        f"a divisor of {'num_attention_heads' if heads % kv else 'hidden_size'}")
    eps = f.float("rms_norm_eps", 1e-6)
    n_layers = f.int("num_hidden_layers", 32)
    f.ignore("use_mamba_kernels", "use_mambapy", "use_associative_scan", "num_logits_to_keep")  # implementation only
    if f.data.get("sliding_window") is not None:  # JambaConfig has no such field: its attention is full
        raise f.unrepresentable("sliding_window", f.data["sliding_window"], "Jamba's attention is full")
    f.ignore("sliding_window")
    block = {"d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": d // heads,
             "d_ff": f.int("intermediate_size", 14336), "norm": "rmsnorm", "norm_eps": eps, **silu_gate(f),
             "bias": False, "placement": "pre", "rope": False}
    model = model_section(n_layers, f.int("vocab_size", 65536), "none", f.int("max_position_embeddings", 262144),
                          f.bool("tie_word_embeddings", False))
    attention = _periodic(f, "attn_layer_period", "attn_layer_offset", 8, 4, n_layers)
    mixer = mamba1_mixer(f, d, _JAMBA_KEYS, (16, 4, 2), "learned", eps, used=not all(attention))
    experts = f.int("num_experts", 16)
    routed = _periodic(f, "expert_layer_period", "expert_layer_offset", 2, 1, n_layers)
    top_k = f.int("num_experts_per_tok", 2)
    moe = ({"n_experts": experts, "top_k": top_k, "d_expert": block["d_ff"]} if experts > 1 else None)
    if moe is not None and top_k > experts:
        raise f.invalid("num_experts_per_tok", top_k, f"at most num_experts = {experts}")
    kinds = [(not attention[i], routed[i] and moe is not None) for i in range(n_layers)]

    def fields_of(kind: tuple[bool, bool]) -> dict[str, Any]:  # the part of a layer that differs from layer 0's
        return {key: part if has else None for key, part, has, base in (("mamba", mixer, kind[0], kinds[0][0]),
                                                                        ("moe", moe, kind[1], kinds[0][1]))
                if has != base}

    block.update({k: v for k, v in (("mamba", mixer if kinds[0][0] else None), ("moe", moe if kinds[0][1] else None))
                  if v is not None})
    for kind in sorted(set(kinds)):
        others = [i for i, k in enumerate(kinds) if k == kind and kind != kinds[0]]
        if others:
            override_layers(f, others, fields_of(kind))
    return block, model


def mamba1_tensors(path: str) -> tuple:
    """A Mamba-1 mixer's tensors under `path` (transformers' MambaMixer names; Jamba's norms of δ, B and C)."""
    return (tensor("blocks.{i}.w_ssm_in", f"{path}.in_proj.weight", LINEAR),
            tensor("blocks.{i}.b_ssm_in", f"{path}.in_proj.bias"),
            tensor("blocks.{i}.ssm_conv", f"{path}.conv1d.weight", DEPTHWISE),
            tensor("blocks.{i}.b_ssm_conv", f"{path}.conv1d.bias"),
            tensor("blocks.{i}.w_ssm_x", f"{path}.x_proj.weight", LINEAR),
            tensor("blocks.{i}.w_ssm_dt", f"{path}.dt_proj.weight", LINEAR),
            tensor("blocks.{i}.b_ssm_dt", f"{path}.dt_proj.bias"),
            tensor("blocks.{i}.ssm_A_log", f"{path}.A_log"),
            tensor("blocks.{i}.ssm_D", f"{path}.D"),
            tensor("blocks.{i}.ssm_dt_norm", f"{path}.dt_layernorm.weight"),
            tensor("blocks.{i}.ssm_B_norm", f"{path}.b_layernorm.weight"),
            tensor("blocks.{i}.ssm_C_norm", f"{path}.c_layernorm.weight"),
            tensor("blocks.{i}.w_ssm_out", f"{path}.out_proj.weight", LINEAR),
            tensor("blocks.{i}.b_ssm_out", f"{path}.out_proj.bias"))


# Mamba and Falcon-Mamba: `backbone.`, one `norm` per layer, the mixer under `mixer.`, the final `norm_f`
# (`embedding.` is the name MambaModel's load hook renames to `embeddings.`)
MAMBA = TensorMap("backbone.", (
    tensor("wte", "embeddings.weight|embedding.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.norm.weight"),
    *mamba1_tensors("layers.{i}.mixer"),
    tensor("ln_f_gamma", "norm_f.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))

# Jamba: Llama's attention names without RoPE, the mixer under `mamba.`, the MLP under `feed_forward.` after
# `pre_ff_layernorm` (experts one tensor each, or transformers 5's fused gate_up_proj / down_proj), `final_layernorm`
_F = "layers.{i}.feed_forward"
JAMBA = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *mamba1_tensors("layers.{i}.mamba"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.pre_ff_layernorm.weight"),
    tensor("blocks.{i}.w_gate", f"{_F}.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.w_up", f"{_F}.up_proj.weight", LINEAR),
    tensor("blocks.{i}.w_down", f"{_F}.down_proj.weight", LINEAR),
    *moe_tensors(f"{_F}.router", f"{_F}.experts", ("gate_proj", "up_proj", "down_proj"), f"{_F}.experts"),
    tensor("ln_f_gamma", "final_layernorm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))

# keys of the state-spaces/mamba_ssm configs that transformers' Mamba (and Falcon-Mamba) carries along unread
_MAMBA_SSM_UNREAD = {
    "n_layer": "mamba_ssm's name of the depth; MambaModel builds num_hidden_layers layers",
    "rms_norm": "mamba_ssm's choice of norm; MambaBlock's and norm_f are RMSNorms whatever it says",
    "fused_add_norm": "a mamba_ssm kernel choice (the same sums); transformers never reads it",
    "pad_vocab_size_multiple": "mamba_ssm pads the vocabulary with it; vocab_size is the padded size already",
}

FAMILIES = (
    # MambaModel's embedding has no padding_idx: every row of it would get its gradient
    Family("mamba", "Mamba", _mamba, MAMBA, frozenset(), unread=_MAMBA_SSM_UNREAD, padding_idx=False),
    Family("falcon_mamba", "Falcon-Mamba", _falcon_mamba, MAMBA, frozenset(), unread=_MAMBA_SSM_UNREAD,
           padding_idx=False),
    Family("jamba", "Jamba", _jamba, JAMBA, MOE_TRAINING_ONLY, aux_loss=True),
)
