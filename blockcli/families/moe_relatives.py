"""Mixtures of experts that are each a small diff of a family blockcli already reads, as transformers' modular_*.py
writes them: HunYuan MoE (HunYuan dense's attention), ERNIE 4.5 MoE (ERNIE 4.5's attention).

- HunYuan MoE (Hunyuan-A13B): HunYuan dense's block (q/k RMSNorm per head after RoPE, NTK-alpha RoPE) whose MLP is
  a shared SwiGLU MLP of `intermediate_size` beside `num_experts` routed experts as wide (Mixtral's experts read
  intermediate_size): softmax, the top `moe_topk`, always renormalised.
"""

from __future__ import annotations

from blockcli.families.common import TRAINING_ONLY, Family
from blockcli.families.fields import Fields
from blockcli.families.llama_relatives import HUNYUAN, hunyuan_dense
from blockcli.families.moe import moe_tensors
from blockcli.tensor_names import LINEAR, TensorMap, tensor


def _per_layer_refused(f: Fields, key: str, default: int) -> int:
    """HunYuan's `num_experts` and `moe_topk` may be per-layer arrays; blockcli's layers share one mixture."""
    if isinstance(f.data.get(key), list):
        raise f.unrepresentable(key, f.data[key], "a per-layer array: blockcli's mixture layers share one expert "
                                                  "count and top-k (give one integer)")
    return f.int(key, default)


def _hunyuan_moe(f: Fields) -> tuple[dict, dict]:
    """HunYuan MoE: HunYuan dense's block with HunYuanMoEV1Moe on every layer: a shared SwiGLU MLP (shared_mlp,
    intermediate_size, no biases) plus the routed experts (intermediate_size each), routed by a softmax over
    `num_experts` (1 by default), the top `moe_topk` (1) renormalised to sum 1."""
    block, model = hunyuan_dense(f)
    n_experts = _per_layer_refused(f, "num_experts", 1)
    top_k = _per_layer_refused(f, "moe_topk", 1)
    if top_k > n_experts:
        raise f.invalid("moe_topk", top_k, f"at most num_experts ({n_experts})")
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": block["d_ff"], "renormalize": True,
                    "d_shared": block["d_ff"]}
    return block, model


# HunYuan dense's attention (query_layernorm, key_layernorm); mlp.gate.wg the router, the experts per expert
# (save_pretrained's layout) or fused (transformers 5's), mlp.shared_mlp the shared expert
_HUNYUAN_ATTENTION = tuple(t for t in HUNYUAN.tensors if ".mlp." not in t.name)
HUNYUAN_MOE = TensorMap("model.", _HUNYUAN_ATTENTION + moe_tensors(
    "layers.{i}.mlp.gate.wg", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"),
    "layers.{i}.mlp.experts") + tuple(
    tensor(f"blocks.{{i}}.shared_w_{role}", f"layers.{{i}}.mlp.shared_mlp.{role}_proj.weight", LINEAR)
    for role in ("gate", "up", "down")), buffers=HUNYUAN.buffers)

FAMILIES = (
    # output_router_logits only returns the router's logits: HunYuanMoEV1ForCausalLM adds no load-balancing loss
    Family("hunyuan_v1_moe", "HunYuan MoE", _hunyuan_moe, HUNYUAN_MOE,
           TRAINING_ONLY | {"output_router_logits"}),
)
