"""A slow, obviously correct decoder block: loops over batch, heads and positions.

It shares no code with `ops` or `block` on purpose, but for the scaled RoPE frequencies: `verify`
compares the vectorised block with it (the check that catches a missing 1/√d_h, for one). Only
small vector operations use NumPy.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Mapping

import numpy as np

from blockcli.config import BlockConfig
from blockcli.ops import rope_frequencies


def _norm(v: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None, kind: str, eps: float) -> np.ndarray:
    n = len(v)
    if kind == "layernorm":
        mu = sum(v) / n
        var = sum((a - mu) ** 2 for a in v) / n
        out = (v - mu) / math.sqrt(var + eps) * gamma
    else:
        out = v / math.sqrt(sum(a * a for a in v) / n + eps) * gamma
    return out if beta is None else out + beta


def _sigmoid(u: float) -> float:
    return 1 / (1 + math.exp(-u)) if u > -700 else 0.0  # exp(−u) past float64's range below −700


def _gelu(u: float) -> float:
    return 0.5 * u * (1 + math.erf(u / math.sqrt(2)))


def _softplus(u: float) -> float:
    return u if u > 20 else math.log1p(math.exp(u))


# each activation of blockcli.activations, one scalar at a time, written from its formula
_SCALAR_ACTIVATIONS = {
    "gelu_tanh": lambda u: 0.5 * u * (1 + math.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3))),
    "gelu": _gelu,
    "relu": lambda u: max(u, 0.0),
    "silu": lambda u: u * _sigmoid(u),
    "relu2": lambda u: max(u, 0.0) ** 2,
    "quick_gelu": lambda u: u * _sigmoid(1.702 * u),
    "gelu_10": lambda u: min(max(_gelu(u), -10.0), 10.0),
    "relu6": lambda u: min(max(u, 0.0), 6.0),
    "leaky_relu": lambda u: u if u > 0 else 0.01 * u,
    "sigmoid": _sigmoid,
    "tanh": math.tanh,
    "mish": lambda u: u * math.tanh(_softplus(u)),
    "hardswish": lambda u: u * min(max(u + 3, 0.0), 6.0) / 6,
    "linear": lambda u: u,
    "laplace": lambda u: 0.5 * (1 + math.erf((u - 0.707107) / (0.282095 * math.sqrt(2)))),
}


def _act(cfg: BlockConfig, u: float, p: Mapping[str, np.ndarray]) -> float:
    """The block's activation of one number; xIELU's with the layer's own scalars a_p, a_n."""
    if cfg.activation == "xielu":
        beta, eps = float(p["act_beta"][0]), float(p["act_eps"][0])
        alpha_p = _softplus(float(p["act_alpha_p"][0]))
        alpha_n = beta + _softplus(float(p["act_alpha_n"][0]))
        if u > 0:
            return alpha_p * u * u + beta * u
        return alpha_n * (math.expm1(min(u, eps)) - u) + beta * u
    return _SCALAR_ACTIVATIONS[cfg.activation](u)


def _gated(cfg: BlockConfig, gate: float, up: float, p: Mapping[str, np.ndarray]) -> float:
    """One unit of a gated MLP: act(gate)·up, or gpt-oss's clamped SwiGLU."""
    if cfg.activation == "clamped_swiglu":
        c, alpha = cfg.swiglu_limit, cfg.swiglu_alpha
        g = min(gate, c)
        silu = g / (1 + math.exp(-alpha * g)) if alpha * g > -700 else 0.0  # exp(−αg) past float64's range
        return silu * (min(max(up, -c), c) + 1)
    return _act(cfg, gate, p) * up


def _rotate(vec: np.ndarray, pos: int, cfg: BlockConfig, seq_len: int) -> np.ndarray:
    r = cfg.rope_dims
    out = vec.copy()
    # Scaled frequencies (a config detail, checked against transformers' own in the tests) come from
    # ops; the rotation itself is written out here, pair by pair.
    inv_freq, attention = rope_frequencies(r, cfg.rope_theta, cfg.rope_scaling, seq_len)
    for i in range(r // 2):
        angle = pos * float(inv_freq[i])
        first, second = (2 * i, 2 * i + 1) if cfg.rope_layout == "interleaved" else (i, i + r // 2)
        a, b = vec[first], vec[second]
        cos, sin = attention * math.cos(angle), attention * math.sin(angle)
        if cfg.rope_layout == "half_reversed":  # NanoChat: each pair turned by −θ
            sin = -sin
        out[first] = a * cos - b * sin
        out[second] = b * cos + a * sin
    return out


def _alibi_slope(head: int, n_heads: int) -> float:
    """ALiBi's slope of one head, written out: 2^(−8(i+1)/p) for the first p (the largest power of two
    <= h), then 2^(−4(2j+1)/p) for the j-th of the rest."""
    p = 1
    while 2 * p <= n_heads:
        p *= 2
    return 2.0 ** (-8.0 * (head + 1) / p) if head < p else 2.0 ** (-4.0 * (2 * (head - p) + 1) / p)
def _latent_attention(n: np.ndarray, p: Mapping[str, np.ndarray], cfg: BlockConfig) -> np.ndarray:
    """Multi-head latent attention (DeepSeek) on n (T, d) of one sequence, token by token, head by head."""
    m = cfg.mla
    assert m is not None
    T, h = n.shape[0], cfg.n_heads
    d_n, d_r, d_v, r_kv = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
    unit = 1.0 if cfg.norm_unit_offset else 0.0

    def latent_norm(name: str, v: np.ndarray) -> np.ndarray:
        return _norm(v, p[f"{name}_gamma"] + unit, p.get(f"{name}_beta"), cfg.norm, m.latent_norm_eps)

    def bias(name: str, width: int) -> np.ndarray:
        return p.get(name, np.zeros(width))

    queries, keys, values, latents = [], [], [], []  # [t][head], and each token's query latent
    for t in range(T):
        if m.q_lora_rank:
            latents.append(latent_norm("q_a_norm", n[t] @ p["w_q_a"] + bias("b_q_a", m.q_lora_rank)))
            q = latents[t] @ p["w_q_b"]
        else:
            q = n[t] @ p["w_q"]
        a = n[t] @ p["w_kv_a"] + bias("b_kv_a", r_kv + d_r)
        up = latent_norm("kv_a_norm", a[:r_kv]) @ p["w_kv_b"]  # each head's key part, then its value
        k_rope = _rotate(a[r_kv:], t, cfg, T)  # one rotated key part, read by every head
        heads = [q[i * (d_n + d_r):(i + 1) * (d_n + d_r)] for i in range(h)]
        queries.append([np.concatenate([qi[:d_n], _rotate(qi[d_n:], t, cfg, T)]) for qi in heads])
        keys.append([np.concatenate([up[i * (d_n + d_v):i * (d_n + d_v) + d_n], k_rope]) for i in range(h)])
        values.append([up[i * (d_n + d_v) + d_n:(i + 1) * (d_n + d_v)] for i in range(h)])
    scale = 1.0 / math.sqrt(d_n + d_r)
    s = cfg.rope_scaling
    if s is not None and s.mscale_all_dim and s.factor > 1:  # transformers' yarn_apply_mscale
        scale *= (0.1 * s.mscale_all_dim * math.log(s.factor) + 1.0) ** 2
    chosen = _index_choice(n, latents, p, cfg) if m.index_heads else None
    concat = np.zeros((T, h * d_v))
    for head in range(h):
        for t in range(T):
            first = max(0, t - cfg.sliding_window + 1) if cfg.sliding_window else 0
            seen = [u for u in range(first, t + 1) if chosen is None or u in chosen[t]]
            logits = [float(queries[t][head] @ keys[u][head]) * scale for u in seen]
            top = max(logits)
            e = [math.exp(x - top) for x in logits]
            z = sum(e)
            concat[t, head * d_v:(head + 1) * d_v] = sum((e[i] / z) * values[u][head] for i, u in enumerate(seen))
    return concat @ p["w_o"] + p.get("b_o", 0.0)


def _mamba(n: np.ndarray, p: Mapping[str, np.ndarray], cfg: BlockConfig) -> np.ndarray:
    """n (T, d) of one sequence → a Mamba-2 mixer's output (T, d), token by token: the conv as a sum over the
    kernel's taps of the earlier projections, then each head's state S (p, N) decayed by exp(Δ·A) and added
    Δ·x ⊗ B, read out by C, plus D·x; gated by silu(z), normalised per group, projected out."""
    m = cfg.mamba
    assert m is not None
    T, d_in, gN = n.shape[0], m.d_inner, m.n_groups * m.d_state
    # W_in's five segments z, x, B, C, dt each times its multiplier (Falcon-H1's µP vector), the input times its own
    mup = np.concatenate([np.full(w, v) for w, v in zip((d_in, d_in, gN, gN, m.n_heads), m.multipliers)])
    zxbcdt = [((m.in_multiplier * n[t]) @ p["w_ssm_in"] + p.get("b_ssm_in", 0.0)) * mup for t in range(T)]
    states = [np.zeros((m.head_dim, m.d_state)) for _ in range(m.n_heads)]
    out = np.zeros((T, cfg.d_model))
    for t in range(T):
        conv = p.get("b_ssm_conv", np.zeros(m.conv_dim)).copy()
        for k in range(m.conv_kernel):  # tap K−1 reads token t, tap K−1−j token t − j
            if t - (m.conv_kernel - 1 - k) >= 0:
                conv += p["ssm_conv"][:, k] * zxbcdt[t - (m.conv_kernel - 1 - k)][d_in:d_in + m.conv_dim]
        xbc = np.array([c * _sigmoid(c) for c in conv])
        y = np.zeros(d_in)
        for i in range(m.n_heads):
            g = i // (m.n_heads // m.n_groups)
            Bv, Cv = xbc[d_in + g * m.d_state:d_in + (g + 1) * m.d_state], xbc[d_in + gN + g * m.d_state:
                                                                              d_in + gN + (g + 1) * m.d_state]
            x = xbc[i * m.head_dim:(i + 1) * m.head_dim]
            delta = max(_softplus(float(zxbcdt[t][d_in + m.conv_dim + i] + p["ssm_dt_bias"][i])), m.dt_min)
            states[i] = math.exp(-delta * math.exp(float(p["ssm_A_log"][i]))) * states[i] + delta * np.outer(x, Bv)
            y[i * m.head_dim:(i + 1) * m.head_dim] = states[i] @ Cv + float(p["ssm_D"][i]) * x
        gate = np.array([u * _sigmoid(u) for u in zxbcdt[t][:d_in]])
        size = d_in // m.n_groups

        def grouped(v: np.ndarray) -> np.ndarray:
            return np.concatenate([_norm(v[j:j + size], p["ssm_norm_gamma"][j:j + size], None, "rmsnorm", m.norm_eps)
                                   for j in range(0, d_in, size)])

        normed = (y * gate if m.norm == "none" else grouped(y) * gate if m.norm == "norm_gate" else
                  grouped(y * gate))
        out[t] = normed @ p["w_ssm_out"] + p.get("b_ssm_out", 0.0)
    return out
def _mamba1(n: np.ndarray, p: Mapping[str, np.ndarray], cfg: BlockConfig) -> np.ndarray:
    """n (T, d) of one sequence → a Mamba-1 mixer's output (T, d), token by token and channel by channel: the conv
    as a sum over the kernel's taps of the earlier x, then δ, B, C from the conv's output (RMS-normed with
    bc_norm), Δ_c = softplus(δ·W_dt[:, c] + b_dt[c]), each state entry S[c, j] decayed by exp(Δ_c·A[c, j]) and added
    Δ_c·x_c·B_j, read out by C, plus D_c·x_c; gated by silu(z), projected out."""
    m = cfg.mamba
    assert m is not None
    T, d_in, R, N = n.shape[0], m.d_inner, m.dt_rank, m.d_state
    xz = [n[t] @ p["w_ssm_in"] + p.get("b_ssm_in", 0.0) for t in range(T)]
    state = np.zeros((d_in, N))
    out = np.zeros((T, cfg.d_model))

    def normed(v: np.ndarray, key: str) -> np.ndarray:
        if m.bc_norm == "none":
            return v
        return _norm(v, p[key] if m.bc_norm == "learned" else np.ones(len(v)), None, "rmsnorm", m.bc_norm_eps)

    for t in range(T):
        conv = p.get("b_ssm_conv", np.zeros(d_in)).copy()
        for k in range(m.conv_kernel):  # tap K−1 reads token t, tap K−1−j token t − j
            if t - (m.conv_kernel - 1 - k) >= 0:
                conv += p["ssm_conv"][:, k] * xz[t - (m.conv_kernel - 1 - k)][:d_in]
        x = np.array([c * _sigmoid(c) for c in conv])
        dbc = x @ p["w_ssm_x"]
        dt, Bv, Cv = normed(dbc[:R], "ssm_dt_norm"), normed(dbc[R:R + N], "ssm_B_norm"), normed(dbc[R + N:], "ssm_C_norm")
        y = np.zeros(d_in)
        for c in range(d_in):
            delta = _softplus(float(dt @ p["w_ssm_dt"][:, c] + p["b_ssm_dt"][c]))
            for j in range(N):
                a = -math.exp(float(p["ssm_A_log"][c, j]))
                state[c, j] = math.exp(delta * a) * state[c, j] + delta * x[c] * Bv[j]
            y[c] = sum(state[c, j] * Cv[j] for j in range(N)) + float(p["ssm_D"][c]) * x[c]
        gated = np.array([v * u * _sigmoid(u) for v, u in zip(y, xz[t][d_in:])])
        out[t] = gated @ p["w_ssm_out"] + p.get("b_ssm_out", 0.0)
    return out


def _index_choice(n: np.ndarray, latents: list[np.ndarray], p: Mapping[str, np.ndarray], cfg: BlockConfig
                  ) -> list[set[int]]:
    """DeepSeek Sparse Attention's lightning indexer on n (T, d), query by query: the keys u <= t each query t
    keeps, the index_topk of the highest Σ_j w_tj·ReLU(q_tj·k_u/√d_I) (all of them while there are fewer)."""
    m = cfg.mla
    assert m is not None
    if m.index_shared:
        raise ValueError("a layer reusing the previous layer's indexer choice has no reference of its own")
    T, H, D, r = n.shape[0], m.index_heads, m.index_head_dim, m.qk_rope_head_dim
    turn = replace(cfg, rope_layout=m.index_rope_layout)  # the indexer's own pairs

    def rotated(v: np.ndarray, t: int) -> np.ndarray:
        return np.concatenate([_rotate(v[:r], t, turn, T), v[r:]])

    keys = [rotated(_norm(n[u] @ p["idx_w_k"], p["idx_k_norm_gamma"], p["idx_k_norm_beta"], "layernorm", 1e-6), u)
            for u in range(T)]
    chosen = []
    for t in range(T):
        q = latents[t] @ p["idx_w_q"]
        heads = [rotated(q[j * D:(j + 1) * D], t) for j in range(H)]
        w = (n[t] @ p["idx_w_weights"]) / math.sqrt(H)
        score = {u: sum(w[j] * max(0.0, float(heads[j] @ keys[u]) / math.sqrt(D)) for j in range(H))
                 for u in range(t + 1)}
        chosen.append(set(sorted(score, key=lambda u: -score[u])[:m.index_topk]))
    return chosen


def _short_conv(n: np.ndarray, p: Mapping[str, np.ndarray], cfg: BlockConfig) -> np.ndarray:
    """n (T, d) of one sequence → a short convolution's output (T, d), token by token: b ⊙ x of each token, summed
    over the kernel's taps (tap K−1 the token itself), times c, projected out."""
    c = cfg.short_conv
    assert c is not None
    d, T = cfg.d_model, n.shape[0]
    bcx = [n[t] @ p["w_conv_in"] + p.get("b_conv_in", 0.0) for t in range(T)]
    gated = [v[:d] * v[2 * d:] for v in bcx]
    out = np.zeros((T, d))
    for t in range(T):
        conv = p.get("b_short_conv", np.zeros(d)).copy()
        for k in range(c.kernel):
            if t - (c.kernel - 1 - k) >= 0:
                conv += p["short_conv"][:, k] * gated[t - (c.kernel - 1 - k)]
        out[t] = (bcx[t][d:2 * d] * conv) @ p["w_conv_out"] + p.get("b_conv_out", 0.0)
    return out


def _attention(n: np.ndarray, p: Mapping[str, np.ndarray], cfg: BlockConfig) -> np.ndarray:
    """n (T, d) of one sequence → attention output (T, d), head by head, query by query."""
    if cfg.short_conv is not None:
        return _short_conv(n, p, cfg)
    if cfg.mamba is not None and cfg.parts == "hybrid":  # Falcon-H1: both mixers on n, each output times its own
        return (cfg.mamba.out_multiplier * _mamba(n, p, cfg) + cfg.attention_out_multiplier
                * _attention(cfg.attention_in_multiplier * n, p, cfg.attention_part))
    if cfg.mamba is not None:
        return _mamba1(n, p, cfg) if getattr(cfg.mamba, "version", 2) == 1 else _mamba(n, p, cfg)
    if cfg.mla is not None:
        return _latent_attention(n, p, cfg)
    T = n.shape[0]
    d_h, group = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
    scale = cfg.attention_scale or 1.0 / math.sqrt(d_h)  # an override, or the equations' 1/√d_h
    zero = np.zeros
    q = n @ p["w_q"] + p.get("b_q", zero(p["w_q"].shape[1]))
    k = n @ p["w_k"] + p.get("b_k", zero(p["w_k"].shape[1]))
    v = n @ p["w_v"] + p.get("b_v", zero(p["w_v"].shape[1]))
    def clamp(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
        c = cfg.clip_qkv  # every entry clamped to [-c, c]
        return tuple(np.array([[min(max(e, -c), c) for e in row] for row in a]) for a in (q, k, v))

    if cfg.clip_qkv and not cfg.clip_after_qk_norm:  # OLMo: the three projections
        q, k, v = clamp(q, k, v)
    late = cfg.qk_norm_after_rope  # HunYuan: each head's rotated slice, below
    if cfg.qk_norm != "none" and not late:  # each token's whole projection, or each head's slice of it
        width = None if cfg.qk_norm == "projection" else d_h
        q, k = (_qk_norm(a, p, name, cfg, width) for a, name in ((q, "q"), (k, "k")))
    if cfg.clip_after_qk_norm:  # OLMoE: the normalised projections (and V)
        q, k, v = clamp(q, k, v)
    d_v = cfg.value_dim  # each head's value width (MiMo-V2-Flash: narrower than d_h)
    concat = np.zeros((T, cfg.n_heads * d_v))
    for head in range(cfg.n_heads):
        kv = head // group
        qs, ks = (a[:, c * d_h:(c + 1) * d_h] for a, c in ((q, head), (k, kv)))
        vs = v[:, kv * d_v:(kv + 1) * d_v] * cfg.value_scale  # (MiMo's values times a constant)
        if cfg.rope:
            qs = np.array([_rotate(qs[t], t, cfg, T) for t in range(T)])
            ks = np.array([_rotate(ks[t], t, cfg, T) for t in range(T)])
        if late:
            qs, ks = (_qk_norm(a, p, name, cfg, d_h) for a, name in ((qs, "q"), (ks, "k")))
        if cfg.query_scale and cfg.query_scale_form == "power":  # Beam: query t times (1 + (t + o) / L)^β
            qs = np.array([qs[t] * (1.0 + (t + cfg.query_scale_offset) / cfg.query_scale_length) ** cfg.query_scale
                           for t in range(T)])
        elif cfg.query_scale:  # Ministral 3: query t times 1 + β·ln(1 + ⌊t / L⌋); Llama 4: ⌊(t + 1) / L⌋
            qs = np.array([qs[t] * (1.0 + cfg.query_scale * math.log(
                1 + (t + cfg.query_scale_offset) // cfg.query_scale_length)) for t in range(T)])
        for t in range(T):
            first = max(0, t - cfg.sliding_window + 1) if cfg.sliding_window else 0  # the window's oldest key
            if cfg.attention_chunk:  # Llama 4: the first key of t's own chunk
                first = t - t % cfg.attention_chunk
            seen = range(first, t + 1)  # keys s <= t only
            logits = [float(qs[t] @ ks[s]) * scale for s in seen]
            if cfg.attention_softcap:  # Gemma 2: c·tanh(score/c)
                logits = [cfg.attention_softcap * math.tanh(a / cfg.attention_softcap) for a in logits]
            if cfg.alibi:  # a linear penalty on the distance back to each key
                logits = [a + _alibi_slope(head, cfg.n_heads) * (s - t) for a, s in zip(logits, seen)]
            sink = [float(p["sinks"][head])] if cfg.attention_sinks else []  # a logit with no value
            top = max(logits + sink)
            e = [math.exp(a - top) for a in logits]
            z = sum(e) + sum(math.exp(a - top) for a in sink)
            concat[t, head * d_v:(head + 1) * d_v] = sum((e[i] / z) * vs[s] for i, s in enumerate(seen))
    if cfg.sub_norms:  # BitNet: each token's heads, all h·d_h of them, normalised before W_O
        gamma, beta = _scale(p, "attn_sub_norm", cfg), p.get("attn_sub_norm_beta")
        concat = np.array([_norm(row, gamma, beta, cfg.norm, cfg.norm_eps) for row in concat])
    return concat @ p["w_o"] + p.get("b_o", 0.0)


def _qk_norm(a: np.ndarray, p: Mapping[str, np.ndarray], name: str, cfg: BlockConfig, width: int | None) -> np.ndarray:
    """a (T, n·w): every row's slices of `width` features (all of them for None) normalised alone."""
    gamma = _scale(p, f"{name}_norm", cfg)
    beta = p.get(f"{name}_norm_beta")
    width = width or a.shape[1]
    out = np.empty_like(a)
    for t in range(a.shape[0]):
        for lo in range(0, a.shape[1], width):
            head = lo // width  # each_head: row `head` of the (heads, d_h) weights
            g = gamma[head] if np.ndim(gamma) == 2 else gamma
            bt = beta[head] if beta is not None and np.ndim(beta) == 2 else beta
            out[t, lo:lo + width] = _norm(a[t, lo:lo + width], g, bt, cfg.norm, cfg.norm_eps)
    return out


def _scale(p: Mapping[str, np.ndarray], which: str, cfg: BlockConfig) -> np.ndarray | float:
    """A norm's scale: gamma, 1 + gamma (Gemma stores the offset), or 1 without one (OLMo)."""
    if f"{which}_gamma" not in p:
        return 1.0
    return p[f"{which}_gamma"] + (1.0 if cfg.norm_unit_offset else 0.0)
def _expert(vec: np.ndarray, p: Mapping[str, np.ndarray], cfg: BlockConfig, key: str) -> np.ndarray:
    """One token through an MLP whose parameters are named `key` + w_gate, w_up, w_down (and b_…)."""
    up = vec @ p[key + "w_up"] + p.get(key + "b_up", 0.0)
    m_gate, m_down = cfg.mlp_multipliers  # Falcon-H1's: the gate's pre-activation and the output times these
    if cfg.gated:
        gate = vec @ p[key + "w_gate"] + p.get(key + "b_gate", 0.0)
        hidden = np.array([_gated(cfg, m_gate * float(g), float(u), p) for g, u in zip(gate, up)])
    else:
        hidden = np.array([_act(cfg, float(u), p) for u in up])
    if cfg.sub_norms:  # BitNet: the token's d_ff hidden features normalised before W_down
        hidden = _norm(hidden, _scale(p, key + "mlp_sub_norm", cfg), p.get(key + "mlp_sub_norm_beta"), cfg.norm,
                       cfg.norm_eps)
    return m_down * (hidden @ p[key + "w_down"] + p.get(key + "b_down", 0.0))


def _best(values: list[float], k: int) -> list[int]:
    """The k largest values' indices, largest first; equal values: the lower index first."""
    return sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]


def _moe(n: np.ndarray, p: Mapping[str, np.ndarray], cfg: BlockConfig) -> np.ndarray:
    """Token by token: the router's choice, the chosen experts weighted, the shared expert added."""
    moe = cfg.moe
    assert moe is not None
    out = np.zeros_like(n)
    size = moe.n_experts // moe.n_groups
    for t, vec in enumerate(n):
        logits = [float(z) for z in vec @ p["router"] + p.get("b_router", 0.0)]
        if moe.order == "topk_softmax":
            chosen = _best(logits, moe.top_k)
            e = [math.exp(logits[i] - logits[chosen[0]]) for i in chosen]
            weights = [a / sum(e) for a in e]
        elif moe.order == "sparsemixer":  # two stages: the best left, softmaxed over the experts left near it
            chosen, weights, left = [], [], list(range(len(logits)))
            for _ in range(2):
                best = _best([logits[i] if i in left else -math.inf for i in range(len(logits))], 1)[0]
                m = logits[best]
                near = [i for i in left if (m - logits[i]) / max(abs(logits[i]), m) <= 2 * moe.sparsemixer_eps]
                chosen.append(best)
                weights.append(1.0 / sum(math.exp(logits[i] - m) for i in near))
                left.remove(best)
        else:
            if moe.scoring == "softmax":
                e = [math.exp(z - max(logits)) for z in logits]
                scores = [a / sum(e) for a in e]
            else:
                scores = [1 / (1 + math.exp(-z)) for z in logits]
            base = logits if moe.selection_on == "logits" else scores  # what the selection bias is added to
            choice = [s + float(p["router_bias"][i]) if moe.selection_bias else s for i, s in enumerate(base)]
            if moe.n_groups > 1:
                groups = [choice[g * size:(g + 1) * size] for g in range(moe.n_groups)]
                rank = [max(g) if moe.group_score == "max" else sum(sorted(g)[-2:]) for g in groups]
                kept = _best(rank, moe.top_groups)
                choice = [c if i // size in kept else -math.inf for i, c in enumerate(choice)]
            chosen = _best(choice, moe.top_k)
            weights = [scores[i] for i in chosen]
            if moe.renormalize:
                weights = [w / (sum(weights) + moe.renormalize_eps) for w in weights]  # DeepSeek-V3's 1e-20
        for i, w in zip(chosen, weights):
            if moe.scale_input:  # Llama 4: the weight scales what the expert reads
                out[t] += _expert(w * moe.routed_scaling * vec, p, cfg, f"experts.{i}.")
            else:
                out[t] += w * moe.routed_scaling * _expert(vec, p, cfg, f"experts.{i}.")
        if moe.d_shared:
            gate = 1 / (1 + math.exp(-float(vec @ p["shared_gate"][:, 0]))) if moe.shared_gate else 1.0
            out[t] += gate * _expert(vec, p, cfg, "shared_")
        if moe.out_norm:  # A.X-K1: the sum through a norm of the block's kind
            out[t] = _norm(out[t], _scale(p, "moe_norm", cfg), p.get("moe_norm_beta"), cfg.norm, cfg.norm_eps)
    return out


def _mlp(n: np.ndarray, p: Mapping[str, np.ndarray], cfg: BlockConfig) -> np.ndarray:
    if cfg.moe is not None:
        return _moe(n, p, cfg)
    return np.array([_expert(vec, p, cfg, "") for vec in n])


def reference_block(x: np.ndarray, p: Mapping[str, np.ndarray], cfg: BlockConfig) -> np.ndarray:
    """y for x (B, T, d), one sequence and one token at a time, in float64."""
    x = np.asarray(x, dtype=np.float64)
    p = {k: np.asarray(v, dtype=np.float64) for k, v in p.items()}

    def norm(which: str, a: np.ndarray) -> np.ndarray:
        gamma = _scale(p, which, cfg)
        return np.array([_norm(row, gamma, p.get(f"{which}_beta"), cfg.norm, cfg.norm_eps) for row in a])

    r = cfg.residual_multiplier  # each branch's output times r before it is added (Granite)
    a1, b1, a2, b2 = cfg.attn_skip_scale, cfg.attn_branch_scale, cfg.mlp_skip_scale, cfg.mlp_branch_scale

    def attention(n: np.ndarray) -> np.ndarray:
        return r * _attention(n, p, cfg)

    def mlp(n: np.ndarray) -> np.ndarray:
        return r * _mlp(n, p, cfg)

    y = np.empty_like(x)
    for b in range(x.shape[0]):
        xb = x[b]
        if cfg.parts == "mixer":  # a layer of one part: its norm, the part, the residual add
            y[b] = xb + attention(norm("ln1", xb))
        elif cfg.parts == "mlp":
            y[b] = xb + mlp(norm("ln2", xb))
        elif cfg.placement == "pre":  # each add α·skip + β·branch (MiniMax's scales; 1 and 1 elsewhere)
            h = a1 * xb + b1 * attention(norm("ln1", xb))
            y[b] = a2 * h + b2 * mlp(norm("ln2", h))
        elif cfg.placement == "sandwich":  # a norm before and after each branch (Gemma 2/3; Beam's scales)
            h = a1 * xb + b1 * r * norm("ln1_post", _attention(norm("ln1", xb), p, cfg))
            y[b] = a2 * h + b2 * r * norm("ln2_post", _mlp(norm("ln2", h), p, cfg))
        elif cfg.placement == "post_branch":
            h = xb + norm("ln1", attention(xb))
            y[b] = h + norm("ln2", mlp(h))
        elif cfg.placement == "normed_residual":  # the residual is each norm's output (BLOOM's switch)
            n1 = norm("ln1", xb)
            h = a1 * n1 + b1 * attention(n1)
            n2 = norm("ln2", h)
            y[b] = a2 * n2 + b2 * mlp(n2)
        elif cfg.placement == "post":
            h = norm("ln1", xb + attention(xb))
            y[b] = norm("ln2", h + mlp(h))
        else:  # parallel: the MLP reads its own norm of x, or LN1's (parallel_shared)
            n1 = norm("ln1", xb)
            y[b] = xb + attention(n1) + mlp(n1 if cfg.placement == "parallel_shared" else norm("ln2", xb))
    return y
