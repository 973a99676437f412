"""AFMoE (Arcee's Trinity) and its descendants, each a diff of its parent as transformers' modular_*.py writes it.

- AFMoE (Trinity-Mini, Trinity-Nano): Llama's attention (GQA, `head_dim` 128 by default) with per-head q/k RMSNorm,
  a sigmoid gate on the heads' output (`gate_proj`: out = (heads ⊙ σ(x·W_gate))·W_O, block.attention_gate), RoPE on
  the sliding-window layers only (the global ones, every `global_attn_every_n_layers`-th or as `layer_types` says,
  have no positions); four RMSNorms per layer (`placement: sandwich`); the first `num_dense_layers` an MLP of
  intermediate_size, the others a mixture: `num_experts` SwiGLU experts of `moe_intermediate_size`, sigmoid scores,
  a selection bias (`expert_bias`, a parameter never trained) for the choice only, the top `num_experts_per_tok`
  renormalised, times `route_scale`, beside `num_shared_experts` shared experts as one ungated MLP
  (moe_intermediate_size · num_shared_experts wide); `mup_enabled` scales the embeddings by √hidden_size.
"""

from __future__ import annotations

from blockcli.families.common import (TRAINING_ONLY, Family, gated_rms, layer_types, override_layers, refuse_nulls,
                                      silu_gate, sliding_layers)
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA, LLAMA_MLP
from blockcli.families.moe import moe_tensors
from blockcli.tensor_names import LINEAR, TensorMap, tensor


def _afmoe(f: Fields) -> tuple[dict, dict]:
    """AFMoE: see the module's docstring."""
    refuse_nulls(f, "num_dense_layers", "num_experts", "num_experts_per_tok", "num_shared_experts", "route_scale",
                 "global_attn_every_n_layers", "mup_enabled")
    if f.bool("attention_bias", False):  # LlamaAttention's q/k/v/o biases, but gate_proj never has one
        raise f.unrepresentable("attention_bias", True, "AFMoE's attention gate has no bias beside biased q/k/v; "
                                "blockcli's gate takes the q/k/v bias setting")
    # AfmoeConfig's head_dim is 128 when absent; an explicit null is LlamaAttention's hidden_size // heads
    head_dim = None if f.has("head_dim") and f.data["head_dim"] is None else 128
    block, model = gated_rms(f, silu_gate, kv_default=None, tie_default=False, head_dim_default=head_dim,
                             qkv_bias=False, out_bias=False, mlp_bias=False, eps_default=1e-5)
    block.update(placement="sandwich", qk_norm="head", attention_gate=True)
    n = model["n_layers"]
    sliding = layer_types(f, n)
    if sliding is None:
        every = f.int("global_attn_every_n_layers", 4)
        sliding = [bool((i + 1) % every) for i in range(n)]
    else:
        f.ignore("global_attn_every_n_layers")  # read only when layer_types is absent
    sliding_layers(f, block, sliding, default=1024)
    override_layers(f, [i for i in range(n) if not sliding[i]], {"rope": False})  # global layers: no RoPE
    if f.bool("mup_enabled", False):
        model["embedding_multiplier"] = float(block["d_model"]) ** 0.5
    n_dense = f.int("num_dense_layers", 1, minimum=0)
    n_experts, top_k = f.int("num_experts", 64), f.int("num_experts_per_tok", 6)
    d_expert = f.int("moe_intermediate_size", 1408)
    shared = f.int("num_shared_experts", 2, minimum=0)
    route_scale = f.float("route_scale", 1.0, high=1e6)
    if n_dense >= n:  # every layer dense: the expert settings are unused
        return block, model
    if top_k > n_experts:
        raise f.invalid("num_experts_per_tok", top_k, f"at most num_experts ({n_experts})")
    block["moe"] = {"n_experts": n_experts, "top_k": top_k, "d_expert": d_expert, "scoring": "sigmoid",
                    "selection_bias": True, "selection_bias_frozen": True, "renormalize": True,
                    "routed_scaling": route_scale, **({"d_shared": d_expert * shared} if shared else {})}
    if n_dense:
        override_layers(f, list(range(n_dense)), {"moe": None})
    return block, model


# AFMoE: Llama's attention with its gate (self_attn.gate_proj) and q/k norms, four norms a layer, the router under
# mlp.router.gate, the selection bias mlp.expert_bias (E,), the routed experts per expert (save_pretrained's layout)
# or fused (transformers 5's), mlp.shared_experts the shared ones, and Llama's MLP on the dense layers
AFMOE = TensorMap("model.", tuple(t for t in LLAMA.tensors if t not in LLAMA_MLP and "post_attention" not in t.name) + (
    tensor("blocks.{i}.w_attn_gate", "layers.{i}.self_attn.gate_proj.weight", LINEAR),
    tensor("blocks.{i}.ln1_post_gamma", "layers.{i}.post_attention_layernorm.weight"),
    tensor("blocks.{i}.ln2_gamma", "layers.{i}.pre_mlp_layernorm.weight"),
    tensor("blocks.{i}.ln2_post_gamma", "layers.{i}.post_mlp_layernorm.weight"),
    tensor("blocks.{i}.router_bias", "layers.{i}.mlp.expert_bias"),
) + moe_tensors("layers.{i}.mlp.router.gate", "layers.{i}.mlp.experts", ("gate_proj", "up_proj", "down_proj"),
                "layers.{i}.mlp.experts") + tuple(
    tensor(f"blocks.{{i}}.shared_w_{role}", f"layers.{{i}}.mlp.shared_experts.{role}_proj.weight", LINEAR)
    for role in ("gate", "up", "down")) + LLAMA_MLP, buffers=LLAMA.buffers)

FAMILIES = (
    # output_router_logits only returns the router's logits: AfmoeForCausalLM adds no load-balancing loss
    Family("afmoe", "AFMoE", _afmoe, AFMOE, TRAINING_ONLY | {"output_router_logits"}),
)
