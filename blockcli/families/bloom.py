"""BLOOM: GPT-2's pre-LN block with ALiBi in place of position embeddings, a LayerNorm on the word
embeddings, and Q/K/V fused per head.
"""

from __future__ import annotations

from blockcli.families.common import Family, divides, first_of, model_section
from blockcli.families.falcon import FALCON
from blockcli.families.fields import Fields
from blockcli.tensor_names import TensorMap, tensor


def _bloom(f: Fields) -> tuple[dict, dict]:
    """BLOOM: LayerNorm with shift, biases everywhere, MLP 4·hidden_size wide with tanh-GELU, ALiBi
    (`model.positions: alibi`, slopes as `build_alibi_tensor` computes them for any head count), a
    LayerNorm on the word embeddings (`model.embedding_norm`), a head tied to the embeddings."""
    # pretraining_tp with slow_but_exact splits the same matmuls into slices: the same function
    f.ignore("pretraining_tp", "slow_but_exact")
    d = first_of(f, ("hidden_size", "n_embed"), lambda k: f.int(k), None)  # n_embed: the legacy name
    if d is None:
        f.int("hidden_size")  # raises: missing
    heads = first_of(f, ("n_head", "num_attention_heads"), lambda k: f.int(k), None)
    if heads is None:
        f.int("n_head")
    layers = first_of(f, ("n_layer", "num_hidden_layers"), lambda k: f.int(k), None)
    if layers is None:
        f.int("n_layer")
    head_dim = divides(f, "hidden_size", d, "n_head", heads)
    block = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim, "d_ff": 4 * d,
        "norm": "layernorm", "norm_eps": f.float("layer_norm_epsilon", 1e-5),
        "activation": "gelu_tanh",  # BloomGelu: the tanh approximation
        "bias": True, "rope": False,
        # true: each norm's output, not its input, is what the branch adds to (BloomBlock's residual)
        "placement": "normed_residual" if f.bool("apply_residual_connection_post_layernorm", False) else "pre",
    }
    # ALiBi needs no table; BloomConfig has no context length, so the training one (2048) bounds run.seq_len
    model = model_section(layers, f.int("vocab_size"), "alibi", 2048, f.bool("tie_word_embeddings", True))
    model["embedding_norm"] = True
    return block, model


# Falcon's module names (Falcon grew out of BLOOM; the tables match either's norm names), a LayerNorm on the
# word embeddings, and query_key_value fused per head [q_i k_i v_i] (GROUPED_QKV, one K/V head per query head)
BLOOM = TensorMap("transformer.", FALCON.tensors + (
    tensor("emb_ln_gamma", "word_embeddings_layernorm.weight"),
    tensor("emb_ln_beta", "word_embeddings_layernorm.bias"),
))


FAMILIES = (
    Family("bloom", "BLOOM", _bloom, BLOOM, frozenset({
        "hidden_dropout", "attention_dropout",  # training-only
        # Megatron-DeepSpeed's training switches, stored in the published configs and never read by transformers
        # (whose BLOOM always scales by 1/sqrt(head_dim), runs its softmax in float32, and builds d_ff = 4·hidden)
        "attention_softmax_in_fp32", "bias_dropout_fusion", "masked_softmax_fusion", "offset_alibi",
        "skip_bias_add", "skip_bias_add_qkv", "n_inner", "unk_token_id", "seq_length",
    }), padding_idx=False),
)
