"""MPT (MosaicML): a pre-LN block without any bias (LayerNorms without a shift), Q/K/V fused in `Wqkv`, a plain
GELU MLP four times as wide, ALiBi in place of position embeddings, a head tied to the embeddings.
"""

from __future__ import annotations

from typing import Any

from blockcli.families.common import Family, divides, model_section
from blockcli.families.fields import Fields
from blockcli.tensor_names import FUSED, LINEAR, QKV, TensorMap, tensor

# what transformers 5.24's MptConfig / MptAttentionConfig hold that modeling_mpt.py never reads, at the value
# that describes what it runs (MosaicML's own code would run something else at another value): another value is
# accepted, with a note that transformers ignores it
_UNREAD_TOP = {
    "expansion_ratio": (4, "MptMLP is 4·d_model wide whatever it says"),
    "learned_pos_emb": (True, "MptModel builds no position embedding: ALiBi positions it"),
    "no_bias": (True, "every MPT linear layer and LayerNorm is built without a bias"),
    "norm_type": ("low_precision_layernorm", "MPT's norms are LayerNorms without a shift"),
    "embedding_fraction": (1.0, "the embedding's gradient fraction of MosaicML's training code"),
    "logit_scale": (None, "MptForCausalLM's logits are the head's output, unscaled"),
}
_UNREAD_ATTENTION = {
    "attn_type": ("multihead_attention", "MptAttention has one K/V head per query head"),
    "alibi": (True, "MptModel always adds ALiBi's biases"),
    "alibi_bias_max": (8, "build_mpt_alibi_tensor is called with its default of 8"),
    "qk_ln": (False, "MptAttention normalises neither queries nor keys"),
    "prefix_lm": (False, "MPT runs a causal mask"),
    "attn_uses_sequence_id": (False, "MPT's mask does not read sequence ids"),
}


def _unread(f: Fields, table: dict[str, tuple[Any, str]], where: str) -> None:
    for key, (value, why) in table.items():
        f.ignore(key)
        if key in f.data and f.data[key] != value:
            f.said.append(f"{where}{key} = {f.data[key]!r} is not read by transformers' MPT ({why})")


def _mpt(f: Fields) -> tuple[dict, dict]:
    """MPT: LayerNorms without a shift (eps `layer_norm_epsilon`), no biases, ALiBi with BLOOM's slopes (MPT's
    own for a head count that is a power of 2; refused otherwise), a plain exact-GELU MLP 4·d_model wide; from
    `attn_config`, `clip_qkv` (the fused Q/K/V output clamped) and `softmax_scale` (1/√d_h when null)."""
    f.ignore("resid_pdrop", "emb_pdrop", "init_device", "verbose")  # dropout; where MosaicML's code initialises
    _unread(f, _UNREAD_TOP, "")
    d, heads = f.int("d_model"), f.int("n_heads")
    head_dim = divides(f, "d_model", d, "n_heads", heads)
    if heads & (heads - 1):
        raise f.unrepresentable("n_heads", heads, "MPT's ALiBi slopes for a head count that is not a power of 2 "
                                                  "interleave those of the next power of 2; blockcli's are BLOOM's")
    attention = f.raw("attn_config", {})
    if not isinstance(attention, dict):
        raise f.invalid("attn_config", attention, "an object (MptAttentionConfig's fields)")
    inner = Fields(attention, f"{f.where}: attn_config", f.family)
    inner.ignore("attn_pdrop", "attn_impl", "model_type")  # dropout; which kernel MosaicML's code calls
    _unread(inner, _UNREAD_ATTENTION, "attn_config.")
    block: dict[str, Any] = {
        "d_model": d, "n_heads": heads, "n_kv_heads": heads, "head_dim": head_dim, "d_ff": 4 * d,
        "norm": "layernorm", "norm_eps": f.float("layer_norm_epsilon", 1e-5), "activation": "gelu",
        "bias": False, "placement": "pre", "rope": False,
    }
    if inner.raw("clip_qkv", None) is not None:
        block["clip_qkv"] = inner.float("clip_qkv", low=0.0, high=1e6)
    if inner.raw("softmax_scale", None) is not None:
        block["attention_scale"] = inner.float("softmax_scale", low=0.0, high=1e6)
    inner.check_leftovers(frozenset())
    f.said.extend(inner.said)
    # the ALiBi table is max_seq_len long: transformers' MPT runs no longer pass
    model = model_section(f.int("n_layers"), f.int("vocab_size"), "alibi", f.int("max_seq_len"),
                          f.bool("tie_word_embeddings", True))
    return block, model


MPT = TensorMap("transformer.", (
    tensor("wte", "wte.weight"),
    tensor("blocks.{i}.ln1_gamma", "blocks.{i}.norm_1.weight"),
    tensor(QKV, "blocks.{i}.attn.Wqkv.weight", FUSED),  # [Q; K; V] rows
    tensor("blocks.{i}.w_o", "blocks.{i}.attn.out_proj.weight", LINEAR),
    tensor("blocks.{i}.ln2_gamma", "blocks.{i}.norm_2.weight"),
    tensor("blocks.{i}.w_up", "blocks.{i}.ffn.up_proj.weight", LINEAR),
    tensor("blocks.{i}.w_down", "blocks.{i}.ffn.down_proj.weight", LINEAR),
    tensor("ln_f_gamma", "norm_f.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))


FAMILIES = (
    Family("mpt", "MPT", _mpt, MPT, padding_idx=False),
)
