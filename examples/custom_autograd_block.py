"""A torch block whose attention is a custom torch.autograd.Function with a hand-written backward, as a
fused kernel's would be, and its buggy twin (needs torch).

    blockcli verify --impl examples/custom_autograd_block.py:Block --grad        # PASS
    blockcli verify --impl examples/custom_autograd_block.py:BuggyBlock --grad   # FAIL: items 20 and 23

Both forwards are right, so the forward checklist passes on both; only the gradient checks (--grad) see
that BuggyBlock's backward forgets softmax's row-sum term. The module's names follow nanoGPT
(ln_1, attn.c_attn = W_Q | W_K | W_V, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj), which blockcli fills by
name; the default block's tanh-GELU, LayerNorm and biases.
"""

import math

import torch
from torch import nn


class CausalAttention(torch.autograd.Function):
    """softmax(mask(Q·Kᵀ/√d_h))·V on (B, h, T, d_h), saving the weights P for the backward."""

    @staticmethod
    def forward(ctx, q, k, v):
        T = q.shape[-2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, h, T, T)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        p = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        ctx.save_for_backward(q, k, v, p)
        return p @ v

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, p = ctx.saved_tensors
        dv = p.transpose(-1, -2) @ d_out
        dp = d_out @ v.transpose(-1, -2)
        ds = p * (dp - (p * dp).sum(-1, keepdim=True)) / math.sqrt(q.shape[-1])  # softmax's VJP, then the scale
        return ds @ k, ds.transpose(-1, -2) @ q, dv


class BuggyCausalAttention(CausalAttention):
    @staticmethod
    def backward(ctx, d_out):
        q, k, v, p = ctx.saved_tensors
        dv = p.transpose(-1, -2) @ d_out
        dp = d_out @ v.transpose(-1, -2)
        ds = p * dp / math.sqrt(q.shape[-1])  # the bug: softmax's row-sum term − P ⊙ Σ P ⊙ dP forgotten
        return ds @ k, ds.transpose(-1, -2) @ q, dv


class Attention(nn.Module):
    def __init__(self, d, n_heads, kernel):
        super().__init__()
        self.n_heads, self.kernel = n_heads, kernel
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):  # x (B, T, d)
        B, T, d = x.shape
        q, k, v = (a.reshape(B, T, self.n_heads, -1).transpose(1, 2) for a in self.c_attn(x).split(d, dim=-1))
        heads = self.kernel.apply(q, k, v)  # (B, h, T, d_h)
        return self.c_proj(heads.transpose(1, 2).reshape(B, T, d))


class MLP(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(d, d_ff), nn.Linear(d_ff, d)

    def forward(self, x):
        return self.c_proj(nn.functional.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    kernel = CausalAttention

    def __init__(self, config):
        super().__init__()
        b = config["block"]
        d = b["d_model"]
        self.ln_1, self.ln_2 = nn.LayerNorm(d, eps=b["norm_eps"]), nn.LayerNorm(d, eps=b["norm_eps"])
        self.attn = Attention(d, b["n_heads"], self.kernel)
        self.mlp = MLP(d, b["d_ff"])

    def forward(self, x):
        h = x + self.attn(self.ln_1(x))
        return h + self.mlp(self.ln_2(h))


class BuggyBlock(Block):
    kernel = BuggyCausalAttention
