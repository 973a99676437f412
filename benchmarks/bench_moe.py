#!/usr/bin/env python3
"""A mixture of experts at the speed of its active work: time ∝ top_k, not n_experts.

    python benchmarks/bench_moe.py [--tokens 512] [--d 1024] [--rounds 7] [--dtype float32]

`--tokens 1` is one decode step: each token reaches only its k experts, so the time follows k alone.

One SwiGLU mixture (d = d_expert = `--d`, softmax router, renormalised top-k, Mixtral's routing) on
`--tokens` rows, for (n_experts, top_k) in (8, 1), (8, 2), (8, 4), (16, 2), (32, 2). Contenders, timed
interleaved in one run (each round runs each contender once, in a rotating order), medians reported:
  (a) blockcli's MixtureOfExperts: rows sorted by expert once, each expert's three GEMMs on its rows only;
  (b) the straightforward NumPy version: every expert on every row, then weighted by the routing weights
      (zero for the experts a token was not sent to), i.e. time ∝ n_experts;
  (c) PyTorch, when importable: transformers' MixtralSparseMoeBlock on the same weights (its own routing
      and expert loop; run this script with an interpreter that has torch and transformers).
(a) and (b) are checked equal to 1e-4 relative (float32) before timing; (c) too, when it runs. It prints
the machine (CPU model, BLAS) and, per case, ms per call, ms per active expert-row block, and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from blockcli.block import DecoderBlock, MixtureOfExperts
from blockcli.config import parse_config
from blockcli.ops import ACTIVATION_KERNELS
from machine import describe, summary_line  # benchmarks/machine.py

CASES = ((8, 1), (8, 2), (8, 4), (16, 2), (32, 2))


def build(d: int, n_experts: int, top_k: int, dtype: str) -> MixtureOfExperts:
    cfg = parse_config({"block": {"d_model": d, "n_heads": 8, "d_ff": d, "activation": "swiglu", "bias": False,
                                  "norm": "rmsnorm", "moe": {"n_experts": n_experts, "top_k": top_k, "d_expert": d,
                                                             "renormalize": True}},
                        "run": {"dtype": dtype}})
    return DecoderBlock.from_config(cfg).mlp


def dense_then_mask(moe: MixtureOfExperts):
    """Every expert on every row, weighted by the (mostly zero) routing weights."""
    E = moe.cfg.moe.n_experts
    silu = ACTIVATION_KERNELS["silu"][0]

    def run(x: np.ndarray) -> np.ndarray:
        chosen, weights = moe.route(x)  # (B, T, k) each
        dense = np.zeros(x.shape[:2] + (E,), dtype=x.dtype)  # (B, T, E)
        np.put_along_axis(dense, chosen, weights, axis=-1)
        out = np.zeros_like(x)
        for e in range(E):
            p = {k: moe.p[f"experts.{e}.{k}"] for k in ("w_gate", "w_up", "w_down")}
            out += dense[..., e:e + 1] * ((silu(x @ p["w_gate"]) * (x @ p["w_up"])) @ p["w_down"])
        return out

    return run


def torch_moe(moe: MixtureOfExperts, dtype: str):
    try:
        import torch
        from transformers import MixtralConfig
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    except ImportError:
        return None, "PyTorch/transformers not importable here"
    spec = moe.cfg.moe
    d = moe.cfg.d_model
    config = MixtralConfig(hidden_size=d, intermediate_size=spec.d_expert, num_local_experts=spec.n_experts,
                           num_experts_per_tok=spec.top_k)
    block = MixtralSparseMoeBlock(config).eval().to(getattr(torch, dtype))
    with torch.no_grad():
        block.gate.weight.copy_(torch.from_numpy(moe.p["router"].T.copy()))
        for e in range(spec.n_experts):
            gate_up = np.concatenate([moe.p[f"experts.{e}.w_gate"].T, moe.p[f"experts.{e}.w_up"].T])  # (2·d_e, d)
            block.experts.gate_up_proj[e].copy_(torch.from_numpy(gate_up))
            block.experts.down_proj[e].copy_(torch.from_numpy(moe.p[f"experts.{e}.w_down"].T.copy()))

    def run(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return block(torch.from_numpy(x)).numpy()

    return run, f"torch {torch.__version__} ({torch.get_num_threads()} threads), experts " \
                f"{getattr(config, '_experts_implementation', None) or 'eager'}"


# Before each timed call: longer than OpenBLAS's and PyTorch's idle threads spin after their last job, so
# the contender before does not steal the cores from the next (a decode step takes only milliseconds)
SETTLE_SECONDS = 0.2


def median_ms(fns: dict, x: np.ndarray, rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # a rotating order
            time.sleep(SETTLE_SECONDS)
            start = time.perf_counter()
            fns[name](x)
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--d", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    args = parser.parse_args()
    print(f"machine: {summary_line(describe())}")
    print(f"{args.tokens} tokens, d = d_expert = {args.d}, SwiGLU experts, {args.dtype}, median of {args.rounds}")
    x = np.random.default_rng(0).standard_normal((1, args.tokens, args.d)).astype(args.dtype)
    header = f"{'E':>3} {'k':>2} {'blockcli ms':>11} {'per k':>7} {'dense+mask ms':>13} {'torch ms':>9} " \
             f"{'dense/blockcli':>14} {'torch/blockcli':>14}"
    print(header)
    note = ""
    for n_experts, top_k in CASES:
        moe = build(args.d, n_experts, top_k, args.dtype)
        fns = {"blockcli": moe, "dense": dense_then_mask(moe)}
        torch_run, note = torch_moe(moe, args.dtype)
        if torch_run is not None:
            fns["torch"] = torch_run
        want = moe(x)
        scale = float(np.max(np.abs(want)))
        for name, fn in fns.items():
            assert np.max(np.abs(fn(x) - want)) <= 1e-4 * scale, f"{name} disagrees with blockcli"
        ms = median_ms(fns, x, args.rounds)
        torch_ms = ms.get("torch", float("nan"))
        print(f"{n_experts:>3} {top_k:>2} {ms['blockcli']:>11.2f} {ms['blockcli'] / top_k:>7.2f} "
              f"{ms['dense']:>13.2f} {torch_ms:>9.2f} {ms['dense'] / ms['blockcli']:>14.2f} "
              f"{torch_ms / ms['blockcli']:>14.2f}")
    print(f"PyTorch: {note}")


if __name__ == "__main__":
    main()
