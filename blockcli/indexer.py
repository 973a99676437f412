"""DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2-Exp §2.1; GLM-5), as transformers 5.24's
DeepseekV32Indexer computes it: which earlier keys each query of a latent-attention layer attends to.

Shapes: h_I indexer heads of d_I, r its RoPE dims (latent attention's qk_rope_head_dim), r_q the query latent.

    q_I   = c_q·W_Iq                         (B, T, h_I, d_I)   c_q the normalised query latent
    k_I   = LayerNorm(x·W_Ik)                (B, T_k, d_I)      one key per token, shared by the heads
    q_I, k_I rotated on their first r dims  (halves: V3.2; interleaved pairs: GLM-5)
    w     = x·W_Iw / √h_I                    (B, T, h_I)
    I_ts  = Σ_j w_tj · ReLU(q_I,tj · k_I,s / √d_I)   (B, T, T_k) the index score of key s for query t

Query t keeps the index_topk keys s ≤ t of the highest I_ts (all of them while t + 1 ≤ index_topk); the
rest are masked out of its attention. The indexer runs without gradients (transformers' torch.no_grad):
the choice is a constant of the pass, and the indexer's weights get no gradient from the loss.
The K/V cache keeps k_I (d_I per token and layer) beside the latent.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from blockcli import ops as F
from blockcli.config import BlockConfig
from blockcli.ops import Array

Record = Callable[..., None]

INDEXER_NORM_EPS = 1e-6  # nn.LayerNorm(index_head_dim, eps=1e-6) in transformers' indexer


def select(cfg: BlockConfig, p: Mapping[str, Array], x: Array, q_latent: Array, start: int,
           cache: Any, rec: Record) -> Array:
    """The indexer's choice for x (B, T, d) with its normalised query latent (B, T, r_q) at positions start…
    (with `cache`, after its earlier keys): (B, 1, T, T_k) booleans, the keys each query attends to, for every
    attention head alike."""
    m = cfg.mla
    assert m is not None and m.index_heads
    B, T, _ = x.shape
    H, D = m.index_heads, m.index_head_dim
    cos, sin = F.rope_tables(np.arange(start, start + T), m.qk_rope_head_dim, cfg.rope_theta, x.dtype,
                             cfg.rope_scaling)  # (T, r/2) each: the tables latent attention's RoPE uses
    q_flat = F.linear(q_latent, p["idx_w_q"], None)  # (B, T, h_I·d_I)
    rec("idx_q", "indexer Q projection (from the Q latent)", q_flat, (q_latent, p["idx_w_q"]), kind="linear",
        params=("idx_w_q",))
    k_raw = F.linear(x, p["idx_w_k"], None)  # (B, T, d_I)
    rec("idx_k", "indexer K projection", k_raw, (x, p["idx_w_k"]), kind="linear", params=("idx_w_k",))
    k = F.layer_norm(k_raw, p["idx_k_norm_gamma"], p["idx_k_norm_beta"], INDEXER_NORM_EPS)  # (B, T, d_I)
    rec("idx_k_norm", "indexer key LayerNorm", k, (k_raw,), kind="layernorm",
        params=("idx_k_norm_gamma", "idx_k_norm_beta"))
    q = F.rotate_pairs(q_flat.reshape(B, T, H, D).transpose(0, 2, 1, 3), cos, sin,
                       m.index_rope_layout)  # (B, h_I, T, d_I): the first r dims turned
    rec("idx_q_rope", f"RoPE on the indexer queries' first {m.qk_rope_head_dim} dims", q, (q_flat,), kind="rope")
    keys = F.rotate_pairs(k[:, None], cos, sin, m.index_rope_layout)  # (B, 1, T, d_I)
    rec("idx_k_rope", f"RoPE on the indexer keys' first {m.qk_rope_head_dim} dims", keys, (k,), kind="rope")
    if cache is not None:
        keys = cache.append_index(keys)  # (B, 1, T_seen, d_I)
    scores = np.maximum(q @ keys.swapaxes(-1, -2) * np.asarray(D ** -0.5, dtype=q.dtype), 0)  # (B, h_I, T, T_k)
    rec("idx_scores", "indexer scores ReLU(q·k/√d_I)", scores, (q, keys), kind="matmul")
    weights = F.linear(x, p["idx_w_weights"], None) * np.asarray(H ** -0.5, dtype=x.dtype)  # (B, T, h_I)
    rec("idx_weights", "indexer head weights x·W_Iw/√h_I", weights, (x, p["idx_w_weights"]), kind="linear",
        params=("idx_w_weights",))
    index = np.einsum("bth,bhts->bts", weights, scores)  # (B, T, T_k)
    rec("idx_index", "index scores Σ_h w·ReLU(…)", index, (weights, scores), kind="combine")
    keep = top_keys(index, start, m.index_topk)  # (B, T, T_k)
    rec("idx_topk", f"indexer's top-{m.index_topk} keys per query", keep, (index,), kind="topk")
    return keep[:, None]  # (B, 1, T, T_k)


def top_keys(scores: Array, start: int, topk: int) -> Array:
    """(B, T, T_k) booleans: the keys each query keeps, the `topk` causal keys of its highest scores (every
    causal key when it has at most `topk`). Query t sits at position start + t."""
    B, T, T_k = scores.shape
    causal = F.causal_mask(T, T_k, start)  # (T, T_k)
    ranked = np.where(causal, scores, -np.inf)  # (B, T, T_k)
    k = min(topk, T_k)
    chosen = np.argpartition(-ranked, k - 1, axis=-1)[..., :k]  # (B, T, k): the k best, in no order
    keep = np.zeros((B, T, T_k), dtype=bool)
    np.put_along_axis(keep, chosen, True, axis=-1)
    return keep & causal  # a query with fewer causal keys than k took some future ones: they stay masked
