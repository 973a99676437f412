"""StarCoder2: LayerNorm with a shift, a plain MLP, biases everywhere, GQA, RoPE, an optional window.
"""

from __future__ import annotations

from blockcli.config import ConfigError
from blockcli.families.common import (Family, bias_groups, divides, model_section, plain_activation, rope_base,
                                      window_by_key)
from blockcli.families.fields import Fields
from blockcli.tensor_names import LINEAR, TensorMap, tensor


def _starcoder2(f: Fields) -> tuple[dict, dict]:
    """StarCoder2: LayerNorm with shift, a plain (ungated) MLP, `use_bias` on every linear layer, GQA, RoPE."""
    # the published configs carry fields of the original training code that transformers never reads
    f.neutral("norm_type", "layer_norm", "blockcli maps StarCoder2's LayerNorm; another norm_type is another model")
    f.neutral("mlp_type", "default", "blockcli maps StarCoder2's plain MLP; another mlp_type is another model")
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    kv = f.int("num_key_value_heads", 2)
    if heads % kv:
        raise ConfigError(f"{f.where}: field 'num_key_value_heads' = {kv} does not divide "
                          f"'num_attention_heads' = {heads}")
    head_dim = f.int("head_dim") if f.data.get("head_dim") is not None else divides(
        f, "hidden_size", d, "num_attention_heads", heads)
    f.ignore("head_dim")
    theta, _, scaling = rope_base(f, ("rope_theta",), 10000.0, max_positions=f.int("max_position_embeddings"))
    bias = f.bool("use_bias", True)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("norm_epsilon", 1e-5),
        "activation": plain_activation(f, "hidden_act", "gelu_pytorch_tanh"),
        "bias": bias_groups(bias, bias, bias, True),  # nn.LayerNorm keeps its shift whatever use_bias says
        "placement": "pre", "rope": True, "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", f.int("max_position_embeddings"),
                          f.bool("tie_word_embeddings", True))
    f.ignore("layer_types")  # Starcoder2ForCausalLM masks by sliding_window alone (default: none)
    window_by_key(f, block, default=None)
    return block, model


# StarCoder2: Llama's attention names, LayerNorms with a shift, a plain MLP of nn.Linear c_fc / c_proj
STARCODER2 = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    tensor("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkvo"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.ln2_beta", "layers.{i}.post_attention_layernorm.bias"),
    tensor("blocks.{i}.w_up", "layers.{i}.mlp.c_fc.weight", LINEAR),
    tensor("blocks.{i}.b_up", "layers.{i}.mlp.c_fc.bias"),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.c_proj.weight", LINEAR),
    tensor("blocks.{i}.b_down", "layers.{i}.mlp.c_proj.bias"),
    tensor("ln_f_gamma", "norm.weight"),
    tensor("ln_f_beta", "norm.bias"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))


FAMILIES = (
    Family("starcoder2", "StarCoder2", _starcoder2, STARCODER2, frozenset({
        "attention_dropout", "residual_dropout", "embedding_dropout",  # training-only
    }), unread={  # fields of the original training code; modeling_starcoder2.py (transformers 5.24) reads neither
        "activation_function": "transformers' StarCoder2 takes its activation from hidden_act",
        "layer_norm_epsilon": "transformers' StarCoder2 takes its LayerNorm epsilon from norm_epsilon",
    }),
)
