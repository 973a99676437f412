"""gpt-oss (OpenAI's gpt-oss-20b and gpt-oss-120b), as transformers' GptOssForCausalLM computes it.

A pre-norm RMSNorm block with grouped-query attention whose q, k, v and o projections have biases
(`attention_bias`, default true), yarn-scaled RoPE (GptOssConfig's default when the config gives
none: factor 32 over 4,096 positions, θ 150,000, not truncated), a sink logit per head joined to
every softmax row (`block.attention_sinks`), a 128-token window on every other layer (`layer_types`;
by default layers 0, 2, 4, … slide), and in every layer a mixture of experts: a router with a bias,
the top `num_experts_per_tok` logits softmaxed, and experts with biases whose activation is the
clamped SwiGLU (`swiglu_limit`, `swiglu_alpha`): min(g, c)·σ(α·min(g, c)) · (clip(u, ±c) + 1).

Checkpoint tensors: the experts fused per layer, (E, d, 2·d_e) with gate and up interleaved along
the last axis (`gate_up_proj`, gate in the even columns), (E, d_e, d) for `down_proj`, their
biases (E, 2·d_e) and (E, d). OpenAI's published folders store those two matrices as MXFP4 pairs
(`gate_up_proj_blocks` and `_scales`), which blockcli/checkpoint.py dequantizes as transformers does.
"""

from __future__ import annotations

from typing import Any, Mapping

from blockcli.families.common import Family, first_of, gated_rms, layer_types, refuse_nulls, sliding_layers, with_data
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA, theta_default
from blockcli.families.moe import MOE_TRAINING_ONLY
from blockcli.tensor_names import EXPERTS_INTERLEAVED, LINEAR, TensorMap, tensor

# GptOssConfig.__post_init__'s RoPE when the config gives none
DEFAULT_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                "original_max_position_embeddings": 4096}


def _clamped_swiglu(f: Fields) -> dict[str, Any]:
    f.ignore("hidden_act")  # GptOssExperts always applies its clamped SwiGLU, whatever hidden_act says
    return {"activation": "clamped_swiglu"}


def _gpt_oss(f: Fields) -> tuple[dict, dict]:
    # GptOssConfig (transformers 5) refuses null for these, and null rope_theta crashes transformers 4: a value
    # null here would otherwise quietly take a default
    refuse_nulls(f, "head_dim", "rope_theta", "swiglu_alpha", "swiglu_limit", "num_experts_per_tok", "attention_bias")
    if not any(f.data.get(key) is not None for key in ("rope_scaling", "rope_parameters")):
        f = _with_default_rope(f)
    attention_bias = f.bool("attention_bias", True)  # GptOssConfig's default: q, k, v and o biased
    block, model = gated_rms(f, _clamped_swiglu, kv_default=8, tie_default=False, head_dim_default=64,
                             qkv_bias=attention_bias, out_bias=attention_bias, mlp_bias=True, eps_default=1e-5)
    theta_default(f, block, 150000.0)  # GptOssConfig.default_theta
    block.update(attention_sinks=True, swiglu_alpha=f.float("swiglu_alpha", 1.702, high=1e6),
                 swiglu_limit=f.float("swiglu_limit", 7.0, high=1e6))
    n_layers = model["n_layers"]
    sliding = layer_types(f, n_layers) or [i % 2 == 0 for i in range(n_layers)]
    sliding_layers(f, block, sliding, default=128)
    top_k = f.int("num_experts_per_tok", 4)
    # OpenAI's configs repeat it as experts_per_token, which transformers never reads: it must agree
    if f.has("experts_per_token") and f.int("experts_per_token") != top_k:
        raise f.unrepresentable("experts_per_token", f.data["experts_per_token"],
                                f"it disagrees with num_experts_per_tok = {top_k}, which transformers uses")
    # initial_context_length: OpenAI's name for the yarn scaling's original length, read from rope_scaling
    f.ignore("experts_per_token", "initial_context_length")
    # num_experts: GptOssConfig's alias of num_local_experts (its attribute_map)
    n_experts = first_of(f, ("num_local_experts", "num_experts"), lambda key: f.int(key), 128)
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": block["d_ff"],
                    "order": "topk_softmax", "logit_bias": True}
    _quantization(f)
    return block, model


def _with_default_rope(f: Fields) -> Fields:
    """The same fields with GptOssConfig's default RoPE in place of the missing one."""
    theta = {"rope_theta": f.data["rope_theta"]} if f.data.get("rope_theta") is not None else {}
    g = with_data(f, {**f.data, "rope_parameters": {**DEFAULT_ROPE, **theta}})
    g.ignore("rope_parameters", "rope_scaling")
    return g


def _quantization(f: Fields) -> None:
    """OpenAI's folders say their experts are stored as MXFP4; they are counted and run dequantized, as
    transformers loads them (every other quantization is refused)."""
    quant: Any = f.raw("quantization_config", None)
    if quant is None:
        return
    if not isinstance(quant, Mapping) or quant.get("quant_method") != "mxfp4":
        raise f.unrepresentable("quantization_config", quant, "blockcli reads gpt-oss's MXFP4 experts (quant_method "
                                                              "mxfp4) and otherwise unquantized weights")
    f.notes.append("quantization_config: the experts' matrices are stored as MXFP4; counted and run dequantized, "
                   "as transformers loads them")


EXPERTS = "layers.{i}.mlp.experts."
GPT_OSS = TensorMap("model.", (
    *(t for t in LLAMA.tensors if ".mlp." not in t.name and "_norm." not in t.name),
    tensor("blocks.{i}.sinks", "layers.{i}.self_attn.sinks"),
    tensor("blocks.{i}.router", "layers.{i}.mlp.router.weight", LINEAR),
    tensor("blocks.{i}.b_router", "layers.{i}.mlp.router.bias"),
    tensor("blocks.{i}.experts.{e}.w_gate blocks.{i}.experts.{e}.w_up", EXPERTS + "gate_up_proj", EXPERTS_INTERLEAVED),
    tensor("blocks.{i}.experts.{e}.b_gate blocks.{i}.experts.{e}.b_up", EXPERTS + "gate_up_proj_bias",
           EXPERTS_INTERLEAVED),
    tensor("blocks.{i}.experts.{e}.w_down", EXPERTS + "down_proj", EXPERTS_INTERLEAVED),
    tensor("blocks.{i}.experts.{e}.b_down", EXPERTS + "down_proj_bias", EXPERTS_INTERLEAVED),
), buffers=LLAMA.buffers)

FAMILIES = (
    Family("gpt_oss", "gpt-oss", _gpt_oss, GPT_OSS, MOE_TRAINING_ONLY, aux_loss=True),
)
