"""MiniMax-Text-01 (`minimax`): Mixtral's block with lightning attention on most layers, and scaled residual adds.

A layer is `linear_attention` (lightning attention, `block.lightning`, blockcli/lightning.py) or `full_attention`
(Mixtral's GQA with RoPE over the whole head) as `layer_types` says; MiniMaxConfig's default alternates, starting
with full attention. Every layer has Mixtral's SwiGLU mixture (softmax router, top `num_experts_per_tok` of
`num_local_experts`, renormalised). The residual of each add is the norm's output (placement normed_residual,
transformers' only MiniMax layout, the remote code's `postnorm: true`), scaled: H = α·LN1(X) + β·mixer(LN1(X)),
α, β = full_attn_alpha_factor / full_attn_beta_factor on attention layers, linear_attn_* on lightning layers;
Y = α·LN2(H) + β·MoE(LN2(H)) with mlp_alpha_factor / mlp_beta_factor. Layer l's lightning heads decay at
s_i = 2^(−8(i+1)/h) · (1 − l/(L − 1 + 1e-5) + 1e-5); the output RMSNorm has eps 1e-6 (transformers builds it so).

Checkpoint tensors: Mixtral's (attention, router, experts per expert or fused); a lightning layer's
`self_attn.qkv_proj` (rows [q_i | k_i | v_i] per head), `output_gate`, `norm`, `out_proj`; its decay tables
(`slope_rate`, `query_decay`, `key_decay`, `diagonal_decay`) are buffers, recomputed from the config.
"""

from __future__ import annotations

from blockcli.families.common import Family, apply_window, gated_rms, override_layers, silu_gate
from blockcli.families.fields import Fields
from blockcli.families.moe import MIXTRAL, MOE_TRAINING_ONLY
from blockcli.tensor_names import GROUPED_HEADS, LINEAR, TensorMap, tensor

LINEAR_ATTENTION, FULL_ATTENTION = "linear_attention", "full_attention"


def _layer_kinds(f: Fields, n_layers: int) -> list[bool]:
    """Which layers are lightning attention: `layer_types`, else MiniMaxConfig's default (odd layers). The remote
    code's `attn_type_list` (0 lightning, 1 softmax), which transformers 5.24 does not read, must agree."""
    types = f.raw("layer_types", None)
    legacy = f.raw("attn_type_list", None)
    if types is None:
        if legacy is not None:
            raise f.unrepresentable("attn_type_list", legacy, "transformers 5.24's MiniMaxConfig does not read it "
                                    "and alternates the layers instead; give layer_types")
        return [bool(i % 2) for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers:
        raise f.invalid("layer_types", types, f"an array of {n_layers} layer types")
    for item in types:
        if item not in (LINEAR_ATTENTION, FULL_ATTENTION):
            raise f.unrepresentable("layer_types", item, "these layers are linear_attention or full_attention")
    linear = [t == LINEAR_ATTENTION for t in types]
    if legacy is not None and (not isinstance(legacy, list) or [x == 0 for x in legacy] != linear):
        raise f.unrepresentable("attn_type_list", legacy, "it disagrees with layer_types, which transformers reads")
    return linear


def decay_scale(layer: int, n_layers: int) -> float:
    """MiniMaxLightningAttention's per-layer factor on every head's decay rate, as its get_slope_rate computes it."""
    return 1 - layer / (n_layers - 1 + 1e-5) + 1e-5


def _minimax(f: Fields) -> tuple[dict, dict]:
    """MiniMax: Mixtral's block (GQA 32/8, RMSNorm eps 1e-5, RoPE θ 1e6 over the whole head, a window if
    `sliding_window` is set, on the attention layers) with lightning attention on the `layer_types` layers, the
    mixture on every layer and each residual add α·LN(x) + β·branch."""
    if f.str("hidden_act", "silu") != "silu":  # the lightning layers' q | k | v run hidden_act; blockcli's run SiLU
        raise f.unrepresentable("hidden_act", f.data["hidden_act"], "the lightning layers' q | k | v run hidden_act, "
                                                                    "which blockcli runs as SiLU only")
    block, model = gated_rms(f, silu_gate, kv_default=8, tie_default=False, qkv_bias=False, out_bias=False,
                             mlp_bias=False, eps_default=1e-5)
    params = f.data.get("rope_parameters")
    if f.data.get("rope_theta") is None and not (isinstance(params, dict) and params.get("rope_theta") is not None):
        block["rope_theta"] = 1e6  # MiniMaxConfig.default_theta
    block["moe"] = {"n_experts": f.int("num_local_experts", 8), "top_k": f.int("num_experts_per_tok", 2),
                    "d_expert": block["d_ff"], "renormalize": True}
    f.neutral("postnorm", True, "transformers' MiniMax takes each residual after its norm (postnorm true) only")
    f.neutral("shared_intermediate_size", 0, "transformers' MiniMax has no shared expert")
    block["placement"] = "normed_residual"
    scale = {key: f.float(key, 1.0, -1e6, 1e6) for key in (
        "full_attn_alpha_factor", "full_attn_beta_factor", "linear_attn_alpha_factor", "linear_attn_beta_factor",
        "mlp_alpha_factor", "mlp_beta_factor")}
    block.update(mlp_skip_scale=scale["mlp_alpha_factor"], mlp_branch_scale=scale["mlp_beta_factor"])
    window: dict = {}
    apply_window(f, window, f.data.get("sliding_window") is not None)
    n_layers = model["n_layers"]
    linear = _layer_kinds(f, n_layers)
    chunk = f.int("block_size", 256)
    attention = {"lightning": None, "attn_skip_scale": scale["full_attn_alpha_factor"],
                 "attn_branch_scale": scale["full_attn_beta_factor"], "sliding_window": window.get("sliding_window", 0)}

    def lightning(layer: int) -> dict:
        return {"lightning": {"decay_scale": decay_scale(layer, n_layers), "block_size": chunk},
                "attn_skip_scale": scale["linear_attn_alpha_factor"],
                "attn_branch_scale": scale["linear_attn_beta_factor"], "sliding_window": 0}

    block.update(lightning(0) if linear[0] else attention)
    for i in range(1, n_layers):
        fields = lightning(i) if linear[i] else attention
        if fields != (lightning(0) if linear[0] else attention):
            override_layers(f, [i], fields)
    return block, model


_LIGHTNING = (
    tensor("blocks.{i}.la_q blocks.{i}.la_k blocks.{i}.la_v", "layers.{i}.self_attn.qkv_proj.weight", GROUPED_HEADS),
    tensor("blocks.{i}.la_gate", "layers.{i}.self_attn.output_gate.weight", LINEAR),
    tensor("blocks.{i}.la_norm_gamma", "layers.{i}.self_attn.norm.weight"),
    tensor("blocks.{i}.la_out", "layers.{i}.self_attn.out_proj.weight", LINEAR),
)
MINIMAX = TensorMap("model.", MIXTRAL.tensors + _LIGHTNING, buffers=MIXTRAL.buffers + tuple(
    f"layers.{{i}}.self_attn.{name}" for name in ("slope_rate", "query_decay", "key_decay", "diagonal_decay")))

# fields of the published configs that transformers 5.24's MiniMax modelling code never reads
_UNREAD = {"rotary_dim": "transformers' MiniMax rotates each head's whole head_dim (MiniMaxRotaryEmbedding reads "
                         "head_dim, not rotary_dim)",
           "shared_moe_mode": "the shared expert's gating in the remote code; transformers' MiniMax has no shared "
                              "expert (shared_intermediate_size 0)"}

FAMILIES = (
    Family("minimax", "MiniMax", _minimax, MINIMAX, MOE_TRAINING_ONLY | {"router_jitter_noise"}, unread=_UNREAD,
           aux_loss=True),  # jitter: training only
)
