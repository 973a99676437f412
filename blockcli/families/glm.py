"""GLM-4 (`glm`: GLM-4-9B) and GLM-4-0414 (`glm4`): Llama's block as transformers' GlmForCausalLM and
Glm4ForCausalLM compute it (their modular_glm.py and modular_glm4.py).

GLM is Llama with q/k/v biases (`attention_bias`, default true; o_proj never has one), RoPE on the
first half of each head (`partial_rotary_factor`, GlmConfig's default 0.5) in interleaved pairs
(2i, 2i + 1), and Phi-3's MLP, whose gate and up are one stored matrix (`gate_up_proj`, gate | up).
GLM-4-0414 adds a norm after each branch (`post_self_attn_layernorm`, `post_mlp_layernorm`): Gemma 2's
sandwich of four norms, with plain RMSNorm scales.
"""

from __future__ import annotations

from blockcli.families.common import TRAINING_ONLY, Family, gated_rms, silu_gate
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA
from blockcli.tensor_names import FUSED, LINEAR, TensorMap, tensor


def _glm(f: Fields) -> tuple[dict, dict]:
    """GLM-4: Llama's block with q/k/v biases, interleaved RoPE on half of each head, 2 K/V heads of 128."""
    block, model = gated_rms(f, silu_gate, kv_default=2, tie_default=False, head_dim_default=128,
                             qkv_bias=f.bool("attention_bias", True), out_bias=False, mlp_bias=False,
                             eps_default=1.5625e-07, fraction_keys=("partial_rotary_factor",), fraction_default=0.5)
    if block["rope"]:
        block["rope_layout"] = "interleaved"  # cos/sin repeated per pair, rotate_half on (2i, 2i + 1)
    return block, model


def _glm4(f: Fields) -> tuple[dict, dict]:
    """GLM-4-0414: GLM's block with a norm after each branch too (`placement: sandwich`)."""
    block, model = _glm(f)
    block["placement"] = "sandwich"
    return block, model


# GLM: Llama's attention and norm names, the MLP's gate | up fused in one nn.Linear (Phi-3's)
_GLM_MLP = (
    tensor("blocks.{i}.w_gate blocks.{i}.w_up", "layers.{i}.mlp.gate_up_proj.weight", FUSED),
    tensor("blocks.{i}.w_down", "layers.{i}.mlp.down_proj.weight", LINEAR),
)
GLM = TensorMap("model.", tuple(t for t in LLAMA.tensors if ".mlp." not in t.name) + _GLM_MLP)

# GLM-4-0414: the sandwich's names. post_self_attn_layernorm normalises the attention output,
# post_attention_layernorm the MLP's input, post_mlp_layernorm its output
_SANDWICH = {"layers.{i}.post_attention_layernorm.weight": "blocks.{i}.ln2_gamma"}
GLM4 = TensorMap("model.", tuple(t for t in GLM.tensors if t.name not in _SANDWICH) + (
    tensor("blocks.{i}.ln1_post_gamma", "layers.{i}.post_self_attn_layernorm.weight"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.ln2_post_gamma", "layers.{i}.post_mlp_layernorm.weight"),
))

FAMILIES = (
    Family("glm", "GLM-4", _glm, GLM, TRAINING_ONLY),
    Family("glm4", "GLM-4-0414", _glm4, GLM4, TRAINING_ONLY),
)
