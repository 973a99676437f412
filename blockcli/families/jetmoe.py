"""JetMoE (`jetmoe`, JetMoE-8B): a mixture of attention heads and a mixture of MLP experts in every layer.

Attention is `block.moa` (blockcli/moa.py): a router picks `num_experts_per_tok` of `num_local_experts` attention
experts per token (the top-k logits softmaxed over those k), each its own W_q and W_o (`kv_channels` · heads wide),
K and V (`num_key_value_heads` heads of `kv_channels`, RoPE over the whole head) one projection shared by the
experts, a bias on the mixture's output; the block's n_heads is num_key_value_heads · num_experts_per_tok, as
JetMoeConfig derives num_attention_heads (a stored value is overwritten, so not read). The MLP is a mixture of the
same number of experts: the top-k logits softmaxed, each expert a gated MLP of `activation_function`
(intermediate_size wide; input_linear holds gate | up), a bias `moe_bias` on the mixture's output. Pre-norm RMSNorm;
tied embeddings by default.

JetMoeDecoderLayer builds its two norms with JetMoeRMSNorm's default eps 1e-6; only the final norm reads
`rms_norm_eps`. blockcli's norms share one eps, so a config whose rms_norm_eps is not 1e-6 is refused.

Checkpoint tensors: `self_attention.experts.router.layer` (E, d), `self_attention.experts.input_linear` (E, h_kv·d_h,
d) and `output_linear` (E, d, h_kv·d_h) (the EXPERTS layout), `self_attention.experts.bias`, `self_attention.kv_proj`
(K | V); `mlp.router.layer`, `mlp.input_linear` (E, 2·d_ff, d: gate | up), `mlp.output_linear` (E, d, d_ff),
`mlp.bias`.
"""

from __future__ import annotations

from blockcli.families.common import TRAINING_ONLY, Family, first_of, mlp_activation, model_section, rope_base
from blockcli.families.fields import Fields
from blockcli.families.llama import LLAMA
from blockcli.tensor_names import EXPERTS, FUSED, LINEAR, TensorMap, tensor

JETMOE_LAYER_EPS = 1e-6  # JetMoeRMSNorm's default, what the decoder layers' two norms are built with


def _jetmoe(f: Fields) -> tuple[dict, dict]:
    """JetMoE: pre-norm RMSNorm, the mixture of attention heads (shared K/V, RoPE θ 10000 over each head) and the
    mixture of gated MLP experts, each routed by the top-k logits softmaxed; JetMoeConfig's defaults (JetMoE 4B
    style: d 2048, 12 layers, 16 K/V heads of 128, 8 experts, top 2, d_ff 5632)."""
    d = f.int("hidden_size", 2048)
    kv = f.int("num_key_value_heads", 16)
    head_dim = first_of(f, ("kv_channels", "head_dim"), lambda key: f.int(key), 128)  # head_dim: its attribute_map
    n_experts = f.int("num_local_experts", 8)
    top_k = f.int("num_experts_per_tok", 2)
    if top_k > n_experts:
        raise f.unrepresentable("num_experts_per_tok", top_k, f"it exceeds num_local_experts = {n_experts} "
                                                              f"(JetMoeConfig refuses it too)")
    if f.has("num_attention_heads") and f.data["num_attention_heads"] != kv * top_k:
        f.notes.append(f"num_attention_heads {f.data['num_attention_heads']!r} is not read: JetMoeConfig sets it to "
                       f"num_key_value_heads · num_experts_per_tok = {kv * top_k}")
    f.ignore("num_attention_heads")
    if f.bool("output_router_logits", False):  # training only: the loss would add the load-balancing loss
        raise f.unrepresentable("output_router_logits", True, "JetMoE's loss then adds aux_loss_coef × the load-"
                                "balancing loss over both mixtures' routers, which blockcli does not compute")
    f.ignore("aux_loss_coef")  # read by the loss only with output_router_logits
    eps = f.float("rms_norm_eps", JETMOE_LAYER_EPS)
    if eps != JETMOE_LAYER_EPS:
        raise f.unrepresentable("rms_norm_eps", eps, "JetMoE's layer norms keep eps 1e-6 and only its final norm "
                                                    "reads rms_norm_eps; blockcli's norms share one eps")
    max_positions = f.int("max_position_embeddings", 4096)
    theta, _, scaling = rope_base(f, ("rope_theta",), 10000.0, max_positions=max_positions)
    d_ff = f.int("intermediate_size", 5632)
    block = {"d_model": d, "n_heads": kv * top_k, "n_kv_heads": kv, "head_dim": head_dim, "d_ff": d_ff,
             "norm": "rmsnorm", "norm_eps": eps, **mlp_activation(f, "activation_function", "silu", gated=True),
             "bias": False, "placement": "pre", "rope": True, "rope_theta": theta,
             "moa": {"n_experts": n_experts, "top_k": top_k},
             "moe": {"n_experts": n_experts, "top_k": top_k, "d_expert": d_ff, "order": "topk_softmax",
                     "out_bias": True}}
    if scaling:
        block["rope_scaling"] = scaling
    model = model_section(f.int("num_hidden_layers", 12), f.int("vocab_size", 32000), "rope", max_positions,
                          f.bool("tie_word_embeddings", True))
    return block, model


_LAYER = "layers.{i}."
JETMOE = TensorMap("model.", (
    tensor("wte", "embed_tokens.weight"),
    tensor("blocks.{i}.ln1_gamma", _LAYER + "input_layernorm.weight"),
    tensor("blocks.{i}.moa_router", _LAYER + "self_attention.experts.router.layer.weight", LINEAR),
    tensor("blocks.{i}.attn_experts.{e}.w_q", _LAYER + "self_attention.experts.input_linear.weight", EXPERTS),
    tensor("blocks.{i}.w_k blocks.{i}.w_v", _LAYER + "self_attention.kv_proj.weight", FUSED),
    tensor("blocks.{i}.attn_experts.{e}.w_o", _LAYER + "self_attention.experts.output_linear.weight", EXPERTS),
    tensor("blocks.{i}.moa_bias", _LAYER + "self_attention.experts.bias"),
    tensor("blocks.{i}.ln2_gamma", _LAYER + "post_attention_layernorm.weight"),
    tensor("blocks.{i}.router", _LAYER + "mlp.router.layer.weight", LINEAR),
    tensor("blocks.{i}.experts.{e}.w_gate blocks.{i}.experts.{e}.w_up", _LAYER + "mlp.input_linear.weight", EXPERTS),
    tensor("blocks.{i}.experts.{e}.w_down", _LAYER + "mlp.output_linear.weight", EXPERTS),
    tensor("blocks.{i}.moe_bias", _LAYER + "mlp.bias"),
    tensor("ln_f_gamma", "norm.weight"),
    tensor("lm_head", "lm_head.weight", LINEAR, top=True),
), buffers=LLAMA.buffers)

FAMILIES = (
    Family("jetmoe", "JetMoE", _jetmoe, JETMOE, TRAINING_ONLY),
)
