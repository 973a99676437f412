"""User implementations for `verify --impl` tests: one correct block and the classic bugs.

Written for the tests, independently of blockcli: a plain pre-norm block whose steps each
have a broken variant selected by the class attribute `bug`.
"""

import math

import numpy as np


class Correct:
    bug = None

    def __init__(self, weights, config):
        self.w = dict(weights)
        self.h = config["block"]["n_heads"]
        self.eps = config["block"]["norm_eps"]

    def parameters(self):
        return self.w

    def norm(self, x, g, b):
        axis = {"norm-time-axis": 1, "norm-batch-axis": 0}.get(self.bug, -1)
        mu = x.mean(axis=axis, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=axis, keepdims=True)
        return g * (x - mu) / np.sqrt(var + self.eps) + b

    def __call__(self, x, return_intermediates=False):
        w, h, bug = self.w, self.h, self.bug
        B, T, d = x.shape
        n1 = self.norm(x, w["ln1_gamma"], w["ln1_beta"])
        flat = {n: n1 @ w["w_" + n] + w["b_" + n] for n in "qkv"}
        d_h = flat["q"].shape[-1] // h
        if bug == "split-no-transpose":
            q, k, v = (flat[n].reshape(B, h, T, d_h) for n in "qkv")
        else:
            q, k, v = (flat[n].reshape(B, T, h, d_h).transpose(0, 2, 1, 3) for n in "qkv")
        scale = 1.0 if bug == "unscaled-scores" else 1.0 / math.sqrt(d_h)
        scores = np.einsum("bhtd,bhsd->bhts", q, k) * scale
        t, s = np.arange(T)[:, None], np.arange(T)[None, :]
        visible = {"no-mask": np.ones((T, T), bool), "mask-hides-diagonal": s < t}.get(bug, s <= t)
        if bug == "mask-cached-16":  # a causal mask built once for 16 positions; beyond them nothing is hidden
            visible = np.ones((T, T), bool)
            visible[:16, :16] = np.tril(np.ones((16, 16), bool))[:T, :T]
        if bug == "mask-after-softmax":
            masked = scores
        else:
            masked = np.where(visible, scores, -np.inf)
        axis = -2 if bug == "softmax-query-axis" else -1
        e = np.exp(masked - masked.max(axis=axis, keepdims=True))
        weights = e / e.sum(axis=axis, keepdims=True)
        if bug == "mask-after-softmax":
            weights = np.where(visible, weights, 0.0)
        heads = np.einsum("bhts,bhsd->bhtd", weights, v)
        combined = heads[:, ::-1] if bug == "heads-wrong-order" else heads
        concat = combined.transpose(0, 2, 1, 3).reshape(B, T, h * d_h)
        attn_out = concat if bug == "missing-wo" else concat @ w["w_o"] + w["b_o"]
        hidden = x + (attn_out[:, -1:, :] if bug == "residual-broadcast" else attn_out)
        n2 = self.norm(hidden, w["ln2_gamma"], w["ln2_beta"])
        u = n2 @ w["w_up"] + w["b_up"]
        act = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
        mlp_out = act @ w["w_down"] + w["b_down"]
        y = hidden + mlp_out
        if not return_intermediates:
            return y
        return y, {"ln1_out": n1, "q_proj": flat["q"], "k_proj": flat["k"], "v_proj": flat["v"], "q": q, "k": k,
                   "v": v, "scores": scores, "masked_scores": masked,
                   "attn_weights": weights, "attn_heads": heads, "attn_concat": concat, "attn_out": attn_out,
                   "h": hidden, "mlp_out": mlp_out}


def _bugged(name):
    return type(name, (Correct,), {"bug": name})


SplitNoTranspose = _bugged("split-no-transpose")
SoftmaxQueryAxis = _bugged("softmax-query-axis")
MaskAfterSoftmax = _bugged("mask-after-softmax")
MaskHidesDiagonal = _bugged("mask-hides-diagonal")
NoMask = _bugged("no-mask")
MissingWo = _bugged("missing-wo")
HeadsWrongOrder = _bugged("heads-wrong-order")
ResidualBroadcast = _bugged("residual-broadcast")
NormTimeAxis = _bugged("norm-time-axis")
NormBatchAxis = _bugged("norm-batch-axis")
UnscaledScores = _bugged("unscaled-scores")
MaskCachedAt16 = _bugged("mask-cached-16")


class CountsWithoutBiases(Correct):
    """Exposes only the matrices and scales: the parameter count misses every bias and shift."""

    def parameters(self):
        return {k: v for k, v in self.w.items() if not k.startswith("b_") and not k.endswith("_beta")}


class BlackBox(Correct):
    """No intermediates: the items that need them are skipped, never passed."""

    def __call__(self, x):
        return Correct.__call__(self, x)


class Raises(Correct):
    def __call__(self, x, return_intermediates=False):
        raise ValueError("shapes do not align in my attention")


class WrongShape(Correct):
    def __call__(self, x):
        return Correct.__call__(self, x)[:, :-1]


class Slow(Correct):
    def __call__(self, x):
        import time

        time.sleep(5)
        return Correct.__call__(self, x)


def wrong_signature(weights, config, extra):
    return Correct(weights, {})


class Prints(Correct):
    """Talks on stdout while building and on every call: none of it may reach --json's stdout."""

    def __init__(self, weights, config):
        print("building my block")
        super().__init__(weights, config)

    def __call__(self, x, return_intermediates=False):
        print("x has shape", x.shape)
        return Correct.__call__(self, x, return_intermediates)


class ExitsInCall(Correct):
    def __call__(self, x, return_intermediates=False):
        import sys

        sys.exit(0)


class UpdatesInPlace(Correct):
    """Adds the attention output into x itself, a classic `x += attn(x)` in NumPy."""

    def __call__(self, x, return_intermediates=False):
        y = Correct.__call__(self, x.copy(), return_intermediates)
        x += 1.0
        return y


class Float32Norm(Correct):
    """Computes its norms in float32 (as transformers' RMSNorm/LayerNorm upcasting does the other way round)."""

    def norm(self, x, g, b):
        return Correct.norm(self, x.astype(np.float32), g.astype(np.float32), b.astype(np.float32)).astype(x.dtype)


class SoftmaxWithoutMax(Correct):
    """exp(scores) / sum without the row-maximum shift: fine on ordinary scores, NaN once they pass ~709."""

    def __call__(self, x):
        return _no_max_shift(self, x)


def _no_max_shift(block, x):
    w, h, B, T = block.w, block.h, x.shape[0], x.shape[1]
    n1 = block.norm(x, w["ln1_gamma"], w["ln1_beta"])
    q, k, v = ((n1 @ w["w_" + n] + w["b_" + n]).reshape(B, T, h, -1).transpose(0, 2, 1, 3) for n in "qkv")
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    e = np.exp(np.where(np.tril(np.ones((T, T), bool)), scores, -np.inf))
    concat = ((e / e.sum(axis=-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    hidden = x + concat @ w["w_o"] + w["b_o"]
    u = block.norm(hidden, w["ln2_gamma"], w["ln2_beta"]) @ w["w_up"] + w["b_up"]
    act = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
    return hidden + act @ w["w_down"] + w["b_down"]


BUILT = []  # the weights of every call of the counts_builds factory


def counts_builds(weights, config):
    BUILT.append({k: v.copy() for k, v in weights.items()})
    return Correct(weights, config)


class ReturnsFloat32(Correct):
    def __call__(self, x):
        return Correct.__call__(self, x).astype(np.float32)


class WritesToFd1(Correct):
    """Writes to file descriptor 1 directly, as C code (printf, std::cout) does, and through C's stdio buffer."""

    def __call__(self, x):
        import ctypes
        import os

        os.write(1, b"raw bytes on fd 1\n")
        ctypes.CDLL(None).printf(b"C printf line\n")
        return Correct.__call__(self, x)
