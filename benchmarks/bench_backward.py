#!/usr/bin/env python3
"""Forward + backward benchmark of blockcli's NumPy decoder block, against torch autograd on the same block.

    python benchmarks/bench_backward.py [--configs M,L] [--rounds N] [--json OUT]

For the M block (d=768, h=12, d_ff=3072, B=2, T=1024) and the L block (d=1024, h=16, d_ff=4096, B=1, T=4096),
float32, pre-norm LayerNorm / tanh-GELU with biases (the default block), it times, interleaved round by round in
a rotating order (every contender once per round, SETTLE_SECONDS of sleep before each timed call so the threads
the previous one left spinning are asleep):
  (a) blockcli: `DecoderBlock.vjp(x, dy)`, a forward that keeps what the backward reads, then the backward;
  (b) torch: the same weights, the same block (fused qkv nn.Linear, F.scaled_dot_product_attention(is_causal=True),
      LayerNorm, tanh-GELU), `y = block(x); y.backward(dy)` with autograd, on as many threads as NumPy's BLAS.
Each figure is the median over the rounds; the ratio blockcli / torch is the headline. It checks the two agree
(dx and every parameter gradient within 1e-3 of each tensor's largest) before timing.

Memory: blockcli's tracemalloc peak during one vjp (beyond the input) against weights + gradients + what the
forward saved (the tape's peak_bytes), and the largest single allocation seen, against the B·h·T·T score table
(it must never come near it). torch's saved tensors are measured with saved_tensors_hooks for comparison.

Per operation: the wall time of one blockcli vjp split by part (norms, attention forward and backward, MLP
forward and backward, the rest), from wrappers around each part's methods.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe, summary_line  # noqa: E402

from blockcli import block as block_module  # noqa: E402
from blockcli.block import DecoderBlock  # noqa: E402
from blockcli.config import parse_config  # noqa: E402
from blockcli.parallel import worker_count  # noqa: E402

CONFIGS = {
    "M": dict(d=768, h=12, d_ff=3072, B=2, T=1024),
    "L": dict(d=1024, h=16, d_ff=4096, B=1, T=4096),
}
SETTLE_SECONDS = 0.3


def config(name: str):
    c = CONFIGS[name]
    return parse_config({"block": {"d_model": c["d"], "n_heads": c["h"], "d_ff": c["d_ff"]},
                         "run": {"batch": c["B"], "seq_len": c["T"], "dtype": "float32"}})


def torch_block(torch, p: dict[str, np.ndarray], cfg) -> tuple[Callable[[Any], Any], dict[str, Any]]:
    """The same block in torch, its parameters leaf tensors that want gradients, in nn.Linear's layout."""
    TF = torch.nn.functional
    b = cfg.block
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).requires_grad_(True)  # noqa: E731
    tp = {"ln1_gamma": t(p["ln1_gamma"]), "ln1_beta": t(p["ln1_beta"]),
          "w_qkv": t(np.concatenate([p["w_q"], p["w_k"], p["w_v"]], axis=1).T),
          "b_qkv": t(np.concatenate([p["b_q"], p["b_k"], p["b_v"]])), "w_o": t(p["w_o"].T), "b_o": t(p["b_o"]),
          "ln2_gamma": t(p["ln2_gamma"]), "ln2_beta": t(p["ln2_beta"]), "w_up": t(p["w_up"].T), "b_up": t(p["b_up"]),
          "w_down": t(p["w_down"].T), "b_down": t(p["b_down"])}

    def forward(x):
        B, T, d = x.shape
        h, d_h = b.n_heads, b.head_dim
        n1 = TF.layer_norm(x, (d,), tp["ln1_gamma"], tp["ln1_beta"], b.norm_eps)
        q, k, v = TF.linear(n1, tp["w_qkv"], tp["b_qkv"]).split([h * d_h] * 3, dim=-1)
        q, k, v = (a.view(B, T, h, d_h).transpose(1, 2) for a in (q, k, v))
        heads = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
        hres = x + TF.linear(heads.transpose(1, 2).reshape(B, T, h * d_h), tp["w_o"], tp["b_o"])
        n2 = TF.layer_norm(hres, (d,), tp["ln2_gamma"], tp["ln2_beta"], b.norm_eps)
        return hres + TF.linear(TF.gelu(TF.linear(n2, tp["w_up"], tp["b_up"]), approximate="tanh"), tp["w_down"],
                                tp["b_down"])

    return forward, tp


def torch_gradients(torch, tp: dict[str, Any]) -> dict[str, np.ndarray]:
    """torch's parameter gradients back under blockcli's keys and layouts."""
    g = {k: v.grad.numpy() for k, v in tp.items()}
    w_qkv, b_qkv = g.pop("w_qkv").T, g.pop("b_qkv")
    for i, name in enumerate("qkv"):
        width = w_qkv.shape[1] // 3
        g[f"w_{name}"], g[f"b_{name}"] = w_qkv[:, i * width:(i + 1) * width], b_qkv[i * width:(i + 1) * width]
    for name in ("w_o", "w_up", "w_down"):
        g[name] = g[name].T
    return g


class Parts:
    """Wall time of a vjp's parts: each wrapped method adds its time to its part (nested calls not double
    counted: a part's time excludes the parts called inside it)."""

    WRAPPED = {"norms": (block_module.Norm, ("__call__", "backward")),
               "attention forward": (block_module.MultiHeadAttention, ("__call__",)),
               "attention backward": (block_module.MultiHeadAttention, ("backward",)),
               "MLP forward": (block_module.MLP, ("__call__",)),
               "MLP backward": (block_module.MLP, ("backward",))}

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {part: 0.0 for part in self.WRAPPED}
        self._stack: list[list[float]] = []
        self._saved: list[tuple[type, str, Any]] = []

    def __enter__(self) -> "Parts":
        for part, (cls, names) in self.WRAPPED.items():
            for name in names:
                original = getattr(cls, name)
                self._saved.append((cls, name, original))
                setattr(cls, name, self._wrap(part, original))
        return self

    def __exit__(self, *_: Any) -> None:
        for cls, name, original in self._saved:
            setattr(cls, name, original)

    def _wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append([0.0])
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                inner = self._stack.pop()[0]
                self.seconds[part] += spent - inner
                if self._stack:
                    self._stack[-1][0] += spent

        return timed


def measure(name: str, rounds: int, torch) -> dict[str, Any]:
    cfg = config(name)
    c = CONFIGS[name]
    blk = DecoderBlock.from_config(cfg, dtype="float32")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((c["B"], c["T"], c["d"])).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    result: dict[str, Any] = {"config": c}

    dx, grads = blk.vjp(x, dy)  # warm-up, and the answer torch must give
    contenders: dict[str, Callable[[], Any]] = {"blockcli": lambda: blk.vjp(x, dy)}
    if torch is not None:
        forward, tp = torch_block(torch, blk.params, cfg)
        tx, tdy = torch.from_numpy(x).requires_grad_(True), torch.from_numpy(dy)

        def torch_step() -> None:
            for v in (*tp.values(), tx):
                v.grad = None
            forward(tx).backward(tdy)

        torch_step()
        tg = torch_gradients(torch, tp)
        # each tensor against its largest, with a floor: K's bias has no gradient at all (softmax ignores a
        # row's constant), so both sides hold rounding noise there
        floor = 1e-3 * max(float(np.max(np.abs(g))) for g in grads.values())
        worst = max([float(np.max(np.abs(tx.grad.numpy() - dx)) / np.max(np.abs(dx)))]
                    + [float(np.max(np.abs(tg[k] - g)) / max(float(np.max(np.abs(g))), floor)) for k, g in grads.items()])
        result["agreement"] = worst
        assert worst < 1e-3, f"blockcli and torch disagree: {worst:.2g}"
        contenders["torch"] = torch_step
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            forward(tx)
        seen: dict[int, int] = {}
        for t in saved:
            seen[t.untyped_storage().data_ptr()] = max(seen.get(t.untyped_storage().data_ptr(), 0),
                                                       t.untyped_storage().nbytes())
        result["torch_saved_bytes"] = sum(seen.values())

    times: dict[str, list[float]] = {k: [] for k in contenders}
    order = list(contenders)
    for r in range(rounds):
        for k in order[r % len(order):] + order[:r % len(order)]:
            gc.collect()
            time.sleep(SETTLE_SECONDS)
            start = time.perf_counter()
            contenders[k]()
            times[k].append(time.perf_counter() - start)
    result["seconds"] = {k: statistics.median(v) for k, v in times.items()}
    result["fastest"] = {k: min(v) for k, v in times.items()}
    if torch is not None:
        result["ratio"] = result["seconds"]["blockcli"] / result["seconds"]["torch"]
        result["ratio_fastest"] = result["fastest"]["blockcli"] / result["fastest"]["torch"]

    # memory: one vjp under tracemalloc (the weights exist already; the gradients are part of what it allocates)
    tape_peak = {}
    original = block_module.Tape.keep

    def keep(self, key, **arrays):
        original(self, key, **arrays)
        tape_peak["bytes"] = max(tape_peak.get("bytes", 0), self._root().peak_bytes)

    block_module.Tape.keep = keep
    gc.collect()
    tracemalloc.start()
    try:
        blk.vjp(x, dy)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        block_module.Tape.keep = original
    weights = sum(v.nbytes for v in blk.params.values())
    result["memory"] = {"peak_bytes": peak, "weights_bytes": weights, "gradient_bytes": weights,
                        "saved_bytes": tape_peak["bytes"],
                        "bound_bytes": int(1.5 * (weights + weights + tape_peak["bytes"])),
                        "score_table_bytes": c["B"] * c["h"] * c["T"] * c["T"] * 4}
    # the peak counts the gradients (allocated) and what is saved; the weights were allocated before
    result["memory"]["peak_over_bound_basis"] = (peak + weights) / (2 * weights + tape_peak["bytes"])

    with Parts() as parts:
        start = time.perf_counter()
        blk.vjp(x, dy)
        total = time.perf_counter() - start
    result["parts"] = {**parts.seconds, "rest": total - sum(parts.seconds.values()), "total": total}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="M,L")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        import torch
        torch.set_num_threads(worker_count())
    except ImportError:
        torch = None
        print("torch is not importable: blockcli alone", file=sys.stderr)
    machine = describe()
    print(summary_line(machine))
    out = {"machine": machine, "results": {}}
    for name in args.configs.split(","):
        r = measure(name, args.rounds, torch)
        out["results"][name] = r
        m = r["memory"]
        print(f"{name} {r['config']}: blockcli {r['seconds']['blockcli'] * 1e3:.0f} ms"
              + (f", torch {r['seconds']['torch'] * 1e3:.0f} ms, blockcli/torch {r['ratio']:.2f} "
                 f"(fastest runs {r['ratio_fastest']:.2f}); gradients agree to {r['agreement']:.1e}"
                 if "torch" in r["seconds"] else ""))
        print(f"  memory: peak {m['peak_bytes'] / 2**20:.0f} MiB beyond the weights; weights + gradients + saved = "
              f"{(2 * m['weights_bytes'] + m['saved_bytes']) / 2**20:.0f} MiB (saved {m['saved_bytes'] / 2**20:.0f} MiB"
              + (f", torch saves {r['torch_saved_bytes'] / 2**20:.0f} MiB" if "torch_saved_bytes" in r else "")
              + f"); (peak + weights) / that = {m['peak_over_bound_basis']:.2f} (target ≤ 1.5); "
              f"score table would be {m['score_table_bytes'] / 2**20:.0f} MiB")
        parts = r["parts"]
        print("  parts: " + ", ".join(f"{k} {v * 1e3:.0f} ms ({v / parts['total']:.0%})" for k, v in parts.items()
                                      if k != "total"))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
