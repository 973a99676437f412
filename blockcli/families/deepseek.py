"""DeepSeek-V2 and V3: Llama's pre-norm RMSNorm block with multi-head latent attention (`block.mla`);
and GLM-4.5, whose mixture is DeepSeek-V3's beside ordinary grouped-query attention.

transformers' DeepseekV2/V3 configs set `head_dim` to qk_rope_head_dim and `qk_head_dim` to
qk_nope_head_dim + qk_rope_head_dim themselves, whatever a config.json says, so both stored values
are ignored. V2 rotates interleaved pairs (its complex rotation `apply_rotary_emb`); V3 also, unless
`rope_interleave` is false (then rotate-half). V3's interleaved rotation writes each query's and key's
rotated pairs out de-interleaved, the same permutation for both, so the scores are those of GPT-J's
layout. The latents' RMSNorms are built with the default eps 1e-6, not `rms_norm_eps`.
Layers first_k_dense_replace and up have mixture-of-experts MLPs (`block.moe`, with DeepSeek's
routing); the dense layers before them (an intermediate_size-wide SwiGLU MLP) are a per-layer override
(`layers:` entry with `moe: null`) of that base block. A checkpoint's expert tensors are read per
expert or fused, and the stored selection bias as the buffer it is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from blockcli.families.common import (TRAINING_ONLY, Family, bias_groups, gated_rms, layer_types, silu_gate,
                                      sliding_layers, with_data)
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA, LLAMA_MLP
from blockcli.families.llama_relatives import _renamed
from blockcli.families.moe import moe_tensors
from blockcli.tensor_names import FUSED, LINEAR, QKV, QKV_BIAS, TensorMap, tensor

# The mixture-of-experts settings: they describe the MLPs of layers first_k_dense_replace and up (and the
# original remote code's routing, parallelism and training losses), so they are unused when every layer is dense
_MOE_FIELDS = ("n_routed_experts", "moe_intermediate_size", "n_shared_experts", "routed_scaling_factor", "n_group",
               "topk_group", "num_experts_per_tok", "norm_topk_prob", "output_router_logits", "topk_method",
               "moe_layer_freq", "scoring_func", "ep_size", "aux_loss_alpha", "seq_aux")


# DeepseekV3Config's defaults that its descendants change: first_k_dense_replace, n_routed_experts, n_group,
# topk_group, q_lora_rank (None: one q_proj)
_V3_DEFAULTS = (3, 256, 8, 4, 1536)
_SARVAM_MLA_DEFAULTS = (1, 128, 1, 1, None)


def _moe(f: Fields, v3: bool, defaults: tuple = _V3_DEFAULTS) -> dict:
    """block.moe for DeepSeek's expert layers, as transformers' DeepseekV2/V3 routers compute it.

    V3: sigmoid scores, e_score_correction_bias for the choice only, group-limited by the sum of each
    group's top two, renormalised if norm_topk_prob, times routed_scaling_factor. V2: softmax scores,
    `topk_method` greedy (no groups) or group_limited_greedy (groups by their best score), never
    renormalised (its router does not read norm_topk_prob), times routed_scaling_factor. Both: a shared
    expert moe_intermediate_size · n_shared_experts wide, ungated."""
    f.neutral("moe_layer_freq", 1, "MoE on every layer past first_k_dense_replace is what transformers builds")
    f.neutral("scoring_func", "sigmoid" if v3 else "softmax", "transformers' DeepSeek router scores that way")
    f.ignore("ep_size", "aux_loss_alpha", "seq_aux", "output_router_logits")  # parallelism, training losses
    d_expert = f.int("moe_intermediate_size", 2048 if v3 else 1407)
    moe = {"n_experts": f.int("n_routed_experts", defaults[1] if v3 else 64),
           "top_k": f.int("num_experts_per_tok", 8) if v3 else f.int(
               "num_experts_per_tok", why="the experts' top k, from layer first_k_dense_replace up; transformers' "
                                          "router fails without it, and a dense model does not read it"),
           "d_expert": d_expert,
           "routed_scaling": f.float("routed_scaling_factor", 2.5 if v3 else 1.0, high=1e6),
           "d_shared": d_expert * f.int("n_shared_experts", 1 if v3 else 2, minimum=0)}
    if v3:
        f.neutral("topk_method", "noaux_tc", "transformers' DeepSeek-V3 router is the noaux_tc one")
        moe.update(scoring="sigmoid", selection_bias=True, group_score="top2_sum",
                   renormalize=f.bool("norm_topk_prob", True), n_groups=f.int("n_group", defaults[2]),
                   top_groups=f.int("topk_group", defaults[3]))
    else:
        method = f.str("topk_method", "greedy")
        f.ignore("norm_topk_prob")  # DeepseekV2TopkRouter never renormalises
        if method == "group_limited_greedy":
            moe.update(n_groups=f.int("n_group"), top_groups=f.int("topk_group"), group_score="max")
        elif method == "greedy":
            f.ignore("n_group", "topk_group")  # read only by group_limited_greedy
        else:
            raise f.unrepresentable("topk_method", method, "transformers' DeepSeek-V2 router knows greedy and "
                                                           "group_limited_greedy")
    return moe


# Glm4MoeConfig's defaults and SarvamMoEConfig's: K/V heads, rms_norm_eps, partial_rotary_factor, head_dim (None:
# hidden_size // heads), moe_intermediate_size, num_experts_per_tok, routed_scaling_factor, use_qk_norm
_GLM4_MOE_DEFAULTS = (8, 1e-5, 0.5, None, 1408, 8, 1.0, False)
_SARVAM_MOE_DEFAULTS = (4, 1e-6, 1.0, 64, 1024, 6, 2.5, True)


def _glm4_moe(f: Fields, defaults: tuple = _GLM4_MOE_DEFAULTS) -> tuple[dict, dict]:
    """GLM-4.5 and 4.6: Llama's pre-norm block with biases on q, k and v (`attention_bias`; o_proj never
    has one), half of each head rotated (`partial_rotary_factor`, Glm4MoeConfig's default 0.5), an
    optional per-head q/k RMSNorm (`use_qk_norm`), and from layer `first_k_dense_replace` up
    DeepSeek-V3's mixture (its router, Glm4MoeTopkRouter, is DeepseekV3TopkRouter's arithmetic)."""
    kv, eps, fraction, head_dim, d_expert_default, top_k, scaling, qk_norm = defaults
    # the multi-token-prediction layers are not part of transformers' Glm4MoeForCausalLM (it skips their tensors)
    f.ignore("num_nextn_predict_layers", "num_mtp_layers", "output_router_logits")
    if defaults == _GLM4_MOE_DEFAULTS:
        f.ignore("pretraining_tp")
    n_layers = f.int("num_hidden_layers")
    # no head_dim: Glm4MoeAttention's hidden_size // num_attention_heads, which need not divide (the config class's
    # 96 heads on 4096: 42 each), as it never checks
    floor = f.int("hidden_size") // f.int("num_attention_heads")
    block, model = gated_rms(f, silu_gate, kv_default=kv, tie_default=False, out_bias=False, mlp_bias=False,
                             eps_default=eps, fraction_keys=("partial_rotary_factor",), fraction_default=fraction,
                             head_dim_default=floor if head_dim is None else head_dim, odd_rounds_up=True)
    if f.bool("use_qk_norm", qk_norm):
        block["qk_norm"] = "head"  # q_norm and k_norm: RMSNorm over each head's d_h, before RoPE
    dense = f.int("first_k_dense_replace", 1, minimum=0)
    expert_fields = ("n_routed_experts", "moe_intermediate_size", "n_shared_experts", "routed_scaling_factor",
                     "n_group", "topk_group", "num_experts_per_tok", "norm_topk_prob")
    if dense >= n_layers:
        f.ignore(*expert_fields)
        f.notes.append(f"every layer dense (first_k_dense_replace {dense} >= {n_layers} layers): the expert "
                       f"settings are unused")
        return block, model
    d_expert = f.int("moe_intermediate_size", d_expert_default)
    block["moe"] = {"n_experts": f.int("n_routed_experts", 128), "top_k": f.int("num_experts_per_tok", top_k),
                    "d_expert": d_expert, "routed_scaling": f.float("routed_scaling_factor", scaling, high=1e6),
                    "d_shared": d_expert * f.int("n_shared_experts", 1, minimum=0), "scoring": "sigmoid",
                    "selection_bias": True, "group_score": "top2_sum", "renormalize": f.bool("norm_topk_prob", True),
                    "n_groups": f.int("n_group", 1), "top_groups": f.int("topk_group", 1)}
    if dense:  # layers 0..dense-1: the dense MLP, intermediate_size (block.d_ff) wide
        f.layers.append({"indices": list(range(dense)), "block": {"moe": None}})
    return block, model


# SarvamMoEConfig.attribute_map: the original sarvam-30b config's spellings → the fields they stand for
_SARVAM_MOE_NAMES = {"num_local_experts": "n_routed_experts", "num_experts": "n_routed_experts",
                     "num_shared_experts": "n_shared_experts", "use_qkv_bias": "attention_bias",
                     "num_mtp_layers": "num_nextn_predict_layers"}


def _sarvam_moe(f: Fields) -> tuple[dict, dict]:
    """Sarvam-30B (SarvamMoEConfig, a Glm4MoeConfig; transformers builds a Glm4MoeForCausalLM): GLM-4.5's mapping
    with SarvamMoEConfig's defaults: heads of `head_dim` 64 rotated whole (`partial_rotary_factor` 1.0), RoPE base
    8,000,000, q/k RMSNorms on (`use_qk_norm`), 4 K/V heads, eps 1e-6, 128 experts of 1024, top 6, times 2.5; the
    attribute_map's spellings (`num_experts`, `num_local_experts`, `num_shared_experts`, `use_qkv_bias`,
    `num_mtp_layers`) read as the fields they stand for."""
    g = _renamed(f, _SARVAM_MOE_NAMES)
    params = g.data.get("rope_parameters") or g.data.get("rope_scaling")
    if "rope_theta" not in g.data and not (isinstance(params, Mapping) and "rope_theta" in params):
        g = with_data(g, {**g.data, "rope_theta": 8_000_000.0})  # SarvamMoEConfig's default_theta
    return _glm4_moe(g, _SARVAM_MOE_DEFAULTS)


def _dots1(f: Fields) -> tuple[dict, dict]:
    """dots.llm1: Qwen3's attention (per-head q/k RMSNorm, `attention_bias` on q/k/v/o, the window on layers
    `max_window_layers` and up when `sliding_window` is set, or as `layer_types` says) and, from layer
    `first_k_dense_replace` up (0 by default), DeepSeek-V3's mixture; Dots1Config leaves the expert counts
    unset (transformers cannot build it without them), so a config must give them."""
    n_layers = f.int("num_hidden_layers")
    block, model = gated_rms(f, silu_gate, kv_default=32, tie_default=False, mlp_bias=False, eps_default=1e-6)
    block["qk_norm"] = "head"
    sliding = layer_types(f, n_layers)
    window_on = f.data.get("sliding_window") is not None if f.has("sliding_window") else True  # default 4096
    if sliding is None:
        first = f.int("max_window_layers", 62, minimum=0)
        sliding = [window_on and i >= first for i in range(n_layers)]
    else:
        f.ignore("max_window_layers")
    sliding_layers(f, block, sliding, default=4096)
    dense = f.int("first_k_dense_replace", 0, minimum=0)
    if dense >= n_layers:
        f.ignore("n_routed_experts", "moe_intermediate_size", "n_shared_experts", "routed_scaling_factor", "n_group",
                 "topk_group", "num_experts_per_tok", "norm_topk_prob")
        f.notes.append(f"every layer dense (first_k_dense_replace {dense} >= {n_layers} layers): the expert "
                       f"settings are unused")
        return block, model
    d_expert = f.int("moe_intermediate_size", 1408)
    block["moe"] = {"n_experts": f.int("n_routed_experts"), "top_k": f.int("num_experts_per_tok"),
                    "d_expert": d_expert, "routed_scaling": f.float("routed_scaling_factor", 1.0, high=1e6),
                    "d_shared": d_expert * f.int("n_shared_experts", minimum=0), "scoring": "sigmoid",
                    "selection_bias": True, "group_score": "top2_sum", "renormalize": f.bool("norm_topk_prob", False),
                    "n_groups": f.int("n_group", 1), "top_groups": f.int("topk_group", 1)}
    if dense:
        f.layers.append({"indices": list(range(dense)), "block": {"moe": None}})
    return block, model


def _deepseek(f: Fields, v3: bool, defaults: tuple = _V3_DEFAULTS, head_dim_default: int | None = None
              ) -> tuple[dict, dict]:
    n_layers = f.int("num_hidden_layers")
    dense = f.int("first_k_dense_replace", defaults[0] if v3 else 0, minimum=0)
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, head_dim_default=head_dim_default,
                             mlp_bias=False if v3 else None)  # V3's MLP has no mlp_bias field
    if dense >= n_layers:
        f.ignore(*_MOE_FIELDS)
        f.notes.append(f"every layer dense (first_k_dense_replace {dense} >= {n_layers} layers): the expert "
                       f"settings are unused")
    else:
        block["moe"] = _moe(f, v3, defaults)
        if isinstance(block["bias"], dict) and block["bias"]["mlp"]:  # (RMSNorm: never all four true)
            block["moe"]["routed_bias"] = False  # V2's mlp_bias: DeepseekV2MLP (dense, shared) biased, experts not
        if dense:  # layers 0..dense-1: the dense MLP, intermediate_size (block.d_ff) wide
            f.layers.append({"indices": list(range(dense)), "block": {"moe": None}})
    f.ignore("pretraining_tp")  # the same matmuls in slices
    _latent(f, block, v3, defaults[4])
    return block, model


def _latent(f: Fields, block: dict, v3: bool, q_rank_default: int | None = 1536) -> None:
    """DeepSeek-V2/V3's latent attention on `block` (gated_rms's): one K and V per query head, the config's
    head_dim and qk_head_dim derived by the config class (not read), `q_lora_rank` (absent: `q_rank_default`;
    null: queries through one q_proj), V3's `rope_interleave` (false: rotate-half)."""
    heads = block["n_heads"]
    if block.pop("n_kv_heads") != heads:  # kv_b_proj makes one K and V per head; transformers would repeat them again
        raise f.unrepresentable("num_key_value_heads", f.data["num_key_value_heads"],
                                f"latent attention expands one K and V per query head ({heads})")
    block.pop("head_dim")
    f.ignore("qk_head_dim")
    absent = 0 if q_rank_default is None else q_rank_default
    q_rank = absent if not f.has("q_lora_rank") else 0 if f.raw("q_lora_rank", None) is None else f.int("q_lora_rank")
    block["mla"] = {"q_lora_rank": q_rank, "kv_lora_rank": f.int("kv_lora_rank", 512),
                    "qk_nope_head_dim": f.int("qk_nope_head_dim", 128),
                    "qk_rope_head_dim": f.int("qk_rope_head_dim", 64), "v_head_dim": f.int("v_head_dim", 128)}
    block["rope_layout"] = "interleaved" if not v3 or f.bool("rope_interleave", True) else "half"


def _youtu(f: Fields) -> tuple[dict, dict]:
    """Youtu-LLM (YoutuConfig: DeepseekV3Config without its experts): DeepSeek-V3's latent attention
    (`q_lora_rank` 1536, null: one q_proj; `rope_interleave`; `attention_bias` on q_a, kv_a and o) in Llama's
    pre-norm layer with Qwen3's dense SwiGLU MLP (no biases) on every layer; tied by default. Its
    embedding_initializer_range only initialises."""
    f.ignore("embedding_initializer_range")
    # YoutuConfig sets head_dim to qk_rope_head_dim, whatever a config.json says (the heads need not divide)
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=True, mlp_bias=False,
                             head_dim_default=f.int("qk_rope_head_dim", 64))
    _latent(f, block, v3=True)
    pad = f.data.get("pad_token_id")
    if isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < model["vocab_size"]:
        f.notes.append(f"transformers' YoutuForCausalLM zeroes embedding row {pad} (pad_token_id) whenever it loads a "
                       f"checkpoint (its _init_weights writes through .data); blockcli keeps the stored row")
    return block, model


def _minicpm3(f: Fields) -> tuple[dict, dict]:
    """MiniCPM3: DeepSeek-V2's latent attention (q_a/q_b through `q_lora_rank` 768, kv_lora_rank 256, 64 + 32 query
    dims, `v_head_dim` null: hidden_size / heads) with rotate-half RoPE on the 32, Llama's dense MLP (`mlp_bias`),
    `attention_bias` on q_a, kv_a and o; the embeddings times `scale_emb` (12), each branch times scale_depth/√L
    (1.4; null: √L, so 1), the logits times dim_model_base/hidden_size (256; null: hidden_size, so 1); tied."""
    f.ignore("head_dim", "qk_head_dim", "pretraining_tp")  # MiniCPM3Config sets head_dim to qk_rope_head_dim
    g = with_data(f, {k: v for k, v in f.data.items() if k != "head_dim"})
    block, model = gated_rms(g, silu_gate, kv_default=None, tie_default=True, eps_default=1e-5)
    heads, d, n = block["n_heads"], block["d_model"], model["n_layers"]
    if block.pop("n_kv_heads") != heads:
        raise f.unrepresentable("num_key_value_heads", f.data["num_key_value_heads"],
                                f"latent attention expands one K and V per query head ({heads})")
    block.pop("head_dim")
    block["bias"] = bias_groups(f.bool("attention_bias", False), f.bool("attention_bias", False),
                                f.bool("mlp_bias", False), False)
    q_rank = 768 if not f.has("q_lora_rank") else 0 if f.raw("q_lora_rank", None) is None else f.int("q_lora_rank")
    v_dim = f.raw("v_head_dim", None)
    block["mla"] = {"q_lora_rank": q_rank, "kv_lora_rank": f.int("kv_lora_rank", 256),
                    "qk_nope_head_dim": f.int("qk_nope_head_dim", 64), "qk_rope_head_dim": f.int("qk_rope_head_dim", 32),
                    "v_head_dim": d // heads if v_dim is None else f.int("v_head_dim")}
    f.ignore("v_head_dim")
    block["rope_layout"] = "half"
    model["embedding_multiplier"] = f.float("scale_emb", 12.0, low=0.0, high=1e6)
    depth = f.data.get("scale_depth", 1.4)  # null: √L, a multiplier of 1
    if depth is not None:
        block["residual_multiplier"] = f.float("scale_depth", 1.4, low=0.0, high=1e6) / n ** 0.5
    f.ignore("scale_depth")
    base = f.data.get("dim_model_base", 256)  # null: hidden_size, a multiplier of 1
    if base is not None:
        model["logit_multiplier"] = f.float("dim_model_base", 256.0, low=0.0, high=1e9) / d
    f.ignore("dim_model_base")
    return block, model


def _deepseek_v2(f: Fields) -> tuple[dict, dict]:
    return _deepseek(f, v3=False)


def _deepseek_v3(f: Fields) -> tuple[dict, dict]:
    # the multi-token-prediction modules are not part of transformers' DeepseekV3ForCausalLM (it skips their tensors)
    f.ignore("num_nextn_predict_layers", "num_mtp_layers")
    return _deepseek(f, v3=True)


# SarvamMLAConfig.attribute_map: the original sarvam-105b config's spellings → the fields they stand for
_SARVAM_MLA_NAMES = {"num_local_experts": "n_routed_experts", "num_experts": "n_routed_experts",
                     "num_shared_experts": "n_shared_experts", "num_mtp_layers": "num_nextn_predict_layers"}


def _sarvam_mla(f: Fields) -> tuple[dict, dict]:
    """Sarvam-105B (SarvamMLAConfig; transformers builds a DeepseekV3ForCausalLM): DeepSeek-V3's family with
    SarvamMLAConfig's defaults (queries through one q_proj: `q_lora_rank` null; 128 experts in one group; layer 0
    dense) and its translation of the original config format: the attribute_map's spellings (`num_experts`,
    `num_local_experts`, `num_shared_experts`, `num_mtp_layers`), `q_head_dim` and `head_dim` dropped (head_dim is
    qk_rope_head_dim; the original stored kv_lora_rank + qk_rope_head_dim for vLLM), `rope_scaling` of type
    `deepseek_yarn` read as yarn."""
    data = dict(f.data)
    f.ignore("q_head_dim", "head_dim", "num_nextn_predict_layers")  # the MTP modules are not built (none released)
    data.pop("q_head_dim", None), data.pop("head_dim", None)
    scaling = data.get("rope_scaling")
    if isinstance(scaling, dict) and "deepseek_yarn" in (scaling.get("type"), scaling.get("rope_type")):
        f.ignore("rope_scaling")  # SarvamMLAConfig's conversion: standard yarn (the base stays rope_theta's)
        data.pop("rope_scaling")
        data["rope_parameters"] = {**{k: v for k, v in scaling.items() if k != "type"}, "rope_type": "yarn"}
    g = _renamed(with_data(f, data), _SARVAM_MLA_NAMES)
    g.ignore("num_nextn_predict_layers")
    return _deepseek(g, v3=True, defaults=_SARVAM_MLA_DEFAULTS, head_dim_default=g.int("qk_rope_head_dim", 64))


# Glm4MoeLiteConfig's and its descendants' defaults: (kind, eps, moe_intermediate_size, n_routed_experts,
# num_experts_per_tok, routed_scaling_factor, n_group, topk_group, q_lora_rank, qk_nope_head_dim, v_head_dim)
_LITE = {"glm4_moe_lite": (1e-5, 1536, 64, 4, 1.8, 1, 1, 768, 192, 256),
         "deepseek_v32": (1e-6, 2048, 256, 8, 2.5, 8, 4, 1536, 128, 128),
         "glm_moe_dsa": (1e-5, 2048, 256, 8, 2.5, 1, 1, 2048, 192, 256),
         "axk1": (1e-6, 2048, 192, 8, 2.5, 8, 4, 1536, 128, 128)}


def _glm4_moe_lite(f: Fields, kind: str = "glm4_moe_lite") -> tuple[dict, dict]:
    """GLM-4.7-Flash (Glm4MoeLiteConfig): DeepSeek-V3's block, latent attention and router (sigmoid, selection
    bias, groups by their top-two sums, renormalised per norm_topk_prob, times routed_scaling_factor) with its own
    defaults, and the dense layers named by `mlp_layer_types` ("dense" or "sparse" per layer; by default layer 0
    dense), not by first_k_dense_replace, which Glm4MoeLiteConfig never reads. DeepSeek-V3.2 and GLM-5 (`kind`)
    derive their config classes from it: their default mlp_layer_types is first_k_dense_replace (3) dense layers."""
    eps, d_expert_default, n_experts, top_k, scaling, groups, top_groups, q_rank_default, nope, d_v = _LITE[kind]
    f.ignore("num_nextn_predict_layers", "num_mtp_layers", "output_router_logits", "pretraining_tp", "qk_head_dim")
    n_layers = f.int("num_hidden_layers")
    kinds = f.raw("mlp_layer_types", None)
    if kind == "glm4_moe_lite" and f.has("first_k_dense_replace"):
        f.ignore("first_k_dense_replace")
        f.notes.append("first_k_dense_replace is not read: transformers' GLM-4.7-Flash takes its dense layers from "
                       "mlp_layer_types (by default layer 0 alone)")
    elif kind != "glm4_moe_lite" and kinds is not None:
        f.ignore("first_k_dense_replace")  # DeepseekV32Config reads it only to fill in a missing mlp_layer_types
        if kind == "axk1":
            f.ignore("moe_layer_freq")  # so does AXK1Config
    if kinds is None and kind == "axk1":  # AXK1Config: sparse where i >= first_k_dense_replace and freq divides i
        first, freq = f.int("first_k_dense_replace", 1, minimum=0), f.int("moe_layer_freq", 1)
        kinds = ["sparse" if i >= first and i % freq == 0 else "dense" for i in range(n_layers)]
    elif kinds is None:
        first = 1 if kind == "glm4_moe_lite" else min(f.int("first_k_dense_replace", 3, minimum=0), n_layers)
        kinds = ["dense"] * first + ["sparse"] * (n_layers - first)
    elif not isinstance(kinds, list) or len(kinds) != n_layers or any(k not in ("dense", "sparse") for k in kinds):
        raise f.invalid("mlp_layer_types", kinds, f'an array of {n_layers} layer kinds, "dense" or "sparse"')
    # Glm4MoeLiteConfig's head_dim is qk_rope_head_dim (its attribute_map); the heads need not divide hidden_size
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, mlp_bias=False, eps_default=eps,
                             head_dim_default=f.int("qk_rope_head_dim", 64))
    dense = [i for i, kind in enumerate(kinds) if kind == "dense"]
    if len(dense) == n_layers:
        f.ignore("n_routed_experts", "moe_intermediate_size", "n_shared_experts", "routed_scaling_factor", "n_group",
                 "topk_group", "num_experts_per_tok", "norm_topk_prob")
        f.notes.append("every layer dense (mlp_layer_types): the expert settings are unused")
    else:
        d_expert = f.int("moe_intermediate_size", d_expert_default)
        block["moe"] = {"n_experts": f.int("n_routed_experts", n_experts), "top_k": f.int("num_experts_per_tok", top_k),
                        "d_expert": d_expert, "routed_scaling": f.float("routed_scaling_factor", scaling, high=1e6),
                        "d_shared": d_expert * f.int("n_shared_experts", 1, minimum=0), "scoring": "sigmoid",
                        "selection_bias": True, "group_score": "top2_sum",
                        "renormalize": f.bool("norm_topk_prob", True), "n_groups": f.int("n_group", groups),
                        "top_groups": f.int("topk_group", top_groups)}
        if kind == "axk1":  # AXK1MoE's post_mlp_layernorm: an RMSNorm (rms_norm_eps) on the mixture's output
            block["moe"]["out_norm"] = True
    heads = block["n_heads"]
    if block.pop("n_kv_heads") != heads:  # kv_b_proj makes one K and V per head
        raise f.unrepresentable("num_key_value_heads", f.data["num_key_value_heads"],
                                f"latent attention expands one K and V per query head ({heads})")
    block.pop("head_dim")
    if kind == "glm4_moe_lite":
        q_rank = (q_rank_default if not f.has("q_lora_rank") else
                  0 if f.raw("q_lora_rank", None) is None else f.int("q_lora_rank"))
    else:  # their attention always has the query latent: their config classes refuse a null (an int field)
        if f.has("q_lora_rank") and f.raw("q_lora_rank", None) is None:
            raise f.invalid("q_lora_rank", None, "an integer (the query latent's rank; this attention always has one)")
        q_rank = f.int("q_lora_rank", q_rank_default)
    block["mla"] = {"q_lora_rank": q_rank, "kv_lora_rank": f.int("kv_lora_rank", 512),
                    "qk_nope_head_dim": f.int("qk_nope_head_dim", nope),
                    "qk_rope_head_dim": f.int("qk_rope_head_dim", 64), "v_head_dim": f.int("v_head_dim", d_v)}
    shared: list[int] = []
    if kind in ("glm4_moe_lite", "axk1"):
        block["rope_layout"] = "interleaved" if f.bool("rope_interleave", True) else "half"
    else:
        block["rope_layout"] = "interleaved"  # their attention always rotates interleaved pairs
        indexer, shared = _indexer(f, kind, n_layers)
        block["mla"].update(indexer)
    if "moe" not in block:
        dense = []  # every layer dense: the base block is
    for is_dense, is_shared in ((True, False), (False, True), (True, True)):  # each layer's overrides, in groups
        indices = [i for i in range(n_layers) if (i in dense) == is_dense and (i in shared) == is_shared]
        if indices:
            f.layers.append({"indices": indices, "block": {**({"moe": None} if is_dense else {}), **(
                {"mla": {**block["mla"], "index_shared": True}} if is_shared else {})}})
    return block, model


def _axk1(f: Fields) -> tuple[dict, dict]:
    """A.X-K1 (AXK1Config, a DeepseekV3Config): GLM-4.7-Flash's mapping with AXK1Config's defaults (eps 1e-6, 192
    experts of 2048 in 8 groups, top 4 groups, top 8, × 2.5, heads of 128 + 64 with values of 128, the query latent
    1536 always) and one addition: an RMSNorm on the mixture's output (`block.moe.out_norm`; the dense layers have
    none). Its dense layers: mlp_layer_types, or from first_k_dense_replace (1) and moe_layer_freq (1)."""
    return _glm4_moe_lite(f, "axk1")


def _indexer(f: Fields, kind: str, n_layers: int) -> tuple[dict, list[int]]:
    """block.mla's DeepSeek Sparse Attention indexer: index_n_heads heads of index_head_dim, index_topk keys per
    query; DeepSeek-V3.2 rotates the indexer's first qk_rope_head_dim dims in halves, GLM-5 in interleaved pairs.
    And the layers (GLM-5's `indexer_types` "shared") that have no indexer but reuse the previous layer's choice
    (`mla.index_shared`); layer 0 cannot (transformers fails there)."""
    kinds = f.raw("layer_types", None)
    if kinds is not None and kinds != ["indexed_attention"] * n_layers:
        raise f.invalid("layer_types", kinds, f'{n_layers} times "indexed_attention" (every layer has the indexer)')
    f.ignore("layer_types")
    if kind == "glm_moe_dsa":
        types = f.raw("indexer_types", None)
        pattern = f.raw("index_topk_pattern", None)
        if types is not None or pattern is not None:
            f.ignore("index_topk_freq", "index_skip_topk_offset")  # read only to fill in a missing pattern
        if types is not None:
            f.ignore("index_topk_pattern")
        elif isinstance(pattern, str):  # GlmMoeDsaConfig fills it in from the pattern ("FSSF…")
            types = [{"F": "full", "S": "shared"}.get(c, c) for c in pattern]
        elif pattern is not None:
            types = pattern
        else:  # or from the frequency and the offset
            freq, offset = max(f.int("index_topk_freq", 1, minimum=0), 1), f.int("index_skip_topk_offset", 2, minimum=0)
            types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n_layers)]
        if not isinstance(types, list) or len(types) != n_layers or any(t not in ("full", "shared") for t in types):
            raise f.invalid("indexer_types", types, f'an array of {n_layers} indexer kinds, "full" or "shared"')
        if types[0] == "shared":
            raise f.unrepresentable("indexer_types", types, "layer 0 has no earlier layer whose top-k choice it "
                                                            "could reuse (transformers fails on it)")
        shared = [i for i, t in enumerate(types) if t == "shared"]
    else:
        shared = []
    return {"index_heads": f.int("index_n_heads", 64 if kind == "deepseek_v32" else 32),
            "index_head_dim": f.int("index_head_dim", 128), "index_topk": f.int("index_topk", 2048),
            "index_rope_layout": "half" if kind == "deepseek_v32" else "interleaved"}, shared


def _deepseek_v32(f: Fields) -> tuple[dict, dict]:
    return _glm4_moe_lite(f, "deepseek_v32")


def _glm_moe_dsa(f: Fields) -> tuple[dict, dict]:
    return _glm4_moe_lite(f, "glm_moe_dsa")


# DeepSeek's expert layers: mlp.gate (its e_score_correction_bias a buffer), the routed experts per expert or
# fused (E, …), the shared experts fused into one MLP
DEEPSEEK_EXPERTS = (
    *moe_tensors("layers.{i}.mlp.gate", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"),
                 "layers.{i}.mlp.experts"),
    tensor("blocks.{i}.router_bias", "layers.{i}.mlp.gate.e_score_correction_bias"),
    tensor("blocks.{i}.shared_w_gate", "layers.{i}.mlp.shared_experts.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.shared_w_up", "layers.{i}.mlp.shared_experts.up_proj.weight", LINEAR),
    tensor("blocks.{i}.shared_w_down", "layers.{i}.mlp.shared_experts.down_proj.weight", LINEAR),
    # A.X-K1's norm of the mixture's output: transformers' name, or the published checkpoints' (decoder level)
    tensor("blocks.{i}.moe_norm_gamma", "layers.{i}.mlp.post_mlp_layernorm.weight|layers.{i}.post_mlp_layernorm.weight"),
    *(tensor(f"blocks.{{i}}.shared_b_{x}", f"layers.{{i}}.mlp.shared_experts.{x}_proj.bias") for x in
      ("gate", "up", "down")),  # DeepSeek-V2's mlp_bias
)

# Llama's layout with latent attention's projections and norms: q_proj when q_lora_rank is null (V2-Lite),
# else q_a_proj, q_a_layernorm, q_b_proj. attention_bias biases the two down-projections and o_proj; V2's
# mlp_bias its MLP.
DEEPSEEK = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    tensor("blocks.{i}.w_q", "layers.{i}.self_attn.q_proj.weight", LINEAR),
    tensor("blocks.{i}.w_q_a", "layers.{i}.self_attn.q_a_proj.weight", LINEAR),
    tensor("blocks.{i}.b_q_a", "layers.{i}.self_attn.q_a_proj.bias"),
    tensor("blocks.{i}.q_a_norm_gamma", "layers.{i}.self_attn.q_a_layernorm.weight"),
    tensor("blocks.{i}.w_q_b", "layers.{i}.self_attn.q_b_proj.weight", LINEAR),
    tensor("blocks.{i}.w_kv_a", "layers.{i}.self_attn.kv_a_proj_with_mqa.weight", LINEAR),
    tensor("blocks.{i}.b_kv_a", "layers.{i}.self_attn.kv_a_proj_with_mqa.bias"),
    tensor("blocks.{i}.kv_a_norm_gamma", "layers.{i}.self_attn.kv_a_layernorm.weight"),
    tensor("blocks.{i}.w_kv_b", "layers.{i}.self_attn.kv_b_proj.weight", LINEAR),
    tensor("blocks.{i}.w_o", "layers.{i}.self_attn.o_proj.weight", LINEAR),
    tensor("blocks.{i}.b_o", "layers.{i}.self_attn.o_proj.bias"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    *LLAMA_MLP,  # the dense layers' MLP (gate_proj, up_proj, down_proj)
    *DEEPSEEK_EXPERTS,
    tensor("ln_f_gamma", "norm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))


# DeepSeek-V3's published checkpoints hold its multi-token-prediction module as one more layer
# (model.layers.61: eh_proj, enorm, hnorm, shared_head and a decoder layer), which it does not run
DEEPSEEK_V3 = replace(DEEPSEEK, extra_layers="multi-token-prediction")

# GLM-4.5: Llama's attention (with q/k norms) and dense MLP, DeepSeek's expert layers, and like DeepSeek-V3 its
# multi-token-prediction layers stored past the last
GLM4_MOE = TensorMap("model.", LLAMA.tensors + DEEPSEEK_EXPERTS, buffers=LLAMA.buffers,
                     extra_layers="multi-token-prediction")

# Sarvam-30B as its checkpoints store it (and save_pretrained writes it back: transformers' conversion mapping):
# word_embeddings, attention.query_key_value fused Q | K | V (with its bias), attention.dense, query_layernorm and
# key_layernorm, the router's expert_bias; GLM-4.5's names (transformers' in-memory ones) beside
_SARVAM_MOE_STORED = (
    tensor("wte", "word_embeddings.weight"),
    tensor(QKV, "layers.{i}.attention.query_key_value.weight", FUSED),
    tensor(QKV_BIAS, "layers.{i}.attention.query_key_value.bias", FUSED),
    tensor("blocks.{i}.w_o", "layers.{i}.attention.dense.weight", LINEAR),
    tensor("blocks.{i}.q_norm_gamma", "layers.{i}.attention.query_layernorm.weight"),
    tensor("blocks.{i}.k_norm_gamma", "layers.{i}.attention.key_layernorm.weight"),
    tensor("blocks.{i}.router_bias", "layers.{i}.mlp.gate.expert_bias"),
)
SARVAM_MOE = replace(GLM4_MOE, tensors=_SARVAM_MOE_STORED + GLM4_MOE.tensors)

# DeepSeek-V3.2 and GLM-5: DeepSeek-V3's names and the indexer's own projections and key norm
_INDEXER = (
    tensor("blocks.{i}.idx_w_q", "layers.{i}.self_attn.indexer.wq_b.weight", LINEAR),
    tensor("blocks.{i}.idx_w_k", "layers.{i}.self_attn.indexer.wk.weight", LINEAR),
    tensor("blocks.{i}.idx_k_norm_gamma", "layers.{i}.self_attn.indexer.k_norm.weight"),
    tensor("blocks.{i}.idx_k_norm_beta", "layers.{i}.self_attn.indexer.k_norm.bias"),
    tensor("blocks.{i}.idx_w_weights", "layers.{i}.self_attn.indexer.weights_proj.weight", LINEAR),
)
DEEPSEEK_V32 = replace(DEEPSEEK_V3, tensors=DEEPSEEK_V3.tensors + _INDEXER)

# transformers 5.24's DeepseekV32/GlmMoeDsa attention rotates interleaved pairs whatever rope_interleave says
_DSA_UNREAD = {"rope_interleave": "DeepseekV32Config drops it and its attention always rotates interleaved pairs",
               "mlp_bias": "DeepseekV32MLP builds its projections without biases whatever it says"}

FAMILIES = (
    Family("deepseek_v2", "DeepSeek-V2", _deepseek_v2, DEEPSEEK, TRAINING_ONLY),
    Family("minicpm3", "MiniCPM3", _minicpm3, DEEPSEEK, TRAINING_ONLY),
    Family("deepseek_v3", "DeepSeek-V3", _deepseek_v3, DEEPSEEK_V3, TRAINING_ONLY),
    Family("youtu", "Youtu-LLM", _youtu, DEEPSEEK, TRAINING_ONLY),
    Family("sarvam_mla", "Sarvam-105B", _sarvam_mla, DEEPSEEK_V3, TRAINING_ONLY),
    Family("glm4_moe", "GLM-4.5", _glm4_moe, GLM4_MOE, TRAINING_ONLY),
    Family("sarvam_moe", "Sarvam-30B", _sarvam_moe, SARVAM_MOE, TRAINING_ONLY),
    Family("dots1", "dots.llm1", _dots1, GLM4_MOE, TRAINING_ONLY | {"output_router_logits"}),
    Family("glm4_moe_lite", "GLM-4.7-Flash", _glm4_moe_lite, DEEPSEEK_V3, TRAINING_ONLY),
    Family("axk1", "A.X-K1", _axk1, DEEPSEEK_V3, TRAINING_ONLY),
    Family("deepseek_v32", "DeepSeek-V3.2", _deepseek_v32, DEEPSEEK_V32, TRAINING_ONLY, unread=_DSA_UNREAD),
    Family("glm_moe_dsa", "GLM-5", _glm_moe_dsa, DEEPSEEK_V32, TRAINING_ONLY, unread=_DSA_UNREAD),
)
