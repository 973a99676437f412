"""torch.nn.Module blocks for `verify --impl` tests, written for the tests (transformers is not needed).

`model.py` style of nanoGPT (Block, CausalSelfAttention with a fused c_attn and nn.Linear layers, a
causal-mask buffer, attn_dropout on the weights), and a transformers-style Llama layer with
transformers' module names and semantics (RMSNorm and the softmax computed in float32, rotate-half
RoPE tables, a mask and the tables passed in by a wrapper). Each has a correct version and the
classic bugs, selected by the class attribute `bug`.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    n_embd: int = 64
    n_head: int = 4
    block_size: int = 1024
    bias: bool = True
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    bug = None

    def __init__(self, config):
        super().__init__()
        self.n_head, self.n_embd = config.n_head, config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        size = config.block_size
        self.register_buffer("bias", torch.tril(torch.ones(size, size)).view(1, 1, size, size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (a.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for a in (q, k, v))  # (B, nh, T, hs)
        scale = 1.0 / k.size(-1) if self.bug == "scale-1/d" else 1.0 / math.sqrt(k.size(-1))
        att = (q @ k.transpose(-2, -1)) * scale  # (B, nh, T, T)
        if self.bug != "no-mask":
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-2 if self.bug == "softmax-queries" else -1)
        att = self.attn_dropout(att)
        y = att @ v  # (B, nh, T, hs)
        if self.bug == "heads-wrong-order":
            y = y.flip(1)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return y if self.bug == "no-output-projection" else self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config, bug=None):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.attn.bug = bug
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


def _nanogpt(bug=None, block_size=1024):
    def factory(config):
        b = config["block"]
        return Block(GPTConfig(n_embd=b["d_model"], n_head=b["n_heads"], block_size=block_size), bug)

    return factory


nanogpt = _nanogpt()
nanogpt_softmax_queries = _nanogpt("softmax-queries")
nanogpt_no_mask = _nanogpt("no-mask")
nanogpt_scale_1_over_d = _nanogpt("scale-1/d")
nanogpt_no_output_projection = _nanogpt("no-output-projection")
nanogpt_heads_wrong_order = _nanogpt("heads-wrong-order")
nanogpt_mask_cached_at_16 = _nanogpt(block_size=16)


class Conv1D(nn.Module):
    """GPT-2's Conv1D (transformers.pytorch_utils): a linear layer storing its weight as (in, out)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.empty(nx, nf)), nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return x @ self.weight + self.bias


def gpt2_style(config):
    """nanoGPT's Block with GPT-2's Conv1D layers: the same names, the other matrix layout."""
    b = config["block"]
    block = Block(GPTConfig(n_embd=b["d_model"], n_head=b["n_heads"]))
    d = b["d_model"]
    block.attn.c_attn, block.attn.c_proj = Conv1D(3 * d, d), Conv1D(d, d)
    block.mlp.c_fc, block.mlp.c_proj = Conv1D(4 * d, d), Conv1D(d, 4 * d)
    return block


# ----------------------------------------------------------------------------- transformers-style Llama layer


class RMSNorm(nn.Module):
    """transformers' LlamaRMSNorm: the statistics in float32 whatever the input dtype."""

    def __init__(self, d, eps):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(d)), eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    bug = None

    def __init__(self, d, n_heads, n_kv_heads, head_dim):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.q_proj = nn.Linear(d, n_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(d, n_kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(d, n_kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * head_dim, d, bias=False)

    def forward(self, hidden_states, attention_mask, position_embeddings):
        B, T, _ = hidden_states.shape
        shape = (B, T, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)  # (B, h, T, d_h)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)  # (B, h_kv, T, d_h)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = position_embeddings  # (1, T, d_h)
        if self.bug == "interleaved-rope":
            pairs = lambda a: torch.stack((-a[..., 1::2], a[..., ::2]), dim=-1).flatten(-2)  # noqa: E731
            cos_i, sin_i = (t[..., : self.head_dim // 2].repeat_interleave(2, -1)[:, None] for t in (cos, sin))
            q, k = q * cos_i + pairs(q) * sin_i, k * cos_i + pairs(k) * sin_i
        else:
            q = q * cos[:, None] + rotate_half(q) * sin[:, None]
            k = k * cos[:, None] + rotate_half(k) * sin[:, None]
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scale = 1.0 if self.bug == "unscaled" else self.head_dim ** -0.5
        weights = (q @ k.transpose(2, 3)) * scale + attention_mask
        weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)  # as transformers does
        out = (weights @ v).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(out), weights


class MLPGated(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate_proj = nn.Linear(d, d_ff, bias=False)
        self.up_proj = nn.Linear(d, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, b, bug=None):
        super().__init__()
        self.input_layernorm = RMSNorm(b["d_model"], b["norm_eps"])
        self.self_attn = Attention(b["d_model"], b["n_heads"], b["n_kv_heads"], b["head_dim"])
        self.self_attn.bug = bug
        self.post_attention_layernorm = RMSNorm(b["d_model"], b["norm_eps"])
        self.mlp = MLPGated(b["d_model"], b["d_ff"])

    def forward(self, hidden_states, attention_mask, position_embeddings):
        residual = hidden_states
        hidden_states, _ = self.self_attn(self.input_layernorm(hidden_states), attention_mask, position_embeddings)
        hidden_states = residual + hidden_states
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class LlamaStyle(nn.Module):
    """The wrapper a user writes: the layer plus its mask and RoPE tables (built in float32, as transformers does)."""

    bug = None

    def __init__(self, config):
        super().__init__()
        b = config["block"]
        self.layer = DecoderLayer(b, self.bug)
        self.head_dim, self.theta = b["head_dim"], b["rope_theta"]

    def forward(self, x):
        T = x.shape[1]
        inv_freq = 1.0 / self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        angles = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]  # (T, d_h/2)
        emb = torch.cat((angles, angles), dim=-1)[None]  # (1, T, d_h)
        mask = torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)[None, None]
        return self.layer(x, mask, (emb.cos().to(x.dtype), emb.sin().to(x.dtype)))


class LlamaStyleUnscaled(LlamaStyle):
    bug = "unscaled"


class LlamaStyleInterleavedRope(LlamaStyle):
    bug = "interleaved-rope"


class AddsIntoItsInput(Block):
    """`x += self.attn(self.ln_1(x))`: the residual written into the caller's tensor."""

    def forward(self, x):
        x += self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def adds_into_its_input(config):
    b = config["block"]
    return AddsIntoItsInput(GPTConfig(n_embd=b["d_model"], n_head=b["n_heads"]))


class NeoXAttention(nn.Module):
    """GPT-NeoX's names and fused layout: query_key_value holds [q_i k_i v_i] per head."""

    def __init__(self, d, n_heads):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d // n_heads
        self.query_key_value = nn.Linear(d, 3 * d)
        self.dense = nn.Linear(d, d)

    def forward(self, x):
        B, T, _ = x.shape
        qkv = self.query_key_value(x).view(B, T, self.n_heads, 3 * self.head_dim).transpose(1, 2)  # (B, h, T, 3d_h)
        q, k, v = qkv.split(self.head_dim, dim=-1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        weights = F.softmax(scores, dim=-1)
        return self.dense((weights @ v).transpose(1, 2).reshape(B, T, -1)), weights


class NeoXMLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dense_h_to_4h, self.dense_4h_to_h = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(x)))


class NeoXLayer(nn.Module):
    """GPT-NeoX's module names on a sequential pre-norm block (Pythia's parallel residual is a config option)."""

    def __init__(self, config):
        super().__init__()
        d, h = config["block"]["d_model"], config["block"]["n_heads"]
        self.input_layernorm, self.post_attention_layernorm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attention, self.mlp = NeoXAttention(d, h), NeoXMLP(d)

    def forward(self, x):
        h = x + self.attention(self.input_layernorm(x))[0]
        return h + self.mlp(self.post_attention_layernorm(h))


def two_argument_factory(weights, config):
    """Takes weights too (and ignores them): blockcli fills the module it returns all the same."""
    return nanogpt(config)


class DetachedNorm(Block):
    """nanoGPT's Block whose second LayerNorm uses its scale detached: the forward is right, but no gradient
    reaches ln_2.weight (verify --grad's item 22)."""

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        normed = F.layer_norm(x, x.shape[-1:], self.ln_2.weight.detach(), self.ln_2.bias, self.ln_2.eps)
        return x + self.mlp(normed)


def detached_norm(config):
    b = config["block"]
    return DetachedNorm(GPTConfig(n_embd=b["d_model"], n_head=b["n_heads"]))
