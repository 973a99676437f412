#!/usr/bin/env python3
"""Multi-head latent attention: blockcli's forward against a straightforward NumPy version and PyTorch.

    python benchmarks/bench_mla.py [--seq 1024] [--batch 1] [--rounds 7] [--config v2-lite|v3]

One attention layer of DeepSeek-V2-Lite (d 2048, 16 heads, one q_proj, K/V latent 512, d_nope 128,
d_rope 64, d_v 128) or of DeepSeek-V3 at 32 heads (d 7168, query latent 1536), float32, a causal
prefill of B × T tokens. Contenders, timed interleaved (each round runs each once, in a rotating order):
  (a) blockcli's LatentAttention (untraced: blocked attention, row-tiled projections);
  (b) a straightforward NumPy version: the same low-rank products, K and V expanded for every head,
      the whole (B, h, T, T) score table, masked, softmax, ·V;
  (c) transformers' DeepseekV2Attention / DeepseekV3Attention module on the same weights (torch CPU),
      with its eager attention and with SDPA, when torch and transformers are importable.
All are checked to agree (float32, 1e-4 relative) before timing. It prints the machine, the medians
and the ratios to blockcli's time. Nothing is written.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
from typing import Callable

import numpy as np

from blockcli.block import DecoderBlock
from blockcli.config import parse_config

CONFIGS = {
    "v2-lite": {"d_model": 2048, "n_heads": 16, "mla": {"q_lora_rank": 0, "kv_lora_rank": 512,
                                                         "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                                                         "v_head_dim": 128}},
    "v3": {"d_model": 7168, "n_heads": 32, "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                                                    "qk_rope_head_dim": 64, "v_head_dim": 128}},
}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        from threadpoolctl import threadpool_info

        blas = ", ".join(f"{i['internal_api']} {i.get('architecture', '')} ×{i['num_threads']}" for i in threadpool_info())
    except ImportError:
        blas = "unknown BLAS"
    return f"{cpu}; {blas}"


def naive(x: np.ndarray, p: dict[str, np.ndarray], cfg) -> np.ndarray:
    """The equations written out plainly: expanded K/V, the whole score table."""
    m, h = cfg.mla, cfg.n_heads
    B, T, _ = x.shape
    d_n, d_r, d_v, r = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank

    def rms(a: np.ndarray, g: np.ndarray) -> np.ndarray:
        return a / np.sqrt((a * a).mean(-1, keepdims=True) + m.latent_norm_eps) * g

    if m.q_lora_rank:
        q = rms(x @ p["w_q_a"], p["q_a_norm_gamma"]) @ p["w_q_b"]
    else:
        q = x @ p["w_q"]
    q = q.reshape(B, T, h, d_n + d_r).transpose(0, 2, 1, 3)  # (B, h, T, d_h)
    kv_a = x @ p["w_kv_a"]  # (B, T, r + d_r)
    kv = (rms(kv_a[..., :r], p["kv_a_norm_gamma"]) @ p["w_kv_b"]).reshape(B, T, h, d_n + d_v).transpose(0, 2, 1, 3)
    inv = 1.0 / cfg.rope_theta ** (np.arange(0, d_r, 2) / d_r)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(ang).astype(x.dtype), np.sin(ang).astype(x.dtype)

    def rope(a: np.ndarray) -> np.ndarray:  # interleaved pairs (2i, 2i + 1)
        out = np.empty_like(a)
        out[..., 0::2] = a[..., 0::2] * cos - a[..., 1::2] * sin
        out[..., 1::2] = a[..., 1::2] * cos + a[..., 0::2] * sin
        return out

    k_pe = rope(kv_a[:, None, :, r:])  # (B, 1, T, d_r)
    qs = np.concatenate([q[..., :d_n], rope(q[..., d_n:])], axis=-1)
    ks = np.concatenate([kv[..., :d_n], np.broadcast_to(k_pe, (B, h, T, d_r))], axis=-1)
    scores = qs @ ks.swapaxes(-1, -2) * (1.0 / math.sqrt(d_n + d_r))  # (B, h, T, T)
    scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    weights = scores / scores.sum(-1, keepdims=True)
    heads = weights @ kv[..., d_n:]  # (B, h, T, d_v)
    return heads.transpose(0, 2, 1, 3).reshape(B, T, h * d_v) @ p["w_o"]


def torch_contenders(block: DecoderBlock, x: np.ndarray) -> dict[str, Callable[[], np.ndarray]]:
    """transformers' DeepSeek attention module on the same weights: eager and SDPA."""
    try:
        import torch
        from transformers import DeepseekV3Config
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding
    except ImportError:
        return {}
    cfg, p = block.cfg, block.params
    m = cfg.mla
    B, T, d = x.shape
    out = {}
    for impl in ("eager", "sdpa"):
        hf = DeepseekV3Config(hidden_size=d, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads,
                              q_lora_rank=m.q_lora_rank or None, kv_lora_rank=m.kv_lora_rank,
                              qk_nope_head_dim=m.qk_nope_head_dim, qk_rope_head_dim=m.qk_rope_head_dim,
                              v_head_dim=m.v_head_dim, rope_interleave=True, num_hidden_layers=1)
        hf._attn_implementation = impl
        attn = DeepseekV3Attention(hf, layer_idx=0).eval()
        names = {"q_proj": "w_q", "q_a_proj": "w_q_a", "q_b_proj": "w_q_b", "kv_a_proj_with_mqa": "w_kv_a",
                 "kv_b_proj": "w_kv_b", "o_proj": "w_o"}
        with torch.no_grad():
            for module, key in names.items():
                if getattr(attn, module) is not None:
                    getattr(attn, module).weight.copy_(torch.from_numpy(np.ascontiguousarray(p[key].T)))
            attn.kv_a_layernorm.weight.copy_(torch.from_numpy(p["kv_a_norm_gamma"]))
            if m.q_lora_rank:
                attn.q_a_layernorm.weight.copy_(torch.from_numpy(p["q_a_norm_gamma"]))
        rotary = DeepseekV3RotaryEmbedding(hf)
        xt = torch.from_numpy(x)
        positions = rotary(xt, torch.arange(T)[None])
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None].expand(B, 1, T, T)

        def run(attn=attn, positions=positions, mask=mask, xt=xt) -> np.ndarray:  # noqa: ANN001
            with torch.no_grad():
                return attn(xt, positions, mask)[0].numpy()

        out[f"torch {impl}"] = run
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--config", choices=sorted(CONFIGS), default="v2-lite")
    args = parser.parse_args()
    block_cfg = {**CONFIGS[args.config], "d_ff": 8, "norm": "rmsnorm", "activation": "swiglu", "bias": False,
                 "rope": True, "rope_layout": "interleaved"}
    cfg = parse_config({"block": block_cfg, "run": {"dtype": "float32", "seed": 0}})
    block = DecoderBlock.from_config(cfg)
    x = np.random.default_rng(1).standard_normal((args.batch, args.seq, cfg.block.d_model)).astype(np.float32)
    contenders: dict[str, Callable[[], np.ndarray]] = {
        "blockcli": lambda: block.attn(x), "numpy (expanded K/V, full table)": lambda: naive(x, block.params, cfg.block)}
    contenders.update(torch_contenders(block, x))
    truth = np.asarray(contenders["blockcli"](), dtype=np.float64)
    for name, fn in contenders.items():
        gap = np.abs(np.asarray(fn(), dtype=np.float64) - truth).max() / np.abs(truth).max()
        assert gap < 1e-4, f"{name} disagrees with blockcli: {gap:.3g}"
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - start)
    m = cfg.block.mla
    print(f"machine: {machine()}")
    print(f"MLA {args.config}: d {cfg.block.d_model}, h {cfg.block.n_heads}, r_q {m.q_lora_rank}, r_kv {m.kv_lora_rank}, "
          f"d_nope {m.qk_nope_head_dim}, d_rope {m.qk_rope_head_dim}, d_v {m.v_head_dim}; B {args.batch} × T {args.seq}, "
          f"float32, {args.rounds} interleaved rounds")
    base = statistics.median(times["blockcli"])
    for name in names:
        med = statistics.median(times[name])
        print(f"  {name:36s} {med * 1e3:9.1f} ms   {med / base:5.2f}× blockcli's time")


if __name__ == "__main__":
    main()
