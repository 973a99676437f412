"""AFMoE (Arcee's Trinity) and its descendants, each a diff of its parent as transformers' modular_*.py writes it.

- AFMoE (Trinity-Mini, Trinity-Nano): Llama's attention (GQA, `head_dim` 128 by default) with per-head q/k RMSNorm,
  a sigmoid gate on the heads' output (`gate_proj`: out = (heads ⊙ σ(x·W_gate))·W_O, block.attention_gate), RoPE on
  the sliding-window layers only (the global ones, every `global_attn_every_n_layers`-th or as `layer_types` says,
  have no positions); four RMSNorms per layer (`placement: sandwich`); the first `num_dense_layers` an MLP of
  intermediate_size, the others a mixture: `num_experts` SwiGLU experts of `moe_intermediate_size`, sigmoid scores,
  a selection bias (`expert_bias`, a parameter never trained) for the choice only, the top `num_experts_per_tok`
  renormalised, times `route_scale`, beside `num_shared_experts` shared experts as one ungated MLP
  (moe_intermediate_size · num_shared_experts wide); `mup_enabled` scales the embeddings by √hidden_size.
- Mellum (Mellum2, JetBrains): Qwen3-MoE's pre-norm block (per-head q/k RMSNorm, `attention_bias` on q/k/v/o, softmax
  routing renormalised per `norm_topk_prob`, default true, no shared expert) in Laguna's layer: windowed layers by
  `layer_types` (none by default; window 1024), one RoPE per layer type (`rope_parameters.full_attention`, base
  500,000, and `.sliding_attention`, 10,000), each layer a mixture or an MLP of intermediate_size by
  `mlp_layer_types` (all "sparse" by default); the multi-token-prediction layers (`num_mtp_layers`, mtp.*) are not
  built by transformers: set aside.
- Laguna (poolside): AFMoE's attention in a pre-norm layer (Llama's two norms, GLM-4.7-Flash's layer), its gate a
  softplus (`gating`: true or "per-head", one gate per head broadcast over d_h, `block.attention_gate_form:
  softplus_head`; "per-element", or false, one per channel), RoPE on every layer, one per layer type
  (`rope_parameters.full_attention`, base 500,000 on half of each head, `.sliding_attention`, 10,000 on all of it),
  windows (512) on the `layer_types` sliding layers (none by default); `mlp_layer_types` (the first layer dense, by
  default) and on the others a mixture: sigmoid scores, a selection bias (`e_score_correction_bias`, a parameter
  never trained) for the choice, the top k renormalised, times `moe_routed_scaling_factor`, beside an ungated shared
  expert of `shared_expert_intermediate_size`.
- MiMo-V2-Flash (Xiaomi; MiMoV2FlashConfig is GLM-4.5's, its model Laguna's): Laguna's pre-norm layer without q/k norms
  or gate; global attention on layer 0 and every sixth (`layer_types`), on the others a window (129: the published
  `sliding_window_size` 128 plus the query) with twice the K/V heads and a sink logit per head; queries and keys of
  `head_dim` (192), values of `v_head_dim` (128) times `attention_value_scale` (0.707; `block.v_head_dim`,
  `block.value_scale`); biased q/k/v under `attention_bias`, never o_proj; one RoPE per layer type (global: base 5·10⁶,
  sliding: 10⁴), each on int(head_dim · partial_rotary_factor) dims (0.334 where a type gives none); `mlp_layer_types`
  (the first layer dense by default) and on the others DeepSeek-V3's mixture without shared experts (sigmoid scores,
  the selection bias a buffer, grouped choice, renormalised per `norm_topk_prob`, times `routed_scaling_factor`); the
  multi-token-prediction layers (model.mtp.*) set aside, as transformers does.
- Beam (Reflection; BeamConfig is Qwen3-MoE's): Qwen3-MoE's attention (per-head q/k RMSNorm before RoPE, GQA 48/8 of
  128) with a sigmoid gate per channel whose pre-activation has a bias per head (`gate_proj`, `gate_bias`:
  block.attention_gate_head_bias), in Gemma 2's sandwich of four RMSNorms; every residual add scaled by depth, the
  k-th add of the model (k = 2·(i + 1) for layer i's attention, k + 1 for its MLP) √((k − 1)/k)·skip + (1/√k)·branch
  (block.*_skip_scale, *_branch_scale per layer); windows (512) and RoPE (base 10,000) on the `layer_types` sliding
  layers (five of six, the last layer global), the global ones without positions and their queries times
  (1 + (t + 1)/2048)^0.1 (block.query_scale_form power); `mlp_layer_types` (three dense layers first by default), the
  others DeepSeek-V3's grouped routing (sigmoid scores, a selection bias buffer, `n_group`/`topk_group`, renormalised
  per `norm_topk_prob`, times `routed_scaling_factor`) without shared experts; logits soft-capped
  (`final_logit_softcapping`, 30).
"""

from __future__ import annotations

import math
from typing import Any

from blockcli.families.common import (TRAINING_ONLY, Family, apply_bases, first_of, gated_rms, layer_type_bases,
                                      layer_type_ropes, layer_types, override_layers, refuse_nulls, silu_gate,
                                      sliding_layers, with_data)
from blockcli.families.deepseek import DEEPSEEK_EXPERTS
from blockcli.families.fields import Fields
from blockcli.families.gemma2 import GEMMA3
from blockcli.families.llama import LLAMA, LLAMA_MLP
from blockcli.families.moe import MOE_TRAINING_ONLY, QWEN_MOE, moe_tensors
from blockcli.tensor_names import LINEAR, TensorMap, tensor


def _afmoe(f: Fields) -> tuple[dict, dict]:
    """AFMoE: see the module's docstring."""
    refuse_nulls(f, "num_dense_layers", "num_experts", "num_experts_per_tok", "num_shared_experts", "route_scale",
                 "global_attn_every_n_layers", "mup_enabled")
    if f.bool("attention_bias", False):  # LlamaAttention's q/k/v/o biases, but gate_proj never has one
        raise f.unrepresentable("attention_bias", True, "AFMoE's attention gate has no bias beside biased q/k/v; "
                                "blockcli's gate takes the q/k/v bias setting")
    # AfmoeConfig's head_dim is 128 when absent; an explicit null is LlamaAttention's hidden_size // heads
    head_dim = None if f.has("head_dim") and f.data["head_dim"] is None else 128
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, head_dim_default=head_dim,
                             qkv_bias=False, out_bias=False, mlp_bias=False, eps_default=1e-5)
    block.update(placement="sandwich", qk_norm="head", attention_gate=True)
    n = model["n_layers"]
    sliding = layer_types(f, n)
    if sliding is None:
        every = f.int("global_attn_every_n_layers", 4)
        sliding = [bool((i + 1) % every) for i in range(n)]
    else:
        f.ignore("global_attn_every_n_layers")  # read only when layer_types is absent
    sliding_layers(f, block, sliding, default=1024)
    override_layers(f, [i for i in range(n) if not sliding[i]], {"rope": False})  # global layers: no RoPE
    if f.bool("mup_enabled", False):
        model["embedding_multiplier"] = float(block["d_model"]) ** 0.5
    n_dense = f.int("num_dense_layers", 1, minimum=0)
    n_experts, top_k = f.int("num_experts", 64), f.int("num_experts_per_tok", 6)
    d_expert = f.int("moe_intermediate_size", 1408)
    shared = f.int("num_shared_experts", 2, minimum=0)
    route_scale = f.float("route_scale", 1.0, high=1e6)
    if n_dense >= n:  # every layer dense: the expert settings are unused
        return block, model
    if top_k > n_experts:
        raise f.invalid("num_experts_per_tok", top_k, f"at most num_experts ({n_experts})")
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": d_expert, "scoring": "sigmoid",
                    "selection_bias": True, "selection_bias_frozen": True, "renormalize": True,
                    "routed_scaling": route_scale, **({"d_shared": d_expert * shared} if shared else {})}
    if n_dense:
        override_layers(f, list(range(n_dense)), {"moe": None})
    return block, model


def mlp_kinds(f: Fields, n: int, default: list[str]) -> list[bool]:
    """Which layers are a mixture ("sparse") by `mlp_layer_types` (Laguna's, Mellum's; `default` when absent)."""
    kinds = f.raw("mlp_layer_types", None)
    if kinds is None:
        kinds = default
    elif not isinstance(kinds, list) or len(kinds) != n or any(k not in ("dense", "sparse") for k in kinds):
        raise f.invalid("mlp_layer_types", kinds, f"an array of {n} layer kinds, dense or sparse")
    return [k == "sparse" for k in kinds]


def place_mixture(f: Fields, block: dict, sparse: list[bool], moe: dict, experts_key: str) -> None:
    """`moe` on the layers `sparse` marks, the others dense (`moe: null`); none when every layer is dense (the
    expert settings are then unused). `experts_key`: the config's name for the expert count, for the message."""
    if not any(sparse):
        return
    if moe["top_k"] > moe["n_experts"]:
        raise f.invalid("num_experts_per_tok", moe["top_k"], f"at most {experts_key} ({moe['n_experts']})")
    block["moe"] = moe
    if not all(sparse):
        override_layers(f, [i for i, kind in enumerate(sparse) if not kind], {"moe": None})


def typed_rope_block(f: Fields, defaults: dict, title: str, **kwargs) -> tuple[dict, dict, Fields]:
    """gated_rms on the config without its RoPE keys, then one RoPE per layer type from `rope_parameters` (the config
    class's `defaults` when absent or null) by layer_types: the fields the caller reads on, with the defaults in."""
    if f.raw("rope_parameters", None) is None:
        f = with_data(f, {**f.data, "rope_parameters": defaults})
    rest = with_data(f, {k: v for k, v in f.data.items() if k not in ("rope_parameters", "rope_theta", "rope_scaling")})
    block, model = gated_rms(rest, silu_gate, **kwargs)
    return block, model, f


def typed_fractions(f: Fields, defaults: dict, absent: float) -> tuple[Fields, Any, dict[str, float]]:
    """Each layer type's rotated fraction out of `rope_parameters` (the config class's `defaults` when absent or
    null; `absent` where a type gives none): the fields with the fractions taken out, the RoPE objects, the fractions."""
    params = f.raw("rope_parameters", None)
    params = defaults if params is None else params
    fractions: dict[str, float] = {}
    if isinstance(params, dict):
        stripped = {}
        for kind, own in params.items():
            if isinstance(own, dict):
                inner = Fields(own, f.where, f.family)
                fractions[kind] = inner.float("partial_rotary_factor", absent, low=0.0, high=1.0)
                own = {k: v for k, v in own.items() if k != "partial_rotary_factor"}
            stripped[kind] = own
        params = stripped
    return with_data(f, {**f.data, "rope_parameters": params}), params, fractions


def typed_rotation(f: Fields, block: dict, sliding: list[bool], fractions: dict[str, float]) -> None:
    """block.rope of layer 0's type, the other type's layers an override where its fraction differs; the rotated
    dimensions int(d_h · fraction) as the rotary tables take them, even and above 0."""
    d_h, rope = block["head_dim"], {}
    for kind, key in ((True, "sliding_attention"), (False, "full_attention")):
        fraction = fractions.get(key, 1.0)
        if int(d_h * fraction) % 2 or int(d_h * fraction) == 0:
            raise f.unrepresentable(f"rope_parameters.{key}.partial_rotary_factor", fraction,
                                    f"it rotates {int(d_h * fraction)} of {d_h} dimensions per head; rotary pairs need "
                                    f"an even number above 0")
        rope[kind] = True if fraction == 1.0 else fraction
    block["rope"] = rope[sliding[0]]
    if rope[True] != rope[False]:
        override_layers(f, [i for i in range(len(sliding)) if sliding[i] != sliding[0]], {"rope": rope[not sliding[0]]})


def _mellum(f: Fields) -> tuple[dict, dict]:
    """Mellum: see the module's docstring."""
    refuse_nulls(f, "head_dim", "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size")
    params = f.raw("rope_parameters", None)
    for kind in ("full_attention", "sliding_attention"):  # MellumAttention's RoPE is Llama's: the whole head
        own = params.get(kind) if isinstance(params, dict) else None
        if isinstance(own, dict) and own.get("partial_rotary_factor", 1.0) != 1.0:
            raise f.unrepresentable(f"rope_parameters.{kind}.partial_rotary_factor", own["partial_rotary_factor"],
                                    "Mellum's attention rotates the whole head (transformers fails on a part)")
        if isinstance(own, dict) and "partial_rotary_factor" in own:
            params = {**params, kind: {k: v for k, v in own.items() if k != "partial_rotary_factor"}}
    if params is not None:
        f = with_data(f, {**f.data, "rope_parameters": params})
    block, model, f = typed_rope_block(f, _MELLUM_ROPE, "Mellum", kv_default=4, tie_default=False,
                                       head_dim_default=128, mlp_bias=False, eps_default=1e-6)
    block["qk_norm"] = "head"
    n = model["n_layers"]
    sliding = layer_types(f, n) or [False] * n
    sliding_layers(f, block, sliding, default=1024)
    layer_type_ropes(f, block, model, sliding, (500000.0, "rope_theta", 10000.0), "Mellum")
    sparse = mlp_kinds(f, n, ["sparse"] * n)
    n_experts = first_of(f, ("num_experts", "num_local_experts"), lambda key: f.int(key), 64)
    top_k = f.int("num_experts_per_tok", 8)
    place_mixture(f, block, sparse, {"n_experts": n_experts, "top_k": top_k, "renormalize": f.bool("norm_topk_prob", True),
                                     "d_expert": f.int("moe_intermediate_size", 896)}, "num_experts")
    return block, model


def _laguna(f: Fields) -> tuple[dict, dict]:
    """Laguna: see the module's docstring."""
    refuse_nulls(f, "head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "shared_expert_intermediate_size", "moe_routed_scaling_factor", "moe_router_logit_softcapping")
    if f.bool("attention_bias", False):  # q/k/v/o biased, but g_proj never is
        raise f.unrepresentable("attention_bias", True, "Laguna's attention gate has no bias beside biased q/k/v; "
                                "blockcli's gate takes the q/k/v bias setting")
    if f.bool("moe_apply_router_weight_on_input", False):
        raise f.invalid("moe_apply_router_weight_on_input", True, "false (LagunaConfig refuses true: not "
                                                                  "implemented in transformers)")
    cap = f.float("moe_router_logit_softcapping", 0.0, low=0.0, high=1e6, low_open=False)
    if cap:
        raise f.unrepresentable("moe_router_logit_softcapping", cap, "blockcli's router has no tanh soft-cap on its "
                                                                     "logits")
    gating = f.raw("gating", True)
    if gating is True or gating == "per-head":
        form = "softplus_head"
    elif gating is False or gating == "per-element":  # LagunaAttention: anything but true or "per-head" is per element
        form = "softplus"
    else:
        raise f.invalid("gating", gating, "true, false, \"per-head\" or \"per-element\"")
    f, params, fractions = typed_fractions(f, _LAGUNA_ROPE, 1.0)
    block, model, f = typed_rope_block(f, params, "Laguna", kv_default=8, tie_default=False, head_dim_default=128,
                                       out_bias=False, mlp_bias=False, eps_default=1e-6)
    block.update(qk_norm="head", attention_gate=True, attention_gate_form=form)
    n = model["n_layers"]
    heads = f.raw("num_attention_heads_per_layer", None)
    if heads is not None and (not isinstance(heads, list) or len(heads) != n or any(h != block["n_heads"]
                                                                                    for h in heads)):
        raise f.unrepresentable("num_attention_heads_per_layer", heads, f"blockcli's layers share one head count "
                                                                        f"(num_attention_heads, {block['n_heads']})")
    sliding = layer_types(f, n) or [False] * n
    sliding_layers(f, block, sliding, default=512)
    layer_type_ropes(f, block, model, sliding, (500000.0, "rope_theta", 10000.0), "Laguna")
    typed_rotation(f, block, sliding, fractions)
    sparse = mlp_kinds(f, n, ["dense"] + ["sparse"] * (n - 1))
    n_experts, top_k = f.int("num_experts", 256), f.int("num_experts_per_tok", 8)
    d_expert = f.int("moe_intermediate_size", 512)
    shared = f.int("shared_expert_intermediate_size", 512, minimum=0)
    scaling = f.float("moe_routed_scaling_factor", 1.0, high=1e6)
    place_mixture(f, block, sparse, {"n_experts": n_experts, "top_k": top_k, "d_expert": d_expert, "scoring": "sigmoid",
                                     "selection_bias": True, "selection_bias_frozen": True, "renormalize": True,
                                     "routed_scaling": scaling, **({"d_shared": shared} if shared else {})}, "num_experts")
    return block, model


def _mimo_v2_flash(f: Fields) -> tuple[dict, dict]:
    """MiMo-V2-Flash: see the module's docstring."""
    refuse_nulls(f, "head_dim", "v_head_dim", "n_routed_experts", "num_local_experts", "num_experts_per_tok",
                 "moe_intermediate_size", "n_group", "topk_group", "sliding_window")
    f, params, fractions = typed_fractions(f, _MIMO_ROPE, 0.334)  # MiMoV2FlashRotaryEmbedding: 0.334 when absent
    if f.raw("sliding_window_size", None) is not None:  # the published configs' window, the query not counted
        f = with_data(f, {**f.data, "sliding_window": f.int("sliding_window_size", minimum=0) + 1})
    f.ignore("sliding_window_size")
    block, model, f = typed_rope_block(f, params, "MiMo-V2-Flash", kv_default=4, tie_default=False,
                                       head_dim_default=192, out_bias=False, mlp_bias=False, eps_default=1e-5)
    n, kv = model["n_layers"], block["n_kv_heads"]
    sliding = layer_types(f, n) or [not (i == 0 or (i + 1) % 6 == 0) for i in range(n)]
    sliding_layers(f, block, sliding, default=129)
    layer_type_ropes(f, block, model, sliding, (5000000.0, "rope_theta", 10000.0), "MiMo-V2-Flash")
    if block.get("rope_scaling"):
        raise f.unrepresentable("rope_parameters", f.data["rope_parameters"], "MiMo-V2-Flash's RoPE of rope_type "
                                                                              "default (blockcli reads no other here)")
    typed_rotation(f, block, sliding, fractions)
    unscaled = f.has("attention_value_scale") and f.data["attention_value_scale"] is None  # null: no scale
    block.update(v_head_dim=f.int("v_head_dim", 128),
                 value_scale=f.float("attention_value_scale", 1.0 if unscaled else 0.707, high=1e6))
    # the sliding layers: twice the K/V heads, and a sink logit per head
    window = {"n_kv_heads": 2 * kv, "attention_sinks": True}
    if sliding[0]:
        block.update(window)
    override_layers(f, [i for i in range(n) if sliding[i] != sliding[0]],
                    {"n_kv_heads": kv, "attention_sinks": False} if sliding[0] else window)
    sparse = mlp_kinds(f, n, ["dense"] + ["sparse"] * (n - 1))
    n_experts = first_of(f, ("n_routed_experts", "num_local_experts"), lambda key: f.int(key), 256)
    top_k = f.int("num_experts_per_tok", 8)
    moe = {"n_experts": n_experts, "top_k": top_k, "d_expert": f.int("moe_intermediate_size", 2048),
           "scoring": "sigmoid", "selection_bias": True, "group_score": "top2_sum",
           "renormalize": f.bool("norm_topk_prob", True), "n_groups": f.int("n_group", 1),
           "top_groups": f.int("topk_group", 1)}
    # null: 1 (MiMoV2FlashConfig, as the hub config.json stores it)
    moe["routed_scaling"] = f.float("routed_scaling_factor", 1.0, high=1e6)
    place_mixture(f, block, sparse, moe, "n_routed_experts")
    return block, model


def _beam(f: Fields) -> tuple[dict, dict]:
    """Beam: see the module's docstring."""
    refuse_nulls(f, "head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "n_group",
                 "topk_group", "routed_scaling_factor", "sliding_window")
    if f.bool("attention_bias", False):  # q/k/v/o biased, but gate_proj never is
        raise f.unrepresentable("attention_bias", True, "Beam's attention gate has no bias beside biased q/k/v; "
                                "blockcli's gate takes the q/k/v bias setting")
    block, model, f = typed_rope_block(f, {"sliding_attention": _BEAM_ROPE, "full_attention": None}, "Beam",
                                       kv_default=8, tie_default=False, head_dim_default=128, out_bias=False,
                                       mlp_bias=False, eps_default=1e-6)
    n = model["n_layers"]
    sliding = layer_types(f, n) or [bool((i + 1) % 6) and i != n - 1 for i in range(n)]
    sliding_layers(f, block, sliding, default=512)
    block.update(qk_norm="head", attention_gate=True, attention_gate_head_bias=True, placement="sandwich")
    # the layers without positions: queries times (1 + (t + 1)/2048)^0.1 (compute_attention_scaling)
    apply_bases(f, block, model, layer_type_bases(f, sliding), {"query_scale": 0.1, "query_scale_length": 2048,
                                                                 "query_scale_offset": 1, "query_scale_form": "power"})
    for i in range(n):  # the model's k-th residual add: √((k − 1)/k)·skip + (1/√k)·branch
        k = 2 * (i + 1)
        override_layers(f, [i], {"attn_skip_scale": math.sqrt((k - 1) / k), "attn_branch_scale": 1 / math.sqrt(k),
                                 "mlp_skip_scale": math.sqrt(k / (k + 1)), "mlp_branch_scale": 1 / math.sqrt(k + 1)})
    if f.has("final_logit_softcapping") and f.data["final_logit_softcapping"] is None:  # null: no cap
        f.ignore("final_logit_softcapping")
    else:
        model["logit_softcap"] = f.float("final_logit_softcapping", 30.0, low=0.0, high=1e9)
    sparse = mlp_kinds(f, n, ["dense"] * min(3, n) + ["sparse"] * (n - min(3, n)))
    n_experts, top_k = f.int("num_experts", 256), f.int("num_experts_per_tok", 8)
    place_mixture(f, block, sparse, {"n_experts": n_experts, "top_k": top_k,
                                     "d_expert": f.int("moe_intermediate_size", 2560), "scoring": "sigmoid",
                                     "selection_bias": True, "group_score": "top2_sum",
                                     "renormalize": f.bool("norm_topk_prob", True), "n_groups": f.int("n_group", 8),
                                     "top_groups": f.int("topk_group", 4),
                                     "routed_scaling": f.float("routed_scaling_factor", 2.5, high=1e6)}, "num_experts")
    return block, model


# BeamConfig.__post_init__'s RoPE of the sliding layers when the config gives none (its global layers: none)
_BEAM_ROPE = {"rope_type": "default", "rope_theta": 10000.0}

# MiMoV2FlashConfig.__post_init__'s RoPE when the config gives none: a third of each head (int(d_h · 0.334) dims)
_MIMO_ROPE = {"full_attention": {"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.334},
              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.334}}

# LagunaConfig.__post_init__'s RoPE when the config gives none: half of each head on the global layers
_LAGUNA_ROPE = {"full_attention": {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}

# MellumConfig.__post_init__'s RoPE when the config gives none
_MELLUM_ROPE = {"full_attention": {"rope_type": "default", "rope_theta": 500000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
# the multi-token-prediction layers: transformers builds none of them (MellumPreTrainedModel ignores mtp.* on load)
_MTP_UNREAD = {"num_nextn_predict_layers": "the multi-token-prediction layers (mtp.*), which transformers does not build",
               "num_mtp_layers": "the multi-token-prediction layers (mtp.*), which transformers does not build",
               "mtp_layer_types": "the multi-token-prediction layers' attention, which transformers does not build",
               "mtp_mlp_layer_types": "the multi-token-prediction layers' MLPs, which transformers does not build"}

# Mellum: Qwen-MoE's names (q_norm, k_norm, mlp.gate and the experts per expert or fused, Llama's MLP on the dense
# layers); the multi-token-prediction layers (mtp.*) set aside
MELLUM = TensorMap("model.", QWEN_MOE.tensors, buffers=LLAMA.buffers, aside=("mtp.",))


# AFMoE: Llama's attention with its gate (self_attn.gate_proj) and q/k norms, four norms a layer, the router under
# mlp.router.gate, the selection bias mlp.expert_bias (E,), the routed experts per expert (save_pretrained's layout)
# or fused (transformers 5's), mlp.shared_experts the shared ones, and Llama's MLP on the dense layers
AFMOE = TensorMap("model.", tuple(t for t in LLAMA.tensors if t not in LLAMA_MLP and "post_attention" not in t.name) + (
    tensor("blocks.{i}.w_attn_gate", "layers.{i}.self_attn.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.ln1_post_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.pre_mlp_layernorm.weight"),
    tensor("blocks.{i}.ln2_post_gamma", "layers.{i}.post_mlp_layernorm.weight"),
    tensor("blocks.{i}.router_bias", "layers.{i}.mlp.expert_bias"),
) + moe_tensors("layers.{i}.mlp.router.gate", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"),
                "layers.{i}.mlp.experts") + tuple(
    tensor(f"blocks.{{i}}.shared_w_{role}", f"layers.{{i}}.mlp.shared_experts.{role}_proj.weight", LINEAR)
    for role in ("gate", "up", "down")) + LLAMA_MLP, buffers=LLAMA.buffers)

# Laguna: Llama's names with q/k norms and the gate (self_attn.g_proj), the router mlp.gate and its selection bias (under
# the router as transformers 5 holds it, or under the experts as the published checkpoints do), the experts per expert
# or fused, the shared expert (mlp.shared_experts., or mlp.shared_expert. as published), Llama's MLP on the dense layers
LAGUNA = TensorMap("model.", tuple(t for t in LLAMA.tensors if t not in LLAMA_MLP) + (
    tensor("blocks.{i}.w_attn_gate", "layers.{i}.self_attn.g_proj.weight", LINEAR),
    tensor("blocks.{i}.router_bias", "layers.{i}.mlp.gate.e_score_correction_bias|"
                                     "layers.{i}.mlp.experts.e_score_correction_bias"),
) + moe_tensors("layers.{i}.mlp.gate", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"),
                "layers.{i}.mlp.experts") + tuple(
    tensor(f"blocks.{{i}}.shared_w_{role}", f"layers.{{i}}.mlp.shared_experts.{role}_proj.weight|"
                                            f"layers.{{i}}.mlp.shared_expert.{role}_proj.weight", LINEAR)
    for role in ("gate", "up", "down")) + LLAMA_MLP, buffers=LLAMA.buffers)

# MiMo-V2-Flash: Llama's names with a sink per head on the sliding layers (self_attn.sinks in memory, attention_sink_bias
# as the published checkpoints and save_pretrained store it), DeepSeek-V3's experts (the
# router mlp.gate and its selection bias, a buffer), Llama's MLP on the dense layers; the multi-token-prediction
# layers (model.mtp.*) set aside as transformers ignores them
MIMO_V2_FLASH = TensorMap("model.", LLAMA.tensors + DEEPSEEK_EXPERTS + (
    tensor("blocks.{i}.sinks", "layers.{i}.self_attn.sinks|layers.{i}.self_attn.attention_sink_bias"),),
    buffers=LLAMA.buffers, aside=("mtp.",))

# Beam: Gemma 2's four norms, Qwen3's q/k norms, the gate (self_attn.gate_proj) and its bias per head
# (self_attn.gate_bias), DeepSeek-V3's experts (the router mlp.gate and its selection bias, a buffer), Gemma 2's MLP on
# the dense layers
BEAM = TensorMap("model.", GEMMA3.tensors + DEEPSEEK_EXPERTS + (
    tensor("blocks.{i}.w_attn_gate", "layers.{i}.self_attn.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.b_attn_gate_head", "layers.{i}.self_attn.gate_bias"),), buffers=LLAMA.buffers)

FAMILIES = (
    # output_router_logits only returns the router's logits: AfmoeForCausalLM adds no load-balancing loss
    Family("afmoe", "AFMoE", _afmoe, AFMOE, TRAINING_ONLY | {"output_router_logits"}),
    Family("mellum", "Mellum", _mellum, MELLUM, MOE_TRAINING_ONLY, unread=_MTP_UNREAD, aux_loss=True),
    Family("laguna", "Laguna", _laguna, LAGUNA, MOE_TRAINING_ONLY, aux_loss=True),
    # output_router_logits only returns the router's logits: MiMoV2FlashForCausalLM adds no load-balancing loss
    # output_router_logits only returns the router's logits: BeamForCausalLM adds no load-balancing loss
    Family("beam", "Beam", _beam, BEAM, TRAINING_ONLY | {"output_router_logits"}),
    Family("mimo_v2_flash", "MiMo-V2-Flash", _mimo_v2_flash, MIMO_V2_FLASH, TRAINING_ONLY | {"output_router_logits"}),
)
