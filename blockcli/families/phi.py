"""Phi-1/1.5/2: one LayerNorm read by attention and MLP side by side, partial rotary, an LM-head bias.
"""

from __future__ import annotations

from blockcli.config import ConfigError
from blockcli.families.common import Family, divides, model_section, plain_activation, rope_base
from blockcli.families.fields import Fields
from blockcli.tensor_names import LINEAR, TensorMap, tensor


def _phi(f: Fields) -> tuple[dict, dict]:
    """Phi-1/1.5/2: one LayerNorm read by attention and MLP side by side, rotate-half RoPE on
    int(head_dim · partial_rotary_factor) dims, biases everywhere, an untied LM head with a bias; with
    `qk_layernorm`, a LayerNorm over each head's q and k before RoPE (one weight and bias for all heads)."""
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    kv = f.int("num_key_value_heads", heads)
    if heads % kv:
        raise ConfigError(f"{f.where}: field 'num_key_value_heads' = {kv} does not divide "
                          f"'num_attention_heads' = {heads}")
    head_dim = divides(f, "hidden_size", d, "num_attention_heads", heads)
    theta, fraction, scaling = rope_base(f, ("rope_theta",), 10000.0, ("partial_rotary_factor",), 0.5,
                                         f.int("max_position_embeddings"))
    rotated = int(head_dim * fraction)
    if rotated % 2 or not rotated:
        raise f.unrepresentable("partial_rotary_factor", fraction, f"it rotates {rotated} of {head_dim} dimensions "
                                                                   f"per head; expected an even number, at least 2")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-5),
        "activation": plain_activation(f, "hidden_act", "gelu_new"),
        "bias": True, "placement": "parallel_shared", "rope": fraction, "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    if f.bool("qk_layernorm", False):  # q_layernorm, k_layernorm: one nn.LayerNorm(d_h) each, shared by the heads
        block["qk_norm"] = "head"
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", f.int("max_position_embeddings"),
                          f.bool("tie_word_embeddings", False))
    model["lm_head_bias"] = True
    return block, model


PHI = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    tensor("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkv"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkv"),
    *(tensor(f"blocks.{{i}}.{x}_norm_{p}", f"layers.{{i}}.self_attn.{x}_layernorm.{n}")
      for x in "qk" for p, n in (("gamma", "weight"), ("beta", "bias"))),
    tensor("blocks.{i}.w_o", "layers.{i}.self_attn.dense.weight", LINEAR),
    tensor("blocks.{i}.b_o", "layers.{i}.self_attn.dense.bias"),
    tensor("blocks.{i}.w_up", "layers.{i}.mlp.fc1.weight", LINEAR),
    tensor("blocks.{i}.b_up", "layers.{i}.mlp.fc1.bias"),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.fc2.weight", LINEAR),
    tensor("blocks.{i}.b_down", "layers.{i}.mlp.fc2.bias"),
    tensor("ln_f_gamma", "final_layernorm.weight"),
    tensor("ln_f_beta", "final_layernorm.bias"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
    tensor("lm_head_bias", "lm_head.bias", top=True),
), buffers=("layers.{i}.self_attn.rotary_emb.inv_freq",))


FAMILIES = (
    Family("phi", "Phi", _phi, PHI, frozenset({
        "attention_dropout", "embd_pdrop", "resid_pdrop",  # training-only dropout
    })),
)
