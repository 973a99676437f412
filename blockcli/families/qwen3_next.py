"""The hybrid linear-attention families: Qwen3-Next, Qwen3.5 and Qwen3.5-MoE (and their vision-language models).

Three layers in four (`layer_types`, or every `full_attention_interval`-th layer full, default 4) mix tokens
with the Gated DeltaNet (`block.linear_attention`, blockcli/deltanet.py): `linear_num_key_heads` ×
`linear_key_head_dim`, `linear_num_value_heads` × `linear_value_head_dim`, a short conv of
`linear_conv_kernel_dim` taps. The others are gated attention (`block.attention_gate`: q_proj twice as wide,
each head [q | gate], the output times σ(gate)), per-head q/k RMSNorm, RoPE on `partial_rotary_factor` (0.25)
of each head. Every RMSNorm but the DeltaNet's output norm scales by (1 + w). Qwen3-Next and Qwen3.5-MoE
have Qwen2-MoE's mixture (a sigmoid-gated shared expert); Qwen3.5 a dense SwiGLU MLP.

Checkpoint tensors: Qwen3-Next fuses q | k | v | z into `in_proj_qkvz` and b | a into `in_proj_ba`, the rows
grouped by key head (GROUPED_KEY_HEADS); Qwen3.5 stores `in_proj_qkv` (q | k | v), `in_proj_z`, `in_proj_b`,
`in_proj_a`. The conv's weight is nn.Conv1d's (C, 1, K) (DEPTHWISE).
"""

from __future__ import annotations

from blockcli.families.common import (TRAINING_ONLY, Composite, Family, gated_rms, override_layers, refuse_nulls,
                                      silu_gate, window_width, with_data)
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA, LLAMA_MLP, OLMO2, QWEN_VL_PATHS, QWEN_VL_TOP, text_only_mrope
from blockcli.families.moe import MOE_TRAINING_ONLY, QWEN_MOE, _dense_layers
from blockcli.tensor_names import DEPTHWISE, FUSED, GROUPED_HEADS, GROUPED_KEY_HEADS, LINEAR, TensorMap, tensor

LINEAR_ATTENTION, FULL_ATTENTION = "linear_attention", "full_attention"


def _layer_kinds(f: Fields, n_layers: int) -> list[bool]:
    """Which layers are linear attention: `layer_types`, or all but every `full_attention_interval`-th."""
    types = f.raw("layer_types", None)
    if types is None:
        interval = f.int("full_attention_interval", 4)
        return [bool((i + 1) % interval) for i in range(n_layers)]
    f.ignore("full_attention_interval")
    if not isinstance(types, list) or len(types) != n_layers:
        raise f.invalid("layer_types", types, f"an array of {n_layers} layer types")
    for item in types:
        if item not in (LINEAR_ATTENTION, FULL_ATTENTION):
            raise f.unrepresentable("layer_types", item, "these layers are linear_attention or full_attention")
    return [t == LINEAR_ATTENTION for t in types]


def _hybrid(f: Fields, kv_default: int) -> tuple[dict, dict]:
    """The block every one of these families shares: gated attention or Gated DeltaNet per layer."""
    f, _ = text_only_mrope(f)  # Qwen3.5's interleaved M-RoPE: text alone is plain RoPE
    block, model = gated_rms(f, silu_gate, kv_default=kv_default, tie_default=False, head_dim_default=256,
                             mlp_bias=False, fraction_keys=("partial_rotary_factor",), fraction_default=0.25)
    if f.str("hidden_act", "silu") != "silu":  # the DeltaNet's conv runs hidden_act too; blockcli's runs SiLU
        raise f.unrepresentable("hidden_act", f.data["hidden_act"], "the linear-attention layers' short conv runs "
                                                                    "hidden_act, which blockcli runs as SiLU only")
    block["norm_unit_offset"] = True
    mixer = {"key_heads": f.int("linear_num_key_heads", 16), "value_heads": f.int("linear_num_value_heads", 32),
             "key_head_dim": f.int("linear_key_head_dim", 128), "value_head_dim": f.int("linear_value_head_dim", 128),
             "conv_kernel": f.int("linear_conv_kernel_dim", 4), "norm_eps": block["norm_eps"]}
    if mixer["value_heads"] % mixer["key_heads"]:
        raise f.unrepresentable("linear_num_value_heads", mixer["value_heads"],
                                f"each of the {mixer['key_heads']} key heads serves as many value heads")
    # the gated attention layers: per-head q/k norms and the output gate; the DeltaNet layers have neither
    attention = {"linear_attention": None, "qk_norm": "head", "attention_gate": True}
    delta = {"linear_attention": mixer, "qk_norm": "none", "attention_gate": False}
    linear = _layer_kinds(f, model["n_layers"])
    block.update(delta if linear[0] else attention)
    override_layers(f, [i for i, lin in enumerate(linear) if lin != linear[0]], attention if linear[0] else delta)
    return block, model


def _moe(f: Fields, block: dict, model: dict, experts: int, top_k: int, renormalize: bool, dense: list[int]) -> None:
    """Qwen2-MoE's mixture with its sigmoid-gated shared expert; the `dense` layers an MLP of intermediate_size."""
    block["moe"] = {"n_experts": f.int("num_experts", experts), "top_k": f.int("num_experts_per_tok", top_k),
                    "d_expert": f.int("moe_intermediate_size", 512), "renormalize": renormalize,
                    "d_shared": f.int("shared_expert_intermediate_size", 512), "shared_gate": True}
    if len(dense) == model["n_layers"]:  # every layer dense: the expert settings are unused
        del block["moe"]
    elif dense:
        override_layers(f, dense, {"moe": None})


def _qwen3_next(f: Fields) -> tuple[dict, dict]:
    """Qwen3-Next: the hybrid block with 2 K/V heads and Qwen2-MoE's mixture (512 experts, top 10, renormalised by
    `norm_topk_prob`, a shared expert of 512); dense layers (intermediate_size) by mlp_only_layers / decoder_sparse_step."""
    block, model = _hybrid(f, kv_default=2)
    if f.int("num_experts", 512, minimum=0) > 0:
        _moe(f, block, model, 512, 10, f.bool("norm_topk_prob", True), _dense_layers(f, model["n_layers"]))
    else:
        f.ignore("num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob",
                 "decoder_sparse_step", "mlp_only_layers")
    return block, model


def _qwen3_5_text(f: Fields) -> tuple[dict, dict]:
    """Qwen3.5's language model: the hybrid block with 4 K/V heads and a dense SwiGLU MLP."""
    return _hybrid(f, kv_default=4)


def _qwen3_5_moe_text(f: Fields) -> tuple[dict, dict]:
    """Qwen3.5-MoE's language model: the hybrid block with 2 K/V heads and a mixture on every layer (256 experts,
    top 8 always renormalised, a sigmoid-gated shared expert of 512)."""
    if f.data.get("intermediate_size") is None:  # Qwen3_5MoeTextConfig has none: every layer is a mixture
        f = with_data(f, {**f.data, "intermediate_size": f.int("moe_intermediate_size", 512)})
    block, model = _hybrid(f, kv_default=2)
    _moe(f, block, model, 256, 8, True, [])
    return block, model


def _olmo_hybrid(f: Fields) -> tuple[dict, dict]:
    """OLMo Hybrid (allenai's Olmo-Hybrid-7B): OLMo 3's attention layers (each branch's output normalised before its
    residual add, q and k normalised over the whole projection, biases attention_bias, full attention always) and,
    per `layer_types` (by default every fourth layer attention, the last one if none is), Llama's pre-norm layers
    whose token mixer is the Gated DeltaNet with separate q/k/v/a/b/g projections: linear_num_key_heads (default
    num_attention_heads) of linear_key_head_dim (default ⌊0.75·d / key heads⌋), linear_num_value_heads of
    linear_value_head_dim (default twice the key's), a linear_conv_kernel_dim-tap conv without bias, β = 2·σ(b) with
    linear_allow_neg_eigval (beta_scale 2), the output's gated RMSNorm at eps 1e-5 always (FLA's, not rms_norm_eps).
    RoPE (rope_parameters) on the attention layers, none when its rope_theta is null (the released checkpoints)."""
    rope = f.data.get("rope_parameters")
    legacy = f.data.get("rope_theta", 0.0) if rope is None else 0.0
    nope = (isinstance(rope, dict) and rope.get("rope_theta") is None) or (f.has("rope_theta") and legacy is None)
    data = f.data
    if nope:  # OlmoHybridModel builds no rotary embedding: the attention layers have no positions
        f.ignore("rope_parameters", "rope_theta", "rope_scaling")
        data = {k: v for k, v in f.data.items() if k not in ("rope_parameters", "rope_theta", "rope_scaling")}
    if f.has("head_dim"):  # OlmoHybridConfig deletes the field: each head is hidden_size / num_attention_heads wide
        raise f.unrepresentable("head_dim", f.data["head_dim"], "not a field of OlmoHybridConfig: its heads are "
                                                                "hidden_size / num_attention_heads wide")
    g = with_data(f, {"hidden_size": 3840, "intermediate_size": 11008, "num_hidden_layers": 32,
                      "num_attention_heads": 30, "vocab_size": 100352, "max_position_embeddings": 65536, **data})
    block, model = gated_rms(g, silu_gate, kv_default=None, tie_default=False, mlp_bias=False)
    if f.str("hidden_act", "silu") != "silu":  # the DeltaNet's conv runs hidden_act too; blockcli's runs SiLU
        raise f.unrepresentable("hidden_act", f.data["hidden_act"], "the linear-attention layers' short conv runs "
                                                                    "hidden_act, which blockcli runs as SiLU only")
    if nope:
        block["rope"], model["positions"] = False, "none"
        block.pop("rope_scaling", None)
    n_layers, d, heads = model["n_layers"], block["d_model"], block["n_heads"]
    key_heads = f.int("linear_num_key_heads", heads)
    key_dim = f.int("linear_key_head_dim", int(0.75 * d / key_heads))
    mixer = {"key_heads": key_heads, "value_heads": f.int("linear_num_value_heads", heads), "key_head_dim": key_dim,
             "value_head_dim": f.int("linear_value_head_dim", 2 * key_dim),
             "conv_kernel": f.int("linear_conv_kernel_dim", 4), "norm_eps": 1e-5,
             "beta_scale": 2.0 if f.bool("linear_allow_neg_eigval", True) else 1.0, "split_conv": True}
    if mixer["value_heads"] % key_heads:
        raise f.unrepresentable("linear_num_value_heads", mixer["value_heads"],
                                f"each of the {key_heads} key heads serves as many value heads")
    f.ignore("linear_a_log_min", "linear_a_log_max", "linear_dt_min", "linear_dt_max", "linear_dt_init_floor")  # init
    if f.raw("layer_types", None) is None:  # OlmoHybridConfig's default: every fourth layer attention
        linear = [i % 4 != 3 for i in range(n_layers)]
        if all(linear):
            linear[-1] = False
    else:
        linear = _layer_kinds(f, n_layers)
    if all(linear) or not any(linear):  # OlmoHybridConfig.validate_architecture refuses both
        raise f.invalid("layer_types", f.data.get("layer_types"), "linear_attention and full_attention layers both")
    attention = {"linear_attention": None, "placement": "post_branch", "qk_norm": "projection"}
    delta = {"linear_attention": mixer, "placement": "pre", "qk_norm": "none"}
    block.update(delta if linear[0] else attention)
    override_layers(f, [i for i, lin in enumerate(linear) if lin != linear[0]], attention if linear[0] else delta)
    return block, model


_LARA_SIZES = {"vocab_size": 151936, "hidden_size": 1024, "num_hidden_layers": 34, "num_attention_heads": 16,
               "max_position_embeddings": 131072}
_LARA_KINDS = (LINEAR_ATTENTION, "sliding_attention", FULL_ATTENTION)


def _lara_mini(f: Fields) -> tuple[dict, dict]:
    """Lara-4-Mini (LaraMiniConfig, a diff of Qwen3-Next's): plain RMSNorms (a scale w, not 1 + w), Qwen3's attention
    without the output gate (per-head q/k RMSNorm, `attention_bias` on q/k/v/o, GQA 16/4 of head_dim 128), Qwen3.5's
    Gated DeltaNet (separate q|k|v, z, b, a projections; a conv of linear_conv_kernel_dim taps without bias; its
    gated output norm at rms_norm_eps), by `layer_types` (by default the period-5 pattern linear, sliding, linear,
    full, sliding): windows of `sliding_window` (512) with RoPE over the whole head on the sliding layers, NoPE on
    the full ones; Flint's mixture on every layer (softmax router, top num_experts_per_tok renormalised per
    norm_topk_prob, an ungated shared expert of shared_expert_intermediate_size); tied embeddings by default."""
    for key in ("intermediate_size", "decoder_sparse_step", "mlp_only_layers", "full_attention_interval",
                "partial_rotary_factor"):  # Qwen3-Next's fields LaraMiniConfig drops (AttributeError)
        if f.has(key):
            raise f.unrepresentable(key, f.data[key], "not a field of LaraMiniConfig (its layers are all mixtures; "
                                                      "RoPE turns the whole head)")
    refuse_nulls(f, "head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "shared_expert_intermediate_size", "sliding_window", "num_key_value_heads")
    rope = f.data.get("rope_parameters")
    if isinstance(rope, dict) and "partial_rotary_factor" in rope:  # the default RoPE of LaraMini ignores it
        raise f.unrepresentable("rope_parameters.partial_rotary_factor", rope["partial_rotary_factor"],
                                "LaraMiniRotaryEmbedding turns the whole head (its default RoPE never reads it)")
    g = with_data(f, {**_LARA_SIZES, **f.data, "intermediate_size": f.int("moe_intermediate_size", 512)})
    block, model = gated_rms(g, silu_gate, kv_default=4, tie_default=True, head_dim_default=128, mlp_bias=False,
                             eps_default=1e-6)
    if f.str("hidden_act", "silu") != "silu":  # the DeltaNet's conv runs hidden_act too; blockcli's runs SiLU
        raise f.unrepresentable("hidden_act", f.data["hidden_act"], "the linear-attention layers' short conv runs "
                                                                    "hidden_act, which blockcli runs as SiLU only")
    n = model["n_layers"]
    mixer = {"key_heads": f.int("linear_num_key_heads", 8), "value_heads": f.int("linear_num_value_heads", 16),
             "key_head_dim": f.int("linear_key_head_dim", 128), "value_head_dim": f.int("linear_value_head_dim", 128),
             "conv_kernel": f.int("linear_conv_kernel_dim", 4), "norm_eps": block["norm_eps"]}
    if mixer["value_heads"] % mixer["key_heads"]:
        raise f.unrepresentable("linear_num_value_heads", mixer["value_heads"],
                                f"each of the {mixer['key_heads']} key heads serves as many value heads")
    types = f.raw("layer_types", None)
    if types is None:  # LaraMiniConfig.__post_init__'s released pattern
        pattern = (LINEAR_ATTENTION, "sliding_attention", LINEAR_ATTENTION, FULL_ATTENTION, "sliding_attention")
        types = [pattern[i % 5] for i in range(n)]
    if not isinstance(types, list) or len(types) != n:
        raise f.invalid("layer_types", types, f"an array of {n} layer types")
    for item in types:
        if item not in _LARA_KINDS:
            raise f.unrepresentable("layer_types", item, "these layers are " + ", ".join(_LARA_KINDS))
    window = f.raw("sliding_window", 512)
    f.ignore("sliding_window")
    window = window_width(f, "sliding_window", window)
    kinds = {LINEAR_ATTENTION: {"linear_attention": mixer, "qk_norm": "none", "rope": False, "sliding_window": 0},
             "sliding_attention": {"linear_attention": None, "qk_norm": "head", "rope": block["rope"],
                                   "sliding_window": window},
             FULL_ATTENTION: {"linear_attention": None, "qk_norm": "head", "rope": False, "sliding_window": 0}}
    # the base block is the sliding layers' (RoPE): every other layer, layer 0 too, an override without positions
    # (a base block's rope: false would read as RoPE under positions: rope; an override's is NoPE)
    block.update(kinds["sliding_attention"])
    for kind in (LINEAR_ATTENTION, FULL_ATTENTION):
        override_layers(f, [i for i, t in enumerate(types) if t == kind], kinds[kind])
    n_experts, top_k = f.int("num_experts", 128), f.int("num_experts_per_tok", 4)
    if top_k > n_experts:
        raise f.invalid("num_experts_per_tok", top_k, f"at most num_experts ({n_experts})")
    shared = f.int("shared_expert_intermediate_size", 512, minimum=0)
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": block["d_ff"],
                    "renormalize": f.bool("norm_topk_prob", True), **({"d_shared": shared} if shared else {})}
    return block, model


_NORMS_AND_EMBEDDINGS = tuple(t for t in LLAMA.tensors if "self_attn" not in t.name and t not in LLAMA_MLP)
_ATTENTION = (
    tensor("blocks.{i}.w_q blocks.{i}.w_attn_gate", "layers.{i}.self_attn.q_proj.weight", GROUPED_HEADS),
    tensor("blocks.{i}.b_q blocks.{i}.b_attn_gate", "layers.{i}.self_attn.q_proj.bias", GROUPED_HEADS),
    *(t for t in LLAMA.tensors if "self_attn" in t.name and "q_proj" not in t.name),
)
_DELTANET = (
    tensor("blocks.{i}.dn_conv", "layers.{i}.linear_attn.conv1d.weight", DEPTHWISE),
    tensor("blocks.{i}.dn_dt_bias", "layers.{i}.linear_attn.dt_bias"),
    tensor("blocks.{i}.dn_A_log", "layers.{i}.linear_attn.A_log"),
    tensor("blocks.{i}.dn_norm_gamma", "layers.{i}.linear_attn.norm.weight"),
    tensor("blocks.{i}.dn_out", "layers.{i}.linear_attn.out_proj.weight", LINEAR),
)
_QWEN3_NEXT_DELTANET = _DELTANET + (
    tensor("blocks.{i}.dn_q blocks.{i}.dn_k blocks.{i}.dn_v blocks.{i}.dn_z", "layers.{i}.linear_attn.in_proj_qkvz.weight",
           GROUPED_KEY_HEADS),
    tensor("blocks.{i}.dn_b blocks.{i}.dn_a", "layers.{i}.linear_attn.in_proj_ba.weight", GROUPED_KEY_HEADS),
)
_QWEN3_5_DELTANET = _DELTANET + (
    tensor("blocks.{i}.dn_q blocks.{i}.dn_k blocks.{i}.dn_v", "layers.{i}.linear_attn.in_proj_qkv.weight", FUSED),
    tensor("blocks.{i}.dn_z", "layers.{i}.linear_attn.in_proj_z.weight", LINEAR),
    tensor("blocks.{i}.dn_b", "layers.{i}.linear_attn.in_proj_b.weight", LINEAR),
    tensor("blocks.{i}.dn_a", "layers.{i}.linear_attn.in_proj_a.weight", LINEAR),
)
_MOE = tuple(t for t in QWEN_MOE.tensors if ".mlp." in t.name)  # router, experts, shared expert (and dense MLPs)

# the published checkpoints' multi-token-prediction head (mtp.*), which transformers does not load: set aside
_MTP_TENSORS = ("mtp.",)
QWEN3_NEXT = TensorMap("model.", _NORMS_AND_EMBEDDINGS + _ATTENTION + _QWEN3_NEXT_DELTANET + _MOE,
                       buffers=LLAMA.buffers, aside=_MTP_TENSORS)
QWEN3_5 = TensorMap("model.", _NORMS_AND_EMBEDDINGS + _ATTENTION + _QWEN3_5_DELTANET + LLAMA_MLP,
                    buffers=LLAMA.buffers, aside=_MTP_TENSORS)
QWEN3_5_MOE = TensorMap("model.", _NORMS_AND_EMBEDDINGS + _ATTENTION + _QWEN3_5_DELTANET + _MOE,
                        buffers=LLAMA.buffers, aside=_MTP_TENSORS)
# OLMo Hybrid: OLMo 2's attention names; its norms by layer kind as published (OLMo-core's attention_layer_norm
# before the DeltaNet, feedforward_layer_norm before its MLP or after attention, post_feedforward_layernorm after an
# attention layer's MLP) or as transformers holds them (input_layernorm, post_attention_layernorm); the DeltaNet's
# separate projections (g_proj the output gate z) under linear_attn., its conv three tensors (q_, k_, v_conv1d) or
# transformers' one conv1d over q | k | v
_L = "layers.{i}.linear_attn"
_NORM_1 = "attention_layer_norm|input_layernorm"  # before a DeltaNet layer's mixer
_NORM_2 = "feedforward_layer_norm|post_attention_layernorm"  # before its MLP, or after an attention layer's attention
OLMO_HYBRID = TensorMap("model.", tuple(t for t in OLMO2.tensors if "layernorm" not in t.name) + (
    tensor("blocks.{i}.ln1_gamma", "|".join(f"layers.{{i}}.{n}.weight" for n in (_NORM_1 + "|" + _NORM_2).split("|"))),
    tensor("blocks.{i}.ln2_gamma", "|".join(f"layers.{{i}}.{n}.weight" for n in
                                            ("post_feedforward_layernorm|" + _NORM_2).split("|"))),
    tensor("blocks.{i}.dn_q_conv", f"{_L}.q_conv1d.weight", DEPTHWISE),
    tensor("blocks.{i}.dn_k_conv", f"{_L}.k_conv1d.weight", DEPTHWISE),
    tensor("blocks.{i}.dn_v_conv", f"{_L}.v_conv1d.weight", DEPTHWISE),
    tensor("blocks.{i}.dn_q_conv blocks.{i}.dn_k_conv blocks.{i}.dn_v_conv", f"{_L}.conv1d.weight", DEPTHWISE),
    *(tensor(f"blocks.{{i}}.dn_{key}", f"{_L}.{name}_proj.weight", LINEAR)
      for key, name in (("q", "q"), ("k", "k"), ("v", "v"), ("a", "a"), ("b", "b"), ("z", "g"), ("out", "o"))),
    tensor("blocks.{i}.dn_dt_bias", f"{_L}.dt_bias"),
    tensor("blocks.{i}.dn_A_log", f"{_L}.A_log"),
    tensor("blocks.{i}.dn_norm_gamma", f"{_L}.o_norm.weight"),
), buffers=LLAMA.buffers)
# Lara-4-Mini: Qwen3's attention names (q_norm, k_norm), the DeltaNet as the published checkpoints and save_pretrained
# hold it (one in_proj, rows q | k | v | z | b | a; its gated norm out_norm) or as transformers holds it in memory
# (Qwen3.5's in_proj_qkv, in_proj_z, in_proj_b, in_proj_a; norm), the router mlp.gate, the experts fused per layer
# (E, 2·d_e, d) and (E, d, d_e) and the ungated shared expert
LARA_MINI = TensorMap("model.", _NORMS_AND_EMBEDDINGS + tuple(t for t in LLAMA.tensors if "self_attn" in t.name) + (
    tensor("blocks.{i}.dn_conv", "layers.{i}.linear_attn.conv1d.weight", DEPTHWISE),
    tensor("blocks.{i}.dn_dt_bias", "layers.{i}.linear_attn.dt_bias"),
    tensor("blocks.{i}.dn_A_log", "layers.{i}.linear_attn.A_log"),
    tensor("blocks.{i}.dn_norm_gamma", "layers.{i}.linear_attn.out_norm.weight|layers.{i}.linear_attn.norm.weight"),
    tensor("blocks.{i}.dn_out", "layers.{i}.linear_attn.out_proj.weight", LINEAR),
    tensor("blocks.{i}.dn_q blocks.{i}.dn_k blocks.{i}.dn_v blocks.{i}.dn_z blocks.{i}.dn_b blocks.{i}.dn_a",
           "layers.{i}.linear_attn.in_proj.weight", FUSED),
) + _QWEN3_5_DELTANET[len(_DELTANET):] + _MOE, buffers=LLAMA.buffers)
_VL_PATHS = {**QWEN_VL_PATHS, "aside": QWEN_VL_PATHS["aside"] + _MTP_TENSORS}

# fields of the published configs that transformers 5.24's Qwen3-Next / Qwen3.5 modelling code never reads
_UNREAD = {"mtp_num_hidden_layers": "the multi-token-prediction layers (mtp.*), which transformers does not build",
           "mtp_use_dedicated_embeddings": "the multi-token-prediction layers' embeddings, which transformers does not "
                                           "build",
           "attn_output_gate": "transformers' attention always gates its output (q_proj twice as wide)",
           "mamba_ssm_dtype": "the dtype of the recurrent state in other engines; transformers keeps it in the "
                              "activations' dtype (float32 in its kernels)"}

COMPOSITES = (
    # Qwen3.5 and Qwen3.5-MoE: the language model under model.language_model., the vision tower under model.visual.;
    # Qwen3_5Config's tie_word_embeddings (default false) decides
    Composite("qwen3_5", "Qwen3.5 (vision-language)", "qwen3_5_text", False, QWEN_VL_TOP, {
        "vocab_size": 248320, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
        "num_attention_heads": 16, "max_position_embeddings": 32768}, tie="top", **_VL_PATHS),
    Composite("qwen3_5_moe", "Qwen3.5-MoE (vision-language)", "qwen3_5_moe_text", False, QWEN_VL_TOP, {
        "vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40,
        "num_attention_heads": 16, "max_position_embeddings": 32768}, tie="top", **_VL_PATHS),
)

FAMILIES = (
    Family("qwen3_next", "Qwen3-Next", _qwen3_next, QWEN3_NEXT, MOE_TRAINING_ONLY, unread=_UNREAD, aux_loss=True),
    Family("qwen3_5_text", "Qwen3.5's language model", _qwen3_5_text, QWEN3_5, MOE_TRAINING_ONLY, unread=_UNREAD),
    Family("qwen3_5_moe_text", "Qwen3.5-MoE's language model", _qwen3_5_moe_text, QWEN3_5_MOE, MOE_TRAINING_ONLY,
           unread=_UNREAD, aux_loss=True),
    Family("olmo_hybrid", "OLMo Hybrid", _olmo_hybrid, OLMO_HYBRID, TRAINING_ONLY),
    Family("lara_mini", "Lara-4-Mini", _lara_mini, LARA_MINI, MOE_TRAINING_ONLY, aux_loss=True),
)
