"""GPT-NeoX (Pythia): parallel attention and MLP on two norms, partial rotary, per-head fused QKV.

Persimmon (Adept's Persimmon-8B): GPT-NeoX's per-head fused QKV and names of its MLP, pre-norm (not parallel), a
LayerNorm with a bias over each head's q and k before RoPE (`qk_layernorm`, one weight for all heads), a plain
ReLU² MLP, RoPE on half of each head.

GPT-NeoX Japanese (ABEJA): GPT-NeoX's per-head fused QKV and names, but sequential pre-norm, no bias on any
projection, and one bias added after the attention's dense of the last layer alone (`dense_bias`).
"""

from __future__ import annotations

from blockcli.families.common import Composite, Family, bias_groups, divides, model_section, plain_activation, rope_base
from blockcli.families.fields import Fields
from blockcli.tensor_names import GROUPED_QKV, LINEAR, QKV, QKV_BIAS, TensorMap, tensor


def _neox(f: Fields) -> tuple[dict, dict]:
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    head_dim = divides(f, "hidden_size", d, "num_attention_heads", heads)
    # GPTNeoXConfig takes its RoPE defaults from rotary_emb_base and rotary_pct only: a top-level
    # rope_theta or partial_rotary_factor is never read by transformers, so not here either
    f.ignore("rope_theta", "partial_rotary_factor")
    theta, fraction, scaling = rope_base(f, ("rotary_emb_base",), 10000.0, ("rotary_pct",), 0.25,
                                         f.int("max_position_embeddings"))
    rotated = int(head_dim * fraction)
    if rotated % 2:
        raise f.unrepresentable("rotary_pct", fraction, f"it rotates {rotated} of {head_dim} dimensions per head; "
                                                        f"rotary pairs need an even number")
    attn_bias = f.bool("attention_bias", True)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-5),
        "activation": plain_activation(f, "hidden_act", "gelu"),
        "bias": bias_groups(attn_bias, attn_bias, True, True),
        "placement": "parallel" if f.bool("use_parallel_residual", True) else "pre",
        "rope": fraction if rotated else False,
    }
    if rotated:
        block["rope_theta"] = theta
        if scaling:
            block["rope_scaling"] = scaling
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "rope" if rotated else "none",
                          f.int("max_position_embeddings"), f.bool("tie_word_embeddings", False))
    return block, model


GPT_NEOX = TensorMap("gpt_neox.", (
    tensor("wte", "embed_in.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    tensor("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    tensor(QKV, "layers.{i}.attention.query_key_value.weight", GROUPED_QKV),  # one K/V head per query head
    tensor(QKV_BIAS, "layers.{i}.attention.query_key_value.bias", GROUPED_QKV),
    tensor("blocks.{i}.w_o", "layers.{i}.attention.dense.weight", LINEAR),
    tensor("blocks.{i}.b_o", "layers.{i}.attention.dense.bias"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.ln2_beta", "layers.{i}.post_attention_layernorm.bias"),
    tensor("blocks.{i}.w_up", "layers.{i}.mlp.dense_h_to_4h.weight", LINEAR),
    tensor("blocks.{i}.b_up", "layers.{i}.mlp.dense_h_to_4h.bias"),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.dense_4h_to_h.weight", LINEAR),
    tensor("blocks.{i}.b_down", "layers.{i}.mlp.dense_4h_to_h.bias"),
    tensor("ln_f_gamma", "final_layer_norm.weight"),
    tensor("ln_f_beta", "final_layer_norm.bias"),
    tensor("lm_head", "embed_out.weight", LINEAR, top=True),
), buffers=("layers.{i}.attention.bias", "layers.{i}.attention.masked_bias",
            "layers.{i}.attention.rotary_emb.inv_freq"))


def _persimmon(f: Fields) -> tuple[dict, dict]:
    """Persimmon: pre-norm LayerNorms (eps `layer_norm_eps`), biases on every projection and norm, the fused
    query_key_value per head, `qk_layernorm` (true) a LayerNorm over each head's q and k before RoPE, RoPE on
    `partial_rotary_factor` (0.5) of each head, a plain MLP of `hidden_act` (ReLU²), an untied head."""
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    head_dim = divides(f, "hidden_size", d, "num_attention_heads", heads)
    theta, fraction, scaling = rope_base(f, ("rope_theta",), 10000.0, ("partial_rotary_factor",), 0.5,
                                         f.int("max_position_embeddings"))
    rotated = int(head_dim * fraction)
    if rotated % 2 or not rotated:
        raise f.unrepresentable("partial_rotary_factor", fraction, f"it rotates {rotated} of {head_dim} dimensions "
                                                                   f"per head; expected an even number, at least 2")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim,
        "d_ff": f.int("intermediate_size"), "norm": "layernorm", "norm_eps": f.float("layer_norm_eps", 1e-5),
        "activation": plain_activation(f, "hidden_act", "relu2"), "bias": True, "placement": "pre",
        "rope": fraction, "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    if f.bool("qk_layernorm", True):  # q_layernorm, k_layernorm: one nn.LayerNorm(d_h) each, shared by the heads
        block["qk_norm"] = "head"
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", f.int("max_position_embeddings"),
                          f.bool("tie_word_embeddings", False))
    return block, model


PERSIMMON = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    tensor("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    tensor(QKV, "layers.{i}.self_attn.query_key_value.weight", GROUPED_QKV),  # [q | k | v] of each head in turn
    tensor(QKV_BIAS, "layers.{i}.self_attn.query_key_value.bias", GROUPED_QKV),
    *(tensor(f"blocks.{{i}}.{x}_norm_{p}", f"layers.{{i}}.self_attn.{x}_layernorm.{n}")
      for x in "qk" for p, n in (("gamma", "weight"), ("beta", "bias"))),
    tensor("blocks.{i}.w_o", "layers.{i}.self_attn.dense.weight", LINEAR),
    tensor("blocks.{i}.b_o", "layers.{i}.self_attn.dense.bias"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.ln2_beta", "layers.{i}.post_attention_layernorm.bias"),
    tensor("blocks.{i}.w_up", "layers.{i}.mlp.dense_h_to_4h.weight", LINEAR),
    tensor("blocks.{i}.b_up", "layers.{i}.mlp.dense_h_to_4h.bias"),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.dense_4h_to_h.weight", LINEAR),
    tensor("blocks.{i}.b_down", "layers.{i}.mlp.dense_4h_to_h.bias"),
    tensor("ln_f_gamma", "final_layernorm.weight"),
    tensor("ln_f_beta", "final_layernorm.bias"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=("layers.{i}.self_attn.rotary_emb.inv_freq",))


def _neox_japanese(f: Fields) -> tuple[dict, dict]:
    """GPT-NeoX Japanese: pre-norm LayerNorms (eps `layer_norm_eps`) with biases, the fused query_key_value per
    head without a bias, dense without one, except the last layer's attention, which adds `dense_bias` (d) to its
    output (GPTNeoXJapaneseAttention's use_bias = layer_number == num_hidden_layers − 1); a bias-free plain MLP
    hidden_size · `intermediate_multiple_size` wide of `hidden_act` (GELU); RoPE (rotate-half) on rotary_pct /
    partial_rotary_factor (1.0) of each head, base rotary_emb_base / rope_theta (10000); the head embed_out tied
    with `tie_word_embeddings` (true)."""
    d = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    head_dim = divides(f, "hidden_size", d, "num_attention_heads", heads)
    n_layers, positions = f.int("num_hidden_layers"), f.int("max_position_embeddings")
    # GPTNeoXJapaneseConfig reads the legacy rotary_emb_base / rotary_pct only as defaults of rope_parameters
    theta, fraction, scaling = rope_base(f, ("rotary_emb_base",), 10000.0, ("rotary_pct",), 1.0, positions)
    rotated = int(head_dim * fraction)
    if rotated % 2 or not rotated:
        raise f.unrepresentable("rotary_pct" if f.has("rotary_pct") else "rope_parameters", fraction,
                                f"it rotates {rotated} of {head_dim} dimensions per head; expected an even number, "
                                f"at least 2")
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim,
        "d_ff": d * f.int("intermediate_multiple_size", 4), "norm": "layernorm",
        "norm_eps": f.float("layer_norm_eps", 1e-5), "activation": plain_activation(f, "hidden_act", "gelu"),
        "bias": bias_groups(False, n_layers == 1, False, True), "placement": "pre",
        "rope": fraction, "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    if n_layers > 1:  # the last layer's attention alone adds dense_bias
        f.layers.append({"indices": [n_layers - 1], "block": {"bias": bias_groups(False, True, False, True)}})
    model = model_section(n_layers, f.int("vocab_size"), "rope", positions, f.bool("tie_word_embeddings", True))
    return block, model


GPT_NEOX_JAPANESE = TensorMap("gpt_neox_japanese.", (
    tensor("wte", "embed_in.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    tensor("blocks.{i}.ln1_beta", "layers.{i}.input_layernorm.bias"),
    tensor(QKV, "layers.{i}.attention.query_key_value.weight", GROUPED_QKV),  # [q | k | v] of each head in turn
    tensor("blocks.{i}.w_o", "layers.{i}.attention.dense.weight", LINEAR),
    tensor("blocks.{i}.b_o", "layers.{i}.attention.dense_bias"),  # the last layer's alone
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.ln2_beta", "layers.{i}.post_attention_layernorm.bias"),
    tensor("blocks.{i}.w_up", "layers.{i}.mlp.dense_h_to_4h.weight", LINEAR),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.dense_4h_to_h.weight", LINEAR),
    tensor("ln_f_gamma", "final_layer_norm.weight"),
    tensor("ln_f_beta", "final_layer_norm.bias"),
    tensor("lm_head", "embed_out.weight", LINEAR, top=True),
), buffers=("rotary_emb.inv_freq", "layers.{i}.attention.rotary_emb.inv_freq"))


# FuyuConfig's text_config defaults (the Persimmon-8B shape), and the keys a flat config (adept/fuyu-8b's, as
# transformers 4 wrote it) hands its language model: these alone, with partial_rotary_factor 0.5 set by default
_FUYU_TEXT = {"vocab_size": 262144, "max_position_embeddings": 16384, "hidden_size": 4096, "intermediate_size": 16384,
              "num_hidden_layers": 36, "num_attention_heads": 64}
_FUYU_MOVES = frozenset({*_FUYU_TEXT, "hidden_act", "initializer_range", "layer_norm_eps", "use_cache", "qk_layernorm",
                         "hidden_dropout", "attention_dropout", "eos_token_id", "rope_scaling", "rope_theta"})

# Fuyu: a Persimmon language model whose image patches enter through one linear layer, vision_embed_tokens (set aside)
COMPOSITES = (
    Composite("fuyu", "Fuyu (vision-language)", "persimmon", False, frozenset({
        "image_size", "patch_size", "num_channels", "image_token_id"}), _FUYU_TEXT, flat=True, moves=_FUYU_MOVES,
              flat_neutral={"partial_rotary_factor": (0.5, "FuyuConfig hands the language model only its size fields "
                                                           "and rotates half of each head")},
              aside=("model.vision_embed_tokens.", "vision_embed_tokens.")),
)

FAMILIES = (
    Family("persimmon", "Persimmon", _persimmon, PERSIMMON, frozenset({
        "attention_dropout", "hidden_dropout",  # training-only
    })),
    Family("gpt_neox_japanese", "GPT-NeoX Japanese", _neox_japanese, GPT_NEOX_JAPANESE, frozenset({
        "attention_dropout", "hidden_dropout",  # training-only
    }), padding_idx=False),  # its embed_in has no padding_idx
    Family("gpt_neox", "GPT-NeoX", _neox, GPT_NEOX, frozenset({
        "attention_dropout", "hidden_dropout", "classifier_dropout",  # training-only
        "use_memory_efficient_attention",
    }), padding_idx=False),
)
