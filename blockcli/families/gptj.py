"""GPT-J: one LayerNorm read by attention and MLP side by side, interleaved-pair RoPE, an LM-head bias.
"""

from __future__ import annotations

from blockcli.families.common import Family, bias_groups, divides, model_section, plain_activation, rotating
from blockcli.families.fields import Fields
from blockcli.tensor_names import LINEAR, TensorMap, tensor


def _gptj(f: Fields) -> tuple[dict, dict]:
    """GPT-J: one LayerNorm read by attention and MLP side by side, interleaved-pair RoPE on the first
    `rotary_dim` dims of each head (base 10000, not configurable), bias-free attention, an untied
    LM head with a bias."""
    d = f.int("n_embd")
    heads = f.int("n_head")
    head_dim = divides(f, "n_embd", d, "n_head", heads)
    if f.has("rotary_dim") and f.data["rotary_dim"] is None:  # transformers then builds n_embd-wide tables
        raise f.unrepresentable("rotary_dim", None, "transformers' GPT-J then rotates whole heads with tables "
                                                    "n_embd wide, which only fit a single head")
    rotary_dim = f.int("rotary_dim", 64)
    if rotary_dim % 2 or rotary_dim > head_dim:
        raise f.unrepresentable("rotary_dim", rotary_dim, f"expected an even number of dims of a {head_dim}-wide head")
    # the original GPT-J config.json says rotary: true and scale_attn_weights: true; transformers reads neither
    f.neutral("rotary", True, "transformers' GPT-J always rotates q and k")
    f.neutral("scale_attn_weights", True, "blockcli always scales attention scores by 1/sqrt(head_dim)")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim,
        "d_ff": f.int("n_inner", 4 * d),  # null means 4·n_embd
        "norm": "layernorm", "norm_eps": f.float("layer_norm_epsilon", 1e-5),
        "activation": plain_activation(f, "activation_function", "gelu_new"),
        "bias": bias_groups(False, False, True, True),
        "placement": "parallel_shared", "rope": rotating(rotary_dim, head_dim), "rope_theta": 10000.0,
        "rope_layout": "interleaved",
    }
    model = model_section(f.int("n_layer"), f.int("vocab_size"), "rope", f.int("n_positions"),
                          f.bool("tie_word_embeddings", False))
    model["lm_head_bias"] = True
    return block, model


# GPT-J and Phi: one norm per block (ln_1 / input_layernorm), read by attention and MLP alike
GPTJ = TensorMap("transformer.", (
    tensor("wte", "wte.weight"),
    tensor("blocks.{i}.ln1_gamma", "h.{i}.ln_1.weight"),
    tensor("blocks.{i}.ln1_beta", "h.{i}.ln_1.bias"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"h.{{i}}.attn.{x}_proj.weight", LINEAR) for x in "qkv"),
    tensor("blocks.{i}.w_o", "h.{i}.attn.out_proj.weight", LINEAR),
    tensor("blocks.{i}.w_up", "h.{i}.mlp.fc_in.weight", LINEAR),
    tensor("blocks.{i}.b_up", "h.{i}.mlp.fc_in.bias"),
    tensor("blocks.{i}.w_down", "h.{i}.mlp.fc_out.weight", LINEAR),
    tensor("blocks.{i}.b_down", "h.{i}.mlp.fc_out.bias"),
    tensor("ln_f_gamma", "ln_f.weight"),
    tensor("ln_f_beta", "ln_f.bias"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
    tensor("lm_head_bias", "lm_head.bias", top=True),
), buffers=("h.{i}.attn.bias", "h.{i}.attn.masked_bias"))


FAMILIES = (
    Family("gptj", "GPT-J", _gptj, GPTJ, frozenset({
        "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout",  # training-only dropout
        # GPTJForSequenceClassification / double-heads settings, not part of the LM
        "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    }), padding_idx=False, unread=dict.fromkeys(
        # GPT-J-6B's config says {"rope_type": "gptj"}; transformers 5 saves a rope_scaling as rope_parameters
        ("rope_scaling", "rope_parameters"),
        "transformers' GPT-J rotates by sinusoidal tables of rotary_dim alone, base 10000"),  # modeling_gptj.py, 5.24
    ),
)
