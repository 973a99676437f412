"""Model types transformers runs as LlamaForCausalLM under a config class of their own: only the defaults differ.

- IQuest-Coder (IQuestCoderConfig): 8 K/V heads of 128 (not hidden_size / heads), RMSNorm eps 1e-5, no biases;
  its config class refuses `clip_qkv` and `use_sliding_window` (options of the original code no released
  checkpoint turns on).
- HyperCLOVA X (HyperCLOVAXConfig, a GraniteConfig): Granite's block and scalars with a second RMSNorm on each
  branch's output (`use_post_norm`, Peri-LN: Gemma 2's sandwich, the residual multiplier after it), logits
  *multiplied* by `logits_scaling` (Granite divides), and the attention multiplier 1/√d_h when null.
- Jais 2 (Jais2Config, a LlamaConfig): Llama's attention with q/k/v/o biases, Nemotron's plain ReLU² MLP with
  biases, and LayerNorms with a bias (eps `layer_norm_eps`).
- CWM (CwmConfig, a LlamaConfig): 8 K/V heads of 128 without biases, llama3-scaled RoPE (×16 over 8,192, base
  1e6) when the config gives no rope_parameters, and a window of 8,192 on three layers of four (`layer_types`;
  by default every fourth layer, from layer 0, global), Qwen2's sliding attention.
- Granite SWA (GraniteSWAConfig, a GraniteConfig): Granite's block and scalars, a learned sink per head (the
  output times sigmoid(logsumexp − sink): gpt-oss's sinks), a window of 128 on three layers of four
  (`layer_types`), and a RoPE base per layer (`layer_rope_theta`, 0 for none: NoPE) as `layers:`.
- Emu3 (Emu3Config, vision-language): its `text_config` (Emu3TextConfig) is Llama's block with 8 K/V heads,
  RMSNorm eps 1e-5 and a RoPE base of 1e6; the branches' dropout at `attention_dropout` acts in training only. The
  VQ-VAE image tokenizer (`vq_config`, `model.vqmodel.`) is set aside: images reach the language model as tokens
  of its own vocabulary, so a text-only pass is the whole language model's.
"""

from __future__ import annotations

from blockcli.families.common import (TRAINING_ONLY, Composite, Family, gated_rms, layer_types, override_layers, refuse_nulls,
                                      silu_gate, sliding_layers, with_data)
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA, granite_scalars, theta_default
from blockcli.families.llama_relatives import NEMOTRON, class_rope, layernorm_relu2
from blockcli.tensor_names import TensorMap, tensor


def _iquestcoder(f: Fields) -> tuple[dict, dict]:
    f.neutral("clip_qkv", None, "IQuestCoderConfig refuses it")
    f.neutral("use_sliding_window", False, "IQuestCoderConfig refuses it")
    f.ignore("pretraining_tp")  # not a field of IQuestCoderConfig; LlamaForCausalLM never reads it
    # IQuestCoderConfig's head_dim is 128 when absent; an explicit null is LlamaConfig's hidden_size // heads
    head_dim = None if f.has("head_dim") and f.data["head_dim"] is None else 128
    return gated_rms(f, silu_gate, kv_default=8, tie_default=False, head_dim_default=head_dim, eps_default=1e-5)


def _hyperclovax(f: Fields) -> tuple[dict, dict]:
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False)
    block["attention_scale"] = f.float("attention_multiplier", block["head_dim"] ** -0.5, high=1e6)
    block["residual_multiplier"] = f.float("residual_multiplier", 1.0, high=1e6)
    model["embedding_multiplier"] = f.float("embedding_multiplier", 1.0, high=1e6)
    model["logit_multiplier"] = f.float("logits_scaling", 1.0, low=1e-6, high=1e6)
    if f.bool("use_post_norm", True):
        block["placement"] = "sandwich"
    return block, model


def _jais2(f: Fields) -> tuple[dict, dict]:
    # Jais2Config's defaults: biases on every projection (attention_bias, mlp_bias true)
    data = {"attention_bias": True, "mlp_bias": True, **f.data}
    g = with_data(f, data)
    block, model = layernorm_relu2(g, "layer_norm_eps")
    return block, model


# CwmConfig.__post_init__'s RoPE when the config gives none (a top-level rope_theta is then not read)
CWM_ROPE = {"rope_type": "llama3", "rope_theta": 1_000_000.0, "factor": 16.0, "high_freq_factor": 4.0,
            "low_freq_factor": 1.0, "original_max_position_embeddings": 8192}


def _cwm(f: Fields) -> tuple[dict, dict]:
    f.neutral("attention_bias", False, "CwmAttention builds q, k, v and o without biases")
    f.ignore("pretraining_tp")  # splits the same matmuls into slices: the same function
    refuse_nulls(f, "head_dim")
    g = class_rope(f, CWM_ROPE, "CwmConfig")
    block, model = gated_rms(g, silu_gate, kv_default=8, tie_default=False, head_dim_default=128,
                             qkv_bias=False, out_bias=False, eps_default=1e-5)
    theta_default(g, block, 1_000_000.0)
    n = model["n_layers"]
    sliding_layers(f, block, layer_types(f, n) or [i % 4 != 0 for i in range(n)], default=8192)
    f.ignore("rope_theta")
    return block, model


def _granite_swa(f: Fields) -> tuple[dict, dict]:
    block, model = gated_rms(f, silu_gate, kv_default=4, tie_default=True, eps_default=1e-5)
    granite_scalars(f, block, model)
    granite_swa_layers(f, block, model)
    return block, model


def _emu3_text(f: Fields) -> tuple[dict, dict]:
    refuse_nulls(f, "head_dim", "num_key_value_heads")  # Emu3Attention divides by both
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False, eps_default=1e-5)
    theta_default(f, block, 1_000_000.0)
    return block, model


def granite_swa_layers(f: Fields, block: dict, model: dict) -> None:
    """Granite SWA's attention (granite_swa, granitemoe_swa): a sink per head, the window (128) on the
    `layer_types` sliding layers (by default all but every fourth), each layer's RoPE base from `layer_rope_theta`
    (0: no RoPE on that layer)."""
    block["attention_sinks"] = True
    n = model["n_layers"]
    sliding_layers(f, block, layer_types(f, n) or [i % 4 != 0 for i in range(n)], default=128)
    thetas = f.raw("layer_rope_theta", None)  # null: every layer at the global base
    if thetas is None:
        return
    if not (isinstance(thetas, list) and len(thetas) == n and all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t <= 1e12 for t in thetas)):
        raise f.invalid("layer_rope_theta", thetas, f"a list of {n} RoPE bases ('num_hidden_layers'), 0 for none")
    for theta in sorted(set(thetas)):
        layers = [i for i, t in enumerate(thetas) if t == theta]
        if theta == 0:
            override_layers(f, layers, {"rope": False})
        elif theta != block["rope_theta"]:
            override_layers(f, layers, {"rope_theta": float(theta)})


# Llama's names and a sink per head
GRANITE_SWA = TensorMap("model.", LLAMA.tensors + (tensor("blocks.{i}.sinks", "layers.{i}.self_attn.sinks"),),
                        buffers=LLAMA.buffers)


# Llama's names and the post-branch norms
HYPERCLOVAX = TensorMap("model.", LLAMA.tensors + (
    tensor("blocks.{i}.ln1_post_gamma", "layers.{i}.post_norm1.weight"),
    tensor("blocks.{i}.ln2_post_gamma", "layers.{i}.post_norm2.weight"),
), buffers=LLAMA.buffers)


FAMILIES = (
    Family("iquestcoder", "IQuest-Coder", _iquestcoder, LLAMA, TRAINING_ONLY),
    Family("hyperclovax", "HyperCLOVA X", _hyperclovax, HYPERCLOVAX, TRAINING_ONLY),
    Family("cwm", "CWM", _cwm, LLAMA, TRAINING_ONLY),
    Family("granite_swa", "Granite SWA", _granite_swa, GRANITE_SWA, TRAINING_ONLY),
    Family("jais2", "Jais 2", _jais2, NEMOTRON, TRAINING_ONLY),  # Nemotron's names: LayerNorms with biases
    Family("emu3_text_model", "Emu3 language model", _emu3_text, LLAMA, TRAINING_ONLY),
)

COMPOSITES = (
    # Emu3: a VQ-VAE image tokenizer beside a Llama-like language model (transformers 5: model.text_model. and
    # lm_head; the original checkpoints: text_model.model. and text_model.lm_head), tied by the top level's field
    Composite("emu3", "Emu3 (vision-language)", "emu3_text_model", False,
              frozenset({"vq_config", "vocabulary_map", "image_token_id"}),
              # Emu3TextConfig's sizes (its other defaults are _emu3_text's)
              {"vocab_size": 184622, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
               "num_attention_heads": 32, "max_position_embeddings": 9216}, bases=("model.text_model.",
              "text_model.model."), heads=("", "text_model."), aside=("model.vqmodel.", "vqmodel."),
              remark="its vision side is the VQ-VAE image tokenizer (vq_config), whose codes are tokens of the "
                     "language model's vocabulary"),
)
