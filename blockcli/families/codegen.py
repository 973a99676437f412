"""CodeGen (Salesforce): GPT-J's block (one LayerNorm read by attention and MLP side by side, interleaved-pair
RoPE on `rotary_dim` dims, an LM-head bias), its Q/K/V fused in `qkv_proj` across the 4 model-parallel shards it
was trained on.
"""

from __future__ import annotations

from blockcli.families.common import Family
from blockcli.families.fields import Fields
from blockcli.families.gptj import GPTJ, _gptj
from blockcli.tensor_names import QKV, QVK_SHARDS, SHARDED_QVK, TensorMap, tensor


def _codegen(f: Fields) -> tuple[dict, dict]:
    """CodeGen: CodeGenConfig spells GPT-J's fields GPT-J's way (n_embd, n_head, rotary_dim, n_inner, ...) and
    transformers runs GPT-J's arithmetic; `qkv_proj`'s shards need n_embd divisible by 4."""
    f.ignore("n_ctx")  # a duplicate of n_positions modeling_codegen.py never reads
    block, model = _gptj(f)
    if block["d_model"] % QVK_SHARDS:
        raise f.unrepresentable("n_embd", block["d_model"], f"CodeGen's qkv_proj splits it into {QVK_SHARDS} "
                                                            f"equal shards")
    return block, model


# GPT-J's names with qkv_proj in place of q_proj, k_proj and v_proj
CODEGEN = TensorMap("transformer.", tuple(t for t in GPTJ.tensors if t.keys[0][-4:] not in (".w_q", ".w_k", ".w_v"))
                    + (tensor(QKV, "h.{i}.attn.qkv_proj.weight", SHARDED_QVK),),
                    buffers=("h.{i}.attn.causal_mask", "h.{i}.attn.masked_bias"))


FAMILIES = (
    Family("codegen", "CodeGen", _codegen, CODEGEN, frozenset({
        "attn_pdrop", "embd_pdrop", "resid_pdrop",  # training-only dropout
    }), padding_idx=False),
)
