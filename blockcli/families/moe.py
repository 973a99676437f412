"""The mixture-of-experts families: Mixtral, Qwen2-MoE (Qwen1.5-MoE), Qwen3-MoE, Qwen3-VL-MoE's language model and
OLMoE (Qwen-MoE's tensor names, OLMo 2's q/k norms over the whole projection), FlexOlmo (OLMo 2's block with
OLMoE's mixture), MiniMax-M2, Granite MoE (and its shared-expert variant), DBRX (LayerNorms without a bias, a
fused Wqkv clamped by clip_qkv, GQA, experts in 2-D stacks; its fields nested in attn_config and ffn_config).

Each is a Llama-like `gated_rms` block whose MLP is `block.moe`: softmax router scores, top-k
(`num_experts_per_tok` of `num_local_experts` / `num_experts`), renormalised always (Mixtral) or per
`norm_topk_prob`; Qwen2-MoE adds its shared expert (`shared_expert_intermediate_size`) times
sigmoid(x·shared_expert_gate). Qwen-MoE's dense layers (`mlp_only_layers`, and every layer but each
`decoder_sparse_step`-th) are per-layer overrides `moe: null`, an MLP of `intermediate_size`.

Checkpoint tensors: per expert as `save_pretrained` writes them (Mixtral's
`block_sparse_moe.experts.{e}.w1/w3/w2`, Qwen's `mlp.experts.{e}.gate_proj/up_proj/down_proj`), or fused
3-D (E, …) as transformers 5 holds them (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`; written by
`save_pretrained(save_original_format=False)`): the EXPERTS layout of blockcli/tensor_names.py.
"""

from __future__ import annotations

from blockcli.families.common import (TRAINING_ONLY, Composite, Family, apply_window, bias_groups, divides, first_of,
                                      gated_rms, layer_types, mlp_activation, model_section, override_layers,
                                      refuse_nulls, rope_base, rotating, silu_gate, sliding_layers, window_by_key,
                                      with_data)
from blockcli.families.fields import COMMON_IGNORED, COMMON_NEUTRAL, Fields
from blockcli.families.llama import (LLAMA, LLAMA_MLP, OLMO2, QWEN_VL_PATHS, QWEN_VL_TOP, granite_scalars,
                                     read_clip_qkv, text_only_mrope, theta_default)
from blockcli.tensor_names import EXPERTS, EXPERTS_SIDE_BY_SIDE, FUSED, LINEAR, STACKED, Tensor, TensorMap, tensor

# the router's load-balancing loss (its coefficient, and whether the logits are returned for it): training only
MOE_TRAINING_ONLY = TRAINING_ONLY | {"output_router_logits", "router_aux_loss_coef"}


def _dense_layers(f: Fields, n_layers: int) -> list[int]:
    """Qwen-MoE's layers with a dense MLP, as its decoder layers choose: those in `mlp_only_layers`, and
    those where (i + 1) % decoder_sparse_step != 0 (indices past the last layer are never read)."""
    step = f.int("decoder_sparse_step", 1)
    only = f.raw("mlp_only_layers", [])
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise f.invalid("mlp_only_layers", only, "an array of layer indices")
    return [i for i in range(n_layers) if i in only or (i + 1) % step]


def _mixtral(f: Fields) -> tuple[dict, dict]:
    """Mixtral: Mistral's block (GQA, RMSNorm, RoPE θ 1e6 by default, a window only if `sliding_window`
    is set) with a SwiGLU mixture of experts: softmax over `num_local_experts`, top `num_experts_per_tok`,
    the k weights renormalised (MixtralTopKRouter always divides by their sum)."""
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False, qkv_bias=False, out_bias=False,
                             mlp_bias=False, eps_default=1e-5)
    params = f.data.get("rope_parameters")
    if f.data.get("rope_theta") is None and not (isinstance(params, dict) and params.get("rope_theta") is not None):
        block["rope_theta"] = 1e6  # MixtralConfig.default_theta
    window_by_key(f, block, default=None)
    block["moe"] = {"n_experts": f.int("num_local_experts", 8), "top_k": f.int("num_experts_per_tok", 2),
                    "d_expert": block["d_ff"], "renormalize": True}
    return block, model


def _qwen_moe(f: Fields, block: dict, model: dict, d_expert_default: int, top_k_default: int,
              experts_default: int) -> None:
    """The mixture of Qwen-MoE's expert layers; its dense layers (intermediate_size wide, block.d_ff) are
    per-layer overrides `moe: null`, and a config with no expert layer is a dense block."""
    # transformers 5 writes Qwen3-MoE's num_experts as num_local_experts (its attribute_map)
    n_experts = first_of(f, ("num_experts", "num_local_experts"), lambda key: f.int(key), experts_default)
    block["moe"] = {"n_experts": n_experts,
                    "top_k": f.int("num_experts_per_tok", top_k_default),
                    "d_expert": f.int("moe_intermediate_size", d_expert_default),
                    "renormalize": f.bool("norm_topk_prob", False)}
    dense = _dense_layers(f, model["n_layers"])
    if len(dense) == model["n_layers"]:  # every layer dense: the expert settings are unused
        del block["moe"]
    elif dense:
        f.layers.append({"indices": dense, "block": {"moe": None}})


def _qwen2_moe(f: Fields) -> tuple[dict, dict]:
    """Qwen2-MoE (Qwen1.5-MoE): Qwen2's attention (q/k/v biases if `qkv_bias`, default true) and a mixture of
    experts with a shared expert gated by sigmoid(x·shared_expert_gate)."""
    block, model = gated_rms(f, silu_gate, kv_default=16, tie_default=False,
                             qkv_bias=f.bool("qkv_bias", True), out_bias=False, mlp_bias=False)
    if f.bool("use_sliding_window", False):
        raise f.unrepresentable("use_sliding_window", True, "Qwen2-MoE slides on alternate layers below "
                                                            "max_window_layers; blockcli's layers are all alike")
    f.ignore("sliding_window", "max_window_layers")  # read only when the window is on
    if any(layer_types(f, model["n_layers"]) or ()):
        raise f.unrepresentable("layer_types", f.data["layer_types"], "use_sliding_window is false, so "
                                                                     "transformers would not slide")
    _qwen_moe(f, block, model, 1408, 4, 60)
    if "moe" in block:
        block["moe"].update(d_shared=f.int("shared_expert_intermediate_size", 5632), shared_gate=True)
    else:  # every layer dense (decoder_sparse_step, mlp_only_layers): no shared expert either
        f.ignore("shared_expert_intermediate_size")
    return block, model


def _qwen3_moe(f: Fields) -> tuple[dict, dict]:
    """Qwen3-MoE: Qwen3's attention (q_norm and k_norm per head, `attention_bias` on q/k/v/o) and a mixture
    of experts without a shared one; `use_sliding_window` slides on every layer."""
    block, model = gated_rms(f, silu_gate, kv_default=4, tie_default=False, mlp_bias=False)
    block["qk_norm"] = "head"
    f.ignore("max_window_layers")  # Qwen3's field, written into Qwen3-MoE configs; Qwen3-MoE never reads it
    apply_window(f, block, f.bool("use_sliding_window", False), default=4096)
    _qwen_moe(f, block, model, 768, 8, 128)
    return block, model


def _flint(f: Fields) -> tuple[dict, dict]:
    """Flint: Qwen3-MoE's attention (per-head q/k RMSNorm, `attention_bias` on q/k/v/o, GQA 32/4 of 128) with a learned
    sink logit per head (`sinks`) on every layer, windows (513) on the `layer_types` sliding layers (by default all but
    the first two, every fourth from layer 1 and the last), RoPE on the sliding layers only (the global ones have no
    positions); the dense layers by `mlp_only_layers` ([0, 1]) and `decoder_sparse_step`, the others sigmoid scores
    without a selection bias, the top k renormalised per `norm_topk_prob` (true), plus an ungated shared expert of
    `shared_expert_intermediate_size` (1024)."""
    refuse_nulls(f, "head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "shared_expert_intermediate_size", "decoder_sparse_step")
    block, model = gated_rms(f, silu_gate, kv_default=4, tie_default=False, head_dim_default=128, mlp_bias=False,
                             eps_default=1e-6)
    block.update(qk_norm="head", attention_sinks=True)
    n = model["n_layers"]
    sliding = layer_types(f, n) or [not (i < 2 or i % 4 == 1 or i == n - 1) for i in range(n)]
    sliding_layers(f, block, sliding, default=513)
    override_layers(f, [i for i in range(n) if not sliding[i]], {"rope": False})  # global layers: no RoPE
    if f.data.get("mlp_only_layers") is None:  # FlintConfig.__post_init__'s [0, 1] for an absent or null list
        f = with_data(f, {**f.data, "mlp_only_layers": [0, 1]})
    n_experts, top_k = f.int("num_experts", 256, minimum=0), f.int("num_experts_per_tok", 6)
    d_expert, shared = f.int("moe_intermediate_size", 512), f.int("shared_expert_intermediate_size", 1024, minimum=0)
    renormalize = f.bool("norm_topk_prob", True)
    dense = _dense_layers(f, n)
    if not n_experts:  # Qwen3MoeDecoderLayer: without experts, no mixture
        dense = list(range(n))
    if len(dense) == n:
        return block, model
    if top_k > n_experts:
        raise f.invalid("num_experts_per_tok", top_k, f"at most num_experts ({n_experts})")
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": d_expert, "scoring": "sigmoid",
                    "renormalize": renormalize, **({"d_shared": shared} if shared else {})}
    if dense:
        override_layers(f, dense, {"moe": None})
    return block, model


def _qwen3_vl_moe_text(f: Fields) -> tuple[dict, dict]:
    """Qwen3-VL-MoE's language model (Qwen3VLMoeTextConfig): Qwen3-VL's attention (per-head q/k RMSNorm,
    interleaved M-RoPE, which text alone turns into RoPE; head_dim hidden_size / heads unless given, 16 K/V
    heads by default) and Qwen3-MoE's mixture, always renormalised (its router divides the top k by their sum;
    the config class has no norm_topk_prob), its dense layers by `mlp_only_layers` and `decoder_sparse_step`,
    intermediate_size wide."""
    refuse_nulls(f, "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "decoder_sparse_step", "num_key_value_heads")
    f, _ = text_only_mrope(f)
    # Qwen3VLMoeTextConfig sets sliding_window to null whatever the config says, and reads no norm_topk_prob
    for key, meant, why in (("sliding_window", None, "never slides"),
                            ("norm_topk_prob", True, "always renormalises the top k")):
        if f.data.get(key, meant) not in (None, meant):
            f.notes.append(f"{key} {f.data[key]!r} is not read: transformers' Qwen3-VL-MoE {why}")
        f.ignore(key)
    block, model = gated_rms(f, silu_gate, kv_default=16, tie_default=True, mlp_bias=False, eps_default=1e-6)
    block["qk_norm"] = "head"
    theta_default(f, block, 5e5)
    _qwen_moe(f, block, model, 1408, 4, 60)
    if "moe" in block:
        block["moe"]["renormalize"] = True
    return block, model


def _olmoe(f: Fields) -> tuple[dict, dict]:
    """OLMoE: Llama's pre-norm block with OLMo 2's q/k RMSNorm over the whole projection (before the heads
    are split and rotated), and a SwiGLU mixture on every layer: softmax over `num_experts`, the top
    `num_experts_per_tok`, renormalised if `norm_topk_prob` (default false); each expert intermediate_size wide."""
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, mlp_bias=False, eps_default=1e-5)
    block["qk_norm"] = "projection"
    read_clip_qkv(f, block)  # OlmoeAttention clamps q, k and v after its q/k norms
    if "clip_qkv" in block:
        block["clip_after_qk_norm"] = True
    n_experts = first_of(f, ("num_experts", "num_local_experts"), lambda key: f.int(key), 64)
    block["moe"] = {"n_experts": n_experts, "top_k": f.int("num_experts_per_tok", 8), "d_expert": block["d_ff"],
                    "renormalize": f.bool("norm_topk_prob", False)}
    return block, model


def _aria_text(f: Fields) -> tuple[dict, dict]:
    """Aria's language model: Llama's block with a mixture on every layer — the top `moe_topk` of
    `moe_num_experts` router logits, softmaxed over those k (AriaTextTopKRouter), experts intermediate_size wide and
    always SiLU-gated, beside shared experts every token uses, one Llama MLP intermediate_size ·
    moe_num_shared_experts wide of `hidden_act`; `mlp_bias` biases the shared MLP alone (AriaExperts has none)."""
    f.ignore("pretraining_tp")  # the same matmuls in slices
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False)
    if block["activation"] != "swiglu":  # AriaExperts' act_fn is SiLU whatever hidden_act says
        raise f.unrepresentable("hidden_act", f.data["hidden_act"], "Aria's routed experts are SiLU-gated whatever it "
                                                                   "says, and blockcli's experts and shared experts "
                                                                   "share one activation")
    shared = f.int("moe_num_shared_experts", 2, minimum=0)
    if shared == 0 and f.bool("mlp_bias", False):
        raise f.unrepresentable("moe_num_shared_experts", 0, "with mlp_bias, Aria's empty shared MLP still adds its "
                                                             "down_proj bias; blockcli's has no parameters at width 0")
    block["moe"] = {"n_experts": f.int("moe_num_experts", 8), "top_k": f.int("moe_topk", 2),
                    "d_expert": block["d_ff"], "order": "topk_softmax", "routed_bias": False,
                    "d_shared": block["d_ff"] * shared}
    return block, model


def _minimax_m2(f: Fields) -> tuple[dict, dict]:
    """MiniMax-M2: Llama's pre-norm block (GQA 48/8 of 128 by default, RoPE base 5e6) with q/k RMSNorm over
    the whole projection and RoPE on part of each head (`partial_rotary_factor`, or the released configs'
    `rotary_dim`); a SwiGLU mixture on every layer routed as DeepSeek-V3 without groups: sigmoid scores, the
    selection bias (e_score_correction_bias) for the choice only, the top k always renormalised."""
    if f.data.get("rotary_dim") is not None and f.data.get("partial_rotary_factor") is None:
        # MiniMaxM2Config turns the legacy rotary_dim into partial_rotary_factor = rotary_dim / head_dim
        head_dim = f.int("head_dim", 128)
        rotated = f.int("rotary_dim")
        if rotated > head_dim:
            raise f.invalid("rotary_dim", rotated, f"at most head_dim ({head_dim})")
        f = with_data(f, {**f.data, "partial_rotary_factor": rotating(rotated, head_dim)})
    f.ignore("rotary_dim")
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False, head_dim_default=128, qkv_bias=False,
                             out_bias=False, mlp_bias=False, eps_default=1e-6, fraction_keys=("partial_rotary_factor",))
    theta_default(f, block, 5e6)
    block["qk_norm"] = "projection"
    n_experts = first_of(f, ("num_local_experts", "num_experts"), lambda key: f.int(key), 256)
    block["moe"] = {"n_experts": n_experts, "top_k": f.int("num_experts_per_tok", 8), "d_expert": block["d_ff"],
                    "scoring": "sigmoid", "selection_bias": True, "renormalize": True}
    return block, model


# the fields of MiniMax-M2's published config.json that its own remote code reads and transformers' MiniMaxM2 never
# does (modeling_minimax_m2.py: sigmoid scores with a selection bias and q/k norms over the projection, always)
_MINIMAX_M2_UNREAD = {
    "scoring_func": "MiniMaxM2's router always scores by sigmoid",
    "use_routing_bias": "MiniMaxM2's router always adds its e_score_correction_bias for the choice",
    "use_qk_norm": "MiniMaxM2Attention always normalises q and k",
    "qk_norm_type": "MiniMaxM2Attention's q/k norms are always over the whole projection",
    "attn_type_list": "every MiniMaxM2 layer is softmax attention",
    "shared_intermediate_size": "MiniMaxM2 has no shared expert",
    "use_mtp": "the multi-token-prediction modules, which transformers does not build",
    "num_mtp_modules": "the multi-token-prediction modules, which transformers does not build",
    "mtp_transformer_layers": "the multi-token-prediction modules, which transformers does not build",
}


def _granitemoe(f: Fields) -> tuple[dict, dict]:
    """Granite MoE (granite-3.x-a*m/b): Granite's block and four scalars (embedding, residual, attention and
    logits multipliers) with a SwiGLU mixture on every layer routed as Mixtral's original code: the top
    `num_experts_per_tok` of `num_local_experts` logits, softmaxed over those k; each expert intermediate_size wide."""
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, mlp_bias=False)
    granite_scalars(f, block, model)
    block["moe"] = {"n_experts": f.int("num_local_experts", 8), "top_k": f.int("num_experts_per_tok", 2),
                    "d_expert": block["d_ff"], "order": "topk_softmax"}
    return block, model


def _granitemoeshared(f: Fields) -> tuple[dict, dict]:
    """Granite MoE with a shared expert: Granite MoE's block plus an ungated SwiGLU MLP every token uses,
    `shared_intermediate_size` wide (GraniteMoeSharedConfig's default 0: none), added to the routed experts' sum."""
    block, model = _granitemoe(f)
    shared = f.int("shared_intermediate_size", 0, minimum=0)
    if shared:
        block["moe"]["d_shared"] = shared
    return block, model


def _granitemoe_swa(f: Fields) -> tuple[dict, dict]:
    """Granite MoE SWA (granite-swash): Granite MoE with its shared expert (GraniteMoeSWAConfig's default 0:
    none) and Granite SWA's attention: a sink per head, sliding-window layers, per-layer RoPE bases."""
    from blockcli.families.llama_aliases import granite_swa_layers

    block, model = _granitemoeshared(f)
    granite_swa_layers(f, block, model)
    return block, model


def _flex_olmo(f: Fields) -> tuple[dict, dict]:
    """FlexOlmo: OLMo 2's block (each branch's output normalised before its residual add, q/k RMSNorm over the
    whole projection) with OLMoE's mixture on every layer: softmax over `num_experts` (7 by default), the top
    `num_experts_per_tok` (5), renormalised if `norm_topk_prob`; each expert intermediate_size wide."""
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, mlp_bias=False, eps_default=1e-6)
    block.update(placement="post_branch", qk_norm="projection")
    n_experts = first_of(f, ("num_experts", "num_local_experts"), lambda key: f.int(key), 7)
    block["moe"] = {"n_experts": n_experts, "top_k": f.int("num_experts_per_tok", 5), "d_expert": block["d_ff"],
                    "renormalize": f.bool("norm_topk_prob", False)}
    return block, model


def _nested(f: Fields, key: str) -> Fields:
    """A nested config dict (DBRX's attn_config, ffn_config) read as its own Fields, its keys named `key.name` in
    messages; absent or null: the sub-config class's defaults."""
    value = f.raw(key, {})
    if not isinstance(value, dict):
        raise f.invalid(key, value, "an object")
    return Fields({f"{key}.{k}": v for k, v in value.items()}, f.where, f.family)


def _nested_leftovers(g: Fields, ignored: frozenset[str]) -> None:
    """Every key of a nested config read, neutral, ignored on purpose or one every config class carries."""
    for name, value in g.data.items():
        inner = name.split(".", 1)[1]
        if inner in COMMON_NEUTRAL:
            g.neutral(name, COMMON_NEUTRAL[inner][0], COMMON_NEUTRAL[inner][1])
        elif name not in g.used and inner not in ignored | COMMON_IGNORED:
            raise g.unrepresentable(name, value, f"not a field blockcli knows for a {g.family} config; it might "
                                                 f"change the architecture, so it is not ignored")


def _dbrx(f: Fields) -> tuple[dict, dict]:
    """DBRX: pre-norm LayerNorms without a bias (nn.LayerNorm's eps 1e-5), a fused bias-free Wqkv [Q | K | V]
    whose output is clamped to ±attn_config.clip_qkv, attn_config.kv_n_heads K/V heads (1), RoPE (rotate-half)
    on whole heads from rope_parameters (base 10000: attn_config.rope_theta must be there, DbrxAttention reads it
    when built, but never applies it); a mixture of ffn_config.moe_num_experts (4) GLU experts of
    ffn_config.ffn_hidden_size (3584) and ffn_act_fn {name} (SiLU), softmax over them, the top moe_top_k (1), their
    weights divided by their p-norm for moe_normalize_expert_weights p (1.0: their sum; null: as they are); an
    untied head (DbrxConfig refuses tie_word_embeddings)."""
    d = f.int("d_model")
    heads = f.int("n_heads")
    head_dim = divides(f, "d_model", d, "n_heads", heads)
    positions = f.int("max_seq_len")
    attn, ffn = _nested(f, "attn_config"), _nested(f, "ffn_config")
    # torch's clamp with neither bound fails, so DBRX's forward needs clip_qkv (the config class's default is null)
    attn.raw("attn_config.clip_qkv", why="DbrxAttention clamps Q, K, V to ±clip_qkv, and torch's clamp without a "
                                         "bound fails")
    clip = attn.float("attn_config.clip_qkv", low=0.0, high=1e6)
    attn.raw("attn_config.rope_theta", why="DbrxAttention reads it when built (RoPE takes rope_parameters' base)")
    kv = attn.int("attn_config.kv_n_heads", 1)
    if heads % kv:
        raise attn.unrepresentable("attn_config.kv_n_heads", kv, f"n_heads={heads} is not a multiple of it")
    # DbrxConfig writes attn_config.kv_n_heads here too; DbrxAttention reads the nested one
    f.neutral("num_key_value_heads", kv, f"DbrxConfig sets it to attn_config.kv_n_heads ({kv})")
    attn.ignore("attn_config.attn_pdrop")  # training-only
    theta, _, scaling = rope_base(f, (), 10000.0, (), 1.0, positions)
    if float(attn.data["attn_config.rope_theta"]) != theta:
        f.said.append(f"attn_config.rope_theta {attn.data['attn_config.rope_theta']:g} is not applied: transformers "
                      f"5.24's DBRX rotates with rope_parameters' base {theta:g}, and so does blockcli")
    act = ffn.raw("ffn_config.ffn_act_fn", {"name": "silu"})
    if not isinstance(act, dict) or set(act) - {"name"}:
        raise ffn.unrepresentable("ffn_config.ffn_act_fn", act, "blockcli reads its 'name' only (DbrxExpertGLU "
                                                                "calls ACT2FN[name] with no arguments)")
    activation = mlp_activation(Fields({"ffn_config.ffn_act_fn.name": act.get("name", "silu")}, f.where, f.family),
                                "ffn_config.ffn_act_fn.name", "silu", gated=True)
    p = ffn.raw("ffn_config.moe_normalize_expert_weights", None) if ffn.has("ffn_config.moe_normalize_expert_weights") \
        else 1.0
    if p not in (None, 1, 1.0) or isinstance(p, bool):
        raise ffn.unrepresentable("ffn_config.moe_normalize_expert_weights", p, "blockcli renormalises the chosen "
                                                                                "weights by their sum (p = 1) or not at all (null)")
    d_expert = ffn.int("ffn_config.ffn_hidden_size", 3584)
    moe = {"n_experts": ffn.int("ffn_config.moe_num_experts", 4), "top_k": ffn.int("ffn_config.moe_top_k", 1),
           "d_expert": d_expert, "renormalize": p is not None}
    if moe["top_k"] > moe["n_experts"]:
        raise ffn.unrepresentable("ffn_config.moe_top_k", moe["top_k"], f"more than the {moe['n_experts']} experts")
    # training only: the router's input jitter, the load-balancing loss's weight; hidden_size is set to d_model
    ffn.ignore("ffn_config.moe_jitter_eps", "ffn_config.moe_loss_weight", "ffn_config.hidden_size")
    f.neutral("output_router_logits", False, "DBRX's load-balancing loss (ffn_config.moe_loss_weight) is not "
                                             "checked against blockcli's")
    f.neutral("tie_word_embeddings", False, "DbrxConfig refuses a tied head")
    _nested_leftovers(attn, frozenset())
    _nested_leftovers(ffn, frozenset())
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim, "d_ff": d_expert,
        "norm": "layernorm", "norm_eps": 1e-5, **activation, "bias": bias_groups(False, False, False, False),
        "placement": "pre", "rope": 1.0, "rope_theta": theta, "clip_qkv": clip, "moe": moe,
    }
    if scaling:
        block["rope_scaling"] = scaling
    model = model_section(f.int("n_layers"), f.int("vocab_size"), "rope", positions, False)
    return block, model


# DBRX: the fused Wqkv Q | K | V, out_proj; the router and the experts' w1 (gate), v1 (up) as nn.Linear blocks
# stacked (E·d_e, d), w2 (down) stacked in blockcli's (d_e, d) layout
DBRX = TensorMap("transformer.", (
    tensor("wte", "wte.weight"),
    tensor("blocks.{i}.ln1_gamma", "blocks.{i}.norm_attn_norm.norm_1.weight"),
    tensor("blocks.{i}.w_q blocks.{i}.w_k blocks.{i}.w_v", "blocks.{i}.norm_attn_norm.attn.Wqkv.weight", FUSED),
    tensor("blocks.{i}.w_o", "blocks.{i}.norm_attn_norm.attn.out_proj.weight", LINEAR),
    tensor("blocks.{i}.ln2_gamma", "blocks.{i}.norm_attn_norm.norm_2.weight"),
    tensor("blocks.{i}.router", "blocks.{i}.ffn.router.layer.weight", LINEAR),
    tensor("blocks.{i}.experts.{e}.w_gate", "blocks.{i}.ffn.experts.mlp.w1", FUSED),
    tensor("blocks.{i}.experts.{e}.w_up", "blocks.{i}.ffn.experts.mlp.v1", FUSED),
    tensor("blocks.{i}.experts.{e}.w_down", "blocks.{i}.ffn.experts.mlp.w2", STACKED),
    tensor("ln_f_gamma", "norm_f.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=("rotary_emb.inv_freq",))


def moe_tensors(router: str, experts: str, names: tuple[str, str, str], fused: str | None) -> tuple[Tensor, ...]:
    """A mixture's router and experts under `experts` (per expert: `{experts}.{e}.<gate|up|down>.weight`;
    fused 3-D: `{fused}.gate_up_proj` and `{fused}.down_proj`)."""
    gate, up, down = names
    per_expert = (tensor("blocks.{i}.router", f"{router}.weight", LINEAR),
                  tensor("blocks.{i}.experts.{e}.w_gate", f"{experts}.{{e}}.{gate}.weight", LINEAR),
                  tensor("blocks.{i}.experts.{e}.w_up", f"{experts}.{{e}}.{up}.weight", LINEAR),
                  tensor("blocks.{i}.experts.{e}.w_down", f"{experts}.{{e}}.{down}.weight", LINEAR))
    if fused is None:
        return per_expert
    return per_expert + (tensor("blocks.{i}.experts.{e}.w_gate blocks.{i}.experts.{e}.w_up", f"{fused}.gate_up_proj",
                                EXPERTS),
                         tensor("blocks.{i}.experts.{e}.w_down", f"{fused}.down_proj", EXPERTS))


_LLAMA_ATTENTION = tuple(t for t in LLAMA.tensors if t not in LLAMA_MLP)

# Mixtral: Llama's attention; the router and experts under block_sparse_moe as save_pretrained writes them
# (w1 gate, w3 up, w2 down), or transformers 5's in-memory names, mlp.gate and the fused mlp.experts
MIXTRAL = TensorMap("model.", _LLAMA_ATTENTION + (
    tensor("blocks.{i}.router", "layers.{i}.block_sparse_moe.gate.weight|layers.{i}.mlp.gate.weight", LINEAR),
    *moe_tensors("layers.{i}.block_sparse_moe.gate", "layers.{i}.block_sparse_moe.experts", ("w1", "w3", "w2"),
                 "layers.{i}.mlp.experts")[1:],
), buffers=LLAMA.buffers)

# Qwen2-MoE (with its shared expert and the shared expert's gate) and Qwen3-MoE (q_norm, k_norm): mlp.gate,
# mlp.experts.{e}.gate_proj / up_proj / down_proj, or the fused mlp.experts.gate_up_proj / down_proj
QWEN_MOE = TensorMap("model.", _LLAMA_ATTENTION + moe_tensors(
    "layers.{i}.mlp.gate", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"), "layers.{i}.mlp.experts") + (
    tensor("blocks.{i}.shared_w_gate", "layers.{i}.mlp.shared_expert.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.shared_w_up", "layers.{i}.mlp.shared_expert.up_proj.weight", LINEAR),
    tensor("blocks.{i}.shared_w_down", "layers.{i}.mlp.shared_expert.down_proj.weight", LINEAR),
    tensor("blocks.{i}.shared_gate", "layers.{i}.mlp.shared_expert_gate.weight", LINEAR),
    *LLAMA_MLP,  # the dense layers' MLP (decoder_sparse_step, mlp_only_layers)
), buffers=LLAMA.buffers)

# Qwen3-VL-MoE: Qwen3's attention, mlp.gate the router, and the experts fused per layer, as transformers 5 holds
# and saves them, gate_up_proj (E, 2·d_e, d) and down_proj (E, d, d_e), or transposed as the published checkpoints
# hold them, (E, d, 2·d_e) with gate | up along the last axis and (E, d_e, d): told apart by shape, transformers'
# own layout when both fit (its loader transposes only a tensor that is not already of its own shape)
_EITHER = f"{EXPERTS}|{EXPERTS_SIDE_BY_SIDE}"
QWEN3_VL_MOE = TensorMap("model.", _LLAMA_ATTENTION + (
    tensor("blocks.{i}.router", "layers.{i}.mlp.gate.weight", LINEAR),
    tensor("blocks.{i}.experts.{e}.w_gate blocks.{i}.experts.{e}.w_up", "layers.{i}.mlp.experts.gate_up_proj", _EITHER),
    tensor("blocks.{i}.experts.{e}.w_down", "layers.{i}.mlp.experts.down_proj", _EITHER),
    *LLAMA_MLP,  # the dense layers' MLP (mlp_only_layers, decoder_sparse_step)
), buffers=LLAMA.buffers)

# Flint: Qwen-MoE's names (q_norm, k_norm, mlp.gate, the experts per expert or fused, mlp.shared_expert's ungated MLP,
# Llama's MLP on the dense layers) and a sink per head (self_attn.sinks, or softmax_offset as published)
FLINT = TensorMap("model.", QWEN_MOE.tensors + (
    tensor("blocks.{i}.sinks", "layers.{i}.self_attn.sinks|layers.{i}.self_attn.softmax_offset"),),
    buffers=LLAMA.buffers)

# Aria's language model: Llama's attention, mlp.router, the experts fused as AriaExperts holds them ((E, d, 2·d_e) gate
# | up and (E, d_e, d), each expert (in, out); the published checkpoints name them fc1 and fc2) and mlp.shared_experts
ARIA_TEXT = TensorMap("model.", _LLAMA_ATTENTION + (
    tensor("blocks.{i}.router", "layers.{i}.mlp.router.weight", LINEAR),
    tensor("blocks.{i}.experts.{e}.w_gate blocks.{i}.experts.{e}.w_up",
           "layers.{i}.mlp.experts.gate_up_proj|layers.{i}.mlp.experts.fc1.weight", EXPERTS_SIDE_BY_SIDE),
    tensor("blocks.{i}.experts.{e}.w_down", "layers.{i}.mlp.experts.down_proj|layers.{i}.mlp.experts.fc2.weight",
           EXPERTS_SIDE_BY_SIDE),
    *(tensor(f"blocks.{{i}}.shared_w_{x}", f"layers.{{i}}.mlp.shared_experts.{x}_proj.weight", LINEAR)
      for x in ("gate", "up", "down")),
    *(tensor(f"blocks.{{i}}.shared_b_{x}", f"layers.{{i}}.mlp.shared_experts.{x}_proj.bias") for x in
      ("gate", "up", "down")),  # mlp_bias
), buffers=LLAMA.buffers)

# MiniMax-M2: Mixtral's names (block_sparse_moe as save_pretrained writes them, mlp in transformers 5), the q/k
# norms, and the selection bias, a buffer of the mixture itself (not of its gate)
MINIMAX_M2 = TensorMap("model.", MIXTRAL.tensors + (
    tensor("blocks.{i}.router_bias",
           "layers.{i}.block_sparse_moe.e_score_correction_bias|layers.{i}.mlp.e_score_correction_bias"),
), buffers=LLAMA.buffers)

# Granite MoE: Llama's attention; the router and the fused experts (E, 2·d_e, d) and (E, d, d_e) under
# block_sparse_moe, as save_pretrained writes them (router.layer, input_linear, output_linear) or as transformers 5
# holds them (router, experts.gate_up_proj, experts.down_proj)
GRANITE_MOE = TensorMap("model.", _LLAMA_ATTENTION + (
    tensor("blocks.{i}.router", "layers.{i}.block_sparse_moe.router.layer.weight|"
                                "layers.{i}.block_sparse_moe.router.weight", LINEAR),
    tensor("blocks.{i}.experts.{e}.w_gate blocks.{i}.experts.{e}.w_up",
           "layers.{i}.block_sparse_moe.input_linear.weight|layers.{i}.block_sparse_moe.experts.gate_up_proj", EXPERTS),
    tensor("blocks.{i}.experts.{e}.w_down",
           "layers.{i}.block_sparse_moe.output_linear.weight|layers.{i}.block_sparse_moe.experts.down_proj", EXPERTS),
), buffers=LLAMA.buffers)

# Granite MoE's names and the shared expert's, gate | up fused in one shared_mlp.input_linear (2·d_s, d)
GRANITE_MOE_SHARED = TensorMap("model.", GRANITE_MOE.tensors + (
    tensor("blocks.{i}.shared_w_gate blocks.{i}.shared_w_up", "layers.{i}.shared_mlp.input_linear.weight", FUSED),
    tensor("blocks.{i}.shared_w_down", "layers.{i}.shared_mlp.output_linear.weight", LINEAR),
), buffers=LLAMA.buffers)

# Granite MoE SWA: Granite MoE (shared)'s names and a sink per head
GRANITE_MOE_SWA = TensorMap("model.", GRANITE_MOE_SHARED.tensors + (
    tensor("blocks.{i}.sinks", "layers.{i}.self_attn.sinks"),), buffers=LLAMA.buffers)

# FlexOlmo: OLMo 2's names (its norms after the branches) with Qwen-MoE's router and experts
FLEX_OLMO = TensorMap("model.", tuple(t for t in OLMO2.tensors if ".mlp." not in t.name) + moe_tensors(
    "layers.{i}.mlp.gate", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"), "layers.{i}.mlp.experts"))

COMPOSITES = (
    # Qwen3VLMoeConfig: like Qwen3-VL's, the top level's tie_word_embeddings alone decides
    Composite("qwen3_vl_moe", "Qwen3-VL-MoE (vision-language)", "qwen3_vl_moe_text", False, QWEN_VL_TOP, {
        "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
        "num_attention_heads": 16, "max_position_embeddings": 128000}, tie="top", **QWEN_VL_PATHS),
)

FAMILIES = (
    Family("dbrx", "DBRX", _dbrx, DBRX, TRAINING_ONLY | {"resid_pdrop", "emb_pdrop"}),
    Family("mixtral", "Mixtral", _mixtral, MIXTRAL, MOE_TRAINING_ONLY | {"router_jitter_noise"}, aux_loss=True),  # jitter: training
    Family("qwen2_moe", "Qwen2-MoE", _qwen2_moe, QWEN_MOE, MOE_TRAINING_ONLY, aux_loss=True),
    Family("qwen3_moe", "Qwen3-MoE", _qwen3_moe, QWEN_MOE, MOE_TRAINING_ONLY, aux_loss=True),
    Family("flint", "Flint", _flint, FLINT, MOE_TRAINING_ONLY, aux_loss=True),
    Family("minimax_m2", "MiniMax-M2", _minimax_m2, MINIMAX_M2, MOE_TRAINING_ONLY | {"router_jitter_noise"},
           unread=_MINIMAX_M2_UNREAD, aux_loss=True),  # jitter: training only
    Family("granitemoe", "Granite MoE", _granitemoe, GRANITE_MOE, MOE_TRAINING_ONLY, aux_loss=True),
    Family("granitemoe_swa", "Granite MoE SWA", _granitemoe_swa, GRANITE_MOE_SWA, MOE_TRAINING_ONLY, aux_loss=True),
    Family("granitemoeshared", "Granite MoE (shared expert)", _granitemoeshared, GRANITE_MOE_SHARED, MOE_TRAINING_ONLY,
           aux_loss=True),
    Family("flex_olmo", "FlexOlmo", _flex_olmo, FLEX_OLMO, MOE_TRAINING_ONLY, aux_loss=True),
    Family("aria_text", "Aria's language model", _aria_text, ARIA_TEXT, TRAINING_ONLY),
    Family("olmoe", "OLMoE", _olmoe, QWEN_MOE, MOE_TRAINING_ONLY, aux_loss=True),
    Family("qwen3_vl_moe_text", "Qwen3-VL-MoE's language model", _qwen3_vl_moe_text, QWEN3_VL_MOE, MOE_TRAINING_ONLY, aux_loss=True),
)
