"""JetMoE's mixture of attention heads (MoA, ModuleFormer §2): attention experts chosen per token by a router.

Shapes: B batch, T tokens, d model width, h_kv K/V heads of d_h, E_a attention experts of which k_a per token
(config.MixtureOfAttention; the block's n_heads is k_a·h_kv):

    logits = x·W_router                                 # (B, T, E_a)
    chosen = top-k_a(logits); g = softmax(chosen logits) # (B, T, k_a) each: the k_a largest, softmaxed over those
    Q_j = x·W_q[e_j]                                    # (B, T, h_kv·d_h) for each chosen expert j
    K, V = x·W_k, x·W_v                                 # (B, h_kv, T, d_h): shared by every expert, RoPE on K
    O_j = softmax(mask(RoPE(Q_j)·Kᵀ/√d_h))·V            # query head i of each expert attends to K/V head i
    out = Σ_j g_j·(O_j·W_o[e_j]) + b                    # (B, T, d)

The K/V cache holds K and V alone, (B, h_kv, T, d_h) each, as any grouped-query attention's: the experts' queries
are recomputed per token. In attention's own terms the k_a·h_kv query heads are grouped per K/V head (head
i·k_a + j is expert slot j's head i), so the grouped-query kernel reads K/V head i for each of them.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from blockcli.config import BlockConfig, MixtureOfAttention
from blockcli.ops import Array, Ops

Record = Callable[..., None]

OUT_LABEL = "+ the mixture's output bias (moa_bias)"
# the symbolic shapes of a mixture-of-attention layer's rows (h = k_a·h_kv query heads, as everywhere)
SYMBOLIC = {"moa_logits": "(B, T, E_a)", "moa_choice": "(B, T, k_a)", "moa_weights": "(B, T, k_a)",
            "q_proj": "(B, T, k_a·h_kv·d_h)", "attn_concat": "(B, T, k_a, h_kv·d_h)",
            "moa_experts_out": "(B, T, k_a, d)", "moa_sum": "(B, T, d)"}


def mixture_of(cfg: BlockConfig) -> MixtureOfAttention:
    assert cfg.moa is not None
    return cfg.moa


def logits_label(m: MixtureOfAttention) -> str:
    return f"attention router logits (d → E_a = {m.n_experts} experts)"


def choice_label(m: MixtureOfAttention) -> str:
    return f"top-{m.top_k} of {m.n_experts} attention experts per token"


def weights_label(m: MixtureOfAttention) -> str:
    return f"attention experts' weights (softmax of the {m.top_k} chosen logits)"


def query_label(cfg: BlockConfig) -> str:
    m, w = mixture_of(cfg), cfg.n_kv_heads * cfg.head_dim
    return f"Q projection: each chosen expert's W_q (d, h_kv·d_h = {w}), {m.top_k} per token"


def split_label(cfg: BlockConfig) -> str:
    return (f"split heads Q ({mixture_of(cfg).top_k} experts × {cfg.n_kv_heads} heads, each expert's head i "
            f"on K/V head i)")


def experts_out_label(cfg: BlockConfig) -> str:
    m, w = mixture_of(cfg), cfg.n_kv_heads * cfg.head_dim
    return f"each chosen expert's W_o (h_kv·d_h = {w} → d), {m.top_k} per token"


def sum_label(cfg: BlockConfig) -> str:
    return f"weighted sum of the {mixture_of(cfg).top_k} attention experts' outputs"


def route(x: Array, router: Array, top_k: int, ops: Ops) -> tuple[Array, Array, Array]:
    """(logits (B, T, E_a), chosen experts (B, T, k_a), their weights (B, T, k_a)) for x (B, T, d): the k_a largest
    logits (ties: the lower index), softmaxed over those k_a (JetMoeTopKGating)."""
    B, T, d = x.shape
    logits = x.reshape(B * T, d) @ router  # (N, E_a)
    chosen = ops.top_k(logits, top_k)  # (N, k_a)
    weights = ops.router_probabilities(np.take_along_axis(logits, chosen, axis=-1), "softmax")  # (N, k_a)
    return logits.reshape(B, T, -1), chosen.reshape(B, T, top_k), weights.reshape(B, T, top_k)


def expert_queries(x: Array, chosen: Array, p: dict[str, Array], n_experts: int) -> Array:
    """Each token's queries from its chosen experts: (B, T, k_a, h_kv·d_h), slot j through W_q of expert chosen[…, j]."""
    B, T, d = x.shape
    k = chosen.shape[-1]
    flat, choice = x.reshape(B * T, d), chosen.reshape(B * T, k)
    width = p["attn_experts.0.w_q"].shape[1]
    q = np.zeros((B * T, k, width), dtype=np.result_type(x, p["attn_experts.0.w_q"]))  # (N, k_a, h_kv·d_h)
    for e in range(n_experts):
        rows, slots = np.nonzero(choice == e)  # the (token, slot) pairs routed to expert e
        if rows.size:
            q[rows, slots] = flat[rows] @ p[f"attn_experts.{e}.w_q"]  # (n_e, h_kv·d_h)
    return q.reshape(B, T, k, width)


def expert_outputs(heads: Array, chosen: Array, p: dict[str, Array], n_experts: int) -> Array:
    """Each slot's heads (B, T, k_a, h_kv·d_h) through its expert's W_o: (B, T, k_a, d)."""
    B, T, k, width = heads.shape
    flat, choice = heads.reshape(B * T, k, width), chosen.reshape(B * T, k)
    d = p["attn_experts.0.w_o"].shape[1]
    out = np.zeros((B * T, k, d), dtype=np.result_type(heads, p["attn_experts.0.w_o"]))  # (N, k_a, d)
    for e in range(n_experts):
        rows, slots = np.nonzero(choice == e)
        if rows.size:
            out[rows, slots] = flat[rows, slots] @ p[f"attn_experts.{e}.w_o"]  # (n_e, d)
    return out.reshape(B, T, k, d)


def experts_backward(inputs: Array, d_out: Array, chosen: Array, p: dict[str, Array], name: str, n_experts: int,
                     tape: Any) -> Array:
    """The backward of each slot's projection through its expert's `name` (w_q or w_o): inputs (B, T, k_a, n_in) and
    d_out (B, T, k_a, n_out) → d_inputs (B, T, k_a, n_in); each expert's weight gradient, from its routed slots, added
    to the tape (an expert no token chose gets none: zeros)."""
    B, T, k, n_in = inputs.shape
    flat_in, flat_d, choice = inputs.reshape(B * T, k, n_in), d_out.reshape(B * T, k, -1), chosen.reshape(B * T, k)
    d_in = np.zeros((B * T, k, n_in), dtype=np.result_type(inputs, d_out))  # (N, k_a, n_in)
    for e in range(n_experts):
        rows, slots = np.nonzero(choice == e)
        if rows.size:
            w = p[f"attn_experts.{e}.{name}"]  # (n_in, n_out)
            tape.add(f"attn_experts.{e}.{name}", flat_in[rows, slots].T @ flat_d[rows, slots])
            d_in[rows, slots] = flat_d[rows, slots] @ w.T  # (n_e, n_in)
    return d_in.reshape(B, T, k, n_in)


def analytic_rows(cfg: BlockConfig, rec: Record, S: Callable[..., Any], x: Any, batch: int, seq: int,
                  attend: Callable[..., Any], indices: Callable[..., Any]) -> Any:
    """The rows the mixture of attention heads records, from shapes alone (stand-ins made by S, integer ones by
    `indices`); `attend(q, k, v)` records the attention itself as every layer's and returns the heads
    (B, k_a·h_kv, T, d_h)."""
    m = mixture_of(cfg)
    B, T, d, h, h_kv, dh = batch, seq, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    E, k, w = m.n_experts, m.top_k, cfg.n_kv_heads * cfg.head_dim
    logits = S(B, T, E)
    rec("moa_logits", logits_label(m), logits, (x, S(d, E)), kind="linear", params=("moa_router",))
    chosen, weights = indices(B, T, k), S(B, T, k)
    rec("moa_choice", choice_label(m), chosen, (logits,), kind="topk")
    rec("moa_weights", weights_label(m), weights, (chosen,), kind="softmax")
    q_flat = S(B, T, k * w)
    rec("q_proj", query_label(cfg), q_flat, (x, S(d, w)), kind="linear",
        params=tuple(f"attn_experts.{e}.w_q" for e in range(E)))
    k_flat, v_flat = S(B, T, w), S(B, T, w)
    rec("k_proj", "K projection (shared by the experts)", k_flat, (x, S(d, w)), kind="linear", params=("w_k",))
    rec("v_proj", "V projection (shared by the experts)", v_flat, (x, S(d, w)), kind="linear", params=("w_v",))
    q, kk, v = S(B, h, T, dh), S(B, h_kv, T, dh), S(B, h_kv, T, dh)
    rec("q", split_label(cfg), q, (q_flat,), kind="reshape")
    rec("k", "split heads K", kk, (k_flat,), kind="reshape")
    rec("v", "split heads V", v, (v_flat,), kind="reshape")
    if cfg.rope:
        q_rot, k_rot = S(B, h, T, dh), S(B, h_kv, T, dh)
        rec("q_rope", "RoPE on Q", q_rot, (q,), kind="rope")
        rec("k_rope", "RoPE on K", k_rot, (kk,), kind="rope")
        q, kk = q_rot, k_rot
    heads = attend(q, kk, v)  # (B, h, T, d_h)
    concat = S(B, T, k, w)
    rec("attn_concat", "combine heads per expert", concat, (heads,), kind="reshape")
    outs = S(B, T, k, d)
    rec("moa_experts_out", experts_out_label(cfg), outs, (concat, S(w, d)), kind="linear",
        params=tuple(f"attn_experts.{e}.w_o" for e in range(E)))
    summed, out = S(B, T, d), S(B, T, d)
    rec("moa_sum", sum_label(cfg), summed, (weights, outs), kind="combine")
    rec("attn_out", OUT_LABEL, out, (summed,), kind="add", params=("moa_bias",))
    return out
