"""The minimal block of examples/my_block.py with its backward written by hand, for verify --grad.

    blockcli verify --impl examples/my_block_backward.py:MyBlockWithBackward --grad

After a call on x, backward(dy) returns (dx, grads): dy·∂y/∂x (B, T, d) and, under blockcli's weight
keys, dy·∂y/∂w for every weight. Each step is the forward's in reverse; the comments name the rule.
"""

import numpy as np

from my_block import MyBlock


class MyBlockWithBackward(MyBlock):
    def layer_norm(self, x, gamma, beta):
        out = super().layer_norm(x, gamma, beta)
        self.norms.append((x, out))  # what the backward needs: each norm's input and output
        return out

    def __call__(self, x, return_intermediates=False):
        self.norms = []
        y, self.saved = super().__call__(x, return_intermediates=True)
        return (y, self.saved) if return_intermediates else y

    def layer_norm_backward(self, x, gamma, dy):
        """dx = (g − mean(g) − x̂·mean(g·x̂)) / σ with g = dy·γ; dγ = Σ dy·x̂, dβ = Σ dy."""
        mean = x.mean(axis=-1, keepdims=True)
        inv = 1 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + self.eps)
        xhat = (x - mean) * inv
        g = dy * gamma
        dx = (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True)) * inv
        return dx, (dy * xhat).sum(axis=(0, 1)), dy.sum(axis=(0, 1))

    def backward(self, dy):
        w, s, h = self.w, self.saved, self.n_heads
        (x1, n1), (x2, n2) = self.norms  # LN1 on x, LN2 on h
        B, T, d = dy.shape
        d_h = d // h
        grads = {}

        def linear(a, d_out, name):  # out = a·W + b: dW = aᵀ·d_out, db = Σ d_out, da = d_out·Wᵀ
            grads[f"w_{name}"] = a.reshape(-1, a.shape[-1]).T @ d_out.reshape(-1, d_out.shape[-1])
            grads[f"b_{name}"] = d_out.sum(axis=(0, 1))
            return d_out @ w[f"w_{name}"].T

        # MLP: y = h + act(n2·W_up + b_up)·W_down + b_down, act the tanh-GELU
        u = n2 @ w["w_up"] + w["b_up"]
        c = np.sqrt(2 / np.pi)
        t = np.tanh(c * (u + 0.044715 * u ** 3))
        d_act = linear(0.5 * u * (1 + t), dy, "down")
        d_u = d_act * (0.5 * (1 + t) + 0.5 * u * (1 - t ** 2) * c * (1 + 3 * 0.044715 * u ** 2))
        d_n2 = linear(n2, d_u, "up")
        d_hidden, grads["ln2_gamma"], grads["ln2_beta"] = self.layer_norm_backward(x2, w["ln2_gamma"], d_n2)
        d_hidden = d_hidden + dy  # the residual passes dy straight through
        # attention: hidden = x + concat·W_O + b_O
        d_concat = linear(s["attn_concat"], d_hidden, "o")
        d_heads = d_concat.reshape(B, T, h, d_h).transpose(0, 2, 1, 3)  # (B, h, T, d_h)
        q, k, v, p = s["q"], s["k"], s["v"], s["attn_weights"]
        dv = p.transpose(0, 1, 3, 2) @ d_heads  # heads = P·V
        dp = d_heads @ v.transpose(0, 1, 3, 2)
        ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))  # softmax: P ⊙ (dP − Σ P ⊙ dP); 0 where masked
        ds = ds / np.sqrt(d_h)  # scores = Q·Kᵀ/√d_h
        dq, dk = ds @ k, ds.transpose(0, 1, 3, 2) @ q
        d_n1 = sum(linear(n1, a.transpose(0, 2, 1, 3).reshape(B, T, d), name) for a, name in
                   ((dq, "q"), (dk, "k"), (dv, "v")))
        dx, grads["ln1_gamma"], grads["ln1_beta"] = self.layer_norm_backward(x1, w["ln1_gamma"], d_n1)
        return dx + d_hidden, grads
