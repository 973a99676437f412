"""Falcon: Falcon-7B's parallel branches on one norm with multi-query attention, and the new decoder
architecture (Falcon-40B/180B) with two norms and grouped K/V heads.
"""

from __future__ import annotations

from blockcli.config import ConfigError
from blockcli.families.common import Family, bias_groups, divides, first_of, model_section, plain_activation, rope_base
from blockcli.families.fields import Fields
from blockcli.tensor_names import GROUPED_QKV, LINEAR, QKV, QKV_BIAS, TensorMap, tensor


def _falcon(f: Fields) -> tuple[dict, dict]:
    """Falcon: LayerNorm, plain MLP, RoPE over whole heads, `bias` on every linear layer. Falcon-7B's blocks
    run attention and MLP in parallel on one norm, with multi-query attention; the new decoder architecture
    (Falcon-40B/180B) gives each branch its own norm and has `num_kv_heads` K/V heads."""
    if f.data.get("alibi"):
        raise f.unrepresentable("alibi", f.data["alibi"], "ALiBi attention biases are not modelled; blockcli's "
                                                          "Falcon uses rotary positions")
    f.ignore("alibi")
    # the original RefinedWeb configs carry it; transformers never reads it (true would put the residual after
    # the norm)
    f.neutral("apply_residual_connection_post_layernorm", False, "transformers' Falcon adds the residual before "
                                                                 "any norm whatever it says")
    d = first_of(f, ("hidden_size", "n_embed"), lambda k: f.int(k), None)  # n_embed: the legacy name
    if d is None:
        f.int("hidden_size")  # raises: missing
    heads = f.int("num_attention_heads")
    head_dim = divides(f, "hidden_size", d, "num_attention_heads", heads)
    kv_field = f.int("num_kv_heads", heads)
    parallel = f.bool("parallel_attn", True)
    norms = f.int("num_ln_in_parallel_attn") if f.raw("num_ln_in_parallel_attn", None) is not None else None
    if f.bool("new_decoder_architecture", False):
        f.ignore("multi_query")  # the new decoder reads num_kv_heads instead
        if not parallel:
            raise f.unrepresentable("parallel_attn", False, "transformers' Falcon cannot run the new decoder "
                                                            "architecture with sequential attention and MLP")
        kv = kv_field
        if heads % kv:
            raise ConfigError(f"{f.where}: field 'num_kv_heads' = {kv} does not divide "
                              f"'num_attention_heads' = {heads}")
        if norms not in (None, 1, 2):
            raise f.invalid("num_ln_in_parallel_attn", norms, "1 or 2")
        placement = "parallel_shared" if norms == 1 else "parallel"  # None means 2: ln_attn and ln_mlp
    else:
        kv = 1 if f.bool("multi_query", True) else heads
        if kv == heads and kv_field != heads:  # transformers would reshape heads·d_h keys into num_kv_heads heads
            raise f.unrepresentable("num_kv_heads", kv_field, "without multi_query or the new decoder "
                                                              "architecture, every Falcon head has its own K/V")
        if parallel and norms not in (None, 1):
            raise f.unrepresentable("num_ln_in_parallel_attn", norms, "transformers' Falcon reads two parallel "
                                                                      "norms only in the new decoder architecture")
        placement = "parallel_shared" if parallel else "pre"
    max_positions = f.int("max_position_embeddings", 2048)
    theta, _, scaling = rope_base(f, ("rope_theta",), 10000.0, max_positions=max_positions)
    bias = f.bool("bias", False)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "d_ff": f.int("ffn_hidden_size", 4 * d),  # null means 4·hidden_size
        "norm": "layernorm", "norm_eps": f.float("layer_norm_epsilon", 1e-5),
        "activation": plain_activation(f, "activation", "gelu"),
        "bias": bias_groups(bias, bias, bias, True),  # torch's LayerNorm keeps its shift whatever `bias` says
        "placement": placement, "rope": True, "rope_theta": theta,
    }
    if scaling:
        block["rope_scaling"] = scaling
    model = model_section(f.int("num_hidden_layers"), f.int("vocab_size"), "rope", max_positions,
                          f.bool("tie_word_embeddings", True))
    return block, model


# Falcon: one fused query_key_value grouped per K/V head in every variant; the norms are
# input_layernorm (shared by parallel attention and MLP, or before attention) and post_attention_layernorm
# (sequential blocks), or ln_attn and ln_mlp (the new decoder architecture's two parallel norms)
FALCON = TensorMap("transformer.", (
    tensor("wte", "word_embeddings.weight"),
    tensor("blocks.{i}.ln1_gamma", "h.{i}.input_layernorm.weight|h.{i}.ln_attn.weight"),
    tensor("blocks.{i}.ln1_beta", "h.{i}.input_layernorm.bias|h.{i}.ln_attn.bias"),
    tensor(QKV, "h.{i}.self_attention.query_key_value.weight", GROUPED_QKV),
    tensor(QKV_BIAS, "h.{i}.self_attention.query_key_value.bias", GROUPED_QKV),
    tensor("blocks.{i}.w_o", "h.{i}.self_attention.dense.weight", LINEAR),
    tensor("blocks.{i}.b_o", "h.{i}.self_attention.dense.bias"),
    tensor("blocks.{i}.ln2_gamma", "h.{i}.post_attention_layernorm.weight|h.{i}.ln_mlp.weight"),
    tensor("blocks.{i}.ln2_beta", "h.{i}.post_attention_layernorm.bias|h.{i}.ln_mlp.bias"),
    tensor("blocks.{i}.w_up", "h.{i}.mlp.dense_h_to_4h.weight", LINEAR),
    tensor("blocks.{i}.b_up", "h.{i}.mlp.dense_h_to_4h.bias"),
    tensor("blocks.{i}.w_down", "h.{i}.mlp.dense_4h_to_h.weight", LINEAR),
    tensor("blocks.{i}.b_down", "h.{i}.mlp.dense_4h_to_h.bias"),
    tensor("ln_f_gamma", "ln_f.weight"),
    tensor("ln_f_beta", "ln_f.bias"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))


FAMILIES = (
    Family("falcon", "Falcon", _falcon, FALCON, frozenset({
        "hidden_dropout", "attention_dropout",  # training-only
    })),
)
