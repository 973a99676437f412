"""Gemma 3n (gemma3n_text, and the gemma3n multimodal composite's language model), as transformers 5.24's
Gemma3nTextConfig and modeling_gemma3n.py build it.

Gemma 4's attention and block as a diff (plain RMSNorms γ, q/k norms per head, values normalised without scale,
scores unscaled, sliding and full layers with their own RoPE bases, the last `num_kv_shared_layers` layers reusing
the keys and values of the last earlier layer of their kind, per-layer embeddings), one head width and K/V head
count for every layer, no experts and no layer scalar, and, new in Gemma 3n:

- AltUp (`altup_num_inputs` streams, `altup_active_idx`, `altup_correct_scale`: `block.altup`, `altup_active`,
  `altup_correct_scale`): the model carries N residual streams; each layer predicts them, runs on the active one
  and corrects them all; the per-layer input joins streams 1 … N−1;
- LAuReL (`laurel_rank`: `block.laurel_rank`), a low-rank residual beside the attention;
- activation sparsity (`activation_sparsity_pattern`, per layer: `block.activation_sparsity`), a gaussian top-k
  on the MLP's gate;
- per-layer MLP widths (`intermediate_size` a list), and token ids past the per-layer table reading its row 0
  (`model.per_layer_clamp`).

Gemma 4's per-layer inputs are Gemma 3n's (e_l = (norm(x₀·W_P/√d)_l + √d_p·E_P[ids]_l)/√2, checked against
Gemma3nTextModel.get_per_layer_inputs / project_per_layer_inputs), except that Gemma 3n maps ids outside the
per-layer table to 0 where Gemma 4 looks them up; the branch that reads them differs (it gates the scaled,
corrected active stream and joins the other streams), so it is AltUp's own step in the block code.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from blockcli.families.common import TRAINING_ONLY, Composite, Family, mlp_activation, model_section
from blockcli.families.fields import Fields
from blockcli.families.gemma4 import ATTENTION, DENSE_MLP, PER_LAYER_INPUT, PER_LAYER_TABLES
from blockcli.tensor_names import LINEAR, TensorMap, tensor

_KINDS = ("full_attention", "sliding_attention")
_THETA = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}  # Gemma3nTextConfig.default_theta
_MAX_STREAMS = 64  # block.altup's bound: the tensor map names that many stream projections


def _ropes(f: Fields) -> dict[str, float]:
    """Each layer kind's RoPE base, as Gemma3nTextConfig.convert_rope_params_to_dict builds rope_parameters: its
    own `rope_parameters[kind].rope_theta`, else the legacy top-level `rope_theta` (full) and
    `rope_local_base_freq` (sliding), else 1e6 and 1e4. Only the default RoPE is implemented: any other rope_type,
    or a `rope_scaling` (applied to the full layers), is refused, named."""
    params = f.raw("rope_parameters", None)
    legacy = {"full_attention": f.float("rope_theta", _THETA["full_attention"], low=0.0, high=1e12),
              "sliding_attention": f.float("rope_local_base_freq", _THETA["sliding_attention"], low=0.0, high=1e12)}
    scaling = f.raw("rope_scaling", None)
    if scaling is not None:
        raise f.unrepresentable("rope_scaling", scaling, "Gemma 3n's layers rotate by the default RoPE here")
    if params is None:
        return legacy
    if not isinstance(params, Mapping):
        raise f.invalid("rope_parameters", params, "an object with one RoPE object per layer type")
    out = dict(legacy)
    for name, own in params.items():
        key = f"rope_parameters.{name}"
        if name not in _KINDS:
            raise f.unrepresentable(key, own, "Gemma 3n's RoPE is set per layer type: full_attention, "
                                              "sliding_attention")
        if own is None:
            continue
        if not isinstance(own, Mapping):
            raise f.invalid(key, own, "an object")
        for field, value in own.items():
            if field == "rope_type":
                if value != "default":
                    raise f.unrepresentable(f"{key}.rope_type", value, "Gemma 3n's layers rotate by the default "
                                                                       "RoPE here")
            elif field == "rope_theta":
                inner = Fields(own, f.where, f.family)
                out[name] = inner.float("rope_theta", low=0.0, high=1e12)
            else:
                raise f.unrepresentable(f"{key}.{field}", value, "not a parameter of the default RoPE")
    return out


def _per_layer(f: Fields, key: str, n_layers: int, default: Any, read) -> list:
    """A field that is one value for every layer or a list of one per layer (intermediate_size,
    activation_sparsity_pattern)."""
    value = f.raw(key, None)
    if value is None:
        return list(default)
    if not isinstance(value, list):
        value = [value] * n_layers if key == "intermediate_size" else value
    if not isinstance(value, list) or len(value) != n_layers:
        raise f.invalid(key, value, f"a list of {n_layers} values, one per layer"
                        + (" (or one number)" if key == "intermediate_size" else ""))
    return [read(Fields({key: v}, f.where, f.family), key) for v in value]


def _gemma3n_text(f: Fields) -> tuple[dict, dict]:
    """config.json → blockcli: one base block (layer 0's) and per-layer overrides for the layers that differ."""
    d = f.int("hidden_size", 2048)
    n_layers = f.int("num_hidden_layers", 35)
    heads = f.int("num_attention_heads", 8)
    kv = f.int("num_key_value_heads", 2)
    head_dim = f.int("head_dim", 256)
    if d % heads:  # Gemma3nTextConfig.validate_architecture
        raise f.invalid("num_attention_heads", heads, f"a divisor of hidden_size {d}")
    types = f.raw("layer_types", None)
    if types is None:
        types = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers:
        raise f.invalid("layer_types", types, f"an array of {n_layers} layer types")
    for kind in types:
        if kind not in _KINDS:
            raise f.unrepresentable("layer_types", kind, "Gemma 3n's layers use full or sliding-window attention")
    shared = f.int("num_kv_shared_layers", 15, minimum=0)
    first_shared = n_layers - shared
    if shared and (first_shared <= 0 or set(types[:first_shared]) != set(types)):
        raise f.unrepresentable("num_kv_shared_layers", shared, "every kind of layer among the shared ones needs an "
                                                                "earlier layer of its kind with keys and values "
                                                                "(transformers refuses it otherwise)")
    producer = {kind: max(i for i in range(first_shared) if types[i] == kind) for kind in set(types)} if shared else {}
    window = f.int("sliding_window", 512)
    widths = _per_layer(f, "intermediate_size", n_layers, [16_384] * n_layers, lambda g, k: g.int(k))
    sparse_default = [0.95] * (10 if n_layers > 10 else 0) + [0.0] * (n_layers - (10 if n_layers > 10 else 0))
    sparsity = _per_layer(f, "activation_sparsity_pattern", n_layers, sparse_default,
                          lambda g, k: g.float(k, low=0.0, high=1.0, low_open=False))
    for s in sparsity:
        if s >= 1.0:
            raise f.invalid("activation_sparsity_pattern", f.data.get("activation_sparsity_pattern"),
                            "sparsities in [0, 1) (Φ⁻¹(1) is infinite)")
    theta = _ropes(f)
    ple = f.int("hidden_size_per_layer_input", 256)
    ple_vocab = f.int("vocab_size_per_layer_input", 262_144)
    streams = f.int("altup_num_inputs", 4)
    if streams > _MAX_STREAMS:
        raise f.invalid("altup_num_inputs", streams, f"at most {_MAX_STREAMS}")
    active = f.int("altup_active_idx", 0, minimum=0)
    if active >= streams:  # predictions[altup_active_idx] would fail
        raise f.invalid("altup_active_idx", active, f"an index below altup_num_inputs {streams}")
    f.float("altup_coef_clip", 120.0, low=0.0, high=1e12)  # clamps the coefficients in training mode only
    attention_bias = f.bool("attention_bias", False)
    common = {"d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim, "norm": "rmsnorm",
              "norm_eps": f.float("rms_norm_eps", 1e-6),
              **mlp_activation(f, "hidden_activation", "gelu_pytorch_tanh", gated=True),
              "bias": {"qkv": attention_bias, "out": attention_bias, "mlp": False, "norm": False},
              "placement": "sandwich", "qk_norm": "head", "v_norm": True, "attention_scale": 1.0,
              "per_layer_input": ple, "altup": streams, "altup_active": active,
              "altup_correct_scale": f.bool("altup_correct_scale", True), "laurel_rank": f.int("laurel_rank", 64)}
    blocks = []
    for i, kind in enumerate(types):
        full = kind == "full_attention"
        blocks.append({**common, "sliding_window": 0 if full else window, "rope": True, "rope_theta": theta[kind],
                       "d_ff": widths[i], "activation_sparsity": sparsity[i],
                       "kv_from": producer[kind] if i >= first_shared else -1})
    block = blocks[0]
    groups: dict[str, tuple[list[int], dict[str, Any]]] = {}
    for i, b in enumerate(blocks[1:], start=1):
        diff = {k: v for k, v in b.items() if block.get(k) != v}
        if diff:
            groups.setdefault(repr(sorted(diff.items())), ([], diff))[0].append(i)
    f.layers.extend({"indices": layers, "block": diff} for layers, diff in groups.values())
    model = model_section(n_layers, f.int("vocab_size", 262_400), "rope", f.int("max_position_embeddings", 32_768),
                          f.bool("tie_word_embeddings", True))
    model.update(embedding_multiplier=math.sqrt(d), per_layer_dim=ple, per_layer_vocab=ple_vocab,
                 per_layer_clamp=True)
    if f.has("final_logit_softcapping") and f.data["final_logit_softcapping"] is None:  # strict: a float
        raise f.invalid("final_logit_softcapping", None, "a number (Gemma3nTextConfig takes no null soft cap)")
    model["logit_softcap"] = f.float("final_logit_softcapping", 30.0, low=0.0, high=1e9)
    return block, model


_L = "layers.{i}."
GEMMA3N = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    *PER_LAYER_TABLES,
    *(tensor(f"altup_in.{j}", f"altup_projections.{j}.weight", LINEAR) for j in range(_MAX_STREAMS - 1)),
    tensor("blocks.{i}.altup_scale", _L + "altup.correct_output_scale"),
    tensor("blocks.{i}.altup_correct", _L + "altup.correction_coefs.weight", LINEAR),
    tensor("blocks.{i}.altup_predict", _L + "altup.prediction_coefs.weight", LINEAR),
    tensor("blocks.{i}.altup_router", _L + "altup.modality_router.weight", LINEAR),
    tensor("blocks.{i}.altup_router_norm_gamma", _L + "altup.router_norm.weight"),
    *ATTENTION,
    tensor("blocks.{i}.laurel_left", _L + "laurel.linear_left.weight", LINEAR),
    tensor("blocks.{i}.laurel_right", _L + "laurel.linear_right.weight", LINEAR),
    tensor("blocks.{i}.laurel_norm_gamma", _L + "laurel.post_laurel_norm.weight"),
    tensor("blocks.{i}.ln1_post_gamma", _L + "post_attention_layernorm.weight"),
    *DENSE_MLP,
    tensor("blocks.{i}.ln2_post_gamma", _L + "post_feedforward_layernorm.weight"),
    *PER_LAYER_INPUT,
    *(tensor(f"altup_out.{j}", f"altup_unembed_projections.{j}.weight", LINEAR) for j in range(_MAX_STREAMS - 1)),
    tensor("ln_f_gamma", "norm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=(  # a layer reusing another's K/V (kv_from) has no k/v projections or k norm, but Google's checkpoints
    # store them for every layer: transformers ignores them there (_keys_to_ignore_on_load_unexpected), so does blockcli
    _L + "self_attn.k_proj.weight", _L + "self_attn.v_proj.weight", _L + "self_attn.k_proj.bias",
    _L + "self_attn.v_proj.bias", _L + "self_attn.k_norm.weight"))

# published gemma-3n config.json files carry these, which transformers 5.24's Gemma3nTextConfig does not declare
# and modeling_gemma3n.py never reads
_UNREAD = {
    "altup_lr_multiplier": "a training learning-rate multiplier; modeling_gemma3n.py never reads it",
    "query_pre_attn_scalar": "Gemma3nTextAttention's scores are unscaled (scaling 1.0) whatever it says",
}

FAMILIES = (
    Family("gemma3n_text", "Gemma 3n", _gemma3n_text, GEMMA3N, TRAINING_ONLY, unread=_UNREAD),
)

# Gemma 3n (E2B, E4B as released): a MobileNet-v5 vision tower (timm) and a Conformer audio tower with their
# embedders beside a gemma3n_text language model
COMPOSITES = (
    Composite("gemma3n", "Gemma 3n (multimodal)", "gemma3n_text", True, frozenset({
        "vision_config", "audio_config", "audio_soft_tokens_per_image", "vision_soft_tokens_per_image",
        "boi_token_id", "eoi_token_id", "image_token_id", "boa_token_id", "eoa_token_id", "audio_token_id"}),
              {}, aside=("model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio.",
                         "vision_tower.", "embed_vision.", "audio_tower.", "embed_audio."),
              remark="token ids at or past vision_config.vocab_offset (262,144 by default: the image and audio soft "
                     "tokens) are embedded by its vision and audio embedders in transformers, which blockcli sets "
                     "aside: it runs every id as a text token"),
)
