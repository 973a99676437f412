"""Lightning attention, MiniMax-Text-01's token mixer: linear attention with a fixed exponential decay per head.

Shapes: B batch, T tokens, d model width, h heads of d_h (the block's n_heads and head_dim):

    [q_i | k_i | v_i] = SiLU(x·W_qkv), per head i          # (B, T, h, d_h) each: W_qkv's rows grouped per head
    per step t and head i:  S ← λ_i·S + k_tᵀ v_t;  o_t = q_t·S   # S (d_h, d_h), from zeros; no 1/√d_h, no RoPE
    λ_i = exp(−s_i), s_i = 2^(−8(i+1)/h) · decay_scale     # MiniMax: decay_scale = 1 − l/(L − 1 + 1e-5) + 1e-5
    out = (σ(x·W_gate) ⊙ RMSNorm(o over h·d_h)) · W_out     # (B, T, d)

The state a sequence carries is S (B, h, d_h, d_h): constant in T, unlike a K/V cache. The forward walks the tokens
in blocks of `block_size` as transformers' prefill does: within a block, o_t = λ^(t+1)·q_t·S₀ + Σ_(s≤t)
λ^(t−s)·(q_t·k_s)·v_s from the block's starting state S₀; then S ← λ^c·S₀ + Σ_s λ^(c−1−s)·k_sᵀv_s. The result is the
step-by-step recurrence's (tests/reference.py walks it token by token); decoding continues from the stored state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from blockcli import ops as F
from blockcli.config import BlockConfig, InputError, Lightning
from blockcli.ops import STANDARD_OPS, Array, Ops

Record = Callable[..., None]

NO_BACKWARD = ("gradients through a lightning-attention layer are not implemented: verify --grad, train and trace "
               "--backward refuse models with block.lightning layers")
QKV_LABEL = "lightning: x·W_qkv → q | k | v per head"
RECURRENCE_LABEL = "lightning recurrence S ← λ·S + kᵀv, o = q·S (state S: B, h, d_h, d_h)"
GATE_LABEL, NORM_LABEL, OUT_LABEL = ("lightning: output gate x·W_gate", "RMSNorm(o) ⊙ σ(gate)",
                                     "lightning: output projection W_out")
# the symbolic shapes of a lightning layer's rows
SYMBOLIC = {"la_qkv": "(B, T, 3·h·d_h)", "la_qkv_act": "(B, T, 3·h·d_h)", "la_recurrence": "(B, h, T, d_h)",
            "la_gate": "(B, T, h·d_h)", "la_gate_act": "(B, T, h·d_h)", "la_gated_norm": "(B, T, h·d_h)",
            "attn_out": "(B, T, d)"}


def _ignore(*_args: Any, **_kwargs: Any) -> None:
    return None


def mixer_of(cfg: BlockConfig) -> Lightning:
    assert cfg.lightning is not None
    return cfg.lightning


def slopes(n_heads: int, decay_scale: float) -> np.ndarray:
    """Each head's decay rate s_i = (1/2^(8/h))^(i+1) · decay_scale (h,), float64, as transformers'
    get_slope_rate builds it."""
    base = 1.0 / (2.0 ** (8.0 / n_heads))
    return base ** np.arange(1, n_heads + 1, dtype=np.float64) * decay_scale


def state_bytes(cfg: BlockConfig, batch: int, itemsize: int) -> int:
    """What one lightning layer carries from token to token, whatever the sequence length: S (B, h, d_h, d_h)."""
    return batch * cfg.n_heads * cfg.head_dim * cfg.head_dim * itemsize


@dataclass
class LightningState:
    """What a lightning layer has read so far: S (B, h, d_h, d_h) (None before the first token), and how many tokens
    (as a K/V cache's `length`, which positions later tokens in the attention layers)."""

    recurrent: Array | None = None
    length: int = 0


def lightning_blocks(q: Array, k: Array, v: Array, rates: Array, state: Array, block_size: int) -> tuple[Array, Array]:
    """The decayed linear attention over T, block by block: q, k, v (B, h, T, d_h), rates s (h,), state S (B, h, d_h,
    d_h). Returns o (B, h, T, d_h) and the final S."""
    B, h, T, dh = q.shape
    dtype = np.result_type(q, v, state)
    out = np.empty((B, h, T, dh), dtype=dtype)
    s = rates.astype(dtype)[:, None, None]  # (h, 1, 1)
    S = state.astype(dtype, copy=True)
    for start in range(0, T, block_size):
        c = min(block_size, T - start)
        n = np.arange(1, c + 1, dtype=dtype)  # 1 … c
        q_b, k_b, v_b = q[:, :, start:start + c], k[:, :, start:start + c], v[:, :, start:start + c]
        q_decay = np.exp(-s * n[:, None])  # (h, c, 1): λ^(t+1)
        k_decay = np.exp(-s * (c - n[:, None]))  # (h, c, 1): λ^(c−1−s)
        gap = n[:, None] - n[None, :]  # (c, c): t − s
        diag = np.where(gap >= 0, np.exp(-s * np.maximum(gap, 0)), 0.0)  # (h, c, c): λ^(t−s) on and below the diagonal
        intra = ((q_b @ np.swapaxes(k_b, -1, -2)) * diag) @ v_b  # (B, h, c, d_h)
        inter = (q_b * q_decay) @ S  # (B, h, c, d_h)
        out[:, :, start:start + c] = inter + intra
        S = S * np.exp(-s * c) + np.swapaxes(k_b * k_decay, -1, -2) @ v_b  # (B, h, d_h, d_h)
    return out, S


@dataclass
class LightningMixer:
    """A lightning layer's mixer, called as attention is: x (B, T, d) → (B, T, d), its state in a LightningState."""

    cfg: BlockConfig
    p: dict[str, Array]
    ops: Ops = STANDARD_OPS
    attention: str = "auto"  # unused: there is no score table

    def __call__(self, x: Array, rec: Record = _ignore, cache: Any = None, drop: Any = None,
                 tape: Any = None) -> Array:
        if tape is not None:
            raise InputError(NO_BACKWARD)
        p, m, cfg = self.p, mixer_of(self.cfg), self.cfg
        B, T, _ = x.shape
        h, dh = cfg.n_heads, cfg.head_dim
        w_qkv = np.concatenate([p["la_q"], p["la_k"], p["la_v"]], axis=-1)  # (d, 3·h·d_h)
        projected = F.linear(x, w_qkv, None)  # (B, T, 3·h·d_h)
        rec("la_qkv", QKV_LABEL, projected, (x, w_qkv), kind="linear", params=("la_q", "la_k", "la_v"))
        qkv = F.silu(projected)  # (B, T, 3·h·d_h)
        rec("la_qkv_act", "SiLU", qkv, (projected,), kind="silu")
        q, k, v = (part.reshape(B, T, h, dh).transpose(0, 2, 1, 3) for part in np.split(qkv, 3, axis=-1))  # (B, h, T, d_h)
        state = getattr(cache, "recurrent", None)
        if state is None:
            state = np.zeros((B, h, dh, dh), dtype=v.dtype)
        o, new_state = lightning_blocks(q, k, v, slopes(h, m.decay_scale), state, m.block_size)  # (B, h, T, d_h)
        rec("la_recurrence", RECURRENCE_LABEL, o, (q, k, v), kind="lightning")
        if cache is not None:
            cache.recurrent, cache.length = new_state, cache.length + T
        flat = o.transpose(0, 2, 1, 3).reshape(B, T, h * dh)  # (B, T, h·d_h)
        gate_in = F.linear(x, p["la_gate"], None)  # (B, T, h·d_h)
        rec("la_gate", GATE_LABEL, gate_in, (x, p["la_gate"]), kind="linear", params=("la_gate",))
        gate = F.sigmoid(gate_in)  # (B, T, h·d_h)
        rec("la_gate_act", "σ", gate, (gate_in,), kind="sigmoid")
        gated = gate * F.rms_norm(flat, p["la_norm_gamma"], None, m.norm_eps)  # (B, T, h·d_h)
        rec("la_gated_norm", NORM_LABEL, gated, (flat, gate), kind="gated_norm", params=("la_norm_gamma",))
        out = F.linear(gated, p["la_out"], None)  # (B, T, d)
        rec("attn_out", OUT_LABEL, out, (gated, p["la_out"]), kind="linear", params=("la_out",))
        return out

    def backward(self, dy: Array, tape: Any) -> Array:
        raise InputError(NO_BACKWARD)


def analytic_rows(cfg: BlockConfig, rec: Record, S: Callable[..., Any], x: Any, batch: int, seq: int) -> Any:
    """The rows `LightningMixer.__call__` records, from shapes alone (stand-ins made by S)."""
    B, T, d, h, dh = batch, seq, cfg.d_model, cfg.n_heads, cfg.head_dim
    w = h * dh
    projected, qkv = S(B, T, 3 * w), S(B, T, 3 * w)
    rec("la_qkv", QKV_LABEL, projected, (x, S(d, 3 * w)), kind="linear", params=("la_q", "la_k", "la_v"))
    rec("la_qkv_act", "SiLU", qkv, (projected,), kind="silu")
    q, k, v, o = S(B, h, T, dh), S(B, h, T, dh), S(B, h, T, dh), S(B, h, T, dh)
    rec("la_recurrence", RECURRENCE_LABEL, o, (q, k, v), kind="lightning")
    gate_in, gate = S(B, T, w), S(B, T, w)
    rec("la_gate", GATE_LABEL, gate_in, (x, S(d, w)), kind="linear", params=("la_gate",))
    rec("la_gate_act", "σ", gate, (gate_in,), kind="sigmoid")
    flat, gated = S(B, T, w), S(B, T, w)
    rec("la_gated_norm", NORM_LABEL, gated, (flat, gate), kind="gated_norm", params=("la_norm_gamma",))
    out = S(B, T, d)
    rec("attn_out", OUT_LABEL, out, (gated, S(w, d)), kind="linear", params=("la_out",))
    return out
