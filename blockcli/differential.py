"""Differential attention (the Differential Transformer; DiffLlama), on the block's grouped-query softmax attention.

Shapes: B batch, T tokens, h query heads over h_kv K/V heads (h_kv even; g = h/h_kv), d_h each head's width:

    Q, K, V = x·W_Q, x·W_K, x·W_V, RoPE on Q and K            # (B, h, T, d_h), (B, h_kv, T, d_h) twice
    V2_j = [V_j | V_(j mod h_kv/2 + h_kv/2)]                 # (B, h_kv, T, 2·d_h): K/V head j's values, both halves
    H_i = softmax(mask(Q_i·K_(i/g)ᵀ/√d_h))·V2_(i/g)          # (B, h, T, 2·d_h): one softmax per query head
    λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init             # a scalar per layer from four learned (d_h,) vectors
    O_i = (1 − λ_init)·RMSNorm(H_i − λ·H_(i+h/2))            # (B, h/2, T, 2·d_h): head i < h/2 and head i + h/2
    out = [O_0 | … | O_(h/2−1)]·W_O                          # (B, T, h·d_h) → (B, T, d)

As transformers' DiffLlamaAttention (its two attention calls over V's halves share one softmax: here it is computed
once, over the doubled values). The RMSNorm has no scale, eps the block's norm_eps. The K/V cache holds K and V as
any grouped-query attention's (h_kv heads of d_h). The backward (MultiHeadAttention._differential_backward) runs it
in reverse: W_O, the norm, the pairs (λ's gradient to the four vectors through exp(λ_q·λ_k)), attention over both
halves (each half's gradient summed over the two K/V heads that read it), RoPE, the Q/K/V projection.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from blockcli.config import BlockConfig, Differential
from blockcli.ops import Array

Record = Callable[..., None]

# the symbolic shapes of a differential-attention layer's rows
SYMBOLIC = {"attn_heads": "(B, h, T, 2·d_h)", "diff_combine": "(B, h/2, T, 2·d_h)", "diff_norm": "(B, h/2, T, 2·d_h)",
            "attn_concat": "(B, T, h·d_h)", "v_both": "(B, h_kv, T, 2·d_h)"}


def mixer_of(cfg: BlockConfig) -> Differential:
    assert cfg.differential is not None
    return cfg.differential


def both_halves(v: Array) -> Array:
    """V (B, h_kv, T, d_h) → (B, h_kv, T, 2·d_h): K/V head j's row [V_j | V_(j mod h_kv/2 + h_kv/2)], as transformers'
    torch.chunk(V, 2, dim=1) halves, each repeated to h_kv heads, side by side."""
    half = v.shape[1] // 2
    first, second = v[:, :half], v[:, half:]  # (B, h_kv/2, T, d_h) each
    return np.concatenate([np.concatenate([first, first], axis=1), np.concatenate([second, second], axis=1)],
                          axis=-1)


def lambda_of(p: dict[str, Array], lambda_init: float, dtype: Any) -> Array:
    """λ = exp(Σ λ_q1·λ_k1) − exp(Σ λ_q2·λ_k2) + λ_init, as a 0-d array of `dtype`."""
    one = math.exp(float(np.sum(p["lambda_q1"].astype(np.float64) * p["lambda_k1"])))
    two = math.exp(float(np.sum(p["lambda_q2"].astype(np.float64) * p["lambda_k2"])))
    return np.asarray(one - two + lambda_init, dtype=dtype)


def combine_label(m: Differential) -> str:
    return (f"differential: heads i − λ·heads i + h/2 (λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init, "
            f"λ_init = {m.lambda_init:.6g})")


def norm_label(m: Differential) -> str:
    return f"RMSNorm over each pair's 2·d_h (no scale) × (1 − λ_init) = {1 - m.lambda_init:.6g}"


VALUES_LABEL = "values of both halves [V_j | V_(j + h_kv/2)] per K/V head"


def analytic_rows(cfg: BlockConfig, rec: Record, S: Callable[..., Any], heads: Any, batch: int, seq: int) -> Any:
    """The rows after attention's heads (B, h, T, 2·d_h), from shapes alone: the combination, its norm, the concat and
    W_O, as DifferentialAttention records them; returns the output stand-in."""
    m = mixer_of(cfg)
    B, T, d, h, dh = batch, seq, cfg.d_model, cfg.n_heads, cfg.head_dim
    combined, normed, concat, out = S(B, h // 2, T, 2 * dh), S(B, h // 2, T, 2 * dh), S(B, T, h * dh), S(B, T, d)
    rec("diff_combine", combine_label(m), combined, (heads,), kind="differential",
        params=("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"))
    rec("diff_norm", norm_label(m), normed, (combined,), kind="rmsnorm")
    rec("attn_concat", "combine heads", concat, (normed,), kind="reshape")
    rec("attn_out", "output projection", out, (concat, S(h * dh, d)), kind="linear", params=("w_o", "b_o"))
    return out
