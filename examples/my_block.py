"""A minimal decoder block written against blockcli's --impl contract.

    blockcli verify --impl examples/my_block.py:MyBlock

blockcli builds MyBlock(weights, config), then calls the result on x (B, T, d).
weights uses blockcli's keys (ln1_gamma, w_q, b_q, ..., w_down, b_down), W shaped (in, out);
config is the YAML as a plain dict. This one is the reference chapter's pre-norm block:
LayerNorm, causal multi-head attention, tanh-GELU MLP.
"""

import numpy as np


class MyBlock:
    def __init__(self, weights, config):
        self.w = weights
        self.n_heads = config["block"]["n_heads"]
        self.eps = config["block"]["norm_eps"]

    def parameters(self):
        return self.w

    def layer_norm(self, x, gamma, beta):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return gamma * (x - mean) / np.sqrt(var + self.eps) + beta

    def __call__(self, x, return_intermediates=False):
        w, h = self.w, self.n_heads
        B, T, d = x.shape
        n1 = self.layer_norm(x, w["ln1_gamma"], w["ln1_beta"])
        flat = [n1 @ w[f"w_{n}"] + w[f"b_{n}"] for n in "qkv"]  # (B, T, d) each
        d_h = d // h
        q, k, v = (a.reshape(B, T, h, d_h).transpose(0, 2, 1, 3) for a in flat)  # (B, h, T, d_h)
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d_h)  # (B, h, T, T)
        future = np.triu(np.ones((T, T), dtype=bool), k=1)
        masked = np.where(future, -np.inf, scores)
        e = np.exp(masked - masked.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
        heads = weights @ v  # (B, h, T, d_h)
        concat = heads.transpose(0, 2, 1, 3).reshape(B, T, h * d_h)  # (B, T, d)
        attn_out = concat @ w["w_o"] + w["b_o"]
        hidden = x + attn_out
        n2 = self.layer_norm(hidden, w["ln2_gamma"], w["ln2_beta"])
        u = n2 @ w["w_up"] + w["b_up"]
        act = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))
        mlp_out = act @ w["w_down"] + w["b_down"]
        y = hidden + mlp_out
        if not return_intermediates:
            return y
        return y, {"ln1_out": n1, "q_proj": flat[0], "k_proj": flat[1], "v_proj": flat[2], "q": q, "k": k,
                   "v": v, "scores": scores, "masked_scores": masked, "attn_weights": weights,
                   "attn_heads": heads, "attn_concat": concat, "attn_out": attn_out, "h": hidden,
                   "mlp_out": mlp_out}
