"""Phi-3/3.5 (and Phi-4-mini): Llama's block stored with fused Q | K | V and gate | up projections.

Phi-4-multimodal (Phi4MultimodalConfig, vision-language and speech): a Phi-3 language model whose fields sit at the
top level beside `vision_config` and `audio_config`, with Phi4MultimodalConfig's defaults (8 K/V heads, a vocabulary
of 200,064, 131,072 positions); its image and audio encoders and their projections (`model.embed_tokens_extend.`)
are set aside: without images or audio they return the token embeddings unchanged.
"""

from __future__ import annotations

from typing import Mapping

from blockcli.families.common import Composite, Family, gated_rms, silu_gate, window_by_key
from blockcli.families.fields import Fields
from blockcli.tensor_names import FUSED, LINEAR, QKV, TensorMap, tensor


def _phi3(f: Fields) -> tuple[dict, dict]:
    """Phi-3/3.5 (and Phi-4-mini): Llama's pre-norm block (RMSNorm, SiLU-gated MLP, GQA) with Q | K | V fused
    in one matrix and gate | up in another, no biases, rotate-half RoPE on int(head_dim ·
    partial_rotary_factor) dims, longrope scaling, an optional sliding window."""
    f.neutral("attention_bias", False, "transformers' Phi-3 has no biases")  # the published configs say false
    for key in ("rope_scaling", "rope_parameters"):
        params = f.data.get(key)
        kind = params.get("rope_type", params.get("type", "default")) if isinstance(params, Mapping) else "default"
        if kind in ("su", "yarn"):  # Phi3Config renames both
            raise f.unrepresentable(key, dict(params), f"transformers' Phi-3 reads rope type {kind!r} as "
                                                       f"'longrope'; say 'longrope' to mean that")
        if kind not in ("default", "longrope"):
            raise f.unrepresentable(key, dict(params), f"transformers' Phi-3 accepts only longrope scaling, "
                                                       f"not {kind!r}")
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, qkv_bias=False, out_bias=False,
                             mlp_bias=False, eps_default=1e-5, fraction_keys=("partial_rotary_factor",))
    rotated = int(block["head_dim"] * block["rope"])
    if rotated % 2 or not rotated:
        raise f.unrepresentable("partial_rotary_factor", block["rope"], f"it rotates {rotated} of "
                                                                        f"{block['head_dim']} dimensions per head; "
                                                                        f"expected an even number, at least 2")
    f.ignore("original_max_position_embeddings")  # read by longrope; without it, unused
    window_by_key(f, block, default=None)  # Phi3Config: no window unless sliding_window says
    return block, model


# Phi-3: Llama's block with Q | K | V in one nn.Linear and gate | up in another; no biases
PHI3 = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    tensor(QKV, "layers.{i}.self_attn.qkv_proj.weight", FUSED),
    tensor("blocks.{i}.w_o", "layers.{i}.self_attn.o_proj.weight", LINEAR),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.w_gate blocks.{i}.w_up", "layers.{i}.mlp.gate_up_proj.weight", FUSED),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.down_proj.weight", LINEAR),
    tensor("ln_f_gamma", "norm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))


FAMILIES = (
    Family("phi3", "Phi-3", _phi3, PHI3, frozenset({
        "attention_dropout", "embd_pdrop", "resid_pdrop",  # training-only dropout
    }), unread={  # Phi-4-mini's config has them; modeling_phi3.py (transformers 5.24) reads none of them
        "full_attn_mod": "a setting of Microsoft's own modelling code: transformers' Phi-3 attends as "
                         "sliding_window says",
        "interpolate_factor": "a setting of Microsoft's own modelling code: transformers' Phi-3 scales RoPE as "
                              "rope_scaling says",
        "lm_head_bias": "transformers' Phi-3 builds its LM head without a bias",
        "mlp_bias": "transformers' Phi-3 builds its MLP without biases",
    }),
)

COMPOSITES = (
    Composite("phi4_multimodal", "Phi-4-multimodal", "phi3", False, frozenset({"vision_config", "audio_config"}),
              # Phi4MultimodalConfig's defaults where they are not Phi3Config's
              {"vocab_size": 200064, "num_key_value_heads": 8, "max_position_embeddings": 131072,
               "bos_token_id": 199999, "pad_token_id": 199999}, flat=True, bases=("model.",), heads=("",),
              aside=("model.embed_tokens_extend.",),
              remark="nor is its audio encoder (audio_config): both feed the token embeddings under "
                     "model.embed_tokens_extend., which without images or audio returns them unchanged"),
)
