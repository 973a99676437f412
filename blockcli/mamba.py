"""The Mamba state-space token mixers in place of attention: Mamba-2 (SSD, config.Mamba2) and Mamba-1 (S6, the
selective scan, config.Mamba1) below it, sharing the causal conv (ops.causal_conv1d), the decode cache and the
refusal of gradients.

Shapes: B batch, T sequence, d model width; h SSM heads of width p (d_in = h·p), N the state width, g groups of
heads sharing B and C, K the conv kernel, c = d_in + 2·g·N the channels the conv runs over.

    [z | xBC | dt] = u·W_in                         (B, T, d_in), (B, T, c), (B, T, h)
    xBC = silu(conv1d(xBC))                         causal, depthwise, kernel K, over T
    x, B, C = split(xBC)                            (B, T, h, p), (B, T, g, N), (B, T, g, N)
    Δ = max(softplus(dt + dt_bias), dt_min)         (B, T, h); A = −exp(A_log) (h,)
    S_t = exp(Δ_t·A)·S_{t−1} + Δ_t·x_t ⊗ B_t        (B, h, p, N), S_0 = 0 (or the cache's)
    y_t = S_t·C_t + D·x_t                           (B, T, h, p)
    out = (RMSNorm per group(y ⊙ silu(z)) · γ)·W_out   (or RMSNorm(y)·γ ⊙ silu(z), or y ⊙ silu(z): block.mamba.norm)

The recurrence is computed chunk by chunk (SSD's dual form): within a chunk of Q steps as a masked
(Q, Q) product, between chunks through the state; the two are the same sums, reordered. The decode
state is constant in T: S (B, h, p, N) and the conv's last K−1 inputs (B, K−1, c).

Mamba-1 (Gu & Dao 2023, Algorithm 2): d_in channels, each its own N-wide state and decay A (d_in, N), Δ per channel
through a rank-R projection; R the Δ rank:

    [x | z] = u·W_in                                (B, T, d_in) each
    x = silu(conv1d(x))                             causal, depthwise, kernel K, over T
    [δ | B | C] = x·W_x                             (B, T, R), (B, T, N), (B, T, N)
    δ, B, C = RMSNorm(δ), RMSNorm(B), RMSNorm(C)    Falcon-Mamba (weightless), Jamba (learned scales); else as they are
    Δ = softplus(δ·W_dt + b_dt)                     (B, T, d_in); A = −exp(A_log) (d_in, N)
    S_t = exp(Δ_t ⊗ A) ⊙ S_{t−1} + (Δ_t ⊙ x_t) ⊗ B_t   (B, d_in, N), S_0 = 0 (or the cache's)
    y_t = S_t·C_t + D ⊙ x_t                         (B, T, d_in)
    out = (y ⊙ silu(z))·W_out

The scan runs step by step over T (each step over all channels and state entries at once): the decay differs per
channel and state entry, so there is no (Q, Q) dual form as small as SSD's. Its decode state is constant in T:
S (B, d_in, N) and the conv's last K−1 inputs (B, K−1, d_in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from blockcli import ops as F
from blockcli.config import BlockConfig, InputError, Mamba1
from blockcli.ops import STANDARD_OPS, Array, Ops

CHUNK = 64  # steps per chunk of the dual form (irrelevant to the result: every chunking gives the same sums)


@dataclass
class MambaCache:
    """One Mamba-2 layer's decode state: the conv's last K−1 inputs (B, K−1, c) and the SSM state
    (B, h, p, N); `length` counts the tokens seen, as KVCache's does."""

    conv: Array | None = None  # (B, K−1, c)
    ssm: Array | None = None  # (B, h, p, N)
    length: int = 0


def segment_sums(a: Array) -> Array:
    """(…, Q, Q) with [l, s] = a_{s+1} + … + a_l for s <= l (0 on the diagonal), −inf above it: the log of
    the decay from step s to step l, summed term by term (no difference of long cumulative sums)."""
    Q = a.shape[-1]
    below = np.tril(np.ones((Q, Q), dtype=bool), k=-1)  # l > s
    terms = np.where(below, a[..., :, None], 0.0)  # (…, Q(l), Q(s)): a_l where l > s
    sums = np.cumsum(terms, axis=-2)  # Σ_{j=s+1..l} a_j
    return np.where(np.tril(np.ones((Q, Q), dtype=bool)), sums, -np.inf)


def ssd_scan(x: Array, dt: Array, A: Array, Bm: Array, Cm: Array, state: Array | None,
             chunk: int = CHUNK) -> tuple[Array, Array]:
    """y_t = S_t·C_t with S_t = exp(Δ_t·A)·S_{t−1} + Δ_t·x_t ⊗ B_t, chunk by chunk. x (B, T, h, p), dt = Δ (B, T, h),
    A (h,), Bm and Cm (B, T, h, N) (each head's group's), state (B, h, p, N) or None (zeros). Returns
    (y (B, T, h, p) without the D skip, the last state (B, h, p, N))."""
    Bsz, T, h, p = x.shape
    N = Bm.shape[-1]
    S = np.zeros((Bsz, h, p, N), dtype=x.dtype) if state is None else state.astype(x.dtype, copy=True)
    y = np.empty_like(x)
    for lo in range(0, T, chunk):
        hi = min(T, lo + chunk)
        xs = x[:, lo:hi].transpose(0, 2, 1, 3)  # (B, h, Q, p)
        d = dt[:, lo:hi].transpose(0, 2, 1)  # (B, h, Q)
        Bc = Bm[:, lo:hi].transpose(0, 2, 1, 3)  # (B, h, Q, N)
        Cc = Cm[:, lo:hi].transpose(0, 2, 1, 3)  # (B, h, Q, N)
        a = d * A[None, :, None]  # (B, h, Q): log of each step's decay
        seg = segment_sums(a)  # (B, h, Q, Q)
        weights = (Cc @ Bc.swapaxes(-1, -2)) * np.exp(seg) * d[:, :, None, :]  # (B, h, Q(l), Q(s))
        into = np.cumsum(a, axis=-1)  # (B, h, Q): log decay from the chunk's start to step l
        ys = weights @ xs + np.exp(into)[..., None] * (Cc @ S.swapaxes(-1, -2))  # (B, h, Q, p)
        to_end = seg[..., -1, :]  # (B, h, Q): log decay from step s to the chunk's end
        S = (np.exp(into[..., -1])[..., None, None] * S
             + (xs * (d * np.exp(to_end))[..., None]).swapaxes(-1, -2) @ Bc)  # (B, h, p, N)
        y[:, lo:hi] = ys.transpose(0, 2, 1, 3)
    return y, S


class Mamba2Mixer:
    """A Mamba-2 layer's mixer, called as attention is: (B, T, d) → (B, T, d), with a MambaCache to decode."""

    def __init__(self, cfg: BlockConfig, p: dict[str, Array], ops: Ops = STANDARD_OPS) -> None:
        assert cfg.mamba is not None and not isinstance(cfg.mamba, Mamba1)
        self.cfg, self.m, self.p, self.ops = cfg, cfg.mamba, p, ops

    def __call__(self, u: Array, rec: Callable[..., None], cache: Any = None, drop_probs: Any = None,
                 tape: Any = None) -> Array:
        if tape is not None:
            raise InputError(NO_BACKWARD)
        m, p = self.m, self.p
        Bsz, T, _ = u.shape
        h, hp, N, g, d_in = m.n_heads, m.head_dim, m.d_state, m.n_groups, m.d_inner
        state = cache if isinstance(cache, MambaCache) else None
        if m.in_multiplier != 1.0:  # Falcon-H1's ssm_in_multiplier
            u = u * np.asarray(m.in_multiplier, dtype=u.dtype)
        zxbcdt = F.linear(u, p["w_ssm_in"], p.get("b_ssm_in"))  # (B, T, 2·d_in + 2·g·N + h)
        if m.multipliers != (1.0, 1.0, 1.0, 1.0, 1.0):  # Falcon-H1's µP vector: z, x, B, C, dt each times its own
            zxbcdt = zxbcdt * mup_vector(m).astype(zxbcdt.dtype)
        rec("ssm_in", IN_LABEL, zxbcdt, (u, p["w_ssm_in"]), kind="linear",
            params=("w_ssm_in", "b_ssm_in"))
        z, xbc, dt = np.split(zxbcdt, [d_in, d_in + m.conv_dim], axis=-1)  # (B, T, d_in), (B, T, c), (B, T, h)
        conv, conv_state = F.causal_conv1d(xbc, p["ssm_conv"], p.get("b_ssm_conv"),
                                           state.conv if state is not None else None)  # (B, T, c), (B, K−1, c)
        rec("ssm_conv", conv_label(m), conv, (zxbcdt, p["ssm_conv"]), kind="conv", params=("ssm_conv", "b_ssm_conv"))
        xbc = F.silu(conv)  # (B, T, c)
        rec("ssm_conv_act", "SiLU", xbc, (conv,), kind="silu")
        x, Bg, Cg = np.split(xbc, [d_in, d_in + g * N], axis=-1)
        x = x.reshape(Bsz, T, h, hp)  # (B, T, h, p)
        per_group = h // g
        Bm = np.repeat(Bg.reshape(Bsz, T, g, N), per_group, axis=2)  # (B, T, h, N): each head its group's B
        Cm = np.repeat(Cg.reshape(Bsz, T, g, N), per_group, axis=2)  # (B, T, h, N)
        delta = F.softplus(dt + p["ssm_dt_bias"])  # (B, T, h)
        if m.dt_min:  # clamped below (Nemotron-H's time_step_min)
            delta = np.maximum(delta, np.asarray(m.dt_min, dtype=delta.dtype))
        rec("ssm_dt", DT_LABEL, delta, (zxbcdt,), kind="softplus", params=("ssm_dt_bias",))
        A = -np.exp(p["ssm_A_log"].astype(u.dtype))  # (h,)
        scan, last = ssd_scan(x, delta, A, Bm, Cm, state.ssm if state is not None else None)  # (B, T, h, p)
        rec("ssm_scan", scan_label(m), scan, (xbc, delta, Bm, Cm), kind="ssd", params=("ssm_A_log",))
        y = (scan + x * p["ssm_D"].astype(u.dtype)[:, None]).reshape(Bsz, T, d_in)  # (B, T, d_in): the D skip
        rec("ssm_skip", SKIP_LABEL, y, (scan, xbc), kind="skip", params=("ssm_D",))
        if m.norm == "norm_gate":  # RMSNorm_grouped(y)·γ ⊙ silu(z)
            normed = grouped_rms(y, g, m.norm_eps) * p["ssm_norm_gamma"] * F.silu(z)  # (B, T, d_in)
        elif m.norm == "none":  # y ⊙ silu(z), no norm
            normed = y * F.silu(z)  # (B, T, d_in)
        else:  # RMSNorm_grouped(y ⊙ silu(z))·γ
            normed = grouped_rms(y * F.silu(z), g, m.norm_eps) * p["ssm_norm_gamma"]  # (B, T, d_in)
        rec("ssm_norm", norm_label(m), normed, (y, zxbcdt), kind="gated_rmsnorm", params=("ssm_norm_gamma",))
        out = F.linear(normed, p["w_ssm_out"], p.get("b_ssm_out"))  # (B, T, d)
        rec("attn_out", OUT_LABEL, out, (normed, p["w_ssm_out"]), kind="linear", params=("w_ssm_out", "b_ssm_out"))
        if state is not None:
            state.conv, state.ssm, state.length = conv_state, last, state.length + T
        return out

    def backward(self, dy: Array, tape: Any) -> Array:
        raise InputError(NO_BACKWARD)


def selective_scan(x: Array, delta: Array, A: Array, Bm: Array, Cm: Array, state: Array | None
                   ) -> tuple[Array, Array]:
    """Mamba-1's y_t = S_t·C_t with S_t = exp(Δ_t ⊗ A) ⊙ S_{t−1} + (Δ_t ⊙ x_t) ⊗ B_t, step by step. x and delta = Δ
    (B, T, d_in), A (d_in, N), Bm and Cm (B, T, N), state (B, d_in, N) or None (zeros). Returns (y (B, T, d_in)
    without the D skip, the last state (B, d_in, N))."""
    Bsz, T, d_in = x.shape
    S = np.zeros((Bsz, d_in, A.shape[1]), dtype=x.dtype) if state is None else state.astype(x.dtype, copy=True)
    y = np.empty_like(x)
    for t in range(T):
        S = np.exp(delta[:, t, :, None] * A) * S + (delta[:, t] * x[:, t])[:, :, None] * Bm[:, t, None, :]
        y[:, t] = np.einsum("bcn,bn->bc", S, Cm[:, t])  # (B, d_in)
    return y, S


def _rms(v: Array, gamma: Array | None, eps: float) -> Array:
    """RMSNorm over the last axis, scaled by gamma (None: weightless, Falcon-Mamba's)."""
    out = v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps)
    return out if gamma is None else out * gamma


class Mamba1Mixer:
    """A Mamba-1 layer's mixer, called as attention is: (B, T, d) → (B, T, d), with a MambaCache to decode."""

    def __init__(self, cfg: BlockConfig, p: dict[str, Array], ops: Ops = STANDARD_OPS) -> None:
        assert isinstance(cfg.mamba, Mamba1)
        self.cfg, self.m, self.p, self.ops = cfg, cfg.mamba, p, ops

    def __call__(self, u: Array, rec: Callable[..., None], cache: Any = None, drop_probs: Any = None,
                 tape: Any = None) -> Array:
        if tape is not None:
            raise InputError(NO_BACKWARD)
        m, p = self.m, self.p
        d_in, R, N = m.d_inner, m.dt_rank, m.d_state
        state = cache if isinstance(cache, MambaCache) else None
        xz = F.linear(u, p["w_ssm_in"], p.get("b_ssm_in"))  # (B, T, 2·d_in)
        rec("ssm_in", IN1_LABEL, xz, (u, p["w_ssm_in"]), kind="linear", params=("w_ssm_in", "b_ssm_in"))
        x, z = np.split(xz, [d_in], axis=-1)  # (B, T, d_in) each
        conv, conv_state = F.causal_conv1d(x, p["ssm_conv"], p.get("b_ssm_conv"),
                                           state.conv if state is not None else None)  # (B, T, d_in), (B, K−1, d_in)
        rec("ssm_conv", conv1_label(m), conv, (xz, p["ssm_conv"]), kind="conv", params=("ssm_conv", "b_ssm_conv"))
        x = F.silu(conv)  # (B, T, d_in)
        rec("ssm_conv_act", "SiLU", x, (conv,), kind="silu")
        dbc = F.linear(x, p["w_ssm_x"], None)  # (B, T, R + 2·N)
        rec("ssm_x", X_LABEL, dbc, (x, p["w_ssm_x"]), kind="linear", params=("w_ssm_x",))
        dt, Bm, Cm = np.split(dbc, [R, R + N], axis=-1)  # (B, T, R), (B, T, N), (B, T, N)
        if m.bc_norm != "none":
            learned = m.bc_norm == "learned"
            dt, Bm, Cm = (_rms(v, p[key] if learned else None, m.bc_norm_eps)
                          for v, key in ((dt, "ssm_dt_norm"), (Bm, "ssm_B_norm"), (Cm, "ssm_C_norm")))
            rec("ssm_bc_norm", bc_norm_label(m), np.concatenate([dt, Bm, Cm], axis=-1), (dbc,), kind="rmsnorm",
                params=("ssm_dt_norm", "ssm_B_norm", "ssm_C_norm") if learned else ())
        dt_in = F.linear(dt, p["w_ssm_dt"], p["b_ssm_dt"])  # (B, T, d_in)
        rec("ssm_dt_proj", DT_PROJ_LABEL, dt_in, (dt, p["w_ssm_dt"]), kind="linear", params=("w_ssm_dt", "b_ssm_dt"))
        delta = F.softplus(dt_in)  # (B, T, d_in)
        rec("ssm_dt", DT1_LABEL, delta, (dt_in,), kind="softplus")
        A = -np.exp(p["ssm_A_log"].astype(u.dtype))  # (d_in, N)
        scan, last = selective_scan(x, delta, A, Bm, Cm, state.ssm if state is not None else None)  # (B, T, d_in)
        rec("ssm_scan", scan1_label(m), scan, (x, delta, Bm, Cm), kind="ssd", params=("ssm_A_log",))
        y = scan + x * p["ssm_D"].astype(u.dtype)  # (B, T, d_in): the D skip
        rec("ssm_skip", SKIP_LABEL, y, (scan, x), kind="skip", params=("ssm_D",))
        gated = y * F.silu(z)  # (B, T, d_in)
        rec("ssm_gate", GATE1_LABEL, gated, (y, xz), kind="swiglu")
        out = F.linear(gated, p["w_ssm_out"], p.get("b_ssm_out"))  # (B, T, d)
        rec("attn_out", OUT_LABEL, out, (gated, p["w_ssm_out"]), kind="linear", params=("w_ssm_out", "b_ssm_out"))
        if state is not None:
            state.conv, state.ssm, state.length = conv_state, last, state.length + u.shape[1]
        return out

    def backward(self, dy: Array, tape: Any) -> Array:
        raise InputError(NO_BACKWARD)


def mixer_class(cfg: BlockConfig) -> type:
    """The block.mamba section's mixer: Mamba1Mixer or Mamba2Mixer."""
    return Mamba1Mixer if isinstance(cfg.mamba, Mamba1) else Mamba2Mixer


# Mamba-1's labels and symbolic shapes (d_in channels, R the Δ rank, N the state)
IN1_LABEL, X_LABEL, DT_PROJ_LABEL, DT1_LABEL, GATE1_LABEL = (
    "SSM in-projection (x | z)", "x-projection (δ | B | C)", "Δ's projection δ·W_dt + b_dt (rank R)",
    "Δ = softplus(δ·W_dt + b_dt)", "y ⊙ silu(z)")
SYMBOLIC1 = {"ssm_in": "(B, T, 2·d_in)", "ssm_conv": "(B, T, d_in)", "ssm_conv_act": "(B, T, d_in)",
             "ssm_x": "(B, T, R + 2·N)", "ssm_bc_norm": "(B, T, R + 2·N)", "ssm_dt_proj": "(B, T, d_in)",
             "ssm_dt": "(B, T, d_in)",
             "ssm_scan": "(B, T, d_in)", "ssm_skip": "(B, T, d_in)", "ssm_gate": "(B, T, d_in)", "attn_out": "(B, T, d)"}


def conv1_label(m: Any) -> str:
    return f"causal conv over T of x (kernel {m.conv_kernel}, per channel)"


def scan1_label(m: Any) -> str:
    return f"selective scan: state (B, d_in={m.d_inner}, N={m.d_state}), constant in T"


def bc_norm_label(m: Any) -> str:
    return f"RMSNorm of δ, B, C ({'weightless' if m.bc_norm == 'weightless' else 'learned scales'})"
def grouped_rms(a: Array, groups: int, eps: float) -> Array:
    """a (B, T, d_in) normalised over each of `groups` groups of d_in/groups features (no scale)."""
    Bsz, T, d_in = a.shape
    parts = a.reshape(Bsz, T, groups, d_in // groups)
    return (parts / np.sqrt(np.mean(parts * parts, axis=-1, keepdims=True) + eps)).reshape(Bsz, T, d_in)


def mup_vector(m: Any) -> Array:
    """(2·d_in + 2·g·N + h,): each of W_in's output segments z, x, B, C, dt times its multiplier."""
    widths = (m.d_inner, m.d_inner, m.n_groups * m.d_state, m.n_groups * m.d_state, m.n_heads)
    return np.concatenate([np.full(w, v) for w, v in zip(widths, m.multipliers)])


# the trace's labels, shared with its analytic rows (blockcli.trace)
IN_LABEL, DT_LABEL, SKIP_LABEL, OUT_LABEL = ("SSM in-projection (z | x B C | dt)", "Δ = softplus(dt + dt_bias)",
                                             "+ D·x", "SSM out-projection")
# the symbolic shapes of a Mamba-2 layer's rows (c = d_in + 2·g·N, d_in = h_s·p)
SYMBOLIC = {"ssm_in": "(B, T, 2·d_in + 2·g·N + h_s)", "ssm_conv": "(B, T, c)", "ssm_conv_act": "(B, T, c)",
            "ssm_dt": "(B, T, h_s)", "ssm_scan": "(B, T, h_s, p)", "ssm_skip": "(B, T, d_in)",
            "ssm_norm": "(B, T, d_in)", "attn_out": "(B, T, d)",
            "ssm_out": "(B, T, d)", "mixer_out": "(B, T, d)"}  # block.parts hybrid: beside attention, their sum


def conv_label(m: Any) -> str:
    return f"causal conv over T of x B C (kernel {m.conv_kernel}, per channel)"


def scan_label(m: Any) -> str:
    return f"SSD scan: state (B, h_s={m.n_heads}, p={m.head_dim}, N={m.d_state}), constant in T"


def norm_label(m: Any) -> str:
    groups = f"{m.n_groups} group{'s' if m.n_groups > 1 else ''}"
    return {"gated": f"gated RMSNorm (y ⊙ silu(z), {groups})", "norm_gate": f"RMSNorm(y) ({groups}) ⊙ silu(z)",
            "none": "y ⊙ silu(z) (no norm)"}[m.norm]


NO_BACKWARD = ("gradients through a Mamba-1 or Mamba-2 (state-space) layer are not implemented: verify --grad, train and "
               "trace --backward refuse models with block.mamba layers")


def state_bytes(cfg: BlockConfig, batch: int, itemsize: int) -> int:
    """One Mamba layer's decode state: the SSM state B·d_in·N (Mamba-2's d_in = h·p) and the conv's B·(K−1)·c
    (Mamba-1's c = d_in), whatever T."""
    m = cfg.mamba
    assert m is not None
    return batch * (m.d_inner * m.d_state + (m.conv_kernel - 1) * m.conv_dim) * itemsize
