"""GPT-2 and GPTBigCode (SantaCoder, StarCoder): learned positions, LayerNorm, a plain MLP; GPTBigCode
stores nn.Linear layers and has multi-query attention. OpenAI GPT (GPT-1): GPT-2's Conv1D layers, post-norm
(each residual sum normalised), no final norm, `afn` from its own table of four. CTRL (Salesforce): GPT-2's
pre-norm block as nn.Linear layers with a ReLU MLP, a fixed sin|cos table for positions, √d-scaled embeddings and a
biased LM head.
"""

from __future__ import annotations

import math

from blockcli.families.common import Family, divides, model_section, plain_activation
from blockcli.config import ConfigError
from blockcli.families.fields import Fields
from blockcli.tensor_names import GROUPED_QKV, LINEAR, QKV, QKV_BIAS, SPLIT, TensorMap, tensor


def _gpt2(f: Fields) -> tuple[dict, dict]:
    d = f.int("n_embd")
    heads = f.int("n_head")
    head_dim = divides(f, "n_embd", d, "n_head", heads)
    d_ff = f.int("n_inner", 4 * d)  # null means 4·n_embd
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim, "d_ff": d_ff,
        "norm": "layernorm", "norm_eps": f.float("layer_norm_epsilon", 1e-5),
        "activation": plain_activation(f, "activation_function", "gelu_new"),
        "bias": True, "placement": "pre", "rope": False,
    }
    model = model_section(f.int("n_layer"), f.int("vocab_size"), "learned", f.int("n_positions"),
                          f.bool("tie_word_embeddings", True))
    scale = head_dim ** -0.5 if f.bool("scale_attn_weights", True) else 1.0
    if scale != head_dim ** -0.5:
        block["attention_scale"] = scale  # the scores unscaled: Q·Kᵀ
    if f.bool("scale_attn_by_inverse_layer_idx", False):  # GPT2Attention: scores / (layer_idx + 1) as well
        f.layers.extend({"indices": [i], "block": {"attention_scale": scale / (i + 1)}}
                        for i in range(1, model["n_layers"]))
        block["attention_scale"] = scale
    return block, model


def _gpt_bigcode(f: Fields) -> tuple[dict, dict]:
    """GPTBigCode (SantaCoder, StarCoder): GPT-2's block (learned positions, LayerNorm, biases everywhere,
    plain MLP; nn.Linear rather than Conv1D, which only the tensor map sees) with multi-query attention,
    one K/V head, unless `multi_query` is false."""
    f.neutral("scale_attn_by_inverse_layer_idx", False, "GPTBigCode's attention never reads it")
    block, model = _gpt2(f)
    kv = 1 if f.bool("multi_query", True) else block["n_heads"]
    # transformers 5 writes the K/V head count multi_query implies; its modelling code reads multi_query only
    f.neutral("num_key_value_heads", kv, f"GPTBigCode has {kv} K/V head(s) when multi_query is "
                                         f"{str(kv == 1).lower()}; it has no grouped-query attention")
    block["n_kv_heads"] = kv
    return block, model


def _ctrl(f: Fields) -> tuple[dict, dict]:
    """CTRL: pre-norm LayerNorms (the layers' eps fixed at 1e-6, the final one's `layer_norm_epsilon`), biases
    everywhere, a plain ReLU MLP `dff` wide, the token embeddings times √n_embd (always), CTRL's sinusoidal table
    (all sines, then all cosines: a buffer, no parameters), a final LayerNorm, the head tied with
    `tie_word_embeddings` (true) and a bias of its own (lm_head has bias=True)."""
    d = f.int("n_embd")
    heads = f.int("n_head")
    # EncoderLayer builds its LayerNorms with eps=1e-6 whatever the config says; only the final one reads it
    f.neutral("layer_norm_epsilon", 1e-6, "CTRL's layer LayerNorms keep eps 1e-6 and only the final LayerNorm "
                                          "reads this; blockcli gives every LayerNorm one eps")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": divides(f, "n_embd", d, "n_head", heads),
        "d_ff": f.int("dff"), "norm": "layernorm", "norm_eps": 1e-6, "activation": "relu",
        "bias": True, "placement": "pre", "rope": False,
    }
    model = model_section(f.int("n_layer"), f.int("vocab_size"), "sinusoidal", f.int("n_positions"),
                          f.bool("tie_word_embeddings", True))
    model.update(sinusoidal_layout="halves", embedding_multiplier=math.sqrt(d), lm_head_bias=True)
    return block, model


# OpenAIGPT's ACT_FNS: its "gelu" is GPT-2's gelu_new (the tanh form), "swish" SiLU
_OPENAI_ACTIVATIONS = {"gelu": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu"}


def _openai_gpt(f: Fields) -> tuple[dict, dict]:
    """OpenAI GPT (GPT-1): learned positions, post-norm blocks, LN1(x + attention(x)) and LN2(h + MLP(h)), eps
    `layer_norm_epsilon`, biases everywhere, a plain MLP 4·n_embd wide of `afn` (OpenAIGPT's table: gelu is the
    tanh form), no final norm, the head tied to the token embedding."""
    d = f.int("n_embd")
    heads = f.int("n_head")
    afn = f.str("afn", "gelu")
    if afn not in _OPENAI_ACTIVATIONS:
        raise ConfigError(f"{f.where}: field 'afn' = {afn!r}: OpenAI GPT's activations are "
                          f"{', '.join(_OPENAI_ACTIVATIONS)}")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads,
        "head_dim": divides(f, "n_embd", d, "n_head", heads), "d_ff": 4 * d,
        "norm": "layernorm", "norm_eps": f.float("layer_norm_epsilon", 1e-5),
        "activation": _OPENAI_ACTIVATIONS[afn], "bias": True, "placement": "post", "rope": False,
    }
    model = model_section(f.int("n_layer"), f.int("vocab_size"), "learned", f.int("n_positions"),
                          f.bool("tie_word_embeddings", True), final_norm=False)
    return block, model


# OpenAI GPT: GPT-2's Conv1D layers under its own names, no final norm
OPENAI_GPT = TensorMap("transformer.", (
    tensor("wte", "tokens_embed.weight"),
    tensor("wpe", "positions_embed.weight"),
    tensor(QKV, "h.{i}.attn.c_attn.weight", SPLIT),
    tensor(QKV_BIAS, "h.{i}.attn.c_attn.bias", SPLIT),
    tensor("blocks.{i}.w_o", "h.{i}.attn.c_proj.weight"),
    tensor("blocks.{i}.b_o", "h.{i}.attn.c_proj.bias"),
    tensor("blocks.{i}.ln1_gamma", "h.{i}.ln_1.weight"),
    tensor("blocks.{i}.ln1_beta", "h.{i}.ln_1.bias"),
    tensor("blocks.{i}.w_up", "h.{i}.mlp.c_fc.weight"),
    tensor("blocks.{i}.b_up", "h.{i}.mlp.c_fc.bias"),
    tensor("blocks.{i}.w_down", "h.{i}.mlp.c_proj.weight"),
    tensor("blocks.{i}.b_down", "h.{i}.mlp.c_proj.bias"),
    tensor("blocks.{i}.ln2_gamma", "h.{i}.ln_2.weight"),
    tensor("blocks.{i}.ln2_beta", "h.{i}.ln_2.bias"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=("h.{i}.attn.bias", "position_ids"))


GPT2 = TensorMap("transformer.", (
    tensor("wte", "wte.weight"),
    tensor("wpe", "wpe.weight"),
    tensor("blocks.{i}.ln1_gamma", "h.{i}.ln_1.weight"),
    tensor("blocks.{i}.ln1_beta", "h.{i}.ln_1.bias"),
    tensor(QKV, "h.{i}.attn.c_attn.weight", SPLIT),
    tensor(QKV_BIAS, "h.{i}.attn.c_attn.bias", SPLIT),
    tensor("blocks.{i}.w_o", "h.{i}.attn.c_proj.weight"),
    tensor("blocks.{i}.b_o", "h.{i}.attn.c_proj.bias"),
    tensor("blocks.{i}.ln2_gamma", "h.{i}.ln_2.weight"),
    tensor("blocks.{i}.ln2_beta", "h.{i}.ln_2.bias"),
    tensor("blocks.{i}.w_up", "h.{i}.mlp.c_fc.weight"),
    tensor("blocks.{i}.b_up", "h.{i}.mlp.c_fc.bias"),
    tensor("blocks.{i}.w_down", "h.{i}.mlp.c_proj.weight"),
    tensor("blocks.{i}.b_down", "h.{i}.mlp.c_proj.bias"),
    tensor("ln_f_gamma", "ln_f.weight"),
    tensor("ln_f_beta", "ln_f.bias"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=("h.{i}.attn.bias", "h.{i}.attn.masked_bias"))

# GPTBigCode (SantaCoder, StarCoder): GPT-2's names, but nn.Linear layers, and multi-query c_attn
GPT_BIGCODE = TensorMap("transformer.", (
    tensor("wte", "wte.weight"),
    tensor("wpe", "wpe.weight"),
    tensor("blocks.{i}.ln1_gamma", "h.{i}.ln_1.weight"),
    tensor("blocks.{i}.ln1_beta", "h.{i}.ln_1.bias"),
    tensor(QKV, "h.{i}.attn.c_attn.weight", GROUPED_QKV),
    tensor(QKV_BIAS, "h.{i}.attn.c_attn.bias", GROUPED_QKV),
    tensor("blocks.{i}.w_o", "h.{i}.attn.c_proj.weight", LINEAR),
    tensor("blocks.{i}.b_o", "h.{i}.attn.c_proj.bias"),
    tensor("blocks.{i}.ln2_gamma", "h.{i}.ln_2.weight"),
    tensor("blocks.{i}.ln2_beta", "h.{i}.ln_2.bias"),
    tensor("blocks.{i}.w_up", "h.{i}.mlp.c_fc.weight", LINEAR),
    tensor("blocks.{i}.b_up", "h.{i}.mlp.c_fc.bias"),
    tensor("blocks.{i}.w_down", "h.{i}.mlp.c_proj.weight", LINEAR),
    tensor("blocks.{i}.b_down", "h.{i}.mlp.c_proj.bias"),
    tensor("ln_f_gamma", "ln_f.weight"),
    tensor("ln_f_beta", "ln_f.bias"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))


# CTRL: nn.Linear layers Wq, Wk, Wv, dense; the MLP an nn.Sequential (ffn.0, ReLU, ffn.2); no position table (its
# buffer is not saved)
CTRL = TensorMap("transformer.", (
    tensor("wte", "w.weight"),
    tensor("blocks.{i}.ln1_gamma", "h.{i}.layernorm1.weight"),
    tensor("blocks.{i}.ln1_beta", "h.{i}.layernorm1.bias"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"h.{{i}}.multi_head_attention.W{x}.weight", LINEAR) for x in "qkv"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"h.{{i}}.multi_head_attention.W{x}.bias") for x in "qkv"),
    tensor("blocks.{i}.w_o", "h.{i}.multi_head_attention.dense.weight", LINEAR),
    tensor("blocks.{i}.b_o", "h.{i}.multi_head_attention.dense.bias"),
    tensor("blocks.{i}.ln2_gamma", "h.{i}.layernorm2.weight"),
    tensor("blocks.{i}.ln2_beta", "h.{i}.layernorm2.bias"),
    tensor("blocks.{i}.w_up", "h.{i}.ffn.0.weight", LINEAR),
    tensor("blocks.{i}.b_up", "h.{i}.ffn.0.bias"),
    tensor("blocks.{i}.w_down", "h.{i}.ffn.2.weight", LINEAR),
    tensor("blocks.{i}.b_down", "h.{i}.ffn.2.bias"),
    tensor("ln_f_gamma", "layernorm.weight"),
    tensor("ln_f_beta", "layernorm.bias"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
    tensor("lm_head_bias", "lm_head.bias", top=True),
), buffers=("pos_encoding",))


FAMILIES = (
    Family("gpt2", "GPT-2", _gpt2, GPT2, frozenset({
        "n_ctx",  # legacy duplicate of n_positions, unused by HF GPT-2 (said by every GPT-2 config: no note)
        "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout",  # training-only dropout
        "reorder_and_upcast_attn",  # numerics of fp16 training, same function
        # GPT2DoubleHeadsModel / sequence-classification heads, not part of the LM
        "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    }), padding_idx=False, unread={  # modeling_gpt2.py (transformers 5.24) reads none of these
        # OpenAI GPT's options, which gpt2-medium's published config still carries
        "n_special": "OpenAI GPT's count of special tokens",
        "predict_special_tokens": "OpenAI GPT's option to predict its special tokens",
    }),
    Family("openai-gpt", "OpenAI GPT", _openai_gpt, OPENAI_GPT, frozenset({
        "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout",  # training-only dropout
        # OpenAIGPTDoubleHeadsModel's / sequence-classification heads, not part of the LM
        "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    }), padding_idx=False, unread={  # modeling_openai.py (transformers 5.24) reads none of these
        "n_special": "the original release's count of special tokens (its vocabulary includes them)",
        "predict_special_tokens": "the original release's option to predict its special tokens",
    }),
    Family("ctrl", "CTRL", _ctrl, CTRL, frozenset({
        "embd_pdrop", "resid_pdrop",  # training-only dropout
    }), padding_idx=False),  # CTRLModel's nn.Embedding has no padding_idx
    Family("gpt_bigcode", "GPTBigCode", _gpt_bigcode, GPT_BIGCODE, frozenset({
        "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout",  # training-only dropout
        # where the softmax runs in half-precision training; transformers' eager attention ignores both
        "attention_softmax_in_fp32", "scale_attention_softmax_in_fp32",
        "n_ctx",  # legacy duplicate of n_positions, unused by HF GPTBigCode
        # sequence-classification / double-heads settings, not part of the LM
        "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    }), padding_idx=False, unread={  # modeling_gpt_bigcode.py (transformers 5.24) reads none of these
        **dict.fromkeys(("inference_runner", "validate_runner_input", "max_batch_size", "max_sequence_length",
                         "runner_max_sequence_length", "pad_key_length", "pre_allocate_kv_cache"),
                        "settings of BigCode's own inference runner"),  # in StarCoder's and SantaCoder's configs
    }),
)
