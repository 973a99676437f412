#!/usr/bin/env python3
"""Step-by-step decoding with the K/V cache: tokens per second at a context of 1k and 4k tokens.

    python benchmarks/bench_decode.py [--steps N] [--contexts 1024,4096] [--dtype float32]

One decoder block (d=1024, 16 heads, d_ff=4096, RoPE, pre-norm) is prefilled with C tokens, then
decodes `--steps` tokens one at a time; the figure is decode steps per second. Contenders, timed
interleaved in one run (each round runs each contender once, in a rotating order):
  (a) blockcli's KVCache, which grows its buffers geometrically (a step writes its own token);
  (b) the same block with a cache that concatenates the whole cache every step (blockcli's cache
      before this change): the baseline that a growing context makes O(T) per step in copying;
  (c) PyTorch, when importable: the same weights, a preallocated (B, h, C + steps, d_h) cache written
      in place, F.scaled_dot_product_attention over the filled part.
It prints the machine (CPU model, BLAS) and the ratios. Nothing is written.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from blockcli.block import DecoderBlock, KVCache
from blockcli.sources import load_config
from machine import describe, summary_line  # benchmarks/machine.py


class ConcatCache(KVCache):
    """The old cache: every append concatenates the whole cache (the baseline)."""

    def append(self, k, v):  # noqa: ANN001, ANN201
        self._k = k if self._k is None else np.concatenate([self._k[:, :, :self.length], k], axis=2)
        self._v = v if self._v is None else np.concatenate([self._v[:, :, :self.length], v], axis=2)
        self.length = self._k.shape[2]
        return self._k, self._v


def blockcli_decoder(block: DecoderBlock, cache_type: type, x: np.ndarray, context: int):
    def run(steps: int) -> float:
        cache = cache_type()
        block.step(x[:, :context], cache)
        start = time.perf_counter()
        for t in range(steps):
            block.step(x[:, context + t:context + t + 1], cache)
        return time.perf_counter() - start
    return run


def torch_decoder(block: DecoderBlock, x: np.ndarray, context: int, steps_max: int):
    import torch
    import torch.nn.functional as F

    p = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in block.params.items()}
    cfg = block.cfg
    h, d_h, r = cfg.n_heads, cfg.head_dim, cfg.rope_dims
    inv = torch.tensor(1.0 / cfg.rope_theta ** (np.arange(0, r, 2) / r), dtype=torch.float64)

    def rope(a: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:  # (B, h, T, d_h), rotate-half
        ang = positions[:, None].double() * inv[None, :]
        cos, sin = ang.cos().to(a.dtype), ang.sin().to(a.dtype)
        first, second = a[..., :r // 2], a[..., r // 2:r]
        return torch.cat((first * cos - second * sin, second * cos + first * sin, a[..., r:]), dim=-1)

    def layer_norm(a, which):
        return F.layer_norm(a, (cfg.d_model,), p[f"{which}_gamma"], p.get(f"{which}_beta"), cfg.norm_eps)

    w_qkv = torch.cat([p["w_q"], p["w_k"], p["w_v"]], dim=1)
    b_qkv = torch.cat([p["b_q"], p["b_k"], p["b_v"]])

    def forward(a: torch.Tensor, k_cache, v_cache, start: int) -> torch.Tensor:
        B, T, d = a.shape
        n = layer_norm(a, "ln1")
        q, k, v = (n @ w_qkv + b_qkv).split(d, dim=-1)
        q, k, v = (t.view(B, T, h, d_h).transpose(1, 2) for t in (q, k, v))
        pos = torch.arange(start, start + T)
        q, k = rope(q, pos), rope(k, pos)
        k_cache[:, :, start:start + T] = k
        v_cache[:, :, start:start + T] = v
        heads = F.scaled_dot_product_attention(q, k_cache[:, :, :start + T], v_cache[:, :, :start + T],
                                               is_causal=T > 1)
        hid = a + heads.transpose(1, 2).reshape(B, T, d) @ p["w_o"] + p["b_o"]
        m = F.gelu(layer_norm(hid, "ln2") @ p["w_up"] + p["b_up"], approximate="tanh") @ p["w_down"] + p["b_down"]
        return hid + m

    xt = torch.from_numpy(x)

    def run(steps: int) -> float:
        with torch.no_grad():
            B = x.shape[0]
            k_cache = torch.empty(B, h, context + steps_max, d_h, dtype=xt.dtype)
            v_cache = torch.empty_like(k_cache)
            forward(xt[:, :context], k_cache, v_cache, 0)
            start = time.perf_counter()
            for t in range(steps):
                forward(xt[:, context + t:context + t + 1], k_cache, v_cache, context + t)
            return time.perf_counter() - start
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--contexts", default="1024,4096")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    args = parser.parse_args()
    config = load_config({"block": {"d_model": 1024, "n_heads": 16, "d_ff": 4096, "rope": True}})
    block = DecoderBlock.from_config(config, dtype=args.dtype)
    print(f"machine: {summary_line(describe())}")
    print(f"block d=1024, h=16, d_ff=4096, RoPE, {args.dtype}; {args.steps} decode steps after the prefill; "
          f"medians of {args.rounds} interleaved rounds")
    for context in (int(c) for c in args.contexts.split(",")):
        x = np.random.default_rng(0).standard_normal((1, context + args.steps, 1024)).astype(args.dtype)
        contenders = {"blockcli (growing cache)": blockcli_decoder(block, KVCache, x, context),
                      "concatenating cache (baseline)": blockcli_decoder(block, ConcatCache, x, context)}
        try:
            contenders["PyTorch (preallocated cache, SDPA)"] = torch_decoder(block, x, context, args.steps)
        except ImportError:
            print("  (PyTorch not importable: skipped)")
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for name, run in contenders.items():
            run(4)  # warm-up
        for i in range(args.rounds):
            order = list(contenders)[i % len(contenders):] + list(contenders)[:i % len(contenders)]
            for name in order:
                time.sleep(0.3)  # let the previous contender's BLAS threads fall asleep
                times[name].append(contenders[name](args.steps))
        base = statistics.median(times["blockcli (growing cache)"])
        print(f"context {context}:")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"  {name:<36} {args.steps / median:8.1f} tokens/s   time {median / base:.2f}× blockcli's")


if __name__ == "__main__":
    main()
