"""The Gated DeltaNet token mixer (Qwen3-Next, Qwen3.5): a layer's attention replaced by a recurrence.

Shapes: B batch, T tokens, d model width; h_k key heads of d_k, h_v value heads of d_v (r = h_v / h_k value
heads read each key head); C = 2·h_k·d_k + h_v·d_v the short conv's channels (q | k | v), K its taps.

    q, k, v = x·W_q, x·W_k, x·W_v                         # (B, T, h_k·d_k) twice, (B, T, h_v·d_v)
    q | k | v = SiLU(causal depthwise conv_K(q | k | v))  # the conv looks K − 1 tokens back
    q, k = L2-normalised per head, repeated r times        # (B, T, h_v, d_k): key head i serves value heads r·i …
    β = σ(x·W_b), g = −exp(A_log)·softplus(x·W_a + dt_bias)  # (B, T, h_v) each
    per step t and value head:  S ← e^g·S;  S ← S + k (β (v − Sᵀk))ᵀ;  o = Sᵀq / √d_k   # S (d_k, d_v)
    out = (RMSNorm_γ(o) ⊙ SiLU(x·W_z)) · W_O               # the norm over each head's d_v, its own γ

The state a sequence carries is S (B, h_v, d_k, d_v) and the conv's last K − 1 inputs (B, K − 1, C): constant in
T, unlike a K/V cache. The forward walks the recurrence token by token over all heads at once (exact, the
same steps transformers' recurrent kernel takes); decoding continues from the stored state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from blockcli import ops as F
from blockcli.config import BlockConfig, GatedDeltaNet, InputError
from blockcli.ops import STANDARD_OPS, Array, Ops
from blockcli.shapes import deltanet_shapes

Record = Callable[..., None]

# the projections from x, by parameter key: what each makes
PROJECTIONS = (("dn_q", "q"), ("dn_k", "k"), ("dn_v", "v"), ("dn_z", "output gate z"), ("dn_b", "write strength b"),
               ("dn_a", "decay input a"))
REFUSED_BACKWARD = ("a Gated DeltaNet layer (block.linear_attention) has no backward in blockcli yet; "
                    "gradients, training and the backward trace are not available for it")
GATE_REFUSED = ("gated attention (block.attention_gate) has no backward in blockcli yet; gradients, training and "
                "the backward trace are not available for it")


def refuse_backward(config: Any) -> None:
    """One InputError, before any work, when some layer of `config` (a Config) has no backward in blockcli."""
    blocks = [config.layer_block(i) for i in range(config.model.n_layers)] if config.model else [config.block]
    if any(b.linear_attention is not None for b in blocks):
        raise InputError(REFUSED_BACKWARD)
    if any(b.attention_gate for b in blocks):
        raise InputError(GATE_REFUSED)


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


def gated_delta_rule(q: Array, k: Array, v: Array, g: Array, beta: Array, state: Array) -> tuple[Array, Array]:
    """The recurrence over T: q, k (B, T, h_v, d_k) (normalised, q already scaled), v (B, T, h_v, d_v), g and beta
    (B, T, h_v), state S (B, h_v, d_k, d_v). Returns o (B, T, h_v, d_v) and the final S."""
    out = np.empty(v.shape, dtype=np.result_type(q, v, state))
    s = state.copy()
    decay = np.exp(g)  # (B, T, h_v)
    for t in range(q.shape[1]):
        s *= decay[:, t, :, None, None]  # (B, h_v, d_k, d_v)
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
        if tape is not None:
            raise InputError(REFUSED_BACKWARD)
        p, m = self.p, mixer_of(self.cfg)
        B, T, _ = x.shape
        h_k, h_v, d_k, d_v = m.key_heads, m.value_heads, m.key_head_dim, m.value_head_dim
        made = {}
        for key, what in PROJECTIONS:
            made[key] = F.linear(x, p[key], None)  # (B, T, width)
            rec(f"{key}_proj", f"linear attention: {what} projection", made[key], (x, p[key]), kind="linear",
                params=(key,))
        qkv = np.concatenate([made["dn_q"], made["dn_k"], made["dn_v"]], axis=-1)  # (B, T, C)
        conv_state = getattr(cache, "conv", None)
        conv, new_conv = F.causal_conv1d(qkv, p["dn_conv"], None, conv_state)  # (B, T, C), (B, K − 1, C)
        rec("dn_conv", f"causal depthwise conv ({m.conv_kernel} taps) of q | k | v", conv, (qkv, p["dn_conv"]),
            kind="conv", params=("dn_conv",))
        act = F.silu(conv)  # (B, T, C)
        rec("dn_conv_act", "SiLU", act, (conv,), kind="silu")
        kw = m.key_width
        q = act[..., :kw].reshape(B, T, h_k, d_k)
        k = act[..., kw:2 * kw].reshape(B, T, h_k, d_k)
        v = act[..., 2 * kw:].reshape(B, T, h_v, d_v)
        q = F.l2_normalize(q) / math.sqrt(d_k)  # (B, T, h_k, d_k), times the readout's 1/√d_k
        k = F.l2_normalize(k)
        rec("dn_qk_norm", "L2-normalise q and k (q / √d_k)", k, (q, k), kind="l2norm")
        if h_v != h_k:  # key head i serves value heads r·i … r·i + r − 1
            q, k = np.repeat(q, h_v // h_k, axis=2), np.repeat(k, h_v // h_k, axis=2)  # (B, T, h_v, d_k)
        beta = F.sigmoid(made["dn_b"])  # (B, T, h_v)
        rec("dn_beta", "β = σ(b)", beta, (made["dn_b"],), kind="sigmoid")
        g = -np.exp(p["dn_A_log"]) * F.softplus(made["dn_a"] + p["dn_dt_bias"])  # (B, T, h_v)
        rec("dn_decay", "g = −exp(A_log)·softplus(a + dt_bias)", g, (made["dn_a"],), kind="decay",
            params=("dn_A_log", "dn_dt_bias"))
        state = getattr(cache, "recurrent", None)
        if state is None:
            state = np.zeros((B, h_v, d_k, d_v), dtype=v.dtype)
        o, new_state = gated_delta_rule(q, k, v, g, beta, state)  # (B, T, h_v, d_v), (B, h_v, d_k, d_v)
        rec("dn_delta_rule", "gated delta rule (state S: B, h_v, d_k, d_v)", o, (q, k, v, g, beta),
            kind="delta_rule")
        if cache is not None:
            cache.recurrent, cache.conv, cache.length = new_state, new_conv, cache.length + T
        z = made["dn_z"].reshape(B, T, h_v, d_v)
        normed = F.rms_norm(o, p["dn_norm_gamma"], None, m.norm_eps)  # (B, T, h_v, d_v)
        gated = normed * F.silu(z)  # (B, T, h_v, d_v)
        rec("dn_gated_norm", "RMSNorm(o) ⊙ SiLU(z)", gated, (o, z), kind="gated_norm", params=("dn_norm_gamma",))
        flat = gated.reshape(B, T, h_v * d_v)  # (B, T, h_v·d_v)
        out = F.linear(flat, p["dn_out"], None)  # (B, T, d)
        rec("attn_out", "output projection", out, (flat, p["dn_out"]), kind="linear", params=("dn_out",))
        return out

    def backward(self, d_out: Array, tape: Any) -> Array:
        raise InputError(REFUSED_BACKWARD)


def analytic_rows(cfg: BlockConfig, rec: Record, S: Callable[..., Any], x: Any, batch: int, seq: int) -> Any:
    """The rows `GatedDeltaNetMixer.__call__` records, from shapes alone (stand-ins made by S)."""
    m, d = mixer_of(cfg), cfg.d_model
    B, T = batch, seq
    made = {}
    for key, what in PROJECTIONS:
        width = deltanet_shapes(cfg)[key][1]
        made[key] = S(B, T, width)
        rec(f"{key}_proj", f"linear attention: {what} projection", made[key], (x, S(d, width)), kind="linear",
            params=(key,))
    qkv, conv = S(B, T, m.conv_width), S(B, T, m.conv_width)
    rec("dn_conv", f"causal depthwise conv ({m.conv_kernel} taps) of q | k | v", conv,
        (qkv, S(m.conv_width, m.conv_kernel)), kind="conv", params=("dn_conv",))
    act = S(B, T, m.conv_width)
    rec("dn_conv_act", "SiLU", act, (conv,), kind="silu")
    q, k = S(B, T, m.key_heads, m.key_head_dim), S(B, T, m.key_heads, m.key_head_dim)
    rec("dn_qk_norm", "L2-normalise q and k (q / √d_k)", k, (q, k), kind="l2norm")
    beta = S(B, T, m.value_heads)
    rec("dn_beta", "β = σ(b)", beta, (made["dn_b"],), kind="sigmoid")
    g = S(B, T, m.value_heads)
    rec("dn_decay", "g = −exp(A_log)·softplus(a + dt_bias)", g, (made["dn_a"],), kind="decay",
        params=("dn_A_log", "dn_dt_bias"))
    qr, kr = S(B, T, m.value_heads, m.key_head_dim), S(B, T, m.value_heads, m.key_head_dim)
    v, o = S(B, T, m.value_heads, m.value_head_dim), S(B, T, m.value_heads, m.value_head_dim)
    rec("dn_delta_rule", "gated delta rule (state S: B, h_v, d_k, d_v)", o, (qr, kr, v, g, beta), kind="delta_rule")
    z, gated = S(B, T, m.value_heads, m.value_head_dim), S(B, T, m.value_heads, m.value_head_dim)
    rec("dn_gated_norm", "RMSNorm(o) ⊙ SiLU(z)", gated, (o, z), kind="gated_norm", params=("dn_norm_gamma",))
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
