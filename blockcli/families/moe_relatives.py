"""Mixtures of experts that are each a small diff of a family blockcli already reads, as transformers' modular_*.py
writes them: HunYuan MoE (HunYuan dense's attention), ERNIE 4.5 MoE (ERNIE 4.5's attention).

- HunYuan MoE (Hunyuan-A13B): HunYuan dense's block (q/k RMSNorm per head after RoPE, NTK-alpha RoPE) whose MLP is
  a shared SwiGLU MLP of `intermediate_size` beside `num_experts` routed experts as wide (Mixtral's experts read
  intermediate_size): softmax, the top `moe_topk`, always renormalised.
- ERNIE 4.5 MoE (ERNIE-4.5-21B-A3B, 300B-A47B): ERNIE 4.5's interleaved RoPE with Llama's attention (head_dim
  hidden_size / heads), an MLP of intermediate_size on the layers before `moe_layer_start_index` (and off the
  `moe_layer_interval`), and elsewhere a softmax mixture chosen with a selection bias (its
  `moe_statics.e_score_correction_bias`, a (1, E) parameter never trained) beside shared experts.
- Cohere 2 MoE: Cohere 2's parallel block (one norm read by attention and the MLP side by side, interleaved RoPE on
  the windowed layers only, scaled logits), its norm an RMSNorm when `rms_norm_eps` is set, with a mixture of
  intermediate_size-wide experts on the `mlp_layer_types` "sparse" layers: the top k logits softmaxed (or their
  sigmoids, renormalised by `norm_topk_prob`), shared experts summed in.
- PhiMoE (Phi-3.5-MoE): Mixtral's block with LayerNorms (weight and bias), `attention_bias` on q/k/v/o, an optional
  LM head bias, and sparsemixer routing as transformers runs it in eval mode (`order: sparsemixer`); its
  training-time sampling and jitter are not modelled (blockcli's `train` routes as in eval).
- Solar Open (Upstage): GLM-4.5's mixture (DeepSeek-V3's routing) on every layer behind Llama's attention (q/k/v
  biases by `attention_bias`, none on o_proj, no q/k norms, RoPE over the whole head), head width 128.
- HY V3 (Hy3-preview, Tencent): Apertus' attention (Llama's with per-head q/k RMSNorm before RoPE) in DeepSeek-V3's
  layer, MiniMax-M2's mixture on the "sparse" layers of `mlp_layer_types` (the first dense by default): sigmoid
  scores, a selection bias (a buffer) for the choice, the top k renormalised, times `router_scaling_factor`, beside
  `num_shared_experts` shared experts as one MLP of moe_intermediate_size · num_shared_experts.
- EXAONE MoE: EXAONE 4.0's attention (per-head q/k RMSNorm, RoPE on the windowed layers only) in OLMoE's pre-norm
  layer, with DeepSeek-V3's mixture on the "sparse" layers of `mlp_layer_types`.
"""

from __future__ import annotations

from dataclasses import replace

from blockcli.families.cohere import cohere_block
from blockcli.families.deepseek import GLM4_MOE
from blockcli.families.common import (TRAINING_ONLY, Family, bias_groups, first_of, gated_rms, layer_types,
                                      override_layers, refuse_nulls, silu_gate, sliding_layers, window_by_key, with_data)
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA, LLAMA_MLP, theta_default
from blockcli.families.llama_relatives import HUNYUAN, _renamed, hunyuan_dense
from blockcli.families.moe import MIXTRAL, MOE_TRAINING_ONLY, moe_tensors
from blockcli.tensor_names import LINEAR, ROW, TensorMap, tensor


def _per_layer_refused(f: Fields, key: str, default: int) -> int:
    """HunYuan's `num_experts` and `moe_topk` may be per-layer arrays; blockcli's layers share one mixture."""
    if isinstance(f.data.get(key), list):
        raise f.unrepresentable(key, f.data[key], "a per-layer array: blockcli's mixture layers share one expert "
                                                  "count and top-k (give one integer)")
    return f.int(key, default)


def _hunyuan_moe(f: Fields) -> tuple[dict, dict]:
    """HunYuan MoE: HunYuan dense's block with HunYuanMoEV1Moe on every layer: a shared SwiGLU MLP (shared_mlp,
    intermediate_size, no biases) plus the routed experts (intermediate_size each), routed by a softmax over
    `num_experts` (1 by default), the top `moe_topk` (1) renormalised to sum 1."""
    block, model = hunyuan_dense(f)
    n_experts = _per_layer_refused(f, "num_experts", 1)
    top_k = _per_layer_refused(f, "moe_topk", 1)
    if top_k > n_experts:
        raise f.invalid("moe_topk", top_k, f"at most num_experts ({n_experts})")
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": block["d_ff"], "renormalize": True,
                    "d_shared": block["d_ff"]}
    return block, model


def _ernie_expert_layers(f: Fields, n_layers: int) -> list[int]:
    """Ernie4_5_MoeDecoderLayer's mixture layers: (i + 1) % moe_layer_interval == 0 and i from
    moe_layer_start_index (1) to moe_layer_end_index (-1: the last layer) inclusive."""
    interval = f.int("moe_layer_interval", 1)
    start = f.int("moe_layer_start_index", 1, minimum=0)
    end = f.int("moe_layer_end_index", -1, minimum=-1)
    end = n_layers - 1 if end == -1 else end
    return [i for i in range(n_layers) if (i + 1) % interval == 0 and start <= i <= end]


def _ernie4_5_moe(f: Fields) -> tuple[dict, dict]:
    """ERNIE 4.5 MoE: Llama's pre-norm block (GQA 20/4, head_dim hidden_size / heads) with ERNIE 4.5's RoPE on
    interleaved pairs (base 500,000 by default) and, on its expert layers, Ernie4_5_MoeSparseMoeBlock: a softmax over
    `moe_num_experts` (64), the top `moe_k` (6) chosen by the scores plus the selection bias and renormalised (the
    sum clamped below at `moe_norm_min`, which binds only above k/E), and `moe_num_shared_experts` (2) shared
    experts as one SwiGLU MLP moe_intermediate_size × that wide. `use_bias` puts a bias on every projection, the
    shared experts' and the LM head's, but not on the routed experts: blockcli's bias.mlp would give them one, so
    use_bias is read only for a model with no expert layer."""
    bias = f.bool("use_bias", False)
    block, model = gated_rms(f, silu_gate, kv_default=4, tie_default=True, qkv_bias=bias, out_bias=bias,
                             mlp_bias=bias, eps_default=1e-5)
    block["rope_layout"] = "interleaved"
    theta_default(f, block, 500000.0)  # Ernie4_5_MoeConfig.default_theta
    model["lm_head_bias"] = bias
    experts = _ernie_expert_layers(f, model["n_layers"])
    n_experts = first_of(f, ("moe_num_experts", "num_experts"), lambda key: f.int(key), 64)
    top_k = first_of(f, ("moe_k", "num_experts_per_tok"), lambda key: f.int(key), 6)
    shared = f.int("moe_num_shared_experts", 2, minimum=0)
    d_expert = f.int("moe_intermediate_size", 1536)
    floor = f.float("moe_norm_min", 1e-12, low=0.0, high=1e6, low_open=False)
    if not experts:
        return block, model
    if bias:
        raise f.unrepresentable("use_bias", True, "ERNIE 4.5 MoE's routed experts have no biases while its other "
                                                  "projections would; blockcli's bias.mlp gives the experts one too")
    if top_k > n_experts:
        raise f.invalid("moe_k", top_k, f"at most moe_num_experts ({n_experts})")
    if floor > top_k / n_experts:  # the k largest of E probabilities summing to 1 sum to at least k/E
        raise f.unrepresentable("moe_norm_min", floor, f"it would clamp the top {top_k} weights' sum, which blockcli's "
                                                       f"renormalisation does not (it binds only above k/E)")
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": d_expert, "renormalize": True,
                    "selection_bias": True, "selection_bias_frozen": True,
                    **({"d_shared": d_expert * shared} if shared else {})}
    dense = [i for i in range(model["n_layers"]) if i not in experts]
    if dense:
        f.layers.append({"indices": dense, "block": {"moe": None}})
    return block, model


def _cohere2_moe(f: Fields) -> tuple[dict, dict]:
    """Cohere 2 MoE: Cohere 2's block (head_dim 128 by default) with, on the "sparse" layers of `mlp_layer_types`,
    Cohere2MoeSparseMoeBlock: `num_experts` (8) experts of intermediate_size; `expert_selection_fn` softmax
    softmaxes the top `num_experts_per_tok` (2) logits (`order: topk_softmax`), sigmoid takes their sigmoids,
    renormalised if `norm_topk_prob`; `num_shared_experts` shared experts as one MLP that many times as wide, summed
    in (`shared_expert_combination_strategy` sum; its default, average, halves the sum: refused when there is a
    shared expert). The "dense" layers an MLP of `prefix_dense_intermediate_size` (default intermediate_size).
    Layer types: `layer_types`, or the first `first_k_dense_replace` layers windowed by
    `prefix_dense_sliding_window_pattern` and the rest by `sliding_window_pattern` (all but every 4th); a layer
    rotates when it is windowed (and a window is set), or is dense with a prefix pattern of 1."""
    if f.data.get("head_dim") is None:  # Cohere2MoeConfig.head_dim: 128, not hidden_size / heads
        f.ignore("head_dim")
        f = with_data(f, {**f.data, "head_dim": 128})
    params = f.data.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params and f.has("rope_theta"):
        # Cohere2MoeConfig keeps a rope_theta of its own (10000 by default) beside rope_parameters and saves both;
        # its rotary embedding reads rope_parameters' alone
        f.ignore("rope_theta")
        f = with_data(f, {k: v for k, v in f.data.items() if k != "rope_theta"})
    rms_eps = f.raw("rms_norm_eps", None)
    block, model = cohere_block(f, theta_default=10000.0)
    if rms_eps is not None:  # Cohere2MoeRMSNorm in place of the shift-free LayerNorm; layer_norm_eps then unread
        block.update(norm="rmsnorm", norm_eps=f.float("rms_norm_eps", low=0.0, high=1.0))
    n = model["n_layers"]
    first_k = f.int("first_k_dense_replace", 0, minimum=0)  # a published config's key, read by __post_init__
    prefix = f.int("prefix_dense_sliding_window_pattern", 1)
    sliding = layer_types(f, n)
    pattern = f.int("sliding_window_pattern", 4)
    if sliding is None:
        sliding = [bool((i + 1) % prefix) for i in range(min(first_k, n))] + [
            bool((i + 1) % pattern) for i in range(n - min(first_k, n))]
    kinds = f.raw("mlp_layer_types", None)
    if kinds is None:
        kinds = ["dense" if i < first_k else "sparse" for i in range(n)]
    elif not isinstance(kinds, list) or len(kinds) != n or any(k not in ("dense", "sparse") for k in kinds):
        raise f.invalid("mlp_layer_types", kinds, f"an array of {n} layer kinds, dense or sparse")
    window_on = f.data.get("sliding_window", 4096) is not None  # a null window: no layer slides, nor rotates
    windowed = [kind and window_on for kind in sliding]
    sliding_layers(f, block, windowed, default=4096)
    override_layers(f, [i for i in range(n) if not (windowed[i] or (kinds[i] == "dense" and prefix == 1))],
                    {"rope": False})
    dense = [i for i in range(n) if kinds[i] == "dense"]
    d_dense = f.int("prefix_dense_intermediate_size", block["d_ff"])
    selection = f.str("expert_selection_fn", "softmax")
    renormalize = f.bool("norm_topk_prob", True)
    shared = f.int("num_shared_experts", 0, minimum=0)
    combination = f.str("shared_expert_combination_strategy", "average")
    n_experts, top_k = f.int("num_experts", 8), f.int("num_experts_per_tok", 2)
    if len(dense) == n:
        block["d_ff"] = d_dense
        return block, model
    if selection not in ("softmax", "sigmoid"):
        raise f.invalid("expert_selection_fn", selection, "softmax or sigmoid")
    if shared and combination != "sum":
        raise f.unrepresentable("shared_expert_combination_strategy", combination, "the shared experts' output and "
                                "the routed experts' averaged: blockcli sums them (only 'sum' is representable)")
    if top_k > n_experts:
        raise f.invalid("num_experts_per_tok", top_k, f"at most num_experts ({n_experts})")
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": block["d_ff"],
                    **({"order": "topk_softmax"} if selection == "softmax" else
                       {"scoring": "sigmoid", "renormalize": renormalize}),
                    **({"d_shared": block["d_ff"] * shared} if shared else {})}
    if dense:
        override_layers(f, dense, {"moe": None, "d_ff": d_dense})
    return block, model


def _phimoe(f: Fields) -> tuple[dict, dict]:
    """PhiMoE: Mixtral's attention (8 K/V heads, RoPE base 1e6 by default, a window only when `sliding_window` is
    set; `attention_bias` on q/k/v/o), nn.LayerNorm with a bias everywhere (eps `rms_norm_eps`), `lm_head_bias`,
    and on every layer `num_local_experts` (16) SwiGLU experts of intermediate_size routed by sparsemixer: in eval
    mode two stages, each the best logit left weighted by the softmax over the experts left within a relative
    margin 2·`router_jitter_noise` of it. It always picks 2 (its code returns two whatever num_experts_per_tok
    says). Training-time sampling and `input_jitter_noise` act in training only."""
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False, mlp_bias=False, eps_default=1e-5)
    theta_default(f, block, 1e6)  # PhimoeConfig.default_theta
    window_by_key(f, block, default=None)
    attention = f.bool("attention_bias", False)
    block.update(norm="layernorm", bias=bias_groups(attention, attention, False, True))
    model["lm_head_bias"] = f.bool("lm_head_bias", False)
    top_k = f.int("num_experts_per_tok", 2)
    if top_k != 2:
        raise f.unrepresentable("num_experts_per_tok", top_k, "PhiMoE's sparsemixer always chooses 2 experts")
    block["moe"] = {"n_experts": f.int("num_local_experts", 16), "top_k": 2, "d_expert": block["d_ff"],
                    "order": "sparsemixer",
                    "sparsemixer_eps": f.float("router_jitter_noise", 0.01, low=0.0, high=1e6, low_open=False)}
    if block["moe"]["n_experts"] < 2:
        raise f.invalid("num_local_experts", block["moe"]["n_experts"], "at least 2 (sparsemixer chooses 2)")
    return block, model


def _solar_open(f: Fields) -> tuple[dict, dict]:
    """Solar Open: SolarOpenDecoderLayer is Llama's (GQA 64/8 of 128, RoPE base 1e6 by default, RMSNorm eps 1e-5;
    `attention_bias` on q/k/v, o_proj without) with Glm4MoeMoE on every layer: `n_routed_experts` (128) experts of
    `moe_intermediate_size` (1280), sigmoid scores with the selection bias for the choice, `n_group` groups by their
    top-two sums (the best `topk_group`), the top `num_experts_per_tok` (8) renormalised per `norm_topk_prob`, times
    `routed_scaling_factor`, `n_shared_experts` shared experts. SolarOpenConfig has no intermediate_size (every
    layer a mixture): one in a config.json is not read, with a note. Its RoPE rotates the whole head (a
    partial_rotary_factor would make transformers' Llama rotation fail): refused."""
    f.ignore("output_router_logits")  # only returns the router's logits: Glm4MoeForCausalLM adds no loss
    d_expert = f.int("moe_intermediate_size", 1280)
    if f.has("intermediate_size"):
        f.notes.append("intermediate_size is not read: every Solar Open layer is a mixture of experts")
    g = with_data(f, {**f.data, "intermediate_size": d_expert})
    block, model = gated_rms(g, silu_gate, kv_default=8, tie_default=False, head_dim_default=128, out_bias=False,
                             mlp_bias=False, eps_default=1e-5)
    if block["rope"] is not True:
        raise f.unrepresentable("rope_parameters.partial_rotary_factor", block["rope"], "Solar Open's attention "
                                "rotates the whole head (transformers fails on a partial rotation)")
    theta_default(f, block, 1e6)  # SolarOpenConfig.default_theta
    top_k = first_of(f, ("num_experts_per_tok",), lambda key: f.int(key), 8)
    n_experts = first_of(f, ("n_routed_experts", "num_local_experts"), lambda key: f.int(key), 128)
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": d_expert,
                    "routed_scaling": f.float("routed_scaling_factor", 1.0, high=1e6),
                    "d_shared": d_expert * f.int("n_shared_experts", 1, minimum=0), "scoring": "sigmoid",
                    "selection_bias": True, "group_score": "top2_sum", "renormalize": f.bool("norm_topk_prob", True),
                    "n_groups": f.int("n_group", 1), "top_groups": f.int("topk_group", 1)}
    return block, model


def _hy_v3(f: Fields) -> tuple[dict, dict]:
    """HY V3: Llama's attention (GQA 64/8 of 128, `attention_bias` on q/k/v/o, RoPE base 11,158,840 by default) with
    per-head q/k RMSNorm before RoPE; the "dense" layers of `mlp_layer_types` an MLP of intermediate_size (biased by
    `mlp_bias`), the "sparse" ones `num_experts` (192) experts of `moe_intermediate_size` (1536, never biased), sigmoid
    scores with the selection bias for the choice, the top `num_experts_per_tok` (8) renormalised, times
    `router_scaling_factor` (2.826), plus the shared experts (biased by `mlp_bias`), one MLP of
    moe_intermediate_size · `num_shared_experts` (1) — none of them, 0, falls back to intermediate_size, as HYV3MLP's
    `intermediate_size or config.intermediate_size` does. `enable_moe_fp32_combine` only rounds the sum of the two in
    float32 under a half-precision dtype: no number blockcli computes changes."""
    refuse_nulls(f, "num_experts", "num_local_experts", "num_experts_per_tok", "num_shared_experts", "head_dim")
    f.ignore("enable_moe_fp32_combine")  # the shared and routed outputs summed in float32: blockcli's dtype already is
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False, head_dim_default=128, eps_default=1e-5)
    theta_default(f, block, 11_158_840.0)  # HYV3Config.default_theta
    block["qk_norm"] = "head"
    n = model["n_layers"]
    kinds = f.raw("mlp_layer_types", None)
    if kinds is None:
        kinds = ["dense"] * min(n, 1) + ["sparse"] * (n - 1)
    elif not isinstance(kinds, list) or len(kinds) != n or any(k not in ("dense", "sparse") for k in kinds):
        raise f.invalid("mlp_layer_types", kinds, f"an array of {n} layer kinds, dense or sparse")
    n_experts = first_of(f, ("num_experts", "num_local_experts"), lambda key: f.int(key), 192)
    top_k, d_expert = f.int("num_experts_per_tok", 8), f.int("moe_intermediate_size", 1536)
    shared = f.int("num_shared_experts", 1, minimum=0)
    scaling = f.float("router_scaling_factor", 2.826, high=1e6)
    if all(kind == "dense" for kind in kinds):  # every layer dense: the expert settings are unused
        return block, model
    if top_k > n_experts:
        raise f.invalid("num_experts_per_tok", top_k, f"at most num_experts ({n_experts})")
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": d_expert, "scoring": "sigmoid",
                    "selection_bias": True, "renormalize": True, "routed_scaling": scaling,
                    "d_shared": d_expert * shared or block["d_ff"], "routed_bias": False}
    dense = [i for i in range(n) if kinds[i] == "dense"]
    if dense:
        override_layers(f, dense, {"moe": None})
    return block, model


def _exaone_moe(f: Fields) -> tuple[dict, dict]:
    """EXAONE MoE: Llama's pre-norm layer (OlmoeDecoderLayer; 32 heads, each its own K/V by default) with EXAONE 4.0's
    per-head q/k RMSNorm and hybrid attention: layers windowed (4,096) by `layer_types`, or all but every
    `sliding_window_pattern`-th (an integer: ExaoneMoeConfig's layer types fail on a string or a null window), the
    global ones without positions. The "sparse" layers of `mlp_layer_types` (by default all from
    `first_k_dense_replace`, 1) DeepSeek-V3's mixture: `num_experts` (64) of `moe_intermediate_size` (1024), sigmoid
    scores and the selection bias for the choice, `n_group` groups, top `num_experts_per_tok` (8) renormalised per
    `norm_topk_prob`, times `routed_scaling_factor` (2.5), `num_shared_experts` (1) shared; the others an MLP of
    intermediate_size."""
    f.ignore("output_router_logits")  # only returns the router's logits: no load-balancing loss is added
    block, model = gated_rms(f, silu_gate, kv_default=32, tie_default=False, qkv_bias=False, out_bias=False,
                             mlp_bias=False, eps_default=1e-5)
    block["qk_norm"] = "head"
    n = model["n_layers"]
    if f.has("sliding_window") and f.data["sliding_window"] is None:
        raise f.invalid("sliding_window", None, "a window size (ExaoneMoeConfig fails on null)")
    sliding = layer_types(f, n)
    if sliding is None:
        pattern = f.int("sliding_window_pattern", 4)
        sliding = [bool((i + 1) % pattern) for i in range(n)]
    else:
        f.ignore("sliding_window_pattern")
    sliding_layers(f, block, sliding, default=4096)
    override_layers(f, [i for i in range(n) if not sliding[i]], {"rope": False})
    first_k = f.int("first_k_dense_replace", 1, minimum=0)
    kinds = f.raw("mlp_layer_types", None)
    if kinds is None:
        kinds = ["dense" if i < first_k else "sparse" for i in range(n)]
    elif not isinstance(kinds, list) or len(kinds) != n or any(k not in ("dense", "sparse") for k in kinds):
        raise f.invalid("mlp_layer_types", kinds, f"an array of {n} layer kinds, dense or sparse")
    d_expert = f.int("moe_intermediate_size", 1024)
    moe = {"n_experts": f.int("num_experts", 64), "top_k": f.int("num_experts_per_tok", 8), "d_expert": d_expert,
           "routed_scaling": f.float("routed_scaling_factor", 2.5, high=1e6),
           "d_shared": d_expert * f.int("num_shared_experts", 1, minimum=0), "scoring": "sigmoid",
           "selection_bias": True, "group_score": "top2_sum", "renormalize": f.bool("norm_topk_prob", True),
           "n_groups": f.int("n_group", 1), "top_groups": f.int("topk_group", 1)}
    dense = [i for i in range(n) if kinds[i] == "dense"]
    if len(dense) < n:
        block["moe"] = {k: v for k, v in moe.items() if k != "d_shared" or v}
        if dense:
            override_layers(f, dense, {"moe": None})
    return block, model


# HunYuan dense's attention (query_layernorm, key_layernorm); mlp.gate.wg the router, the experts per expert
# (save_pretrained's layout) or fused (transformers 5's), mlp.shared_mlp the shared expert
_HUNYUAN_ATTENTION = tuple(t for t in HUNYUAN.tensors if ".mlp." not in t.name)
HUNYUAN_MOE = TensorMap("model.", _HUNYUAN_ATTENTION + moe_tensors(
    "layers.{i}.mlp.gate.wg", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"),
    "layers.{i}.mlp.experts") + tuple(
    tensor(f"blocks.{{i}}.shared_w_{role}", f"layers.{{i}}.mlp.shared_mlp.{role}_proj.weight", LINEAR)
    for role in ("gate", "up", "down")), buffers=HUNYUAN.buffers)

# ERNIE 4.5 MoE: Llama's attention and dense MLP (with use_bias' biases), mlp.gate the router, the experts per expert
# or fused, mlp.shared_experts the shared experts, and the selection bias (1, E) under mlp.moe_statics (as
# save_pretrained writes it) or mlp.gate.moe_statics (as transformers 5 holds it); the LM head's bias
ERNIE4_5_MOE = TensorMap("model.", tuple(t for t in LLAMA.tensors if t not in LLAMA_MLP) + moe_tensors(
    "layers.{i}.mlp.gate", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"),
    "layers.{i}.mlp.experts") + tuple(
    tensor(f"blocks.{{i}}.shared_{kind}_{role}", f"layers.{{i}}.mlp.shared_experts.{role}_proj.{name}", layout)
    for role in ("gate", "up", "down") for kind, name, layout in (("w", "weight", LINEAR), ("b", "bias", "same"))) + (
    tensor("blocks.{i}.router_bias", "layers.{i}.mlp.moe_statics.e_score_correction_bias|"
                                     "layers.{i}.mlp.gate.moe_statics.e_score_correction_bias", ROW),
    *LLAMA_MLP,  # the dense layers' MLP
    tensor("lm_head_bias", "lm_head.bias", top=True),
), buffers=LLAMA.buffers)

# Cohere 2 MoE: Cohere's names (Llama's, with no post_attention_layernorm), mlp.gate the router, the experts per
# expert or fused, mlp.shared_experts the shared experts, mlp.gate_proj … the dense layers' MLP
COHERE2_MOE = TensorMap("model.", tuple(t for t in LLAMA.tensors if t not in LLAMA_MLP) + moe_tensors(
    "layers.{i}.mlp.gate", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"),
    "layers.{i}.mlp.experts") + tuple(
    tensor(f"blocks.{{i}}.shared_w_{role}", f"layers.{{i}}.mlp.shared_experts.{role}_proj.weight", LINEAR)
    for role in ("gate", "up", "down")) + LLAMA_MLP, buffers=LLAMA.buffers)

# PhiMoE: Mixtral's names (block_sparse_moe.gate and experts w1/w3/w2 as save_pretrained writes them, or transformers
# 5's mlp.router and fused mlp.experts), each LayerNorm's bias and the LM head's
PHIMOE = TensorMap("model.", tuple(
    tensor(" ".join(t.keys), t.name + "|layers.{i}.mlp.router.weight", t.layout) if t.keys == ("blocks.{i}.router",)
    else t for t in MIXTRAL.tensors) + (
    tensor("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    tensor("blocks.{i}.ln2_beta", "layers.{i}.post_attention_layernorm.bias"),
    tensor("ln_f_beta", "norm.bias"),
    tensor("lm_head_bias", "lm_head.bias", top=True),
), buffers=MIXTRAL.buffers)

# Solar Open: GLM-4.5's names (Llama's, DeepSeek's expert layers); no multi-token-prediction layers to set aside
SOLAR_OPEN = replace(GLM4_MOE, extra_layers="")

# EXAONE MoE: GLM-4.5's names (Llama's with q/k norms, DeepSeek's expert layers), its selection bias under the
# mixture (mlp.e_score_correction_bias, as save_pretrained writes it) or its router (as transformers 5 holds it)
EXAONE_MOE = TensorMap("model.", tuple(
    tensor(" ".join(t.keys), "layers.{i}.mlp.e_score_correction_bias|" + t.name, t.layout)
    if t.keys == ("blocks.{i}.router_bias",) else t for t in GLM4_MOE.tensors), buffers=GLM4_MOE.buffers)

# HY V3: Llama's names with q/k norms (and biases), the router mlp.gate (published: mlp.router.gate), its selection bias
# mlp.e_score_correction_bias (published: mlp.expert_bias; a buffer), the experts per expert or fused, the shared experts
# mlp.shared_experts (published: mlp.shared_mlp) with their biases, Llama's MLP on the dense layers; the published
# checkpoints' multi-token-prediction layer, stored past the last, set aside
HY_V3 = TensorMap("model.", tuple(t for t in LLAMA.tensors if t not in LLAMA_MLP) + (
    tensor("blocks.{i}.router", "layers.{i}.mlp.gate.weight|layers.{i}.mlp.router.gate.weight", LINEAR),
    *moe_tensors("layers.{i}.mlp.gate", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"),
                 "layers.{i}.mlp.experts")[1:],
    tensor("blocks.{i}.router_bias", "layers.{i}.mlp.e_score_correction_bias|layers.{i}.mlp.expert_bias"),
    *(tensor(f"blocks.{{i}}.shared_{kind}_{role}", f"layers.{{i}}.mlp.shared_experts.{role}_proj.{name}|"
                                                   f"layers.{{i}}.mlp.shared_mlp.{role}_proj.{name}", layout)
      for role in ("gate", "up", "down") for kind, name, layout in (("w", "weight", LINEAR), ("b", "bias", "same"))),
    *LLAMA_MLP,  # the dense layers' MLP
), buffers=LLAMA.buffers + ("layers.{i}.mlp.e_score_correction_bias", "layers.{i}.mlp.expert_bias"),
    extra_layers="multi-token-prediction")

FAMILIES = (
    Family("exaone_moe", "EXAONE MoE", _exaone_moe, EXAONE_MOE, TRAINING_ONLY),
    # output_router_logits only returns the router's logits: HYV3ForCausalLM adds no load-balancing loss
    Family("hy_v3", "HY V3", _hy_v3, HY_V3, TRAINING_ONLY | {"output_router_logits"}),
    Family("solar_open", "Solar Open", _solar_open, SOLAR_OPEN, TRAINING_ONLY),
    Family("phimoe", "PhiMoE", _phimoe, PHIMOE, MOE_TRAINING_ONLY | {"input_jitter_noise"}, aux_loss=True),
    # output_router_logits only returns the router's logits: Cohere2MoeForCausalLM adds no load-balancing loss
    Family("cohere2_moe", "Cohere 2 MoE", _cohere2_moe, COHERE2_MOE, TRAINING_ONLY | {"output_router_logits"}),
    Family("ernie4_5_moe", "ERNIE 4.5 MoE", _ernie4_5_moe, ERNIE4_5_MOE, MOE_TRAINING_ONLY, aux_loss=True),
    # output_router_logits only returns the router's logits: HunYuanMoEV1ForCausalLM adds no load-balancing loss
    Family("hunyuan_v1_moe", "HunYuan MoE", _hunyuan_moe, HUNYUAN_MOE,
           TRAINING_ONLY | {"output_router_logits"}),
)


def _kolibri1(f: Fields) -> tuple[dict, dict]:
    """Kolibri-1 (Kolibri1Config, a Qwen3MoeConfig): EXAONE 4.0's attention (per-head q/k RMSNorm; windowed layers
    by `layer_types`, by default all but every fifth, window 513, the global ones without positions while a window
    is set) in GLM-4's layer of four norms (`placement: sandwich`), and on every layer a mixture: top
    `num_experts_per_tok` (6) of `num_experts` (384; its second spelling num_local_experts) by the logits plus the
    selection bias (`moe.selection_on: logits`), the weights the chosen logits' sigmoids, renormalised per
    `norm_topk_prob` (false), no routed scaling, beside a shared SwiGLU expert `shared_expert_intermediate_size`
    (512) wide. Kolibri1Config has no intermediate_size (no dense MLP), attention_bias, use_sliding_window,
    mlp_only_layers, decoder_sparse_step nor router_aux_loss_coef: each is refused as not its field."""
    f.ignore("output_router_logits")  # Kolibri1ForCausalLM (DeepSeek-V3's) adds no load-balancing loss
    if f.has("intermediate_size"):
        raise f.unrepresentable("intermediate_size", f.data["intermediate_size"], "not a field of Kolibri1Config "
                                "(it has no dense MLP: moe_intermediate_size and shared_expert_intermediate_size)")
    g = _renamed(f, {"num_experts": "num_local_experts"})
    d_expert = g.int("moe_intermediate_size", 512)
    # no dense MLP anywhere: the block's d_ff is the experts' width, read by nothing
    block, model = gated_rms(with_data(g, {**g.data, "intermediate_size": d_expert}), silu_gate, kv_default=4,
                             tie_default=False, head_dim_default=128, qkv_bias=False, out_bias=False,
                             mlp_bias=False, eps_default=1e-6)
    block.update(placement="sandwich", qk_norm="head")
    n = model["n_layers"]
    window_set = g.data.get("sliding_window") is not None if g.has("sliding_window") else True  # default 513
    sliding = layer_types(g, n)
    if sliding is None:
        sliding = [bool((i + 1) % 5) for i in range(n)]
    if any(sliding) and not window_set:
        raise g.invalid("sliding_window", None, "a window size: layer_types has sliding layers (Kolibri1Config "
                                                "fails without one)")
    sliding_layers(g, block, sliding, default=513)
    if window_set:  # Kolibri1Attention rotates only without a window or in a sliding layer
        override_layers(g, [i for i, kind in enumerate(sliding) if not kind], {"rope": False})
    shared = g.int("shared_expert_intermediate_size", 512, minimum=0)
    block["moe"] = {"n_experts": g.int("num_local_experts", 384), "top_k": g.int("num_experts_per_tok", 6),
                    "d_expert": d_expert, "scoring": "sigmoid", "selection_bias": True, "selection_on": "logits",
                    "renormalize": g.bool("norm_topk_prob", False), **({"d_shared": shared} if shared else {})}
    return block, model


def _either(published: str, loaded: str) -> str:
    """A tensor under its published (and save_pretrained's) name or transformers' in-memory one."""
    return f"layers.{{i}}.{published}|layers.{{i}}.{loaded}"


# Kolibri-1: Qwen3's attention names, GLM-4's sandwich norms and DeepSeek's expert layers, its published names
# (post_attn_norm, post_ffn_norm, moe.router.expert_bias; save_pretrained writes them back) beside transformers'
KOLIBRI1 = TensorMap("model.", tuple(
    t for t in GLM4_MOE.tensors if t.keys != ("blocks.{i}.router_bias",) and not t.keys[0].startswith(
        ("blocks.{i}.w_gate", "blocks.{i}.w_up", "blocks.{i}.w_down", "blocks.{i}.b_"))) + (
    tensor("blocks.{i}.ln1_post_gamma", _either("post_attn_norm.weight", "post_self_attn_layernorm.weight")),
    tensor("blocks.{i}.ln2_post_gamma", _either("post_ffn_norm.weight", "post_mlp_layernorm.weight")),
    tensor("blocks.{i}.router_bias", _either("moe.router.expert_bias", "mlp.gate.e_score_correction_bias")),
), buffers=GLM4_MOE.buffers)

FAMILIES += (Family("kolibri1", "Kolibri-1", _kolibri1, KOLIBRI1, TRAINING_ONLY),)
