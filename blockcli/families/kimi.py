"""Kimi-Linear (model_type kimi_linear, transformers' KimiLinearConfig, a DeepseekV3Config diff).

Three layers in four mix tokens by Kimi Delta Attention (`block.linear_attention` with `decay: channel`,
blockcli/deltanet.py): `linear_num_heads` heads of `linear_head_dim` (or `linear_attn_config`'s num_heads, head_dim,
short_conv_kernel_size), a per-channel decay and a sigmoid output gate, both low-rank through the head width. The
others are DeepSeek's multi-head latent attention without rotary positions (KimiLinearModel has no rotary
embedding: `model.positions: none`, the qk_rope_head_dim part read unrotated). Layer types from `layer_types`, else
`linear_attn_config`'s 1-indexed full_attn_layers and kda_layers (both present), else every fourth layer from
layer 4 full. The MLPs: DeepSeek-V3's mixture (sigmoid router with selection bias, groups, renormalised, times
routed_scaling_factor, shared experts), dense on the `mlp_layer_types` "dense" layers (by default the first
first_k_dense_replace, 1). KimiLinearConfig's attribute_map gives six fields a second spelling (num_experts,
num_experts_per_token, num_shared_experts, moe_renormalize, num_expert_group, model_max_length), the one the
published config.json uses.
"""

from __future__ import annotations

from blockcli.families.common import TRAINING_ONLY, Family, model_section, override_layers, silu_gate
from blockcli.families.deepseek import DEEPSEEK
from blockcli.families.fields import Fields
from blockcli.families.llama_relatives import _renamed
from blockcli.families.moe import moe_tensors
from blockcli.tensor_names import DEPTHWISE, LINEAR, PER_HEAD, TensorMap, tensor

# KimiLinearConfig.attribute_map: the published spelling → the field it stands for
_NAMES = {"model_max_length": "max_position_embeddings", "moe_renormalize": "norm_topk_prob",
          "num_expert_group": "n_group", "num_experts": "num_local_experts",
          "num_experts_per_token": "num_experts_per_tok", "num_shared_experts": "n_shared_experts"}
_LINEAR_KEYS = {"head_dim": "linear_head_dim", "num_heads": "linear_num_heads",
                "short_conv_kernel_size": "linear_conv_kernel_dim"}
_MOE_FIELDS = ("num_local_experts", "moe_intermediate_size", "n_shared_experts", "routed_scaling_factor", "n_group",
               "topk_group", "num_experts_per_tok", "norm_topk_prob")


def _layer_kinds(f: Fields, n_layers: int, nested: dict) -> list[bool]:
    """Which layers are KDA layers, with KimiLinearConfig's precedence: layer_types, then linear_attn_config's
    full_attn_layers and kda_layers (1-indexed; both, or neither is read), then full on layers 4, 8, …"""
    types = f.raw("layer_types", None)
    if types is None and "full_attn_layers" in nested and "kda_layers" in nested:
        types = [None] * n_layers
        for key, kind in (("full_attn_layers", "full_attention"), ("kda_layers", "linear_attention")):
            layers = nested[key]
            if not isinstance(layers, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= n_layers
                                                   for i in layers):
                raise f.invalid(f"linear_attn_config.{key}", layers, f"an array of layer numbers 1 … {n_layers}")
            for i in layers:
                types[i - 1] = kind
        if None in types:
            raise f.unrepresentable("linear_attn_config", nested, f"layer {types.index(None) + 1} is in neither "
                                                                  f"full_attn_layers nor kda_layers")
    elif types is None:
        types = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers:
        raise f.invalid("layer_types", types, f"an array of {n_layers} layer types")
    for item in types:
        if item not in ("linear_attention", "full_attention"):
            raise f.unrepresentable("layer_types", item, "these layers are linear_attention or full_attention")
    return [t == "linear_attention" for t in types]


def _kimi_linear(f: Fields) -> tuple[dict, dict]:
    """Kimi-Linear: KDA and NoPE latent-attention layers, DeepSeek-V3's mixture (KimiLinearConfig's defaults:
    the 48B-A3B's shape)."""
    f = _renamed(f, _NAMES)
    nested = f.raw("linear_attn_config", {})
    if not isinstance(nested, dict):
        raise f.invalid("linear_attn_config", nested, "an object")
    unknown = sorted(set(nested) - set(_LINEAR_KEYS) - {"full_attn_layers", "kda_layers"})
    if unknown:  # KimiLinearConfig reads these five keys and no other
        raise f.unrepresentable(f"linear_attn_config.{unknown[0]}", nested[unknown[0]],
                                "transformers' Kimi-Linear reads head_dim, num_heads, short_conv_kernel_size, "
                                "full_attn_layers and kda_layers there, nothing else")
    n_layers = f.int("num_hidden_layers", 27)
    d, heads = f.int("hidden_size", 2304), f.int("num_attention_heads", 32)
    if f.int("num_key_value_heads", heads) != heads:  # kv_b_proj makes one K and V per head
        raise f.unrepresentable("num_key_value_heads", f.data["num_key_value_heads"],
                                f"latent attention expands one K and V per query head ({heads})")
    if f.str("hidden_act", "silu") != "silu":  # the KDA's conv runs hidden_act too; blockcli's runs SiLU
        raise f.unrepresentable("hidden_act", f.data["hidden_act"], "the KDA layers' short conv runs hidden_act, "
                                                                    "which blockcli runs as SiLU only")
    eps = f.float("rms_norm_eps", 1e-5)

    def linear(key: str, default: int) -> int:  # linear_attn_config's value wins over the top-level field
        nested_key = next(k for k, v in _LINEAR_KEYS.items() if v == key)
        if nested_key in nested:
            f.ignore(key)
            return Fields({key: nested[nested_key]}, f"{f.where} (linear_attn_config.{nested_key})", f.family).int(key)
        return f.int(key, default)

    width = linear("linear_head_dim", 128)
    mixer = {"key_heads": linear("linear_num_heads", 32), "key_head_dim": width, "value_head_dim": width,
             "conv_kernel": linear("linear_conv_kernel_dim", 4), "norm_eps": eps, "decay": "channel"}
    mixer["value_heads"] = mixer["key_heads"]
    f.ignore("head_dim", "qk_head_dim", "pretraining_tp")  # head_dim: set to qk_rope_head_dim by the config class
    q_rank = 0 if f.raw("q_lora_rank", None) is None else f.int("q_lora_rank")
    mla = {"q_lora_rank": q_rank, "kv_lora_rank": f.int("kv_lora_rank", 512),
           "qk_nope_head_dim": f.int("qk_nope_head_dim", 128), "qk_rope_head_dim": f.int("qk_rope_head_dim", 64),
           "v_head_dim": f.int("v_head_dim", 128)}
    if f.bool("attention_bias", False):  # KDA's projections never have biases; MLA's kv_a and o_proj would
        raise f.unrepresentable("attention_bias", True, "blockcli reads Kimi-Linear without biases (transformers "
                                                        "biases only its latent attention's kv_a_proj and o_proj)")
    block = {"d_model": d, "n_heads": heads, "d_ff": f.int("intermediate_size", 9216), "norm": "rmsnorm",
             "norm_eps": eps, **silu_gate(f), "bias": False, "placement": "pre", "rope": False}
    model = model_section(n_layers, f.int("vocab_size", 163840), "none",
                          f.int("max_position_embeddings", 1048576), False)
    kinds = f.raw("mlp_layer_types", None)
    if kinds is None:
        first = min(f.int("first_k_dense_replace", 1, minimum=0), n_layers)
        kinds = ["dense"] * first + ["sparse"] * (n_layers - first)
    else:
        f.ignore("first_k_dense_replace")  # read only to fill in a missing mlp_layer_types
    if not isinstance(kinds, list) or len(kinds) != n_layers or any(k not in ("dense", "sparse") for k in kinds):
        raise f.invalid("mlp_layer_types", kinds, f'an array of {n_layers} layer kinds, "dense" or "sparse"')
    dense = [i for i, k in enumerate(kinds) if k == "dense"]
    if len(dense) == n_layers:
        f.ignore(*_MOE_FIELDS)
        f.notes.append("every layer dense (mlp_layer_types): the expert settings are unused")
    else:
        d_expert = f.int("moe_intermediate_size", 1024)
        block["moe"] = {"n_experts": f.int("num_local_experts", 256), "top_k": f.int("num_experts_per_tok", 8),
                        "d_expert": d_expert, "routed_scaling": f.float("routed_scaling_factor", 2.446, high=1e6),
                        "d_shared": d_expert * f.int("n_shared_experts", 1, minimum=0), "scoring": "sigmoid",
                        "selection_bias": True, "group_score": "top2_sum", "renormalize": f.bool("norm_topk_prob", True),
                        "n_groups": f.int("n_group", 1), "top_groups": f.int("topk_group", 1)}
    kda = {"linear_attention": mixer, "mla": None}
    attention = {"linear_attention": None, "mla": mla}
    linear_layers = _layer_kinds(f, n_layers, nested)
    block.update(kda if linear_layers[0] else attention)
    override_layers(f, [i for i, lin in enumerate(linear_layers) if lin != linear_layers[0]],
                    attention if linear_layers[0] else kda)
    if "moe" in block and dense:
        override_layers(f, dense, {"moe": None})
    return block, model


def _either(published: str, loaded: str) -> str:
    """A tensor saved under the published checkpoints' name (transformers writes that one back) or transformers'
    in-memory one."""
    return f"layers.{{i}}.{published}|layers.{{i}}.{loaded}"


# the KDA layers as the published checkpoints (and save_pretrained) store them: a short conv each for q, k and v,
# the decay's projections and parameters on the attention itself; transformers' own names beside
_KDA = (
    tensor("blocks.{i}.dn_q", "layers.{i}.self_attn.q_proj.weight", LINEAR),
    tensor("blocks.{i}.dn_k", "layers.{i}.self_attn.k_proj.weight", LINEAR),
    tensor("blocks.{i}.dn_v", "layers.{i}.self_attn.v_proj.weight", LINEAR),
    *(tensor(f"blocks.{{i}}.dn_{x}_conv", f"layers.{{i}}.self_attn.{x}_conv1d.weight", DEPTHWISE) for x in "qkv"),
    tensor("blocks.{i}.dn_q_conv blocks.{i}.dn_k_conv blocks.{i}.dn_v_conv", "layers.{i}.self_attn.conv1d.weight",
           DEPTHWISE),  # transformers' in-memory name: the three stacked
    tensor("blocks.{i}.dn_dt_bias", _either("self_attn.dt_bias", "self_attn.forget_gate.dt_bias")),
    tensor("blocks.{i}.dn_A_log", _either("self_attn.A_log", "self_attn.forget_gate.A_log"), PER_HEAD),
    tensor("blocks.{i}.dn_f_a", _either("self_attn.f_a_proj.weight", "self_attn.forget_gate.f_a_proj.weight"), LINEAR),
    tensor("blocks.{i}.dn_f_b", _either("self_attn.f_b_proj.weight", "self_attn.forget_gate.f_b_proj.weight"), LINEAR),
    tensor("blocks.{i}.dn_b", "layers.{i}.self_attn.b_proj.weight", LINEAR),
    tensor("blocks.{i}.dn_g_a", "layers.{i}.self_attn.g_a_proj.weight", LINEAR),
    tensor("blocks.{i}.dn_g_b", "layers.{i}.self_attn.g_b_proj.weight", LINEAR),
    tensor("blocks.{i}.dn_norm_gamma", "layers.{i}.self_attn.o_norm.weight"),
    tensor("blocks.{i}.dn_out", "layers.{i}.self_attn.o_proj.weight", LINEAR),
)
# the MLPs under block_sparse_moe (dense ones too), the experts per expert as w1 (gate), w3 (up), w2 (down); or
# transformers' in-memory names (mlp., the fused experts)
_MLP = (
    tensor("blocks.{i}.router", _either("block_sparse_moe.gate.weight", "mlp.gate.weight"), LINEAR),
    tensor("blocks.{i}.router_bias", _either("block_sparse_moe.gate.e_score_correction_bias",
                                             "mlp.gate.e_score_correction_bias")),
    *moe_tensors("layers.{i}.block_sparse_moe.gate", "layers.{i}.block_sparse_moe.experts", ("w1", "w3", "w2"),
                 "layers.{i}.mlp.experts")[1:],
    *(tensor(f"blocks.{{i}}.shared_w_{x}", _either(f"block_sparse_moe.shared_experts.{x}_proj.weight",
                                                  f"mlp.shared_experts.{x}_proj.weight"), LINEAR)
      for x in ("gate", "up", "down")),
    *(tensor(f"blocks.{{i}}.w_{x}", _either(f"block_sparse_moe.{x}_proj.weight", f"mlp.{x}_proj.weight"), LINEAR)
      for x in ("gate", "up", "down")),
)
# DeepSeek's embedding, norms, latent attention and LM head, and the KDA layers and MLPs above
KIMI_LINEAR = TensorMap("model.", tuple(t for t in DEEPSEEK.tensors if ".mlp." not in t.name) + _KDA + _MLP)

_UNREAD = {
    "mla_use_nope": "transformers' Kimi-Linear latent attention never rotates (KimiLinearModel has no rotary embedding)",
    "rope_theta": "transformers' Kimi-Linear has no rotary positions (NoPE latent attention)",
    "rope_scaling": "transformers' Kimi-Linear has no rotary positions (NoPE latent attention)",
    "rope_parameters": "KimiLinearConfig drops it: no rotary positions (NoPE latent attention)",
    "moe_router_activation_func": "KimiLinearTopkRouter always scores by a sigmoid",
    "moe_layer_freq": "KimiLinearConfig does not read it: the MLPs follow mlp_layer_types (first_k_dense_replace)",
    "use_grouped_topk": "KimiLinearTopkRouter always limits the choice by groups (n_group)",
    "num_nextn_predict_layers": "the multi-token-prediction layers, which transformers does not build",
    "tie_word_embeddings": "KimiLinearForCausalLM ties no weights (its _tied_weights_keys is empty)",
}

FAMILIES = (
    Family("kimi_linear", "Kimi-Linear", _kimi_linear, KIMI_LINEAR, TRAINING_ONLY | {"output_router_logits"},
           unread=_UNREAD),
)
