"""The Gated DeltaNet token mixer (Qwen3-Next, Qwen3.5): a layer's attention replaced by a recurrence.

Shapes: B batch, T tokens, d model width; h_k key heads of d_k, h_v value heads of d_v (r = h_v / h_k value
heads read each key head); C = 2·h_k·d_k + h_v·d_v the short conv's channels (q | k | v), K its taps.

    q, k, v = x·W_q, x·W_k, x·W_v                         # (B, T, h_k·d_k) twice, (B, T, h_v·d_v)
    q | k | v = SiLU(causal depthwise conv_K(q | k | v))  # the conv looks K − 1 tokens back
    q, k = L2-normalised per head, repeated r times        # (B, T, h_v, d_k): key head i serves value heads r·i …
    β = σ(x·W_b), g = −exp(A_log)·softplus(x·W_a + dt_bias)  # (B, T, h_v) each
    per step t and value head:  S ← e^g·S;  S ← S + k (β (v − Sᵀk))ᵀ;  o = Sᵀq / √d_k   # S (d_k, d_v)
    out = (RMSNorm_γ(o) ⊙ SiLU(x·W_z)) · W_O               # the norm over each head's d_v, its own γ

Kimi Delta Attention (KDA, Kimi-Linear; `decay: channel`) is the same recurrence with the decay per key channel
and two low-rank projections in place of W_a and W_z (h = h_k = h_v, d_k = d_v):

    g = −exp(A_log)·softplus(x·W_fa·W_fb + dt_bias)       # (B, T, h, d_k): A_log per head, dt_bias per channel
    per step t and head:  S ← diag(e^g)·S; the delta write and readout as above
    out = (RMSNorm_γ(o) ⊙ σ(x·W_ga·W_gb)) · W_O            # W_fa (d, d_k), W_fb (d_k, h·d_k); W_ga, W_gb alike

The state a sequence carries is S (B, h_v, d_k, d_v) and the conv's last K − 1 inputs (B, K − 1, C): constant in
T, unlike a K/V cache. The forward walks the recurrence token by token over all heads at once (exact, the
same steps transformers' recurrent kernel takes); decoding continues from the stored state. The backward walks
it back from the last token, from each step's starting state kept on the tape (KDA's decay gradient per channel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from blockcli import ops as F
from blockcli.config import BlockConfig, GatedDeltaNet
from blockcli.ops import STANDARD_OPS, Array, Ops
from blockcli.shapes import deltanet_shapes

Record = Callable[..., None]
DECAY_LABEL = {False: "g = −exp(A_log)·softplus(a + dt_bias)",
               True: "g = −exp(A_log)·softplus(f + dt_bias), per key channel"}
GATE_LABEL = {False: "RMSNorm(o) ⊙ SiLU(z)", True: "RMSNorm(o) ⊙ σ(gate)"}

# the projections from x, by parameter key: what each makes
PROJECTIONS = (("dn_q", "q"), ("dn_k", "k"), ("dn_v", "v"), ("dn_z", "output gate z"), ("dn_b", "write strength b"),
               ("dn_a", "decay input a"))
# Kimi Delta Attention's: q, k, v and b from x; the decay input and the output gate each through a d_k-wide bottleneck
KDA_PROJECTIONS = (("dn_q", "q"), ("dn_k", "k"), ("dn_v", "v"), ("dn_b", "write strength b"))
KDA_LOW_RANK = (("dn_f", "decay input"), ("dn_g", "output gate"))


def _ignore(*_args: Any, **_kwargs: Any) -> None:
    return None


def mixer_of(cfg: BlockConfig) -> GatedDeltaNet:
    assert cfg.linear_attention is not None
    return cfg.linear_attention


def state_bytes(cfg: BlockConfig, batch: int, itemsize: int) -> int:
    """What one Gated DeltaNet layer carries from token to token, whatever the sequence length: S
    (B, h_v, d_k, d_v) and the conv's last K − 1 inputs (B, K − 1, C)."""
    m = mixer_of(cfg)
    return batch * (m.value_heads * m.key_head_dim * m.value_head_dim + (m.conv_kernel - 1) * m.conv_width) * itemsize


@dataclass
class DeltaNetState:
    """What a Gated DeltaNet layer has read so far: the recurrent state and the conv's window (None before the
    first token), and how many tokens (as a K/V cache's `length`, which positions later tokens)."""

    recurrent: Array | None = None  # (B, h_v, d_k, d_v)
    conv: Array | None = None  # (B, K − 1, C)
    length: int = 0


def beta_label(m: GatedDeltaNet) -> str:
    """The trace's name of the write strength: β = σ(b), or s·σ(b) with beta_scale s."""
    return "β = σ(b)" if m.beta_scale == 1.0 else f"β = {m.beta_scale:g}·σ(b)"


def conv_taps(m: GatedDeltaNet, p: dict[str, Array]) -> tuple[Array, tuple[str, ...]]:
    """The short conv's taps (C, K) over q | k | v and their parameter keys: the Gated DeltaNet's one conv, or Kimi
    Delta Attention's three (one each for q, k and v, stacked), or split_conv's (OLMo Hybrid's)."""
    if m.three_convs:
        keys = ("dn_q_conv", "dn_k_conv", "dn_v_conv")
        return np.concatenate([p[k] for k in keys], axis=0), keys
    return p["dn_conv"], ("dn_conv",)


def gated_delta_rule(q: Array, k: Array, v: Array, g: Array, beta: Array, state: Array,
                     before: Array | None = None) -> tuple[Array, Array]:
    """The recurrence over T: q, k (B, T, h_v, d_k) (normalised, q already scaled), v (B, T, h_v, d_v), g (B, T, h_v)
    per head or (B, T, h_v, d_k) per key channel (KDA), beta (B, T, h_v), state S (B, h_v, d_k, d_v). Returns o
    (B, T, h_v, d_v) and the final S; `before` (B, T, h_v, d_k, d_v), given, receives the state each step starts from
    (what the backward reads)."""
    out = np.empty(v.shape, dtype=np.result_type(q, v, state))
    s = state.copy()
    decay = np.exp(g)  # (B, T, h_v) or (B, T, h_v, d_k)
    decay = decay[..., None] if g.ndim == 4 else decay[..., None, None]  # (B, T, h_v, d_k or 1, 1)
    for t in range(q.shape[1]):
        if before is not None:
            before[:, t] = s
        s *= decay[:, t]  # (B, h_v, d_k, d_v): each row k of S (per channel) or all of it (per head) decays
        k_t = k[:, t]  # (B, h_v, d_k)
        remembered = np.einsum("bhkv,bhk->bhv", s, k_t)  # (B, h_v, d_v): Sᵀk
        delta = (v[:, t] - remembered) * beta[:, t, :, None]  # (B, h_v, d_v)
        s += k_t[..., :, None] * delta[..., None, :]  # rank-one write k δᵀ
        out[:, t] = np.einsum("bhkv,bhk->bhv", s, q[:, t])  # (B, h_v, d_v): Sᵀq
    return out, s


@dataclass
class GatedDeltaNetMixer:
    """The token mixer of a linear-attention layer: x (B, T, d) → (B, T, d), with its state in `cache`."""

    cfg: BlockConfig
    p: dict[str, Array]
    ops: Ops = STANDARD_OPS
    attention: str = "auto"  # unused: there is no score table

    def __call__(self, x: Array, rec: Record = _ignore, cache: Any = None, drop: Any = None,
                 tape: Any = None) -> Array:
        """x (B, T, d) → (B, T, d); `cache` (a DeltaNetState) carries the state between calls. A tape keeps what
        the backward reads: x, the conv's input and output, the normalised q and k, v, b, a, z, every step's
        starting state and the heads' output."""
        p, m = self.p, mixer_of(self.cfg)
        B, T, _ = x.shape
        h_k, h_v, d_k, d_v = m.key_heads, m.value_heads, m.key_head_dim, m.value_head_dim
        made = {}
        for key, what in KDA_PROJECTIONS if m.per_channel else PROJECTIONS:
            made[key] = F.linear(x, p[key], None)  # (B, T, width)
            rec(f"{key}_proj", f"linear attention: {what} projection", made[key], (x, p[key]), kind="linear",
                params=(key,))
        for key, what in KDA_LOW_RANK if m.per_channel else ():  # x·W_a (B, T, d_k), then ·W_b (B, T, h·d_k)
            low = made[f"{key}_low"] = F.linear(x, p[f"{key}_a"], None)
            rec(f"{key}_a_proj", f"linear attention: {what} down-projection (rank d_k)", low, (x, p[f"{key}_a"]),
                kind="linear", params=(f"{key}_a",))
            made[key] = F.linear(low, p[f"{key}_b"], None)
            rec(f"{key}_b_proj", f"linear attention: {what} up-projection", made[key], (low, p[f"{key}_b"]),
                kind="linear", params=(f"{key}_b",))
        qkv = np.concatenate([made["dn_q"], made["dn_k"], made["dn_v"]], axis=-1)  # (B, T, C)
        conv_state = getattr(cache, "conv", None)
        taps, conv_keys = conv_taps(m, p)  # (C, K): KDA's three convs side by side, one depthwise conv
        conv, new_conv = F.causal_conv1d(qkv, taps, None, conv_state)  # (B, T, C), (B, K − 1, C)
        rec("dn_conv", f"causal depthwise conv ({m.conv_kernel} taps) of q | k | v", conv, (qkv, taps),
            kind="conv", params=conv_keys)
        act = F.silu(conv)  # (B, T, C)
        rec("dn_conv_act", "SiLU", act, (conv,), kind="silu")
        kw = m.key_width
        q = act[..., :kw].reshape(B, T, h_k, d_k)
        k = act[..., kw:2 * kw].reshape(B, T, h_k, d_k)
        v = act[..., 2 * kw:].reshape(B, T, h_v, d_v)
        q_raw, k_raw = q, k
        q = F.l2_normalize(q) / math.sqrt(d_k)  # (B, T, h_k, d_k), times the readout's 1/√d_k
        k = F.l2_normalize(k)
        rec("dn_qk_norm", "L2-normalise q and k (q / √d_k)", k, (q, k), kind="l2norm")
        if h_v != h_k:  # key head i serves value heads r·i … r·i + r − 1
            q, k = np.repeat(q, h_v // h_k, axis=2), np.repeat(k, h_v // h_k, axis=2)  # (B, T, h_v, d_k)
        beta = F.sigmoid(made["dn_b"])  # (B, T, h_v)
        if m.beta_scale != 1.0:  # OLMo Hybrid's allow_neg_eigval: β in (0, 2)
            beta = beta * np.asarray(m.beta_scale, dtype=beta.dtype)
        rec("dn_beta", beta_label(m), beta, (made["dn_b"],), kind="sigmoid")
        if m.per_channel:  # (B, T, h, d_k): A_log per head, dt_bias per channel
            pre = (made["dn_f"] + p["dn_dt_bias"]).reshape(B, T, h_v, d_k)
            g = -np.exp(p["dn_A_log"])[:, None] * F.softplus(pre)
            rec("dn_decay", DECAY_LABEL[True], g, (made["dn_f"],), kind="decay", params=("dn_A_log", "dn_dt_bias"))
        else:
            g = -np.exp(p["dn_A_log"]) * F.softplus(made["dn_a"] + p["dn_dt_bias"])  # (B, T, h_v)
            rec("dn_decay", DECAY_LABEL[False], g, (made["dn_a"],), kind="decay", params=("dn_A_log", "dn_dt_bias"))
        state = getattr(cache, "recurrent", None)
        if state is None:
            state = np.zeros((B, h_v, d_k, d_v), dtype=v.dtype)
        before = np.empty((B, T, h_v, d_k, d_v), dtype=np.result_type(q, v)) if tape is not None else None
        o, new_state = gated_delta_rule(q, k, v, g, beta, state, before)  # (B, T, h_v, d_v), (B, h_v, d_k, d_v)
        rec("dn_delta_rule", "gated delta rule (state S: B, h_v, d_k, d_v)", o, (q, k, v, g, beta),
            kind="delta_rule")
        if cache is not None:
            cache.recurrent, cache.conv, cache.length = new_state, new_conv, cache.length + T
        z = made["dn_g" if m.per_channel else "dn_z"].reshape(B, T, h_v, d_v)
        normed = F.rms_norm(o, p["dn_norm_gamma"], None, m.norm_eps)  # (B, T, h_v, d_v)
        gated = normed * (F.sigmoid(z) if m.per_channel else F.silu(z))  # (B, T, h_v, d_v)
        rec("dn_gated_norm", GATE_LABEL[m.per_channel], gated, (o, z), kind="gated_norm", params=("dn_norm_gamma",))
        flat = gated.reshape(B, T, h_v * d_v)  # (B, T, h_v·d_v)
        out = F.linear(flat, p["dn_out"], None)  # (B, T, d)
        rec("attn_out", "output projection", out, (flat, p["dn_out"]), kind="linear", params=("dn_out",))
        if tape is not None:
            low = {"f_low": made["dn_f_low"], "g_low": made["dn_g_low"]} if m.per_channel else {}
            tape.keep("deltanet", x=x, qkv=qkv, conv=conv, q_raw=q_raw, k_raw=k_raw, q=q, k=k, v=v, b=made["dn_b"],
                      a=made["dn_f" if m.per_channel else "dn_a"], z=z, g=g, beta=beta, before=before, o=o, flat=flat,
                      **low)
        return out

    def backward(self, d_out: Array, tape: Any) -> Array:
        """d_out (B, T, d) → dx (B, T, d): the forward in reverse, the recurrence walked back from the last token
        (the state after the pass gets no gradient); every parameter's gradient added to the tape."""
        p, m, ops = self.p, mixer_of(self.cfg), self.ops
        sv = tape.take("deltanet")
        x = sv["x"]
        B, T, _ = x.shape
        h_k, h_v, d_k, d_v = m.key_heads, m.value_heads, m.key_head_dim, m.value_head_dim
        tape.add("dn_out", ops.weight_grad(sv["flat"], d_out))
        d_gated = (d_out @ p["dn_out"].T).reshape(B, T, h_v, d_v)
        o, z = sv["o"], sv["z"]
        normed = F.rms_norm(o, p["dn_norm_gamma"], None, m.norm_eps)  # (B, T, h_v, d_v)
        if m.per_channel:  # KDA's gate σ(z)
            gate = F.sigmoid(z)
            d_normed = d_gated * gate
            d_z = d_gated * normed * gate * (1.0 - gate)  # (B, T, h_v, d_v)
        else:
            d_normed = d_gated * F.silu(z)
            d_z = F.silu_backward(z, d_gated * normed)  # (B, T, h_v, d_v)
        d_o, d_scale = F.rms_norm_backward(o, p["dn_norm_gamma"], m.norm_eps, d_normed)
        tape.add("dn_norm_gamma", F.unbroadcast(d_scale, p["dn_norm_gamma"].shape))
        dq, dk, dv, dg, d_beta = delta_rule_backward(sv["q"], sv["k"], sv["v"], sv["g"], sv["beta"], sv["before"], d_o)
        r = h_v // h_k  # value heads per key head: their gradients summed back onto it
        dq = dq.reshape(B, T, h_k, r, d_k).sum(axis=3) / math.sqrt(d_k)  # (B, T, h_k, d_k)
        dk = dk.reshape(B, T, h_k, r, d_k).sum(axis=3)
        dq, dk = l2_normalize_backward(sv["q_raw"], dq), l2_normalize_backward(sv["k_raw"], dk)
        d_b = d_beta * sv["beta"] * (1.0 - sv["beta"] / m.beta_scale)  # (B, T, h_v): β = s·σ, β' = β·(1 − β/s)
        # g = −exp(A_log)·softplus(a + dt_bias): ∂g/∂A_log = g, ∂g/∂a = −exp(A_log)·σ(a + dt_bias); KDA's per key
        # channel (B, T, h, d_k), A_log's gradient summed over a head's channels
        if m.per_channel:
            tape.add("dn_A_log", (dg * sv["g"]).sum(axis=(0, 1, 3)))
            pre = (sv["a"] + p["dn_dt_bias"]).reshape(B, T, h_v, d_k)
            d_a = (dg * -np.exp(p["dn_A_log"])[:, None] * F.sigmoid(pre)).reshape(B, T, h_v * d_k)
        else:
            tape.add("dn_A_log", (dg * sv["g"]).sum(axis=(0, 1)))
            d_a = dg * -np.exp(p["dn_A_log"]) * F.sigmoid(sv["a"] + p["dn_dt_bias"])  # (B, T, h_v)
        tape.add("dn_dt_bias", d_a.sum(axis=(0, 1)))
        d_act = np.concatenate([dq.reshape(B, T, -1), dk.reshape(B, T, -1), dv.reshape(B, T, -1)], axis=-1)
        d_conv = F.silu_backward(sv["conv"], d_act)  # (B, T, C)
        taps, conv_keys = conv_taps(m, p)
        d_qkv, d_taps = causal_conv1d_backward(sv["qkv"], taps, d_conv)
        kw = m.key_width
        if m.three_convs:  # the three convs' rows of the stacked taps
            for key, rows in zip(conv_keys, (d_taps[:kw], d_taps[kw:2 * kw], d_taps[2 * kw:])):
                tape.add(key, rows)
        else:
            tape.add("dn_conv", d_taps)
        parts = {"dn_q": d_qkv[..., :kw], "dn_k": d_qkv[..., kw:2 * kw], "dn_v": d_qkv[..., 2 * kw:], "dn_b": d_b}
        if m.per_channel:  # the low-rank pairs: top = (x·W_a)·W_b
            for key, d_top in (("dn_f", d_a), ("dn_g", d_z.reshape(B, T, -1))):
                low = sv[f"{key[3]}_low"]
                tape.add(f"{key}_b", ops.weight_grad(low, d_top))
                parts[f"{key}_a"] = d_top @ p[f"{key}_b"].T  # (B, T, rank)
        else:
            parts.update(dn_z=d_z.reshape(B, T, -1), dn_a=d_a)
        dx = np.zeros_like(x, dtype=np.result_type(x, d_out))
        for key, d_part in parts.items():  # y = x·W for each: dW = xᵀ·dy, dx += dy·Wᵀ
            tape.add(key, ops.weight_grad(x, d_part))
            dx += d_part @ p[key].T
        return dx


def delta_rule_backward(q: Array, k: Array, v: Array, g: Array, beta: Array, before: Array, d_out: Array
                        ) -> tuple[Array, Array, Array, Array, Array]:
    """The gated delta rule's vector-Jacobian product, walked back from the last step: with S₀ the step's starting
    state, S' = e^g·S₀, r = S'ᵀk, δ = β(v − r), S = S' + kδᵀ and o = Sᵀq; `before` holds each step's S₀. Returns
    dq, dk (B, T, h_v, d_k), dv (B, T, h_v, d_v), dg and dβ (B, T, h_v)."""
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    dg, d_beta = np.empty_like(g), np.empty_like(beta)
    dS = np.zeros(before.shape[:1] + before.shape[2:], dtype=before.dtype)  # (B, h_v, d_k, d_v): ∂L/∂S after step t
    per_channel = g.ndim == 4  # KDA: g (B, T, h_v, d_k), each row of S its own decay
    decay = np.exp(g)[..., None] if per_channel else np.exp(g)[..., None, None]  # (B, T, h_v, d_k or 1, 1)
    for t in reversed(range(q.shape[1])):
        q_t, k_t, v_t, b_t = q[:, t], k[:, t], v[:, t], beta[:, t, :, None]
        decayed = before[:, t] * decay[:, t]  # S'
        r = np.einsum("bhkv,bhk->bhv", decayed, k_t)  # (B, h_v, d_v)
        delta = b_t * (v_t - r)
        after = decayed + k_t[..., :, None] * delta[..., None, :]  # S
        dq[:, t] = np.einsum("bhkv,bhv->bhk", after, d_out[:, t])  # o = Sᵀq
        dS += q_t[..., :, None] * d_out[:, t][..., None, :]
        d_delta = np.einsum("bhkv,bhk->bhv", dS, k_t)  # S = S' + kδᵀ
        dk_t = np.einsum("bhkv,bhv->bhk", dS, delta)
        d_beta[:, t] = np.sum(d_delta * (v_t - r), axis=-1)
        dv[:, t] = b_t * d_delta
        d_r = -b_t * d_delta  # r = S'ᵀk
        dk[:, t] = dk_t + np.einsum("bhkv,bhv->bhk", decayed, d_r)
        dS = dS + k_t[..., :, None] * d_r[..., None, :]  # now ∂L/∂S'
        dg[:, t] = np.sum(dS * decayed, axis=-1 if per_channel else (-2, -1))  # S' = e^g·S₀
        dS = dS * decay[:, t]  # ∂L/∂S₀: the previous step's S
    return dq, dk, dv, dg, d_beta


def l2_normalize_backward(x: Array, dy: Array, eps: float = 1e-6) -> Array:
    """y = x/n, n = √(Σx² + ε): dx = (dy − y·⟨y, dy⟩)/n over the last axis."""
    n = np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)
    y = x / n
    return (dy - y * np.sum(y * dy, axis=-1, keepdims=True)) / n


def causal_conv1d_backward(x: Array, weight: Array, dy: Array) -> tuple[Array, Array]:
    """ops.causal_conv1d's vector-Jacobian product from zeros before x: x (B, T, C), weight (C, K), dy (B, T, C) →
    dx (B, T, C), d_weight (C, K)."""
    B, T, C = x.shape
    K = weight.shape[1]
    padded = np.concatenate([np.zeros((B, K - 1, C), dtype=x.dtype), x], axis=1)  # (B, K − 1 + T, C)
    d_padded = np.zeros(padded.shape, dtype=np.result_type(x, dy))
    d_weight = np.empty(weight.shape, dtype=np.result_type(x, dy))
    for j in range(K):  # y_t += weight[:, j]·padded[t + j]
        d_weight[:, j] = np.sum(dy * padded[:, j:j + T], axis=(0, 1))
        d_padded[:, j:j + T] += dy * weight[:, j]
    return d_padded[:, K - 1:], d_weight


def analytic_rows(cfg: BlockConfig, rec: Record, S: Callable[..., Any], x: Any, batch: int, seq: int) -> Any:
    """The rows `GatedDeltaNetMixer.__call__` records, from shapes alone (stand-ins made by S)."""
    m, d = mixer_of(cfg), cfg.d_model
    B, T = batch, seq
    made = {}
    shapes = deltanet_shapes(cfg)
    for key, what in KDA_PROJECTIONS if m.per_channel else PROJECTIONS:
        width = shapes[key][1]
        made[key] = S(B, T, width)
        rec(f"{key}_proj", f"linear attention: {what} projection", made[key], (x, S(d, width)), kind="linear",
            params=(key,))
    for key, what in KDA_LOW_RANK if m.per_channel else ():
        (_, rank), (_, width) = shapes[f"{key}_a"], shapes[f"{key}_b"]
        low = S(B, T, rank)
        rec(f"{key}_a_proj", f"linear attention: {what} down-projection (rank d_k)", low, (x, S(d, rank)),
            kind="linear", params=(f"{key}_a",))
        made[key] = S(B, T, width)
        rec(f"{key}_b_proj", f"linear attention: {what} up-projection", made[key], (low, S(rank, width)),
            kind="linear", params=(f"{key}_b",))
    qkv, conv = S(B, T, m.conv_width), S(B, T, m.conv_width)
    rec("dn_conv", f"causal depthwise conv ({m.conv_kernel} taps) of q | k | v", conv,
        (qkv, S(m.conv_width, m.conv_kernel)), kind="conv",
        params=("dn_q_conv", "dn_k_conv", "dn_v_conv") if m.three_convs else ("dn_conv",))
    act = S(B, T, m.conv_width)
    rec("dn_conv_act", "SiLU", act, (conv,), kind="silu")
    q, k = S(B, T, m.key_heads, m.key_head_dim), S(B, T, m.key_heads, m.key_head_dim)
    rec("dn_qk_norm", "L2-normalise q and k (q / √d_k)", k, (q, k), kind="l2norm")
    beta = S(B, T, m.value_heads)
    rec("dn_beta", beta_label(m), beta, (made["dn_b"],), kind="sigmoid")
    g = S(B, T, m.value_heads, m.key_head_dim) if m.per_channel else S(B, T, m.value_heads)
    rec("dn_decay", DECAY_LABEL[m.per_channel], g, (made["dn_f" if m.per_channel else "dn_a"],), kind="decay",
        params=("dn_A_log", "dn_dt_bias"))
    # repeated for the value heads (new arrays), or, one value head per key head, the normalised q and k themselves
    qr, kr = ((S(B, T, m.value_heads, m.key_head_dim), S(B, T, m.value_heads, m.key_head_dim))
              if m.value_heads != m.key_heads else (q, k))
    v, o = S(B, T, m.value_heads, m.value_head_dim), S(B, T, m.value_heads, m.value_head_dim)
    rec("dn_delta_rule", "gated delta rule (state S: B, h_v, d_k, d_v)", o, (qr, kr, v, g, beta), kind="delta_rule")
    z, gated = S(B, T, m.value_heads, m.value_head_dim), S(B, T, m.value_heads, m.value_head_dim)
    rec("dn_gated_norm", GATE_LABEL[m.per_channel], gated, (o, z), kind="gated_norm", params=("dn_norm_gamma",))
    flat, out = S(B, T, m.value_width), S(B, T, d)
    rec("attn_out", "output projection", out, (flat, S(m.value_width, d)), kind="linear", params=("dn_out",))
    return out


# symbolic shapes of the rows above (trace's one shape vocabulary)
SYMBOLIC_DELTANET = {
    "dn_q_proj": "(B, T, h_k·d_k)", "dn_k_proj": "(B, T, h_k·d_k)", "dn_v_proj": "(B, T, h_v·d_v)",
    "dn_z_proj": "(B, T, h_v·d_v)", "dn_b_proj": "(B, T, h_v)", "dn_a_proj": "(B, T, h_v)",
    "dn_conv": "(B, T, C)", "dn_conv_act": "(B, T, C)", "dn_qk_norm": "(B, T, h_k, d_k)", "dn_beta": "(B, T, h_v)",
    "dn_decay": "(B, T, h_v)", "dn_delta_rule": "(B, T, h_v, d_v)", "dn_gated_norm": "(B, T, h_v, d_v)",
    "attn_out": "(B, T, d)",
}
# Kimi Delta Attention's rows where they differ (h = h_k = h_v)
SYMBOLIC_KDA = {**{k: v for k, v in SYMBOLIC_DELTANET.items() if k not in ("dn_z_proj", "dn_a_proj")},
                "dn_f_a_proj": "(B, T, d_k)", "dn_f_b_proj": "(B, T, h·d_k)", "dn_g_a_proj": "(B, T, d_v)",
                "dn_g_b_proj": "(B, T, h·d_v)", "dn_decay": "(B, T, h, d_k)"}
