"""Gemma 2, VaultGemma and Gemma 3 (text): Gemma's block with a norm before and after each branch (`sandwich`;
VaultGemma keeps only the norms before),
alternating sliding-window and global layers (per-layer overrides), soft caps (Gemma 2) and q/k norms
per head with a RoPE base of their own for the sliding layers (Gemma 3).
"""

from __future__ import annotations

import math

from blockcli.families.common import (TRAINING_ONLY, Composite, Family, gated_rms, mlp_activation, layer_types,
                                      layer_type_ropes, sliding_layers)
from blockcli.families.fields import Fields, short
from blockcli.tensor_names import LINEAR, TensorMap, tensor


def _gemma2(f: Fields, pattern: int = 2, softcaps: tuple[float | None, float | None] = (50.0, 30.0)
            ) -> tuple[dict, dict]:
    """Gemma 2: Gemma's block with a norm before and after each branch (`placement: sandwich`), scores
    scaled by query_pre_attn_scalar^-1/2 and soft-capped (attn_logit_softcapping), soft-capped logits
    (final_logit_softcapping), and sliding-window layers alternating with global ones (`layer_types`,
    default: even layers slide)."""
    if f.data.get("use_bidirectional_attention") is not None:
        f.neutral("use_bidirectional_attention", False, "blockcli's attention is causal")
    f.ignore("use_bidirectional_attention")
    # Gemma2MLP runs hidden_activation; hidden_act, which the published configs carry too, is unread
    f.ignore("hidden_act")
    block, model = gated_rms(f, lambda g: mlp_activation(g, "hidden_activation", "gelu_pytorch_tanh", gated=True),
                             kv_default=4, tie_default=True, head_dim_default=256, mlp_bias=False)
    block.update(placement="sandwich", norm_unit_offset=True)
    model["embedding_multiplier"] = math.sqrt(block["d_model"])
    scalar = f.float("query_pre_attn_scalar", 256, low=0.0, high=1e9)
    if scalar != block["head_dim"]:  # 1/√head_dim is the default scale
        block["attention_scale"] = scalar ** -0.5
    for key, default, section, field in (("attn_logit_softcapping", softcaps[0], block, "attention_softcap"),
                                         ("final_logit_softcapping", softcaps[1], model, "logit_softcap")):
        if f.data.get(key) is None and (f.has(key) or default is None):  # null, or absent without a default: no cap
            f.ignore(key)
        else:  # absent: the config class's default
            section[field] = f.float(key, default, low=0.0, high=1e9)
    n_layers = model["n_layers"]
    sliding = layer_types(f, n_layers)
    if sliding is None:  # Gemma2Config: layer i slides when (i + 1) % 2 (Gemma 3: % sliding_window_pattern)
        sliding = [bool((i + 1) % pattern) for i in range(n_layers)]
    f.ignore("sliding_window_size")  # an older duplicate of sliding_window in the published configs, unread
    sliding_layers(f, block, sliding, default=4096)
    return block, model



def _vaultgemma(f: Fields) -> tuple[dict, dict]:
    """VaultGemma: Gemma 2's block, config and soft caps with the norms before the branches only
    (`placement: pre`, no norm after either branch); the MLP's norm is `pre_feedforward_layernorm`."""
    block, model = _gemma2(f)
    block["placement"] = "pre"
    return block, model


_GEMMA3_ROPE_KEYS = ("rope_theta", "rope_local_base_freq", "rope_scaling", "rope_parameters")



def _gemma3_text(f: Fields) -> tuple[dict, dict]:
    """Gemma 3 (text): Gemma 2's sandwich block with q/k RMSNorm per head ((1 + w) like every Gemma norm),
    no soft caps by default, and two RoPEs: the sliding layers rotate with base `rope_local_base_freq`
    (10,000) and no scaling, the global ones with `rope_theta` (1,000,000) and `rope_scaling` — in
    transformers 5, `rope_parameters` holds one dict per layer type. Layers slide unless
    (i + 1) % sliding_window_pattern == 0 (default 6), or as `layer_types` says."""
    unapplied = ("attn_logit_softcapping",)  # Gemma3Attention keeps it but never passes it to its attention
    rest = Fields({k: v for k, v in f.data.items() if k not in _GEMMA3_ROPE_KEYS + unapplied}, f.where, f.family)
    pattern = f.int("sliding_window_pattern", 6)
    f.ignore("_sliding_window_pattern")  # transformers 5 saves its copy of the pattern beside layer_types
    block, model = _gemma2(rest, pattern=pattern, softcaps=(None, None))
    f.used |= rest.used
    f.notes.extend(rest.notes)
    f.said.extend(rest.said)
    if f.raw("attn_logit_softcapping", None) is not None:
        f.said.append(f"attn_logit_softcapping {short(f.data['attn_logit_softcapping'])} is not applied: transformers' "
                      f"Gemma3Attention stores it but never caps its scores with it, so neither does blockcli")
    block["qk_norm"] = "head"  # q_norm and k_norm: Gemma3RMSNorm over each head's d_h, before RoPE
    f.layers.extend(rest.layers)  # the other kind's window
    sliding = layer_types(f, model["n_layers"]) or [bool((i + 1) % pattern) for i in range(model["n_layers"])]
    layer_type_ropes(f, block, model, sliding, (1e6, "rope_local_base_freq", 1e4), "Gemma 3")
    return block, model



# Gemma 2: Llama's names, but post_attention_layernorm is the norm of the attention *output*
# (sandwich), pre_feedforward_layernorm reads the MLP input and post_feedforward_layernorm its output
GEMMA2 = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", "layers.{i}.input_layernorm.weight"),
    *(tensor(f"blocks.{{i}}.w_{x}", f"layers.{{i}}.self_attn.{x}_proj.weight", LINEAR) for x in "qkvo"),
    *(tensor(f"blocks.{{i}}.b_{x}", f"layers.{{i}}.self_attn.{x}_proj.bias") for x in "qkvo"),
    tensor("blocks.{i}.ln1_post_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.pre_feedforward_layernorm.weight"),
    tensor("blocks.{i}.w_gate", "layers.{i}.mlp.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.w_up", "layers.{i}.mlp.up_proj.weight", LINEAR),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.down_proj.weight", LINEAR),
    tensor("blocks.{i}.ln2_post_gamma", "layers.{i}.post_feedforward_layernorm.weight"),
    tensor("ln_f_gamma", "norm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
))

# Gemma 3 (text): Gemma 2's names and q/k norms per head (Qwen3's names)
GEMMA3 = TensorMap("model.", GEMMA2.tensors + (
    tensor("blocks.{i}.q_norm_gamma", "layers.{i}.self_attn.q_norm.weight"),
    tensor("blocks.{i}.k_norm_gamma", "layers.{i}.self_attn.k_norm.weight"),
))

# VaultGemma: Gemma 2's names without the two norms after the branches
VAULTGEMMA = TensorMap("model.", tuple(t for t in GEMMA2.tensors if "post_" not in t.name))

_HYBRID_CACHE = frozenset({"cache_implementation"})  # generation's cache class (hybrid), not the network

FAMILIES = (
    Family("gemma2", "Gemma 2", _gemma2, GEMMA2, TRAINING_ONLY | _HYBRID_CACHE),
    Family("vaultgemma", "VaultGemma", _vaultgemma, VAULTGEMMA, TRAINING_ONLY | _HYBRID_CACHE),
    Family("gemma3_text", "Gemma 3", _gemma3_text, GEMMA3, TRAINING_ONLY | _HYBRID_CACHE),
)

# Gemma 3 4B, 12B and 27B: a SigLIP vision tower and a projector beside a gemma3_text language model
COMPOSITES = (
    Composite("gemma3", "Gemma 3 (vision-language)", "gemma3_text", True, frozenset({
        "vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index", "image_token_index",
        "boi_token_id", "eoi_token_id", "image_token_id"}),
              # Gemma3TextConfig's sizes (its other defaults are _gemma3_text's)
              {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
               "num_attention_heads": 8, "max_position_embeddings": 131_072},
              unapplied={"final_logit_softcapping": "Gemma3ForConditionalGeneration computes its logits without it "
                                                    "(Gemma3ForCausalLM, a gemma3_text model's class, caps them)"}),
)
