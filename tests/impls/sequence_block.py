"""A block written for one sequence (T, d), in the style of the reference chapter's "Anatomy of a Decoder
Block": RMSNorm with eps 1e-6 and scale only, attention without biases, a tanh-GELU MLP with biases.
Written for the tests; blockcli must detect the (T, d) input and call it once per sequence."""

import numpy as np


def rms_norm(x, gamma, eps=1e-6):
    return gamma * x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps)


class SequenceBlock:
    def __init__(self, d_model, n_heads):
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads

    def attention(self, x):  # (T, d) → (T, d)
        T = x.shape[0]
        q, k, v = (
            (x @ w).reshape(T, self.n_heads, self.d_k).transpose(1, 0, 2) for w in (self.W_q, self.W_k, self.W_v)
        )  # (h, T, d_k)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(self.d_k) + np.triu(np.full((T, T), -np.inf), k=1)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        heads = (e / e.sum(axis=-1, keepdims=True)) @ v  # (h, T, d_k)
        return heads.transpose(1, 0, 2).reshape(T, self.d_model) @ self.W_o

    def __call__(self, x):
        x = x + self.attention(rms_norm(x, self.gamma1))
        u = rms_norm(x, self.gamma2) @ self.W1 + self.b1
        return x + (0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))) @ self.W2 + self.b2


def build(weights, config):
    """The factory: the chapter's block as written, its arrays replaced by blockcli's."""
    block = SequenceBlock(config["block"]["d_model"], config["block"]["n_heads"])
    names = {"W_q": "w_q", "W_k": "w_k", "W_v": "w_v", "W_o": "w_o", "gamma1": "ln1_gamma", "gamma2": "ln2_gamma",
             "W1": "w_up", "b1": "b_up", "W2": "w_down", "b2": "b_down"}
    for attr, key in names.items():
        setattr(block, attr, weights[key])
    return block
