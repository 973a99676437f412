"""Pure NumPy primitives of the decoder block, and the `Ops` table the block takes them from.

Shape legend, used in every module: B batch, T sequence length, d model width, h query heads,
h_kv key/value heads, d_h head width, d_ff MLP width, V vocabulary.

Conventions pinned here (implementations disagree on them):
- LayerNorm uses the biased variance with eps inside the square root (GPT-2, PyTorch).
- `gelu_tanh` is the tanh approximation (GPT-2's "gelu_new"); `gelu` is the exact erf form.
- Softmax subtracts the row maximum, so very large logits stay finite.
- The causal mask lets query t see keys s <= t (the diagonal is visible).
- RoPE follows the GPT-NeoX / Hugging Face "rotate half" layout by default: dimension i pairs with
  i + r/2; GPT-J's interleaved layout (`rotate_every_two`) pairs 2i with 2i + 1. Pair i turns at the
  same frequency in both.

The block calls its operations through an `Ops` instance. The checklist's seeded bugs
(`blockcli.mutants`) are `Ops` with exactly one field swapped, so a bug differs from the
real block by one operation and there is only one block to maintain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from blockcli.activations import ACTIVATIONS
from blockcli.parallel import share_out

if TYPE_CHECKING:
    from blockcli.config import RopeScaling

Array = np.ndarray
# Rows per tile of a linear layer, a norm or the MLP: its (rows, d_ff) activation stays in the last-level
# cache (measured at L on 2 cores: 512 rows 4% faster than 256, each GEMM reading its weights half as often).
ROW_TILE = 512
SLAB_BYTES = 256 * 2**10  # elementwise passes over a tile go a slab of this size at a time: it stays in L2

# ----------------------------------------------------------------------------- row tiles


def by_rows(fill: Callable[[Array, Array], None], x: Array, width: int, dtype: np.dtype, work: float) -> Array:
    """(…, width) output of a row-wise operation on x (…, n), in tiles of ROW_TILE rows shared among
    the cores: fill(rows (r, n), out (r, width)) writes one tile. `work`: multiply-adds in all."""
    flat = x.reshape(-1, x.shape[-1])  # (N, n)
    out = np.empty((flat.shape[0], width), dtype=dtype)  # (N, width)

    def run(starts: Iterable[int]) -> None:
        for lo in starts:
            fill(flat[lo:lo + ROW_TILE], out[lo:lo + ROW_TILE])

    share_out(run, range(0, flat.shape[0], ROW_TILE), cost=lambda lo: 1, work=work)
    return out.reshape(*x.shape[:-1], width)


def slabs(a: Array) -> list[slice]:
    """Row slices of a (rows, n) array of about SLAB_BYTES each (at least one row): the chunks in
    which several elementwise passes run one after another while the chunk is still in cache."""
    step = max(1, SLAB_BYTES // max(1, a.shape[-1] * a.itemsize))
    return [slice(lo, lo + step) for lo in range(0, a.shape[0], step)]


def linear(x: Array, w: Array, b: Array | None) -> Array:
    """x (…, n_in) @ W (n_in, n_out) + b, as one GEMM per row tile."""
    def fill(rows: Array, out: Array) -> None:
        np.matmul(rows, w, out=out)
        if b is not None:
            out += b

    return by_rows(fill, x, w.shape[1], np.result_type(x, w), work=x.size * w.shape[1])


def head_grad_to_table(d_head: Array) -> Array:
    """The LM head's gradient (d, V) laid into its tied embedding table's shape (V, d), summed there with the token
    lookup's rows (the table's two uses)."""
    return d_head.T


def weight_grad(x: Array, dy: Array) -> Array:
    """dW = xᵀ·dy (n_in, n_out) of y = x @ W, summed over every row of x (…, n_in) and dy (…, n_out)."""
    return x.reshape(-1, x.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])


def unbroadcast(grad: Array, shape: tuple[int, ...]) -> Array:
    """The gradient of a parameter of `shape` that was broadcast against `grad`'s shape: summed over the
    axes it was repeated along (leading ones, and those where it has length 1)."""
    lead = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(lead))) if lead else grad
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return (grad.sum(axis=axes, keepdims=True) if axes else grad).reshape(shape)


def sum_rows(dy: Array) -> Array:
    """A bias's gradient: dy (…, n) summed over every row."""
    return dy.reshape(-1, dy.shape[-1]).sum(axis=0)


def sum_groups(d: Array, n_kv_heads: int) -> Array:
    """Grouped-query K or V's gradient: (B, h, T, d_h) per query head → (B, h_kv, T, d_h), each K/V head's the
    sum over the h/h_kv query heads that read it (np.repeat made head j·g + i a copy of K/V head j)."""
    B, h, T, d_h = d.shape
    return d.reshape(B, n_kv_heads, h // n_kv_heads, T, d_h).sum(axis=2)


# ----------------------------------------------------------------------------- activations
# Each registry row (blockcli.activations) has a forward f(x) and a backward f'(x)·dy here, keyed by its
# name in ACTIVATION_KERNELS. The backward of a gated MLP's product is the block's (block.MLP).

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715
_erf = np.frompyfunc(math.erf, 1, 1)  # NumPy has no erf; math.erf is exact to double precision


def erf(x: Array) -> Array:
    return _erf(x).astype(x.dtype)


def sigmoid(x: Array) -> Array:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # 1/(1 + e^−x), finite for large |x|


def _normal_pdf(x: Array) -> Array:
    """φ(x) = e^(−x²/2)/√(2π), 0 where x² overflows."""
    with np.errstate(over="ignore", under="ignore"):
        return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def gelu_tanh(x: Array) -> Array:
    """0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³), computed as x / (1 + exp(−2u)) (the same
    function: 0.5·(1 + tanh u) is the logistic of 2u) with one temporary and no pow or tanh."""
    t = x * x
    t *= -2.0 * _SQRT_2_OVER_PI * _GELU_CUBIC
    t += -2.0 * _SQRT_2_OVER_PI
    t *= x  # −2u
    with np.errstate(over="ignore", under="ignore"):  # exp(−2u) = inf for x ≪ 0: x/inf = −0, the limit
        np.exp(t, out=t)
    t += 1.0
    np.divide(x, t, out=t)
    return t


def gelu_tanh_backward(x: Array, dy: Array) -> Array:
    """dy·(s + 2·x·s·(1 − s)·u'), s = σ(2u) = 0.5·(1 + tanh u), u' = √(2/π)·(1 + 3·0.044715·x²): the forward's
    logistic form differentiated, in place in two temporaries."""
    x2 = x * x
    s = x2 * (-2.0 * _SQRT_2_OVER_PI * _GELU_CUBIC)
    s += -2.0 * _SQRT_2_OVER_PI
    s *= x  # −2u
    with np.errstate(over="ignore", under="ignore"):  # exp(−2u) = inf for x ≪ 0: s = 0, its limit
        np.exp(s, out=s)
    s += 1.0
    np.reciprocal(s, out=s)  # s = σ(2u)
    x2 *= 3.0 * _GELU_CUBIC
    x2 += 1.0
    x2 *= 2.0 * _SQRT_2_OVER_PI  # 2u'
    x2 *= x
    x2 *= 1.0 - s  # 2·x·(1 − s)·u'
    x2 += 1.0
    x2 *= s
    x2 *= dy
    return x2


def gelu(x: Array) -> Array:
    """Exact GELU, x·Φ(x). Elementwise math.erf: exact, but slower than the tanh form."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_backward(x: Array, dy: Array) -> Array:
    """dy·(Φ(x) + x·φ(x))."""
    return dy * (0.5 * (1.0 + erf(x / math.sqrt(2.0))) + x * _normal_pdf(x))


def relu(x: Array) -> Array:
    return np.maximum(x, 0)


def relu_backward(x: Array, dy: Array) -> Array:
    return np.where(x > 0, dy, 0).astype(dy.dtype)


def silu(x: Array) -> Array:
    return x * sigmoid(x)


def silu_backward(x: Array, dy: Array) -> Array:
    """dy·σ(x)·(1 + x·(1 − σ(x)))."""
    s = sigmoid(x)
    out = 1.0 - s
    out *= x
    out += 1.0
    out *= s
    out *= dy
    return out


def relu2(x: Array) -> Array:
    r = np.maximum(x, 0)
    return r * r


def relu2_backward(x: Array, dy: Array) -> Array:
    return dy * 2 * np.maximum(x, 0)


_QUICK = 1.702


def quick_gelu(x: Array) -> Array:
    return x * sigmoid(_QUICK * x)


def quick_gelu_backward(x: Array, dy: Array) -> Array:
    s = sigmoid(_QUICK * x)
    return dy * (s + _QUICK * x * s * (1.0 - s))


def gelu_10(x: Array) -> Array:
    return np.clip(gelu(x), -10, 10)


def gelu_10_backward(x: Array, dy: Array) -> Array:
    g = gelu(x)
    return np.where((g >= -10) & (g <= 10), gelu_backward(x, dy), 0).astype(dy.dtype)  # clip passes its bounds


def relu6(x: Array) -> Array:
    return np.clip(x, 0, 6)


def relu6_backward(x: Array, dy: Array) -> Array:
    return np.where((x > 0) & (x < 6), dy, 0).astype(dy.dtype)  # hardtanh's: open at both bounds


_LEAK = 0.01


def leaky_relu(x: Array) -> Array:
    return np.where(x > 0, x, _LEAK * x).astype(x.dtype)


def leaky_relu_backward(x: Array, dy: Array) -> Array:
    return np.where(x > 0, dy, _LEAK * dy).astype(dy.dtype)


def sigmoid_backward(x: Array, dy: Array) -> Array:
    s = sigmoid(x)
    return dy * s * (1.0 - s)


def tanh(x: Array) -> Array:
    return np.tanh(x)


def tanh_backward(x: Array, dy: Array) -> Array:
    t = np.tanh(x)
    return dy * (1.0 - t * t)


def softplus(x: Array) -> Array:
    """log(1 + e^x), as torch computes it: x itself above 20."""
    with np.errstate(over="ignore"):
        return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))).astype(x.dtype)


def mish(x: Array) -> Array:
    return x * np.tanh(softplus(x))


def mish_backward(x: Array, dy: Array) -> Array:
    t = np.tanh(softplus(x))
    return dy * (t + x * (1.0 - t * t) * sigmoid(x))


def hardswish(x: Array) -> Array:
    return x * np.clip(x + 3, 0, 6) / 6


def hardswish_backward(x: Array, dy: Array) -> Array:
    """torch's: 0 below −3, x/3 + 1/2 up to 3 (included), 1 above."""
    return np.where(x < -3, 0, np.where(x <= 3, x / 3 + 0.5, 1)).astype(dy.dtype) * dy


def identity(x: Array) -> Array:
    return x


def identity_backward(x: Array, dy: Array) -> Array:
    return dy


_LAPLACE_MU, _LAPLACE_SIGMA = 0.707107, 0.282095


def laplace(x: Array) -> Array:
    return 0.5 * (1.0 + erf((x - _LAPLACE_MU) / (_LAPLACE_SIGMA * math.sqrt(2.0))))


def laplace_backward(x: Array, dy: Array) -> Array:
    return dy * _normal_pdf((x - _LAPLACE_MU) / _LAPLACE_SIGMA) / _LAPLACE_SIGMA


def clamped_swiglu_gate(x: Array, alpha: float, limit: float) -> Array:
    """gpt-oss's gate branch: g·sigmoid(α·g) with g = min(x, limit)."""
    g = np.minimum(x, np.asarray(limit, dtype=x.dtype))
    return g * sigmoid(np.asarray(alpha, dtype=x.dtype) * g)


def clamped_swiglu_gate_backward(x: Array, dy: Array, alpha: float, limit: float) -> Array:
    """dy·(σ(αg) + αg·σ(αg)(1 − σ(αg))) where x <= limit (clamp passes its bound), 0 above."""
    g = np.minimum(x, np.asarray(limit, dtype=x.dtype))
    s = sigmoid(np.asarray(alpha, dtype=x.dtype) * g)
    return np.where(x <= limit, dy * (s + alpha * g * s * (1.0 - s)), 0).astype(dy.dtype)


def clamped_swiglu_up(x: Array, limit: float) -> Array:
    """gpt-oss's up branch (the gate's partner): clip(x, −limit, limit) + 1."""
    c = np.asarray(limit, dtype=x.dtype)
    return np.clip(x, -c, c) + np.asarray(1, dtype=x.dtype)


def clamped_swiglu_up_backward(x: Array, dy: Array, limit: float) -> Array:
    return np.where((x >= -limit) & (x <= limit), dy, 0).astype(dy.dtype)


def _number(a: Array) -> float:
    """A (1,) parameter or buffer as a float64 number."""
    return float(np.asarray(a, dtype=np.float64).reshape(-1)[0])


def xielu_slopes(alpha_p: Array, alpha_n: Array, beta: Array) -> tuple[float, float]:
    """xIELU's effective slopes from its stored parameters: (softplus(a_p), β + softplus(a_n))."""
    return float(softplus(np.float64(_number(alpha_p)))), _number(beta) + float(softplus(np.float64(_number(alpha_n))))


def xielu(x: Array, alpha_p: Array, alpha_n: Array, beta: Array, eps: Array) -> Array:
    """Apertus' xIELU: α_p·x² + β·x where x > 0, α_n·(expm1(min(x, ε)) − x) + β·x elsewhere, with
    α_p = softplus(a_p), α_n = β + softplus(a_n) from the layer's two learned scalars (β, ε: its buffers)."""
    p, n = xielu_slopes(alpha_p, alpha_n, beta)
    dt = x.dtype.type
    negative = (np.expm1(np.minimum(x, dt(_number(eps)))) - x) * dt(n)
    return np.where(x > 0, dt(p) * x * x, negative) + dt(_number(beta)) * x


def xielu_backward(x: Array, dy: Array, alpha_p: Array, alpha_n: Array, beta: Array,
                   eps: Array) -> tuple[Array, float, float]:
    """(dx, d a_p, d a_n): f'(x) = 2·α_p·x + β (x > 0), α_n·e^x − α_n + β (x < ε), β − α_n (ε ≤ x ≤ 0, where
    min(x, ε) is the constant ε); ∂f/∂α_p = x² and ∂f/∂α_n = expm1(min(x, ε)) − x on their sides, times the
    softplus' derivative σ(a) for the stored parameters."""
    p, n = xielu_slopes(alpha_p, alpha_n, beta)
    dt, e = x.dtype.type, x.dtype.type(_number(eps))
    positive = x > 0
    slope = np.where(positive, dt(2 * p) * x, np.where(x < e, dt(n) * np.expm1(np.minimum(x, e)), dt(-n)))
    dx = dy * (slope + dt(_number(beta)))
    d_p = float(np.sum(np.where(positive, dy * x * x, 0), dtype=np.float64))
    d_n = float(np.sum(np.where(positive, 0, dy * (np.expm1(np.minimum(x, e)) - x)), dtype=np.float64))
    s_p, s_n = (float(sigmoid(np.float64(_number(a)))) for a in (alpha_p, alpha_n))
    return dx.astype(dy.dtype), d_p * s_p, d_n * s_n


Kernel = tuple[Callable[[Array], Array], Callable[[Array, Array], Array]]
ACTIVATION_KERNELS: dict[str, Kernel] = {
    "gelu_tanh": (gelu_tanh, gelu_tanh_backward), "gelu": (gelu, gelu_backward), "relu": (relu, relu_backward),
    "silu": (silu, silu_backward), "relu2": (relu2, relu2_backward), "quick_gelu": (quick_gelu, quick_gelu_backward),
    "gelu_10": (gelu_10, gelu_10_backward), "relu6": (relu6, relu6_backward),
    "leaky_relu": (leaky_relu, leaky_relu_backward), "sigmoid": (sigmoid, sigmoid_backward),
    "tanh": (tanh, tanh_backward), "mish": (mish, mish_backward), "hardswish": (hardswish, hardswish_backward),
    "linear": (identity, identity_backward), "laplace": (laplace, laplace_backward),
}  # clamped_swiglu takes its α and c from the config, xielu its two scalars from the layer: block.mlp_branches
# binds them
assert set(ACTIVATION_KERNELS) | {"clamped_swiglu", "xielu"} == set(ACTIVATIONS), "every registry row has its kernels"

# ----------------------------------------------------------------------------- norms


def layer_norm(x: Array, gamma: Array, beta: Array | None, eps: float) -> Array:
    """Normalise over the feature axis: γ·(x − μ)/√(σ² + ε) + β, σ² the biased variance."""
    mean = x.mean(axis=-1, keepdims=True)  # (B, T, 1)
    centred = x - mean
    var = np.mean(centred * centred, axis=-1, keepdims=True)  # (B, T, 1)
    out = centred / np.sqrt(var + eps)
    out = out * gamma
    return out if beta is None else out + beta


def rms_norm(x: Array, gamma: Array, beta: Array | None, eps: float) -> Array:
    """γ·x/√(mean(x²) + ε) (+ β if the config asks for a shift)."""
    ms = np.mean(x * x, axis=-1, keepdims=True)  # (B, T, 1)
    out = x / np.sqrt(ms + eps) * gamma
    return out if beta is None else out + beta


def layer_norm_backward(x: Array, scale: Array | float, eps: float, dy: Array) -> tuple[Array, Array]:
    """LayerNorm's vector-Jacobian product, from its input x (…, n), its scale and dy (…, n): (dx, dy·x̂), the
    second summed by the caller over the axes its scale is shared along. With g = dy·γ and x̂ = (x − μ)/σ:
    dx = (g − mean(g) − x̂·mean(g·x̂))/σ (the mean over the normalised axis, as μ and σ are taken)."""
    mean = x.mean(axis=-1, keepdims=True)  # (…, 1)
    centred = x - mean
    inv = 1.0 / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)  # (…, 1): 1/σ
    xhat = centred * inv  # (…, n)
    g = dy * scale
    dx = (g - g.mean(axis=-1, keepdims=True) - xhat * np.mean(g * xhat, axis=-1, keepdims=True)) * inv
    return dx, dy * xhat


def rms_norm_backward(x: Array, scale: Array | float, eps: float, dy: Array) -> tuple[Array, Array]:
    """RMSNorm's vector-Jacobian product: (dx, dy·x/rms). With g = dy·γ and r = 1/√(mean(x²) + ε):
    dx = r·g − x·r³·mean(g·x), the second term because r depends on every x."""
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)  # (…, 1): r
    g = dy * scale
    dx = inv * g - x * (inv ** 3) * np.mean(g * x, axis=-1, keepdims=True)
    return dx, dy * (x * inv)


# ----------------------------------------------------------------------------- attention pieces


def softmax(x: Array, axis: int = -1) -> Array:
    with np.errstate(over="ignore"):  # a row spanning ±1e308 overflows to -inf, whose exp is a clean 0
        shifted = x - np.max(x, axis=axis, keepdims=True)
    np.exp(shifted, out=shifted)
    shifted /= np.sum(shifted, axis=axis, keepdims=True)
    return shifted


def softmax_backward(weights: Array, d_weights: Array, axis: int = -1) -> Array:
    """Softmax's vector-Jacobian product from its output P and dP: P ⊙ (dP − Σ P ⊙ dP), the sum over the
    softmax's axis (the row-sum term: every weight depends on every logit of its row)."""
    return weights * (d_weights - np.sum(weights * d_weights, axis=axis, keepdims=True))


def split_heads(x: Array, n_heads: int) -> Array:
    """(B, T, n·d_h) → (B, n, T, d_h): head i takes feature columns i·d_h … (i+1)·d_h − 1."""
    B, T, width = x.shape
    return x.reshape(B, T, n_heads, width // n_heads).transpose(0, 2, 1, 3)


def combine_heads(x: Array) -> Array:
    """(B, h, T, d_h) → (B, T, h·d_h), heads in order: the inverse of split_heads."""
    B, h, T, d_h = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, h * d_h)


def attention_scores(q: Array, k: Array) -> Array:
    """Q·Kᵀ/√d_h: (B, h, T_q, d_h) × (B, h, T_k, d_h) → (B, h, T_q, T_k)."""
    scores = q @ k.swapaxes(-1, -2)
    scores *= 1.0 / math.sqrt(q.shape[-1])
    return scores


def causal_mask(t_q: int, t_k: int, offset: int = 0) -> Array:
    """(T_q, T_k) booleans, True where query t (at absolute position offset + t) may see key s <= it."""
    return np.arange(t_k)[None, :] <= (offset + np.arange(t_q))[:, None]


def window_mask(t_q: int, t_k: int, offset: int, window: int) -> Array:
    """(T_q, T_k) booleans, True where key s lies among the `window` latest positions up to query t
    (s > offset + t − window), as sliding-window attention (Mistral) keeps them."""
    return np.arange(t_k)[None, :] > (offset + np.arange(t_q))[:, None] - window


def chunk_mask(t_q: int, t_k: int, offset: int, chunk: int) -> Array:
    """(T_q, T_k) booleans, True where key s lies in query t's chunk of `chunk` positions (⌊s / C⌋ = ⌊(offset + t)
    / C⌋), as chunked local attention (Llama 4's attention_chunk_size) keeps them. Positions count from key 0, so
    `offset` must be the query's position counted from a chunk boundary."""
    return np.arange(t_k)[None, :] // chunk == ((offset + np.arange(t_q)) // chunk)[:, None]


def alibi_slopes(n_heads: int) -> Array:
    """ALiBi's slope of each head (h,), as BLOOM's `build_alibi_tensor` computes them: with p the largest
    power of two <= h, head i (from 1) of the first p has slope 2^(−8i/p); the h − p heads left take the
    odd powers 1, 3, 5, … of 2^(−8/(2p)), the slopes of a 2p-head model that the first p do not use."""
    p = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = (2.0 ** (-8.0 / p)) ** np.arange(1, p + 1)  # (p,)
    if p != n_heads:
        extra = (2.0 ** (-8.0 / (2 * p))) ** np.arange(1, 2 * (n_heads - p), 2)  # (h − p,)
        slopes = np.concatenate([slopes, extra])
    return slopes


def alibi_bias(slopes: Array, t_q: int, t_k: int, offset: int, dtype: np.dtype) -> Array:
    """(h, T_q, T_k): slope · (s − t) for key s and query t (at position offset + t), added to the
    scores. transformers adds slope · s; each query row differs by a constant, which softmax ignores."""
    distance = np.arange(t_k)[None, :] - (offset + np.arange(t_q))[:, None]  # (T_q, T_k), <= 0 where causal
    return (slopes[:, None, None] * distance).astype(dtype)


def attention_weights(scores: Array, allowed: Array) -> tuple[Array, Array]:
    """Mask, then softmax over the key axis. Returns (masked scores, weights), both (B, h, T_q, T_k)."""
    masked = np.where(allowed, scores, -np.inf)
    return masked, softmax(masked, axis=-1)


def project_out(concat: Array, w_o: Array, b_o: Array | None) -> Array:
    """Concatenated heads (B, T, h·d_h) → residual stream (B, T, d) through W_O."""
    return linear(concat, w_o, b_o)


def residual_add(x: Array, update: Array) -> Array:
    """x + update, for two tensors of exactly the same shape (B, T, d)."""
    return x + update


def rope_frequencies(rot_dims: int, theta: float, scaling: RopeScaling | None = None,
                     seq_len: int = 1) -> tuple[Array, float]:
    """Inverse frequencies (r/2,) of the rotated pairs, and the factor cos and sin are multiplied by,
    as transformers' `ROPE_INIT_FUNCTIONS` compute them (in float64). `seq_len` is the length a
    pass reaches (its last position + 1): dynamic and longrope scaling depend on it."""
    exponent = np.arange(0, rot_dims, 2, dtype=np.float64) / rot_dims  # (r/2,): 2i/r
    inv_freq = 1.0 / theta ** exponent
    if scaling is None:
        return inv_freq, 1.0
    s, original = scaling, scaling.original_max_positions
    if s.type == "proportional":  # Gemma 4: the first int(fraction·r/2) pairs turn (θ^(−2i/r) / factor), the rest not
        turning = int(s.fraction * rot_dims // 2)
        return np.where(np.arange(rot_dims // 2) < turning, inv_freq, 0.0) / s.factor, 1.0
    if s.type == "linear":
        return inv_freq / s.factor, 1.0
    if s.type == "dynamic":  # NTK-aware: the base grows once the pass is longer than the original context
        if seq_len <= original:
            return inv_freq, 1.0
        base = theta * (s.factor * seq_len / original - (s.factor - 1)) ** (rot_dims / (rot_dims - 2))
        return 1.0 / base ** exponent, 1.0
    if s.type == "llama3":
        wavelength = 2 * math.pi / inv_freq
        low_wavelength, high_wavelength = original / s.low_freq_factor, original / s.high_freq_factor
        scaled = np.where(wavelength > low_wavelength, inv_freq / s.factor, inv_freq)
        with np.errstate(divide="ignore", invalid="ignore"):  # equal factors (Llama 4 Scout's): no medium band
            smooth = (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
            blended = (1 - smooth) * scaled / s.factor + smooth * scaled
        medium = (wavelength >= high_wavelength) & (wavelength <= low_wavelength)
        return np.where(medium, blended, scaled), 1.0
    if s.type == "yarn":
        def mscale(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        attention = s.attention_factor or (mscale(s.factor, s.mscale) / mscale(s.factor, s.mscale_all_dim)
                                           if s.mscale and s.mscale_all_dim else mscale(s.factor))

        def correction_dim(rotations: float) -> float:  # the pair index that turns `rotations` times
            return rot_dims * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
        if s.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, rot_dims - 1)
        if low == high:
            high += 0.001  # as the reference does, to avoid dividing by zero
        ramp = np.clip((np.arange(rot_dims // 2, dtype=np.float64) - low) / (high - low), 0, 1)  # (r/2,)
        keep = 1 - ramp  # 1: the original frequency (extrapolation), 0: divided by factor (interpolation)
        return inv_freq / s.factor * (1 - keep) + inv_freq * keep, attention
    # longrope: per-pair factors, the long ones once the pass reaches past the original context
    factors = np.asarray(s.long_factor if seq_len > original else s.short_factor, dtype=np.float64)
    attention = s.attention_factor or (math.sqrt(1 + math.log(s.factor) / math.log(original)) if s.factor > 1
                                       else 1.0)
    return inv_freq / factors, attention


def rope_tables(positions: Array, rot_dims: int, theta: float, dtype: np.dtype,
                scaling: RopeScaling | None = None) -> tuple[Array, Array]:
    """cos and sin tables (T, rot_dims/2) for rotary positions (times the scaling's attention factor)."""
    inv_freq, attention = rope_frequencies(rot_dims, theta, scaling, int(positions.max()) + 1)  # (r/2,)
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]  # (T, r/2)
    return (attention * np.cos(angles)).astype(dtype), (attention * np.sin(angles)).astype(dtype)


def apply_rope(x: Array, cos: Array, sin: Array) -> Array:
    """Rotate the first r dims of each head of x (B, n, T, d_h); pairs are (i, i + r/2)."""
    half = cos.shape[-1]
    first, second, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    rotated = (first * cos - second * sin, second * cos + first * sin)
    return np.concatenate(rotated + (rest,), axis=-1)


def apply_rope_interleaved(x: Array, cos: Array, sin: Array) -> Array:
    """Rotate the first r dims of each head of x (B, n, T, d_h); pairs are (2i, 2i + 1), as GPT-J's
    `rotate_every_two` with its cos/sin tables repeated element by element."""
    half = cos.shape[-1]
    even, odd = x[..., 0:2 * half:2], x[..., 1:2 * half:2]  # (B, n, T, r/2) each
    rotated = np.empty_like(x[..., :2 * half])
    rotated[..., 0::2] = even * cos - odd * sin
    rotated[..., 1::2] = odd * cos + even * sin
    return np.concatenate((rotated, x[..., 2 * half:]), axis=-1)


def apply_rope_half_reversed(x: Array, cos: Array, sin: Array) -> Array:
    """The half layout turned the other way, by −θ: NanoChat's rotate_half is cat(x2, −x1), not cat(−x2, x1)."""
    return apply_rope(x, cos, -sin)


ROPE_LAYOUTS: dict[str, Callable[[Array, Array, Array], Array]] = {
    "half": apply_rope, "interleaved": apply_rope_interleaved, "half_reversed": apply_rope_half_reversed,
}


def rotate_pairs(x: Array, cos: Array, sin: Array, layout: str) -> Array:
    """RoPE on x (B, n, T, d_h) with the pairs of `layout` (`ROPE_LAYOUTS`): half or interleaved."""
    return ROPE_LAYOUTS[layout](x, cos, sin)


def rotate_pairs_backward(dy: Array, cos: Array, sin: Array, layout: str) -> Array:
    """RoPE's vector-Jacobian product: each pair's rotation (times the scaling's attention factor) is a
    fixed linear map whose transpose turns the other way, so dx is dy rotated by −θ."""
    return ROPE_LAYOUTS[layout](dy, cos, -sin)


def l2_normalize(x: Array, eps: float = 1e-6) -> Array:
    """x/√(Σx² + ε) over the last axis (as the FLA kernels and transformers' Gated DeltaNet)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def split_rope_part(x: Array, rope_dims: int) -> tuple[Array, Array]:
    """(…, d_nope + d_rope) → (…, d_nope), (…, d_rope): the part of a latent-attention query head RoPE
    leaves alone, then the part it turns (DeepSeek lays each head out as [no-RoPE | RoPE])."""
    return x[..., :-rope_dims], x[..., -rope_dims:]


def normalise_latent(latent: Array, norm: Callable[[Array], Array]) -> Array:
    """A latent-attention latent through its norm (what a seeded bug may skip)."""
    return norm(latent)


def sinusoidal_positions(positions: Array, d: int, dtype: np.dtype, layout: str = "interleaved",
                         zero_row: int | None = None) -> Array:
    """The fixed sin/cos table's rows `positions` (T, d), computed in float64 and cast to dtype.

    interleaved (Vaswani): PE[t, 2i] = sin(t·ω_i), PE[t, 2i+1] = cos(t·ω_i), ω_i = 10000^(−2i/d).
    halves (CTRL): the same sines, then the same cosines: [sin(t·ω_0 … t·ω_⌈d/2⌉−1) | cos(t·ω_0 … t·ω_⌊d/2⌋−1)].
    fairseq (XGLM, tensor2tensor): h = ⌊d/2⌋, ω_j = 10000^(−j/(h−1)), [sin(t·ω) | cos(t·ω)] and a zero column when d
    is odd; the row `zero_row` (fairseq's padding_idx) is all zeros."""
    t = positions.astype(np.float64)[:, None]
    table = np.zeros((len(positions), d), dtype=np.float64)
    if layout == "fairseq":
        h = d // 2
        angles = t * np.exp(np.arange(h, dtype=np.float64) * -(math.log(10000.0) / (h - 1)))[None, :]  # (T, h)
        table[:, :h], table[:, h:2 * h] = np.sin(angles), np.cos(angles)
        if zero_row is not None:
            table[positions == zero_row] = 0.0
        return table.astype(dtype)
    angles = t * (10000.0 ** (-np.arange(0, d, 2, dtype=np.float64) / d))[None, :]  # (T, ceil(d/2))
    if layout == "halves":
        table[:, :(d + 1) // 2], table[:, (d + 1) // 2:] = np.sin(angles), np.cos(angles[:, : d // 2])
    else:
        table[:, 0::2] = np.sin(angles)
        table[:, 1::2] = np.cos(angles[:, : d // 2])
    return table.astype(dtype)


# ----------------------------------------------------------------------------- convolution over time


def causal_conv1d(x: Array, weight: Array, bias: Array | None, state: Array | None = None) -> tuple[Array, Array]:
    """A depthwise causal convolution over time: x (B, T, C), weight (C, K), bias (C,) or None; `state` (B, K−1, C)
    the K−1 inputs before x (None: zeros). y[t] = bias + Σ_k weight[:, k]·u[t + k] over u = state | x, so
    weight[:, K−1] reads the current input (torch's Conv1d with K−1 padding on the left, cut to T). Returns
    (y (B, T, C) before any activation, the new state: the last K−1 inputs of u (B, K−1, C))."""
    B, T, C = x.shape
    K = weight.shape[1]
    if state is None:
        state = np.zeros((B, K - 1, C), dtype=x.dtype)
    u = np.concatenate([state.astype(x.dtype, copy=False), x], axis=1)  # (B, K−1+T, C)
    y = np.zeros((B, T, C), dtype=x.dtype) if bias is None else np.broadcast_to(bias.astype(x.dtype), (B, T, C)).copy()
    for k in range(K):
        y += u[:, k:k + T] * weight[:, k].astype(x.dtype)
    return y, u[:, T:].copy()  # (B, T, C), (B, K−1, C)


# ----------------------------------------------------------------------------- mixture-of-experts routing


def router_probabilities(logits: Array, scoring: str) -> Array:
    """Router scores (N, E) from logits (N, E): softmax over the experts, or an independent sigmoid each."""
    return softmax(logits.copy(), axis=-1) if scoring == "softmax" else sigmoid(logits)


def top_k(values: Array, k: int) -> Array:
    """Indices (N, k) of each row's k largest values, largest first; ties: the lower index first
    (a stable sort), which is what torch.topk returns on CPU for exactly equal values."""
    return np.argsort(-values, axis=-1, kind="stable")[:, :k]


def sparsemixer(logits: Array, eps: float) -> tuple[Array, Array, Array]:
    """PhiMoE's routing as transformers runs it in eval mode (sparsemixer without its training-time sampling): two
    stages, each choosing the best logit left (the first stage's expert taken out for the second) and weighting it
    by the softmax over the experts left whose logit s is within a relative margin of that best m,
    (m − s) / max(|s|, m) ≤ 2·eps. Returns (chosen (N, 2), their weights (N, 2), each stage's masked softmax
    (2, N, E), zero off its experts, for the backward)."""
    N, E = logits.shape
    left = logits.copy()  # (N, E): the logits not yet chosen (-inf once chosen)
    chosen, weights = np.empty((N, 2), dtype=np.intp), np.empty((N, 2), dtype=logits.dtype)
    stages = np.empty((2, N, E), dtype=logits.dtype)
    for j in range(2):
        best = top_k(left, 1)  # (N, 1)
        top = np.take_along_axis(left, best, axis=-1)  # (N, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            near = (top - logits) / np.maximum(np.abs(logits), top) <= 2 * eps  # (N, E)
        stages[j] = softmax(np.where(near, left, -np.inf), axis=-1)
        chosen[:, j], weights[:, j] = best[:, 0], np.take_along_axis(stages[j], best, axis=-1)[:, 0]
        np.put_along_axis(left, best, -np.inf, axis=-1)
    return chosen, weights, stages


def sparsemixer_backward(stages: Array, chosen: Array, d_weights: Array) -> Array:
    """d_weights (N, 2) of sparsemixer's two weights → d_logits (N, E): each stage's softmax VJP over its own
    experts (none flows through the choices or the margins, computed without gradient in transformers)."""
    d_logits = np.zeros(stages.shape[1:], dtype=d_weights.dtype)
    for j in range(2):
        d_stage = np.zeros_like(d_logits)
        np.put_along_axis(d_stage, chosen[:, j:j + 1], d_weights[:, j:j + 1], axis=-1)
        d_logits += softmax_backward(stages[j], d_stage)
    return d_logits


RENORMALIZE_EPS = 1e-20  # added to the sum, as DeepSeek-V3 does: sigmoid scores may all underflow to 0


def renormalize(weights: Array, eps: float = RENORMALIZE_EPS) -> Array:
    """The k chosen routing weights (N, k) divided by their sum (+ eps, block.moe.renormalize_eps: 1e-20 by
    default), so each row sums to 1 (to Σ/(Σ + eps))."""
    return weights / (weights.sum(axis=-1, keepdims=True) + eps)


def add_shared(routed: Array, shared: Array) -> Array:
    """The routed experts' output plus the shared expert's (N, d) each."""
    return routed + shared


# ----------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Ops:
    """The operations the block is built from; a seeded bug replaces exactly one of them."""

    layer_norm: Callable[[Array, Array, Array | None, float], Array] = layer_norm
    rms_norm: Callable[[Array, Array, Array | None, float], Array] = rms_norm
    split_heads: Callable[[Array, int], Array] = split_heads
    combine_heads: Callable[[Array], Array] = combine_heads
    attention_scores: Callable[[Array, Array], Array] = attention_scores
    causal_mask: Callable[[int, int, int], Array] = causal_mask
    attention_weights: Callable[[Array, Array], tuple[Array, Array]] = attention_weights
    project_out: Callable[[Array, Array, Array | None], Array] = project_out
    residual_add: Callable[[Array, Array], Array] = residual_add
    rotate_pairs: Callable[[Array, Array, Array, str], Array] = rotate_pairs
    router_probabilities: Callable[[Array, str], Array] = router_probabilities
    top_k: Callable[[Array, int], Array] = top_k
    renormalize: Callable[[Array, float], Array] = renormalize
    add_shared: Callable[[Array, Array], Array] = add_shared
    split_rope_part: Callable[[Array, int], tuple[Array, Array]] = split_rope_part
    normalise_latent: Callable[[Array, Callable[[Array], Array]], Array] = normalise_latent
    alibi_slopes: Callable[[int], Array] = alibi_slopes
    # the backward's operations, where a seeded backward bug is one of them swapped
    layer_norm_backward: Callable[[Array, Array | float, float, Array], tuple[Array, Array]] = layer_norm_backward
    rms_norm_backward: Callable[[Array, Array | float, float, Array], tuple[Array, Array]] = rms_norm_backward
    softmax_backward: Callable[[Array, Array], Array] = softmax_backward
    rotate_pairs_backward: Callable[[Array, Array, Array, str], Array] = rotate_pairs_backward
    weight_grad: Callable[[Array, Array], Array] = weight_grad
    sum_groups: Callable[[Array, int], Array] = sum_groups
    backward_mask: Callable[[int, int, int], Array] = causal_mask  # the whole table's backward recomputes P under it
    head_grad_to_table: Callable[[Array], Array] = head_grad_to_table


STANDARD_OPS = Ops()
