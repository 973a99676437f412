"""Cohere (Command-R): parallel attention and MLP on one shift-free LayerNorm, interleaved RoPE, scaled logits.
"""

from __future__ import annotations

from blockcli.families.common import (TRAINING_ONLY, Family, bias_groups, divides, kv_heads, model_section, rope_base,
                                      silu_gate)
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA


def _cohere(f: Fields) -> tuple[dict, dict]:
    """Cohere (Command-R): one LayerNorm without a shift (mean-centred, in float32) read by attention and
    the SwiGLU MLP side by side, interleaved-pair RoPE over the whole head, logits times `logit_scale`,
    tied embeddings by default."""
    qk_norm = f.raw("use_qk_norm", None)
    if qk_norm not in (None, False):  # null and false both leave the norms out (`if self.use_qk_norm`)
        raise f.unrepresentable("use_qk_norm", qk_norm, "Command R+'s LayerNorm over each head of q and k, with "
                                                        "weights (h, d_h) per head, which blockcli does not model")
    if f.has("logit_scale") and f.data["logit_scale"] is None:
        raise f.unrepresentable("logit_scale", None, "transformers multiplies the logits by it, so null is no model")
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    kv = kv_heads(f, heads, heads)
    head_dim = f.int("head_dim") if f.data.get("head_dim") is not None else divides(
        f, "hidden_size", d, "num_attention_heads", heads)
    f.ignore("head_dim")
    max_positions = f.int("max_position_embeddings")
    theta, _, scaling = rope_base(f, ("rope_theta",), 500000.0, max_positions=max_positions)  # CohereConfig's
    bias = f.bool("attention_bias", False)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-5),
        "activation": silu_gate(f),
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
)
