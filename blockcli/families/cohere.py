"""Cohere (Command-R) and Cohere 2 (Command R7B, Command A): parallel attention and MLP on one shift-free
LayerNorm, interleaved RoPE, scaled logits; Cohere 2 windows three layers of four and leaves the fourth
without positions. Cohere Compass's language model (North): Cohere 2's layer with one RoPE per layer type, in
Qwen3's half layout, or none.
"""

from __future__ import annotations

from blockcli.families.common import (TRAINING_ONLY, Family, apply_bases, bias_groups, divides, kv_heads,
                                      layer_type_bases, layer_types, model_section, override_layers, rope_base,
                                      silu_gate, sliding_layers, with_data)
from blockcli.families.fields import Fields, short
from blockcli.families.llama import LLAMA


def _cohere(f: Fields) -> tuple[dict, dict]:
    """Cohere (Command-R): one LayerNorm without a shift (mean-centred, in float32) read by attention and
    the SwiGLU MLP side by side, interleaved-pair RoPE over the whole head, logits times `logit_scale`,
    tied embeddings by default."""
    # null and false both leave the norms out (`if self.use_qk_norm`); true is Command R+'s shift-free LayerNorm
    # over each head of q and k, with weights (h, d_h) and (h_kv, d_h): qk_norm each_head
    qk_norm = bool(f.bool("use_qk_norm")) if f.raw("use_qk_norm", None) is not None else False
    block, model = cohere_block(f, theta_default=500000.0)  # CohereConfig's base
    if qk_norm:
        block["qk_norm"] = "each_head"
    return block, model


def _cohere2(f: Fields) -> tuple[dict, dict]:
    """Cohere 2 (Command R7B, Command A): Cohere's block, its layers sliding-window (`layer_types`, or
    all but every `sliding_window_pattern`-th, default 4) with RoPE, and the global layers between them
    without positions at all: Cohere2Attention rotates q and k only in a windowed layer."""
    # what Cohere's own exports carry about their codebase; transformers reads none of them, and runs
    # the model these values describe
    for key, value in (("use_parallel_block", True), ("use_gated_activation", True), ("rotary_pct", 1.0),
                       ("position_embedding_type", "rope_gptj"), ("order_of_interleaved_layers", "local_attn_first")):
        f.neutral(key, value, "transformers' Cohere2 runs the model this value describes and no other")
    f.ignore("use_embedding_sharder", "use_parallel_embedding")  # how the original code shards its tables
    block, model = cohere_block(f, theta_default=10000.0)
    n_layers = model["n_layers"]
    sliding = layer_types(f, n_layers)
    if sliding is None:
        pattern = f.int("sliding_window_pattern", 4)
        sliding = [bool((i + 1) % pattern) for i in range(n_layers)]
    else:
        f.ignore("sliding_window_pattern")
    sliding_layers(f, block, sliding, default=4096)
    override_layers(f, [i for i, kind in enumerate(sliding) if not kind], {"rope": False})  # the global layers
    return block, model


def _cohere_compass_text(f: Fields) -> tuple[dict, dict]:
    """Cohere Compass's language model (CohereCompassForCausalLM): Cohere 2's parallel layer, windows on the
    `layer_types` sliding layers (none by default), each layer type's RoPE from `rope_parameters` (an object per type
    the layers use: its base over the whole head, in the half layout of Qwen3's apply_rotary_pos_emb; null: no
    positions), logits times `logit_scale` (null, the default: 1). A text pass gives every M-RoPE axis the same
    positions, so `mrope_section` changes nothing."""
    f.ignore("pooling")  # the sequence-classification head's, which the causal LM does not build
    f.ignore("sliding_window_pattern")  # read only without layer_types, which CohereCompassTextConfig always sets
    plain = with_data(f, {**{k: v for k, v in f.data.items() if k not in ("rope_parameters", "rope_theta", "rope_scaling")},
                          "logit_scale": f.raw("logit_scale", 1.0)})
    block, model = cohere_block(plain, theta_default=10000.0)
    n = model["n_layers"]
    sliding = layer_types(f, n) or [False] * n
    sliding_layers(f, block, sliding, default=4096)
    params = f.raw("rope_parameters", None)
    for kind, own in (params.items() if isinstance(params, dict) else ()):  # the rotary embedding never reads it
        if isinstance(own, dict) and own.get("partial_rotary_factor") not in (None, 1.0):
            f.said.append(f"rope_parameters.{kind}.partial_rotary_factor {short(own['partial_rotary_factor'])} is not "
                          f"applied: Cohere Compass's default RoPE rotates the whole head")
    # one position for every M-RoPE axis in a text pass: mrope_section changes nothing
    bases = layer_type_bases(f, sliding, unread=("mrope_section", "mrope_interleaved", "partial_rotary_factor"))
    block["rope_layout"] = "half"
    apply_bases(f, block, model, bases, {})
    return block, model


def cohere_block(f: Fields, theta_default: float) -> tuple[dict, dict]:
    """The block and model sections Cohere and Cohere 2 share."""
    if f.has("logit_scale") and f.data["logit_scale"] is None:
        raise f.unrepresentable("logit_scale", None, "transformers multiplies the logits by it, so null is no model")
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    kv = kv_heads(f, heads, heads)
    head_dim = f.int("head_dim") if f.data.get("head_dim") is not None else divides(
        f, "hidden_size", d, "num_attention_heads", heads)
    f.ignore("head_dim")
    max_positions = f.int("max_position_embeddings")
    theta, _, scaling = rope_base(f, ("rope_theta",), theta_default, max_positions=max_positions)
    bias = f.bool("attention_bias", False)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-5),
        **silu_gate(f),
        "bias": bias_groups(bias, bias, False, False),  # CohereLayerNorm has no shift; the MLP no biases
        "placement": "parallel_shared", "rope": True, "rope_theta": theta, "rope_layout": "interleaved",
    }
    if scaling:
        block["rope_scaling"] = scaling
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", max_positions,
                          f.bool("tie_word_embeddings", True))
    model["logit_multiplier"] = f.float("logit_scale", 0.0625, high=1e6)
    return block, model


FAMILIES = (
    Family("cohere", "Cohere", _cohere, LLAMA, TRAINING_ONLY),
    Family("cohere2", "Cohere 2", _cohere2, LLAMA, TRAINING_ONLY | frozenset({"cache_implementation"})),
    Family("cohere_compass_text", "Cohere Compass", _cohere_compass_text, LLAMA, TRAINING_ONLY),
)
