"""StableLM 2: LayerNorm with a shift, SwiGLU, partial rotary, optionally parallel branches on one norm.
"""

from __future__ import annotations

from blockcli.families.common import (Family, bias_groups, divides, kv_heads, model_section, rope_base, rotating,
                                      silu_gate)
from blockcli.families.fields import Fields
from blockcli.tensor_names import HEAD_ROW, LINEAR, TensorMap, tensor


def _stablelm(f: Fields) -> tuple[dict, dict]:
    """StableLM (2): LayerNorm with a shift, SwiGLU without biases, q/k/v biases if `use_qkv_bias`,
    rotate-half RoPE on int(head_dim · partial_rotary_factor) dims; `use_parallel_residual` runs
    attention and the MLP side by side on the one input_layernorm (no second norm); `qk_layernorm` (StableLM 2
    12B) a LayerNorm of each head of q and of k before RoPE, each head its own weight and no shift
    (StableLmLayerNormPerHead: nn.LayerNorm(d_h, bias=False) per head, eps layer_norm_eps)."""
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    kv = kv_heads(f, heads, 32)  # StableLmConfig's default
    head_dim = divides(f, "hidden_size", d, "num_attention_heads", heads)
    max_positions = f.int("max_position_embeddings")
    theta, fraction, scaling = rope_base(f, ("rope_theta",), 10000.0, ("partial_rotary_factor",), 0.25,
                                         max_positions)
    rotated = int(head_dim * fraction)
    if rotated % 2 or not rotated:
        raise f.unrepresentable("partial_rotary_factor", fraction, f"it rotates {rotated} of {head_dim} dimensions "
                                                                   f"per head; expected an even number, at least 2")
    qkv_bias = f.bool("use_qkv_bias", False)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-5),
        **silu_gate(f),
        "bias": bias_groups(qkv_bias, False, False, True),  # o_proj and the MLP never have biases; nn.LayerNorm does
        "placement": "parallel_shared" if f.bool("use_parallel_residual", False) else "pre",
        "rope": rotating(rotated, head_dim), "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    if f.bool("qk_layernorm", False):  # q_layernorm over the h query heads, k_layernorm over the h_kv key heads
        block["qk_norm"] = "each_head"
        block["bias"] = {"qkv": qkv_bias, "out": False, "mlp": False, "norm": True, "qk_norm": False}
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", max_positions,
                          f.bool("tie_word_embeddings", False))
    return block, model


# StableLM: Llama's names with LayerNorms that have a shift (nn.LayerNorm); with use_parallel_residual
# there is no post_attention_layernorm
STABLELM = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    tensor("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkv"),
    # qk_layernorm: one nn.LayerNorm per head, each (d_h,), gathered into the rows of (h, d_h) and (h_kv, d_h)
    *(tensor(f"blocks.{{i}}.{x}_norm_gamma", f"layers.{{i}}.self_attn.{x}_layernorm.norms.{{h}}.weight", HEAD_ROW)
      for x in "qk"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.ln2_beta", "layers.{i}.post_attention_layernorm.bias"),
    tensor("blocks.{i}.w_gate", "layers.{i}.mlp.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.w_up", "layers.{i}.mlp.up_proj.weight", LINEAR),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.down_proj.weight", LINEAR),
    tensor("ln_f_gamma", "norm.weight"),
    tensor("ln_f_beta", "norm.bias"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=("layers.{i}.self_attn.rotary_emb.inv_freq",))


FAMILIES = (
    Family("stablelm", "StableLM", _stablelm, STABLELM, frozenset({"attention_dropout", "hidden_dropout"})),
)
