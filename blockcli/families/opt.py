"""OPT: learned positions with an offset of 2, LayerNorm before (or, for OPT-350m, after) each branch.

BioGPT (Microsoft): OPT's pre-norm block under its own names, the token embeddings times √d (`scale_embedding`),
every LayerNorm torch's default eps (its `layer_norm_eps` is never read), `hidden_act` GELU.

XGLM (Meta): BioGPT's block under model., fairseq's fixed sinusoidal positions in place of the learned table (rows
offset by 2, the pad_token_id row zero, no parameters), `activation_function` GELU.
"""

from __future__ import annotations

import math

from blockcli.families.common import Family, bias_groups, divides, model_section, plain_activation
from blockcli.families.fields import Fields
from blockcli.tensor_names import LINEAR, TensorMap, tensor


def _opt(f: Fields) -> tuple[dict, dict]:
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    head_dim = divides(f, "hidden_size", d, "num_attention_heads", heads)
    proj = f.int("word_embed_proj_dim", d)  # != hidden_size: project_in / project_out (OPT-350m)
    affine = f.bool("layer_norm_elementwise_affine", True)  # false: every LayerNorm without scale and shift
    pre = f.bool("do_layer_norm_before", True)
    remove_final = f.bool("_remove_final_layer_norm", False)
    bias = f.bool("enable_bias", True)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim, "d_ff": f.int("ffn_dim"),
        "norm": "layernorm", "norm_eps": 1e-5,  # OPT uses torch.nn.LayerNorm's default eps
        "activation": plain_activation(f, "activation_function", "relu"),
        # enable_bias switches the linear layers' biases; the LayerNorms keep their shift.
        "bias": bias_groups(bias, bias, bias, affine),
        "placement": "pre" if pre else "post", "rope": False,
    }
    if not affine:
        block["norm_scale"] = False
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "learned", f.int("max_position_embeddings"),
                          f.bool("tie_word_embeddings", True), final_norm=pre and not remove_final, position_offset=2)
    if proj != d:
        model["embedding_dim"] = proj
    return block, model


def _biogpt(f: Fields) -> tuple[dict, dict]:
    """BioGPT: pre-norm LayerNorms (nn.LayerNorm's eps 1e-5: BioGPT builds them without layer_norm_eps), biases
    everywhere, a plain MLP of `hidden_act` (GELU), learned positions offset by 2, the token embeddings times
    √hidden_size with `scale_embedding` (true), a final LayerNorm, the head tied to the embeddings."""
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads,
        "head_dim": divides(f, "hidden_size", d, "num_attention_heads", heads), "d_ff": f.int("intermediate_size"),
        "norm": "layernorm", "norm_eps": 1e-5, "activation": plain_activation(f, "hidden_act", "gelu"),
        "bias": True, "placement": "pre", "rope": False,
    }
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "learned", f.int("max_position_embeddings"),
                          f.bool("tie_word_embeddings", True), position_offset=2)
    if f.bool("scale_embedding", True):
        model["embedding_multiplier"] = math.sqrt(d)
    return block, model


def _xglm(f: Fields) -> tuple[dict, dict]:
    """XGLM: pre-norm LayerNorms (nn.LayerNorm's eps 1e-5: XGLM passes none), biases everywhere, a plain MLP of
    `activation_function` (GELU), the token embeddings times √d_model with `scale_embedding` (true), fairseq's
    sinusoidal table (XGLMSinusoidalPositionalEmbedding: a buffer, no parameters) read at row t + 2, its row
    pad_token_id zero, a final LayerNorm, the head tied with `tie_word_embeddings` (true)."""
    d = f.int("d_model")
    heads = f.int("attention_heads")
    vocab, positions = f.int("vocab_size"), f.int("max_position_embeddings")
    # nn.Embedding's padding_idx, and the table's zero row (null: neither)
    pad = None if f.raw("pad_token_id", None) is None else f.int("pad_token_id", minimum=0)
    if pad is not None and pad >= vocab:
        raise f.invalid("pad_token_id", pad, f"a token id below vocab_size {vocab} (nn.Embedding's padding_idx)")
    if pad is not None and pad >= positions + 2:
        raise f.invalid("pad_token_id", pad, f"an id below max_position_embeddings + 2 = {positions + 2} (the "
                                              f"sinusoidal table's row XGLM sets to zero)")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads,
        "head_dim": divides(f, "d_model", d, "attention_heads", heads), "d_ff": f.int("ffn_dim"),
        "norm": "layernorm", "norm_eps": 1e-5, "activation": plain_activation(f, "activation_function", "gelu"),
        "bias": True, "placement": "pre", "rope": False,
    }
    model = model_section(f.int("num_layers"), vocab, "sinusoidal", positions, f.bool("tie_word_embeddings", True))
    model.update(sinusoidal_layout="fairseq", position_offset=2)
    if f.bool("scale_embedding", True):
        model["embedding_multiplier"] = math.sqrt(d)
    return block, model


# BioGPT's and XGLM's layers: OPT's names without decoder.
_FAIRSEQ_LAYERS = (
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.self_attn_layer_norm.weight"),
    tensor("blocks.{i}.ln1_beta", "layers.{i}.self_attn_layer_norm.bias"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkv"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkv"),
    tensor("blocks.{i}.w_o", "layers.{i}.self_attn.out_proj.weight", LINEAR),
    tensor("blocks.{i}.b_o", "layers.{i}.self_attn.out_proj.bias"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.final_layer_norm.weight"),
    tensor("blocks.{i}.ln2_beta", "layers.{i}.final_layer_norm.bias"),
    tensor("blocks.{i}.w_up", "layers.{i}.fc1.weight", LINEAR),
    tensor("blocks.{i}.b_up", "layers.{i}.fc1.bias"),
    tensor("blocks.{i}.w_down", "layers.{i}.fc2.weight", LINEAR),
    tensor("blocks.{i}.b_down", "layers.{i}.fc2.bias"),
    tensor("ln_f_gamma", "layer_norm.weight"),
    tensor("ln_f_beta", "layer_norm.bias"),
)
# BioGPT: under biogpt., its learned positions, its head called output_projection
BIOGPT = TensorMap("biogpt.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("wpe", "embed_positions.weight"),  # max_positions + 2 rows: the offset
    *_FAIRSEQ_LAYERS,
    tensor("lm_head", "output_projection.weight", LINEAR, top=True),
))
# XGLM: under model., no position table (the sinusoidal buffer is not saved; older conversions may hold it)
XGLM = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    *_FAIRSEQ_LAYERS,
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=("embed_positions.weights", "embed_positions._float_tensor"))


OPT = TensorMap("model.", (
    tensor("wte", "decoder.embed_tokens.weight"),
    tensor("wpe", "decoder.embed_positions.weight"),  # max_positions + 2 rows: OPT's offset
    tensor("blocks.{i}.ln1_gamma", "decoder.layers.{i}.self_attn_layer_norm.weight"),
    tensor("blocks.{i}.ln1_beta", "decoder.layers.{i}.self_attn_layer_norm.bias"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"decoder.layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkv"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"decoder.layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkv"),
    tensor("blocks.{i}.w_o", "decoder.layers.{i}.self_attn.out_proj.weight", LINEAR),
    tensor("blocks.{i}.b_o", "decoder.layers.{i}.self_attn.out_proj.bias"),
    tensor("blocks.{i}.ln2_gamma", "decoder.layers.{i}.final_layer_norm.weight"),
    tensor("blocks.{i}.ln2_beta", "decoder.layers.{i}.final_layer_norm.bias"),
    tensor("blocks.{i}.w_up", "decoder.layers.{i}.fc1.weight", LINEAR),
    tensor("blocks.{i}.b_up", "decoder.layers.{i}.fc1.bias"),
    tensor("blocks.{i}.w_down", "decoder.layers.{i}.fc2.weight", LINEAR),
    tensor("blocks.{i}.b_down", "decoder.layers.{i}.fc2.bias"),
    tensor("ln_f_gamma", "decoder.final_layer_norm.weight"),
    tensor("ln_f_beta", "decoder.final_layer_norm.bias"),
    tensor("proj_in", "decoder.project_in.weight", LINEAR),  # word_embed_proj_dim != hidden_size (OPT-350m)
    tensor("proj_out", "decoder.project_out.weight", LINEAR),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))


FAMILIES = (
    Family("opt", "OPT", _opt, OPT, frozenset({
        "dropout", "attention_dropout", "activation_dropout", "layerdrop",  # training-only
        "init_std",
    })),
    Family("biogpt", "BioGPT", _biogpt, BIOGPT, frozenset({
        "hidden_dropout_prob", "attention_probs_dropout_prob", "activation_dropout", "layerdrop",  # training-only
    }), unread={  # modeling_biogpt.py (transformers 5.24) never reads it
        "layer_norm_eps": "BioGPT builds its LayerNorms with torch's default eps, 1e-5",
    }),
    Family("xglm", "XGLM", _xglm, XGLM, frozenset({
        "dropout", "attention_dropout", "activation_dropout", "layerdrop",  # training-only
        "init_std",
    })),
)
