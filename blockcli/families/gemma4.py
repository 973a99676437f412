"""Gemma 4 (gemma4_text, and the gemma4 vision-language composite's language model), as transformers 5.24's
Gemma4TextConfig and modeling_gemma4.py build it; Gemma 4 unified's language model (gemma4_unified_text, and the
gemma4_unified composite's) is the same block without per-layer embeddings and experts.

Gemma 3's sandwich block with plain RMSNorms (γ, not 1 + γ), q/k norms per head, scores Q·Kᵀ unscaled
(`attention_scale` 1) and, new in Gemma 4:

- two layer kinds (`layer_types`, default five sliding to one full, the last layer always full): the sliding
  layers with `head_dim` and `num_key_value_heads`, RoPE `default`; the full ones with `global_head_dim` (512)
  and, with `attention_k_eq_v`, `num_global_key_value_heads` K/V heads whose values are their keys' projection
  (`block.k_eq_v`); RoPE `proportional` (`rope_scaling.type: proportional`, its `partial_rotary_factor`);
  transformers 5 saves those two as `per_layer_config` (read too);
- values RMS-normalised without scale (`block.v_norm`);
- the last `num_kv_shared_layers` layers have no K/V projections: each attends to the keys and values of the last
  earlier layer of its kind (`block.kv_from`), with an MLP twice as wide under `use_double_wide_mlp`;
- per-layer embeddings (`hidden_size_per_layer_input`, `vocab_size_per_layer_input`: `model.per_layer_dim`,
  `per_layer_vocab`, and each block's `per_layer_input`);
- `enable_moe_block`: experts beside the dense MLP (`block.moe.beside_dense`, `router_norm`, `expert_scale`);
- each layer's output times a stored scalar (`block.layer_scalar`, a buffer).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from blockcli.families.common import TRAINING_ONLY, Composite, Family, mlp_activation, model_section
from blockcli.families.fields import Fields, short
from blockcli.tensor_names import EXPERTS, LINEAR, TensorMap, tensor

_PER_LAYER_KEYS = ("head_dim", "num_key_value_heads")  # what Gemma4TextConfig's own per_layer_config overrides


def _rope(f: Fields, kind: str, head_dim: int) -> dict[str, Any]:
    """One layer kind's RoPE from `rope_parameters[kind]`: rope_theta, and `default` or `proportional` (its
    partial_rotary_factor and factor); any other rope_type or key is refused, named."""
    default = ({"rope_type": "default", "rope_theta": 10_000.0} if kind == "sliding_attention" else
               {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0})
    params = f.raw("rope_parameters", None)
    if params is not None and (not isinstance(params, Mapping) or not all(isinstance(v, Mapping) or v is None
                                                                           for v in params.values())):
        raise f.invalid("rope_parameters", params, "an object with one RoPE object per layer type")
    if params is not None:
        for name in params:
            if name not in ("full_attention", "sliding_attention"):
                raise f.unrepresentable(f"rope_parameters.{name}", params[name],
                                        "Gemma 4's RoPE is set per layer type: full_attention, sliding_attention")
    own = default if params is None else params.get(kind)
    key = f"rope_parameters.{kind}"
    if own is None:
        raise f.unrepresentable(key, own, "a layer kind without RoPE: transformers 5.24's Gemma 4 fails on it")
    inner = Fields(own, f.where, f.family)
    rope_type = own.get("rope_type", "default")
    inner.ignore("rope_type")
    theta = inner.float("rope_theta", low=0.0, high=1e12)
    out: dict[str, Any] = {"rope": True, "rope_theta": theta}
    if rope_type == "proportional":
        fraction = inner.float("partial_rotary_factor", 1.0, low=0.0, high=1.0, low_open=False)
        factor = inner.float("factor", 1.0, low=0.0, high=1e6)
        out["rope_scaling"] = {"type": "proportional", "fraction": fraction, "factor": factor}
    elif rope_type != "default":
        raise f.unrepresentable(f"{key}.rope_type", rope_type, "Gemma 4's layers rotate by the default or the "
                                                               "proportional RoPE here")
    for name, value in own.items():
        if name not in inner.used:
            raise f.unrepresentable(f"{key}.{name}", value, "not a RoPE parameter Gemma 4's RoPE reads")
    return out


def _per_layer_config(f: Fields, types: list[str]) -> list[dict[str, int]]:
    """Each layer's head_dim and K/V heads where they differ from the top level's: transformers 5's saved
    `per_layer_config` ({layer: {head_dim, num_key_value_heads}}), else what Gemma4TextConfig derives from
    global_head_dim (512) and, with attention_k_eq_v, num_global_key_value_heads, for the full layers."""
    saved = f.raw("per_layer_config", None)
    overrides: list[dict[str, int]] = [{} for _ in types]
    if saved is None:
        head_dim = f.int("global_head_dim", 512)
        kv = f.raw("num_global_key_value_heads", None)
        if kv is not None and not f.bool("attention_k_eq_v", False):
            f.said.append(f"num_global_key_value_heads {short(kv)} is not applied: Gemma4TextConfig applies it only "
                          f"with attention_k_eq_v true, so neither does blockcli")
            kv = None
        for i, kind in enumerate(types):
            if kind == "full_attention":
                overrides[i] = {"head_dim": head_dim, **({"num_key_value_heads": f.int("num_global_key_value_heads")}
                                                         if kv is not None else {})}
        return overrides
    f.ignore("global_head_dim", "num_global_key_value_heads")  # Gemma4TextConfig pops them unread then
    if not isinstance(saved, Mapping):
        raise f.invalid("per_layer_config", saved, "an object of layer index → overrides")
    for name, value in saved.items():
        if not (isinstance(name, str) and name.isdigit() and int(name) < len(types)) or not isinstance(value, Mapping):
            raise f.invalid(f"per_layer_config.{name}", value, f"a layer index < {len(types)} and an object")
        inner = Fields(value, f.where, f.family)
        for key in value:
            if key not in _PER_LAYER_KEYS:
                raise f.unrepresentable(f"per_layer_config.{name}.{key}", value[key],
                                        f"a Gemma 4 layer overrides only {', '.join(_PER_LAYER_KEYS)} here")
            overrides[int(name)][key] = inner.int(key)
    return overrides


def _gemma4_text(f: Fields, unified: bool = False) -> tuple[dict, dict]:
    """config.json → blockcli: one base block (layer 0's) and per-layer overrides for the layers that differ.
    `unified` (Gemma 4 unified's language model, Gemma4UnifiedTextConfig): no per-layer embeddings and no experts
    (the config class has none of their fields), a window of 1024, 262,144 positions, use_bidirectional_attention
    "vision" by default."""
    d = f.int("hidden_size", 2304)
    n_layers = f.int("num_hidden_layers", 30)
    heads = f.int("num_attention_heads", 8)
    kv = f.int("num_key_value_heads", 4)
    head_dim = f.int("head_dim", 256)
    bidirectional = f.raw("use_bidirectional_attention", "vision" if unified else None)
    if bidirectional == "all":
        raise f.unrepresentable("use_bidirectional_attention", bidirectional, "blockcli's attention is causal")
    if bidirectional == "vision":  # causal for text; only the composite's image tokens see each other
        f.said.append("use_bidirectional_attention \"vision\": text tokens attend causally, as blockcli runs them "
                      "(only image tokens, which blockcli does not run, would see each other)")
    elif bidirectional is not None:
        raise f.invalid("use_bidirectional_attention", bidirectional, "null, \"vision\" or \"all\"")
    types = f.raw("layer_types", None)
    if types is None:
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers:
        raise f.invalid("layer_types", types, f"an array of {n_layers} layer types")
    for kind in types:
        if kind not in ("full_attention", "sliding_attention"):
            raise f.unrepresentable("layer_types", kind, "Gemma 4's layers use full or sliding-window attention")
    types = list(types)
    if types[-1] != "full_attention":  # as Gemma4TextConfig forces it (with a warning)
        f.said.append(f"layer_types: the last layer is full attention, as transformers forces it (the config "
                      f"says {types[-1]})")
        types[-1] = "full_attention"
    per_layer = _per_layer_config(f, types)
    k_eq_v = f.bool("attention_k_eq_v", False)
    shared = f.int("num_kv_shared_layers", 0, minimum=0)
    first_shared = n_layers - shared
    if shared and (first_shared <= 0 or set(types[:first_shared]) != set(types)):
        raise f.unrepresentable("num_kv_shared_layers", shared, "every kind of layer among the shared ones needs an "
                                                                "earlier layer of its kind with keys and values "
                                                                "(transformers refuses it otherwise)")
    producer = {kind: max(i for i in range(first_shared) if types[i] == kind) for kind in set(types)} if shared else {}
    window = f.int("sliding_window", 1024 if unified else 512)
    d_ff = f.int("intermediate_size", 9216)
    double_wide = f.bool("use_double_wide_mlp", False)
    theta = {kind: _rope(f, kind, next((per_layer[i].get("head_dim", head_dim) for i, t in enumerate(types)
                                        if t == kind), head_dim)) for kind in set(types)}
    for kind in set(types):
        dims = {(o.get("head_dim", head_dim), o.get("num_key_value_heads", kv))
                for o, t in zip(per_layer, types) if t == kind}
        if len(dims) > 1:
            raise f.unrepresentable("per_layer_config", f.data.get("per_layer_config"),
                                    f"its {kind} layers differ in head_dim or num_key_value_heads, but transformers "
                                    f"builds one RoPE per layer type")
    moe = None
    if not unified and f.bool("enable_moe_block", False):
        moe = {"n_experts": f.int("num_experts", why="enable_moe_block is true"),
               "top_k": f.int("top_k_experts", why="enable_moe_block is true"),
               "d_expert": f.int("moe_intermediate_size", why="enable_moe_block is true"),
               "renormalize": True, "beside_dense": True, "router_norm": True, "expert_scale": True}
        if moe["top_k"] > moe["n_experts"]:
            raise f.invalid("top_k_experts", moe["top_k"], f"at most num_experts = {moe['n_experts']}")
    elif not unified:  # read only with enable_moe_block
        f.ignore("num_experts", "top_k_experts", "moe_intermediate_size")
    ple = 0 if unified else f.int("hidden_size_per_layer_input", 256, minimum=0)
    ple_vocab = f.int("vocab_size_per_layer_input", 262_144) if ple else 0
    if not ple and not unified:
        f.ignore("vocab_size_per_layer_input")
    attention_bias = f.bool("attention_bias", False)
    common = {"d_model": d, "n_heads": heads, "norm": "rmsnorm", "norm_eps": f.float("rms_norm_eps", 1e-6),
              **mlp_activation(f, "hidden_activation", "gelu_pytorch_tanh", gated=True),
              "bias": {"qkv": attention_bias, "out": attention_bias, "mlp": False, "norm": False},
              "placement": "sandwich", "qk_norm": "head", "v_norm": True, "attention_scale": 1.0,
              "layer_scalar": True, "per_layer_input": ple}
    if moe is not None:
        common["moe"] = moe
    blocks = []
    for i, kind in enumerate(types):
        full = kind == "full_attention"
        b = {**common, "n_kv_heads": per_layer[i].get("num_key_value_heads", kv),
             "head_dim": per_layer[i].get("head_dim", head_dim), "sliding_window": 0 if full else window,
             "d_ff": d_ff * (2 if double_wide and i >= first_shared else 1), **theta[kind],
             "k_eq_v": k_eq_v and full and i < first_shared, "kv_from": producer[kind] if i >= first_shared else -1}
        blocks.append(b)
    block = blocks[0]
    groups: dict[str, tuple[list[int], dict[str, Any]]] = {}
    for i, b in enumerate(blocks[1:], start=1):
        diff = {k: v for k, v in b.items() if block.get(k) != v}
        if "rope_scaling" in block and "rope_scaling" not in b:
            diff["rope_scaling"] = None
        if diff:
            groups.setdefault(repr(sorted(diff.items())), ([], diff))[0].append(i)
    f.layers.extend({"indices": layers, "block": diff} for layers, diff in groups.values())
    model = model_section(n_layers, f.int("vocab_size", 262_144), "rope",
                          f.int("max_position_embeddings", 262_144 if unified else 131_072),
                          f.bool("tie_word_embeddings", True))
    model["embedding_multiplier"] = math.sqrt(d)
    if ple:
        model.update(per_layer_dim=ple, per_layer_vocab=ple_vocab)
    cap = f.raw("final_logit_softcapping", None)
    if cap is not None:
        model["logit_softcap"] = f.float("final_logit_softcapping", low=0.0, high=1e9)
    f.ignore("hidden_act")  # Gemma4TextMLP runs hidden_activation
    return block, model


_L = "layers.{i}."
# the parts of the map Gemma 3n's shares (families/gemma3n.py): the per-layer tables, the attention with its q/k
# norms, the dense MLP with its pre-norm, a layer's per-layer input
PER_LAYER_TABLES = (
    tensor("ple_wte", "embed_tokens_per_layer.weight"),
    tensor("ple_proj", "per_layer_model_projection.weight", LINEAR),
    tensor("ple_proj_norm_gamma", "per_layer_projection_norm.weight"),
)
ATTENTION = (
    tensor("blocks.{i}.ln1_gamma", _L + "input_layernorm.weight"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"{_L}self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"{_L}self_attn.{x}_proj.bias") for x in "qkvo"),
    tensor("blocks.{i}.q_norm_gamma", _L + "self_attn.q_norm.weight"),
    tensor("blocks.{i}.k_norm_gamma", _L + "self_attn.k_norm.weight"),
)
DENSE_MLP = (
    tensor("blocks.{i}.ln2_gamma", _L + "pre_feedforward_layernorm.weight"),
    tensor("blocks.{i}.w_gate", _L + "mlp.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.w_up", _L + "mlp.up_proj.weight", LINEAR),
    tensor("blocks.{i}.w_down", _L + "mlp.down_proj.weight", LINEAR),
)
PER_LAYER_INPUT = (
    tensor("blocks.{i}.ple_gate", _L + "per_layer_input_gate.weight", LINEAR),
    tensor("blocks.{i}.ple_proj", _L + "per_layer_projection.weight", LINEAR),
    tensor("blocks.{i}.ple_norm_gamma", _L + "post_per_layer_input_norm.weight"),
)
GEMMA4 = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    *PER_LAYER_TABLES,
    *ATTENTION,
    tensor("blocks.{i}.ln1_post_gamma", _L + "post_attention_layernorm.weight"),
    *DENSE_MLP,
    tensor("blocks.{i}.ln2_post1_gamma", _L + "post_feedforward_layernorm_1.weight"),
    tensor("blocks.{i}.ln2b_gamma", _L + "pre_feedforward_layernorm_2.weight"),
    tensor("blocks.{i}.router_scale", _L + "router.scale"),
    tensor("blocks.{i}.router", _L + "router.proj.weight", LINEAR),
    tensor("blocks.{i}.expert_scale", _L + "router.per_expert_scale"),
    tensor("blocks.{i}.experts.{e}.w_gate blocks.{i}.experts.{e}.w_up", _L + "experts.gate_up_proj", EXPERTS),
    tensor("blocks.{i}.experts.{e}.w_down", _L + "experts.down_proj", EXPERTS),
    tensor("blocks.{i}.ln2_post2_gamma", _L + "post_feedforward_layernorm_2.weight"),
    tensor("blocks.{i}.ln2_post_gamma", _L + "post_feedforward_layernorm.weight"),
    *PER_LAYER_INPUT,
    tensor("blocks.{i}.layer_scalar", _L + "layer_scalar"),
    tensor("ln_f_gamma", "norm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))

def _gemma4_unified_text(f: Fields) -> tuple[dict, dict]:
    return _gemma4_text(f, unified=True)


FAMILIES = (
    Family("gemma4_text", "Gemma 4", _gemma4_text, GEMMA4, TRAINING_ONLY),
    Family("gemma4_unified_text", "Gemma 4 unified", _gemma4_unified_text, GEMMA4, TRAINING_ONLY),
)

# Gemma 4 (E2B, E4B, 26B-A4B, 31B as released): a vision tower (and, in E2B/E4B, an audio tower) with their
# embedders beside a gemma4_text language model
COMPOSITES = (
    Composite("gemma4", "Gemma 4 (multimodal)", "gemma4_text", True, frozenset({
        "vision_config", "audio_config", "boi_token_id", "eoi_token_id", "image_token_id", "video_token_id",
        "boa_token_id", "eoa_token_index", "eoa_token_id", "audio_token_id", "vision_soft_tokens_per_image"}),
              {}, aside=("model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio.",
                         "vision_tower.", "embed_vision.", "audio_tower.", "embed_audio.")),
    # Gemma 4 unified: no vision or audio tower, only their embedders (raw patches and waveform frames projected onto
    # the width) beside a gemma4_unified_text language model
    Composite("gemma4_unified", "Gemma 4 unified (multimodal)", "gemma4_unified_text", True, frozenset({
        "vision_config", "audio_config", "boi_token_id", "eoi_token_id", "image_token_id", "video_token_id",
        "boa_token_id", "eoa_token_index", "eoa_token_id", "audio_token_id", "vision_soft_tokens_per_image"}),
              {}, aside=("model.embed_vision.", "model.vision_embedder.", "model.embed_audio.", "embed_vision.",
                         "vision_embedder.", "embed_audio.")),
)
