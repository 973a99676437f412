"""The hybrid state-space families: Mamba-2 (SSD) mixers interleaved with attention layers (block.mamba).

Granite 4.0-H (`granitemoehybrid`): Granite MoE-shared's block (its four scalars, a softmax over the top-k router
logits, a shared SwiGLU expert; a dense SwiGLU of `shared_intermediate_size` when num_local_experts is 0) whose
token mixer is, per `layer_types`, a Mamba-2 layer ("mamba" / "linear_attention") or attention ("attention" /
"full_attention"), RoPE only with position_embedding_type "rope" (null or "nope": none). Every layer is pre-norm
with its MLP.

Bamba (`bamba`, IBM's Bamba-9B): Llama's block (GQA, RMSNorm, SwiGLU) whose RoPE turns half of each head (BambaConfig
hard-codes partial_rotary_factor 0.5; only rope_parameters' own overrides it), Mamba-2 on every layer but those in
`attn_layer_indices`; the MLP under `feed_forward`, its norm `pre_ff_layernorm`, the final norm `final_layernorm`.

The Mamba-2 mixer's fields (transformers' BambaMixer, which Granite's reuses): mamba_n_heads heads of
mamba_d_head ("auto": mamba_expand·hidden_size / mamba_n_heads), a mamba_d_state-wide state, mamba_n_groups
groups, a mamba_d_conv-tap conv (bias mamba_conv_bias), in/out projections with mamba_proj_bias, the gated
norm's eps rms_norm_eps. mamba_chunk_size only chunks the scan (the sums are the same); time_step_limit is
accepted at its default (0, ∞), which clamps nothing.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from blockcli.families.common import Family, first_of, gated_rms, override_layers, silu_gate
from blockcli.families.fields import Fields
from blockcli.families.common import TRAINING_ONLY, with_data
from blockcli.families.llama import LLAMA, granite_scalars
from blockcli.families.moe import GRANITE_MOE_SHARED, MOE_TRAINING_ONLY
from blockcli.tensor_names import DEPTHWISE, FUSED, LINEAR, TensorMap, tensor

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
    limit = f.raw("time_step_limit", None)
    if limit is not None and (not isinstance(limit, list) or len(limit) != 2 or limit[0] != 0
                              or not _infinite(limit[1])):
        raise f.unrepresentable("time_step_limit", limit, "blockcli's Δ is not clamped; only the default "
                                                          "(0, inf) is accepted")
    return {"n_heads": heads, "head_dim": head_dim, "d_state": f.int("mamba_d_state", defaults["d_state"]),
            "n_groups": groups, "conv_kernel": f.int("mamba_d_conv", 4), "conv_bias": f.bool("mamba_conv_bias", True),
            "proj_bias": f.bool("mamba_proj_bias", False), "norm_eps": eps}


def _infinite(value: Any) -> bool:
    """∞ as a JSON config holds it: a float, or transformers 5's {"__float__": "Infinity"}."""
    return (isinstance(value, float) and math.isinf(value) and value > 0) or value == {"__float__": "Infinity"}


def mamba_layers(f: Fields, block: dict, mixer: dict[str, Any], is_mamba: list[bool]) -> None:
    """The mixer of each layer: the base block takes layer 0's kind, the other layers an override."""
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


FAMILIES = (
    Family("granitemoehybrid", "Granite 4.0-H (Granite MoE hybrid)", _granitemoehybrid, GRANITE_HYBRID,
           MOE_TRAINING_ONLY, aux_loss=True),
    Family("bamba", "Bamba", _bamba, BAMBA, TRAINING_ONLY),
)
