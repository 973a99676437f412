#!/usr/bin/env python3
"""Forward-pass and start-up benchmark of blockcli's NumPy decoder block.

    python benchmarks/bench_forward.py [--json OUT] [--quick]

In one process and one run it times `DecoderBlock(x)` against
  (a) a straightforward NumPy reference block written below (separate q/k/v matmuls, the whole
      (B, h, T, T) table, temporaries everywhere): the "naive" baseline;
  (b) PyTorch's CPU block (fused qkv linear + F.scaled_dot_product_attention(is_causal=True)) with
      the same weights, when torch is importable (skipped with a note otherwise);
  (c) the machine's GEMM throughput: one large square matmul of the same dtype, giving GFLOP/s and
      the "GEMM-bound time" of the block's matmul FLOPs (trace's closed form:
      2·B·T·(d·(h+2·h_kv)·d_h + h·d_h·d + k·d·d_ff) + 4·B·h·T²·d_h, k = 2 ungated / 3 gated),
at configs S, M, L in float32 and float64. Timings are interleaved: every round runs each
contender once, in a rotating order, so machine noise (a shared 2-core VM) hits all of them alike;
the figures are medians over the rounds, after one warm-up call each (the correctness check).
Before each timed call the process sleeps SETTLE_SECONDS, so the idle threads the previous
contender left behind (OpenBLAS's and PyTorch's OpenMP workers spin for a while after their last
job) are asleep and do not steal the cores from the next one.

It also reports the tracemalloc peak of one blockcli forward pass against a footprint of
weights + activations + one chunk of scores, a per-operation time breakdown of the very pass timed
above (each operation as it runs: the fused Q|K|V GEMM is one row with its own FLOPs, the MLP's
fused row tiles another), the machine (CPU model, ISA flags, the BLAS threadpoolctl finds), and a
start-up section (median of subprocess runs, ratios against a minimal Typer app; `count`'s own
floor, without NumPy, is measured by benchmarks/bench_count.py).

This machine is often shared: each case prints the share of CPU that other processes took during
its timed runs, and the same ratios computed from each contender's fastest run, which noise
disturbs least. Medians are the headline figures; read them together with that share.

Nothing here writes outside --json OUT and a temporary directory.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np

import blockcli
from blockcli import ops as F
from blockcli.block import (MLP, DecoderBlock, MultiHeadAttention, Norm, attention_tile, block_parameter_shapes,
                            parameter_bytes)
from blockcli.parallel import worker_count
from blockcli.config import parse_config
from blockcli.trace import analytic_trace
from machine import describe, summary_line  # benchmarks/machine.py

CONFIGS = {
    "S": dict(d=512, h=8, d_ff=2048, B=4, T=256),
    "M": dict(d=768, h=12, d_ff=3072, B=2, T=1024),
    "L": dict(d=1024, h=16, d_ff=4096, B=1, T=4096),
}
DTYPES = ("float32", "float64")
ROOT = Path(__file__).resolve().parent.parent
# Timed rounds per (config, dtype) after the warm-up; L in float64 takes seconds per pass.
REPEATS = {("S", "float32"): 15, ("S", "float64"): 11, ("M", "float32"): 9, ("M", "float64"): 7,
           ("L", "float32"): 7, ("L", "float64"): 3}
QUICK_REPEATS = 5
BREAKDOWN_RUNS = {"S": 5, "M": 3, "L": 1}
SETTLE_SECONDS = 0.3  # before each timed call: longer than OpenBLAS's spin (2^28 cycles, ~0.1 s)
GEMM_N = 2048  # the square matmul that stands for "the machine's GEMM throughput"
STARTUP_RUNS, QUICK_STARTUP_RUNS = 7, 3
TOLERANCE = {"float32": 2e-3, "float64": 1e-8}  # max |blockcli − naive| allowed
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "OPENBLAS_CORETYPE", "OMP_WAIT_POLICY",
              "GOMP_SPINCOUNT")

try:  # optional contender (b)
    import torch
    import torch.nn.functional as TF
except ImportError:  # pragma: no cover - depends on the environment
    torch = None
    TF = None


# ----------------------------------------------------------------------------- helpers


def say(text: str = "") -> None:
    print(text, flush=True)


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_b(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def cpu_busy_fraction(interval: float = 0.5) -> float | None:
    """Fraction of all CPUs busy over `interval` seconds while this script sleeps (background load)."""
    def read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return idle, sum(fields)
    try:
        i0, t0 = read()
        time.sleep(interval)
        i1, t1 = read()
    except OSError:
        return None
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def loadavg() -> list[float] | None:
    try:
        return [float(v) for v in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
        "machine": platform.machine(), "numpy": np.__version__, "blockcli": blockcli.__version__,
        "blockcli_path": str(Path(blockcli.__file__).parent),
        "os_cpu_count": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "env": {k: os.environ.get(k) for k in THREAD_ENV},
        # start-up: without cached bytecode every CLI run compiles blockcli's sources first
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE"),
        "blockcli_bytecode_cached": (Path(blockcli.__file__).parent / "__pycache__").is_dir(),
        "threadpools": None, "torch": None, "loadavg_start": loadavg(), "background_cpu_busy": cpu_busy_fraction(),
    }
    env["machine"] = describe()
    import threadpoolctl  # a blockcli dependency

    env["threadpools"] = [{k: p.get(k) for k in ("user_api", "internal_api", "num_threads", "version",
                                                 "architecture", "threading_layer", "prefix")}
                          for p in threadpoolctl.threadpool_info()]
    env["blockcli_workers"] = worker_count()
    if torch is not None:
        env["torch"] = {"version": torch.__version__, "num_threads": torch.get_num_threads(),
                        "num_interop_threads": torch.get_num_interop_threads(),
                        "mkl": torch.backends.mkl.is_available(), "mkldnn": torch.backends.mkldnn.is_available()}
    try:
        root = Path(__file__).resolve().parent.parent
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "blockcli"],
                               capture_output=True, text=True, timeout=10).stdout.splitlines()
        env["git"] = {"head": head, "dirty_package_files": [line[3:] for line in dirty]}
    except (OSError, subprocess.SubprocessError):
        env["git"] = None
    return env


def print_environment(env: dict[str, Any]) -> None:
    say("== environment")
    say(f"machine: {summary_line(env['machine'])}")
    say(f"python {env['python']} ({env['executable']}), numpy {env['numpy']}, blockcli {env['blockcli']} "
        f"from {env['blockcli_path']}")
    if env.get("git"):
        dirty = env["git"]["dirty_package_files"]
        say(f"git HEAD {env['git']['head']}; uncommitted package files: {', '.join(dirty) if dirty else 'none'}")
    say(f"os.cpu_count() = {env['os_cpu_count']}, CPUs in affinity mask = {env['affinity_cpus']}")
    say("thread env: " + ", ".join(f"{k}={v if v is not None else 'unset'}" for k, v in env["env"].items()))
    say(f"OPENBLAS_CORETYPE = {env['env']['OPENBLAS_CORETYPE'] or 'unset'}")
    for p in env["threadpools"]:
        say(f"threadpool: {p['internal_api']} {p.get('version') or ''} ({p['prefix']}) "
            f"num_threads={p['num_threads']}"
            + (f" arch={p['architecture']}" if p.get("architecture") else "")
            + (f" layer={p['threading_layer']}" if p.get("threading_layer") else ""))
    say(f"blockcli shares its tiles among {env['blockcli_workers']} worker thread(s), BLAS held to 1 meanwhile")
    if env["torch"]:
        t = env["torch"]
        say(f"torch {t['version']}: num_threads={t['num_threads']}, interop={t['num_interop_threads']}, "
            f"mkl={t['mkl']}, mkldnn={t['mkldnn']}")
    else:
        say("torch: not importable — contender (b) skipped (install torch in a separate venv to include it)")
    busy = env["background_cpu_busy"]
    say(f"load average at start {env['loadavg_start']}; background CPU busy before start "
        f"{'?' if busy is None else f'{busy:.0%}'} (other processes distort every timing below)")


# ----------------------------------------------------------------------------- contenders


def make_config(spec: dict[str, int], dtype: str):
    return parse_config({"block": {"d_model": spec["d"], "n_heads": spec["h"], "d_ff": spec["d_ff"]},
                         "run": {"batch": spec["B"], "seq_len": spec["T"], "dtype": dtype}})


def naive_block(x: np.ndarray, p: dict[str, np.ndarray], cfg) -> np.ndarray:
    """The textbook pre-norm block, written the obvious way: every step a new array."""
    b = cfg.block
    B, T, d = x.shape
    h, h_kv, d_h, eps = b.n_heads, b.n_kv_heads, b.head_dim, b.norm_eps

    def layer_norm(z, gamma, beta):
        mu = z.mean(axis=-1, keepdims=True)
        var = ((z - mu) ** 2).mean(axis=-1, keepdims=True)
        return (z - mu) / np.sqrt(var + eps) * gamma + beta

    a = layer_norm(x, p["ln1_gamma"], p["ln1_beta"])
    q = a @ p["w_q"] + p["b_q"]
    k = a @ p["w_k"] + p["b_k"]
    v = a @ p["w_v"] + p["b_v"]
    q = q.reshape(B, T, h, d_h).transpose(0, 2, 1, 3)
    k = k.reshape(B, T, h_kv, d_h).transpose(0, 2, 1, 3)
    v = v.reshape(B, T, h_kv, d_h).transpose(0, 2, 1, 3)
    if h_kv != h:
        k, v = np.repeat(k, h // h_kv, axis=1), np.repeat(v, h // h_kv, axis=1)
    scores = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(d_h)  # (B, h, T, T)
    mask = np.tril(np.ones((T, T), dtype=bool))
    scores = np.where(mask, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    heads = weights @ v  # (B, h, T, d_h)
    concat = heads.transpose(0, 2, 1, 3).reshape(B, T, h * d_h)
    hres = x + (concat @ p["w_o"] + p["b_o"])
    m = layer_norm(hres, p["ln2_gamma"], p["ln2_beta"])
    f = m @ p["w_up"] + p["b_up"]
    f = 0.5 * f * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (f + 0.044715 * f ** 3)))
    return hres + (f @ p["w_down"] + p["b_down"])


def check_naive_supports(cfg) -> None:
    b = cfg.block
    assert (b.norm, b.activation, b.placement, b.rope) == ("layernorm", "gelu_tanh", "pre", 0.0), \
        "the naive block covers the default pre-norm LayerNorm/GELU-tanh block only"
    assert b.bias.qkv and b.bias.out and b.bias.mlp and b.bias.norm


def torch_params(p: dict[str, np.ndarray]) -> dict[str, Any]:
    """The same weights in nn.Linear layout ((out, in), contiguous) with q|k|v fused, as GPT-2 does."""
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    return {
        "ln1_gamma": t(p["ln1_gamma"]), "ln1_beta": t(p["ln1_beta"]),
        "w_qkv": t(np.concatenate([p["w_q"], p["w_k"], p["w_v"]], axis=1).T),
        "b_qkv": t(np.concatenate([p["b_q"], p["b_k"], p["b_v"]])),
        "w_o": t(p["w_o"].T), "b_o": t(p["b_o"]),
        "ln2_gamma": t(p["ln2_gamma"]), "ln2_beta": t(p["ln2_beta"]),
        "w_up": t(p["w_up"].T), "b_up": t(p["b_up"]), "w_down": t(p["w_down"].T), "b_down": t(p["b_down"]),
    }


def torch_block(x, tp: dict[str, Any], cfg):
    b = cfg.block
    B, T, d = x.shape
    h, h_kv, d_h = b.n_heads, b.n_kv_heads, b.head_dim
    n1 = TF.layer_norm(x, (d,), tp["ln1_gamma"], tp["ln1_beta"], b.norm_eps)
    q, k, v = TF.linear(n1, tp["w_qkv"], tp["b_qkv"]).split([h * d_h, h_kv * d_h, h_kv * d_h], dim=-1)
    q = q.view(B, T, h, d_h).transpose(1, 2)
    k = k.view(B, T, h_kv, d_h).transpose(1, 2)
    v = v.view(B, T, h_kv, d_h).transpose(1, 2)
    extra = {"enable_gqa": True} if h_kv != h else {}
    heads = TF.scaled_dot_product_attention(q, k, v, is_causal=True, **extra)
    hres = x + TF.linear(heads.transpose(1, 2).reshape(B, T, h * d_h), tp["w_o"], tp["b_o"])
    n2 = TF.layer_norm(hres, (d,), tp["ln2_gamma"], tp["ln2_beta"], b.norm_eps)
    f = TF.gelu(TF.linear(n2, tp["w_up"], tp["b_up"]), approximate="tanh")
    return hres + TF.linear(f, tp["w_down"], tp["b_down"])


def matmul_flops(cfg) -> int:
    """trace's closed form: 2·B·T·(d·(h+2h_kv)·d_h + h·d_h·d + k·d·d_ff) + 4·B·h·T²·d_h."""
    b, r = cfg.block, cfg.run
    B, T, d, h, h_kv, d_h, d_ff = r.batch, r.seq_len, b.d_model, b.n_heads, b.n_kv_heads, b.head_dim, b.d_ff
    k = 3 if b.gated else 2
    return 2 * B * T * (d * (h + 2 * h_kv) * d_h + h * d_h * d + k * d * d_ff) + 4 * B * h * T * T * d_h


def footprint(cfg, params_bytes: int) -> dict[str, int]:
    """Weights + activations + one chunk of scores: the memory a lean forward pass needs.

    activations: the largest set of (B, T, ·) tensors a lean pre-norm pass must hold at once —
    attention phase: x, LN1 out, q, k, v, attention heads; MLP phase: x, h, LN2 out, MLP hidden
    (×2 gated), MLP out. One chunk: the scores blockcli's untraced pass holds at once, one
    attention tile per worker thread (it never builds the whole (B, h, T, T) table).
    """
    b, r = cfg.block, cfg.run
    B, T, d, h, h_kv, d_h, d_ff = r.batch, r.seq_len, b.d_model, b.n_heads, b.n_kv_heads, b.head_dim, b.d_ff
    item = np.dtype(r.dtype).itemsize
    attn_phase = B * T * (2 * d + (h + 2 * h_kv) * d_h + h * d_h)
    mlp_phase = B * T * (4 * d + (2 if b.gated else 1) * d_ff)
    table = B * h * T * T * item
    rows, kv_heads = attention_tile(h, h_kv, T, T, item)
    chunk = worker_count() * kv_heads * (h // h_kv) * rows * T * item
    activations = max(attn_phase, mlp_phase) * item
    return {"weights": params_bytes, "activations": activations, "scores_chunk": chunk,
            "full_table": table, "total": params_bytes + activations + chunk}


def traced_peak(fn: Callable[[], Any]) -> int:
    """Peak bytes newly allocated (tracemalloc) during fn()."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    del out
    return int(peak)


def cpu_jiffies() -> tuple[int, int] | None:
    """(busy incl. steal, total) jiffies of the whole machine, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def timed(fn: Callable[[], Any], others: list[float] | None = None) -> float:
    """Wall time of fn(). With `others`, also append the share of the machine's CPU time that went to
    other processes (or hypervisor steal) during the call: 0 on a quiet machine."""
    gc.collect()
    j0, c0 = cpu_jiffies(), os.times()
    t0 = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - t0
    j1, c1 = cpu_jiffies(), os.times()
    del out
    if others is not None and j0 and j1 and j1[1] > j0[1]:
        ours = (sum(c1[:4]) - sum(c0[:4])) * os.sysconf("SC_CLK_TCK")  # this process and its waited children
        others.append(max(0.0, (j1[0] - j0[0] - ours) / (j1[1] - j0[1])))
    return elapsed


def attention_flops_as_run(attn: MultiHeadAttention, q: np.ndarray, k: np.ndarray, start: int) -> int:
    """Q·Kᵀ and weights·V FLOPs of the blocked kernel's tiles as it cuts them: each tile of query rows
    [lo, hi) multiplies against every key it may see, [first, start + hi), so the diagonal squares'
    future keys are computed (then masked) and everything beyond them is skipped."""
    B, h, T, d_h = q.shape
    rows, _ = attention_tile(h, k.shape[1], T, k.shape[2], q.itemsize, attn.tile_bytes)
    window = attn.cfg.sliding_window
    starts = range(0, T, rows)
    query_rows = [min(T, lo + rows) - lo for lo in starts]
    keys = [start + min(T, lo + rows) - (max(0, start + lo - window + 1) if window else 0) for lo in starts]
    return 2 * 2 * B * h * d_h * sum(c * n for c, n in zip(query_rows, keys))


def breakdown(block: DecoderBlock, x: np.ndarray, runs: int) -> list[dict[str, Any]]:
    """Per-operation wall time of the untraced pass the contenders' timings are of, and the FLOPs of
    each operation counted from its arguments as it runs.

    The functions that pass calls are wrapped at their outermost call on this thread: the linear
    layers (the fused Q|K|V GEMM is one call, labelled as such), the norms, the blocked attention
    kernel, the MLP's fused row tiles. Whatever the block does between them (residual adds, head
    views, the K/V cache) is the "rest" row: block time minus the wrapped calls.
    """
    attn = block.attn
    labels_by_weight = {id(attn.w_qkv): "QKV projection (one fused GEMM)", id(block.params["w_o"]): "output projection"}
    norms = {id(block.ln1): "LN1", **({id(block.ln2): "LN2"} if block.ln2 is not None else {})}
    calls: list[tuple[str, float, int]] = []
    depth = threading.local()

    def wrap(owner: Any, name: str, label: Callable[..., str], flops: Callable[..., int]) -> Callable[[], None]:
        original = getattr(owner, name)

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            if getattr(depth, "n", 0) or threading.current_thread() is not threading.main_thread():
                return original(*args, **kwargs)
            depth.n = 1
            try:
                t0 = time.perf_counter()
                out = original(*args, **kwargs)
                calls.append((label(*args), time.perf_counter() - t0, flops(*args)))
                return out
            finally:
                depth.n = 0

        setattr(owner, name, timed_call)
        return lambda: setattr(owner, name, original)

    restore = [
        wrap(F, "linear", lambda x_, w, b=None: labels_by_weight.get(id(w), f"linear {w.shape}"),
             lambda x_, w, b=None: 2 * (x_.size // x_.shape[-1]) * w.shape[0] * w.shape[1]),
        wrap(Norm, "__call__", lambda self, a: norms.get(id(self), "norm"), lambda self, a: 0),
        wrap(MultiHeadAttention, "_attend_blocked", lambda self, *a: "blocked attention (Q·Kᵀ, mask, softmax, ·V)",
             lambda self, q, k, v, start: attention_flops_as_run(self, q, k, start)),
        wrap(MLP, "__call__", lambda self, a, *r: "MLP (expand, bias+activation, contract: fused row tiles)",
             lambda self, a, *r: 2 * (a.size // a.shape[-1]) * self.p["w_up"].size * (3 if self.cfg.gated else 2)),
    ]
    per_label: dict[str, list[tuple[float, int, int]]] = {}
    try:
        for _ in range(runs):
            gc.collect()
            calls.clear()
            t0 = time.perf_counter()
            block(x)
            total = time.perf_counter() - t0
            grouped: dict[str, list[float]] = {}
            for label, seconds, fl in calls:
                entry = grouped.setdefault(label, [0.0, 0, 0])
                entry[0] += seconds
                entry[1] += 1
                entry[2] += fl
            grouped["rest (residual adds, head views, copies between the calls)"] = [
                total - sum(seconds for _, seconds, _ in calls), 0, 0]
            for label, (seconds, n, fl) in grouped.items():
                per_label.setdefault(label, []).append((seconds, n, fl))
    finally:
        for undo in restore:
            undo()
    rows = []
    for label, samples in per_label.items():
        t = median([s for s, _, _ in samples])
        _, n, fl = samples[0]
        rows.append({"op": label, "calls": n, "seconds": t, "matmul_flops": fl,
                     "gflops": fl / t / 1e9 if fl and t > 0 else None})
    return rows


# ----------------------------------------------------------------------------- one config × dtype


def bench_case(name: str, dtype: str, repeats: int, gemm: dict[str, np.ndarray]) -> dict[str, Any]:
    spec = CONFIGS[name]
    cfg = make_config(spec, dtype)
    check_naive_supports(cfg)
    block = DecoderBlock.from_config(cfg, dtype=dtype)  # seeded weights, attention="auto"
    p = block.params
    x = np.random.default_rng(1).standard_normal((spec["B"], spec["T"], spec["d"])).astype(dtype)
    flops = matmul_flops(cfg)
    trace_rows = analytic_trace(cfg).rows
    trace_flops = sum(r.matmul_flops for r in trace_rows)
    # the timed pass is untraced, so it always takes the tiled kernel; a traced pass ("auto") may not
    traced_mode = "tiled" if any(r.kind == "attention" for r in trace_rows) else "full table"
    res: dict[str, Any] = {"config": name, "dtype": dtype, "shape": spec, "repeats": repeats,
                           "attention_mode": "tiled", "traced_attention_mode": traced_mode, "matmul_flops": flops,
                           "trace_matmul_flops": trace_flops, "flops_agree": flops == trace_flops}

    # correctness first (doubles as the warm-up of every contender)
    y_b = block(x)
    y_n = naive_block(x, p, cfg)
    diff = float(np.max(np.abs(y_b.astype(np.float64) - y_n)))
    res["max_abs_diff_naive"] = diff
    res["agree"] = bool(np.isfinite(diff) and diff <= TOLERANCE[dtype])
    del y_n
    tp = xt = None
    if torch is not None:
        tp, xt = torch_params(p), torch.from_numpy(x)
        with torch.inference_mode():
            try:
                y_t = torch_block(xt, tp, cfg).numpy()
                res["max_abs_diff_torch"] = float(np.max(np.abs(y_b.astype(np.float64) - y_t)))
                del y_t
            except RuntimeError as exc:  # e.g. a dtype SDPA does not support on CPU
                res["torch_error"] = str(exc).splitlines()[0]
                tp = None
    del y_b
    a_mat, b_mat = gemm[dtype]
    a_mat @ b_mat  # warm-up

    def run_torch() -> Any:
        with torch.inference_mode():
            return torch_block(xt, tp, cfg)

    contenders: dict[str, Callable[[], Any]] = {
        "gemm": lambda: a_mat @ b_mat,
        "blockcli": lambda: block(x),
        "naive": lambda: naive_block(x, p, cfg),
    }
    if tp is not None:
        contenders["torch"] = run_torch
    times: dict[str, list[float]] = {k: [] for k in contenders}
    others: list[float] = []
    names = list(contenders)
    for i in range(repeats):
        for key in names[i % len(names):] + names[:i % len(names)]:  # rotate the order every round
            time.sleep(SETTLE_SECONDS)
            times[key].append(timed(contenders[key], others))
    res["background_cpu_share"] = {"median": median(others), "max": max(others)} if others else None
    med = {k: median(v) for k, v in times.items()}
    res["times"] = {k: {"median": med[k], "min": min(v), "max": max(v), "all": v} for k, v in times.items()}
    gemm_gflops = 2 * GEMM_N**3 / med["gemm"] / 1e9
    # the same ratios from each contender's fastest run: less sensitive to other processes
    best = {k: min(v) for k, v in times.items()}
    gemm_best = 2 * GEMM_N**3 / best["gemm"] / 1e9
    res["best_of"] = {"gemm_gflops": gemm_best, "blockcli_gflops": flops / best["blockcli"] / 1e9,
                      "fraction_of_gemm": flops / best["blockcli"] / 1e9 / gemm_best,
                      "speedup_vs_naive": best["naive"] / best["blockcli"],
                      "ratio_vs_torch": best["blockcli"] / best["torch"] if "torch" in best else None}
    t_b = med["blockcli"]
    res["gemm_gflops"] = gemm_gflops
    res["gemm_bound_seconds"] = flops / (gemm_gflops * 1e9)
    res["blockcli_gflops"] = flops / t_b / 1e9
    res["fraction_of_gemm"] = res["blockcli_gflops"] / gemm_gflops
    res["speedup_vs_naive"] = med["naive"] / t_b
    res["ratio_vs_torch"] = t_b / med["torch"] if "torch" in med else None
    res["torch_gflops"] = flops / med["torch"] / 1e9 if "torch" in med else None

    # memory: one blockcli pass (and the naive one for contrast) under tracemalloc
    w_bytes = parameter_bytes(block_parameter_shapes(cfg.block), dtype)
    fp = footprint(cfg, w_bytes)
    peak_call = traced_peak(lambda: block(x))
    res["memory"] = {
        "blockcli_peak_call": peak_call,  # newly allocated during the call
        "resident_before": w_bytes + x.nbytes,  # weights and the input, allocated before the call
        "blockcli_peak_total": peak_call + w_bytes + x.nbytes,
        "naive_peak_call": traced_peak(lambda: naive_block(x, p, cfg)),
        "footprint": fp,
    }
    res["memory"]["ratio_to_footprint"] = res["memory"]["blockcli_peak_total"] / fp["total"]

    res["breakdown"] = breakdown(block, x, min(BREAKDOWN_RUNS[name], repeats))
    return res


def print_case(r: dict[str, Any]) -> None:
    s, t = r["shape"], r["times"]
    say(f"\n== {r['config']} {r['dtype']}: d={s['d']} h={s['h']} d_ff={s['d_ff']} B={s['B']} T={s['T']} "
        f"(blockcli attention: tiled, {r['traced_attention_mode']} when traced; "
        f"{r['repeats']} timed rounds after a warm-up)")
    agree = "OK" if r["agree"] else "MISMATCH"
    torch_diff = r.get("max_abs_diff_torch")
    say(f"check: max|blockcli − naive| = {r['max_abs_diff_naive']:.2e} ({agree}, tol {TOLERANCE[r['dtype']]:g})"
        + (f"; max|blockcli − torch| = {torch_diff:.2e}" if torch_diff is not None else "")
        + (f"; torch failed: {r['torch_error']}" if r.get("torch_error") else ""))
    say(f"matmul FLOPs {r['matmul_flops'] / 1e9:.2f} G (closed form; trace says "
        f"{r['trace_matmul_flops'] / 1e9:.2f} G{'' if r['flops_agree'] else ' — DIFFERENT'})")
    for key, label in (("blockcli", "blockcli"), ("naive", "naive NumPy"), ("torch", "torch SDPA"),
                       ("gemm", f"GEMM {GEMM_N}³")):
        if key in t:
            v = t[key]
            say(f"  {label:<12} median {fmt_s(v['median']):>9}   (min {fmt_s(v['min'])}, max {fmt_s(v['max'])})")
    say(f"  GEMM throughput {r['gemm_gflops']:.1f} GFLOP/s → GEMM-bound time {fmt_s(r['gemm_bound_seconds'])}")
    say(f"  blockcli: {r['blockcli_gflops']:.1f} GFLOP/s = {r['fraction_of_gemm']:.0%} of GEMM; "
        f"{r['speedup_vs_naive']:.2f}× faster than naive"
        + (f"; {r['ratio_vs_torch']:.2f}× torch's time (torch {r['torch_gflops']:.1f} GFLOP/s)"
           if r["ratio_vs_torch"] is not None else "; torch: skipped"))
    b = r["best_of"]
    say(f"  same from fastest runs: GEMM {b['gemm_gflops']:.1f} GFLOP/s; blockcli {b['blockcli_gflops']:.1f} GFLOP/s "
        f"= {b['fraction_of_gemm']:.0%} of GEMM; {b['speedup_vs_naive']:.2f}× faster than naive"
        + (f"; {b['ratio_vs_torch']:.2f}× torch's time" if b["ratio_vs_torch"] is not None else ""))
    bg = r.get("background_cpu_share")
    if bg:
        say(f"  CPU taken by other processes during the timed runs: median {bg['median']:.0%}, max {bg['max']:.0%}"
            + ("  ← timings disturbed" if bg["median"] > 0.1 else ""))
    m, fp = r["memory"], r["memory"]["footprint"]
    say(f"  memory: blockcli peak {fmt_b(m['blockcli_peak_total'])} = weights+input {fmt_b(m['resident_before'])} "
        f"+ {fmt_b(m['blockcli_peak_call'])} allocated in the call (naive allocates {fmt_b(m['naive_peak_call'])})")
    say(f"          footprint weights {fmt_b(fp['weights'])} + activations {fmt_b(fp['activations'])} "
        f"+ one score tile per worker {fmt_b(fp['scores_chunk'])} = {fmt_b(fp['total'])} "
        f"(full table {fmt_b(fp['full_table'])}) → peak is {m['ratio_to_footprint']:.2f}× footprint")
    total = sum(row["seconds"] for row in r["breakdown"])
    say(f"  blockcli per-op time of the untraced pass ({fmt_s(total)} in all; FLOPs as each call ran them):")
    for row in r["breakdown"]:
        say(f"    {row['op']:<62} {fmt_s(row['seconds']):>9} {row['seconds'] / total:5.1%}"
            + (f"  ×{row['calls']}" if row["calls"] > 1 else "")
            + (f"  {row['matmul_flops'] / 1e9:.2f} GFLOP, {row['gflops']:.0f} GF/s" if row["gflops"] else ""))
    if "wall_seconds" in r:
        say(f"  (this case took {r['wall_seconds']:.0f} s; load average after it {r.get('loadavg_after')})")


# ----------------------------------------------------------------------------- start-up

MINIMAL_APP = '''\
import json

import numpy
import rich
import typer
import yaml

app = typer.Typer(add_completion=False)


@app.command()
def main(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """One command, one option."""
    print(json.dumps({"ok": True, "json": json_out, "numpy": numpy.__version__, "yaml": yaml.__version__}))


if __name__ == "__main__":
    app()
'''


VERIFY_COMPUTE = """\
import time
from blockcli.sources import load_config
from blockcli.verify import verify
cfg = load_config(None)
t0 = time.perf_counter()
verify(cfg)
print(time.perf_counter() - t0)
"""


def blockcli_command() -> list[str]:
    script = Path(sys.executable).parent / "blockcli"
    if script.exists():
        return [str(script)]
    found = shutil.which("blockcli")
    return [found] if found else [sys.executable, "-m", "blockcli"]


def startup(runs: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench_forward_"))
    try:
        app = tmp / "minimal_app.py"
        app.write_text(MINIMAL_APP)
        cli = blockcli_command()
        commands = {
            "import_numpy": [sys.executable, "-c", "import numpy"],
            "minimal_typer_app": [sys.executable, str(app), "--json"],
            "count_llama-2-70b_json": cli + ["count", "llama-2-70b", "--json"],
            "count_gpt3_train_json": cli + ["count", str(ROOT / "configs" / "gpt3-175b.yaml"), "--train", "--json"],
            "trace_shapes_only_1e9": cli + ["trace", "--shapes-only", "--seq", "1000000000", "--json"],
            "version": cli + ["--version"],
            "verify_default": cli + ["verify"],
        }
        times: dict[str, list[float]] = {k: [] for k in commands}
        codes: dict[str, int] = {}
        others: list[float] = []
        names = list(commands)
        for i in range(runs + 1):  # round 0 is a warm-up (file cache, .pyc)
            for key in names[i % len(names):] + names[:i % len(names)]:
                def one(cmd=commands[key]) -> int:
                    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp).returncode
                box: list[int] = []
                elapsed = timed(lambda: box.append(one()), others if i else None)
                codes[key] = box[0]
                if i:
                    times[key].append(elapsed)
        med = {k: median(v) for k, v in times.items()}
        base = med["minimal_typer_app"]
        result: dict[str, Any] = {"command": {k: " ".join(Path(c).name if j == 0 else c for j, c in enumerate(v))
                                              for k, v in commands.items()},
                                  "runs": runs, "exit_codes": codes,
                                  "background_cpu_share": {"median": median(others), "max": max(others)} if others else None,
                                  "median": med, "all": times, "ratio_to_minimal_app": {k: v / base for k, v in med.items()}}
        # where --version's time goes: top-level imports by cumulative time
        proc = subprocess.run([sys.executable, "-X", "importtime", *cli_python_args(cli), "--version"],
                              capture_output=True, text=True, cwd=tmp)
        result["version_imports"] = top_imports(proc.stderr)
        # verify's compute without start-up: timed inside a fresh process (as the CLI runs it), and
        # again in this one (warm, and with torch loaded if it is)
        fresh = []
        for _ in range(max(3, runs // 2)):
            proc = subprocess.run([sys.executable, "-c", VERIFY_COMPUTE], capture_output=True, text=True, cwd=tmp)
            fresh.append(float(proc.stdout.strip().splitlines()[-1]))
        result["verify_compute_median"] = median(fresh)
        result["bytecode_cached"] = (Path(blockcli.__file__).parent / "__pycache__").is_dir()
        result["dontwritebytecode"] = os.environ.get("PYTHONDONTWRITEBYTECODE")
        result["verify_compute_all"] = fresh
        from blockcli.sources import load_config
        from blockcli.verify import verify
        cfg = load_config(None)
        verify(cfg)
        result["verify_compute_in_process_median"] = median([timed(lambda: verify(cfg)) for _ in range(3)])
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cli_python_args(cli: list[str]) -> list[str]:
    """The arguments after `python` that run the blockcli command (the console script is a Python file)."""
    return cli[1:] if cli[0] == sys.executable else cli


def top_imports(stderr: str, n: int = 12) -> list[dict[str, Any]]:
    """Packages (top-level names) by cumulative import time, from `python -X importtime` output."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, self_us, cum_us, name = (part.strip() for part in line.replace("import time:", "|").split("|"))
        if "." not in name and not name.startswith("_") and int(cum_us) >= 1000:
            rows.append({"module": name, "cumulative_ms": int(cum_us) / 1e3, "self_ms": int(self_us) / 1e3})
    rows.sort(key=lambda r: -r["cumulative_ms"])
    return rows[:n]


def print_startup(s: dict[str, Any]) -> None:
    say(f"\n== start-up (median of {s['runs']} subprocess runs after a warm-up; ratio to the minimal Typer app)")
    bg = s.get("background_cpu_share")
    if bg:
        say(f"  CPU taken by other processes during these runs: median {bg['median']:.0%}, max {bg['max']:.0%}")
    if not s.get("bytecode_cached", True):
        say(f"  note: blockcli has no __pycache__ (PYTHONDONTWRITEBYTECODE={s.get('dontwritebytecode') or 'unset'}), "
            f"so each blockcli run below also compiles its sources; an installed wheel would not")
    labels = {"import_numpy": "(1) python -c 'import numpy'",
              "minimal_typer_app": "(2) minimal Typer app --json (numpy, yaml, rich)",
              "count_llama-2-70b_json": "(3) blockcli count llama-2-70b --json",
              "count_gpt3_train_json": "(3b) blockcli count gpt3-175b.yaml --train --json",
              "trace_shapes_only_1e9": "(3c) blockcli trace --shapes-only --seq 1e9 --json",
              "version": "(4) blockcli --version", "verify_default": "(5) blockcli verify"}
    for key, label in labels.items():
        code = s["exit_codes"][key]
        say(f"  {label:<52} {fmt_s(s['median'][key]):>9}  {s['ratio_to_minimal_app'][key]:.2f}×"
            + (f"  (exit {code})" if code else ""))
    say(f"  verify on the default, compute only: {fmt_s(s['verify_compute_median'])} in a fresh process "
        f"(runs: {', '.join(fmt_s(v) for v in s['verify_compute_all'])}); "
        f"{fmt_s(s['verify_compute_in_process_median'])} warm in this process")
    say("  `blockcli --version` imports, packages by cumulative time (-X importtime, one run): " + ", ".join(
        f"{r['module']} {r['cumulative_ms']:.0f} ms" for r in s["version_imports"]))


# ----------------------------------------------------------------------------- main


def summary(cases: list[dict[str, Any]], st: dict[str, Any] | None) -> list[str]:
    """The targets, each with the measured figure and whether it is met."""
    lines = []
    by = {(c["config"], c["dtype"]): c for c in cases}
    for name in ("M", "L"):
        c = by.get((name, "float32"))
        if not c:
            continue
        b = c["best_of"]
        if c["ratio_vs_torch"] is not None:
            lines.append(f"{name} float32 ≤ 1.0× torch: {c['ratio_vs_torch']:.2f}× "
                         f"{'MET' if c['ratio_vs_torch'] <= 1.0 else 'MISSED'} (fastest runs: {b['ratio_vs_torch']:.2f}×)")
        share = 0.85 if name == "L" else 0.7
        lines.append(f"{name} float32 ≥ {share:.0%} of GEMM: {c['fraction_of_gemm']:.0%} "
                     f"{'MET' if c['fraction_of_gemm'] >= share else 'MISSED'} (fastest runs: {b['fraction_of_gemm']:.0%})")
    c = by.get(("L", "float32"))
    if c:
        lines.append(f"L float32 ≥ 2× faster than naive: {c['speedup_vs_naive']:.2f}× "
                     f"{'MET' if c['speedup_vs_naive'] >= 2 else 'MISSED'} "
                     f"(fastest runs: {c['best_of']['speedup_vs_naive']:.2f}×)")
    for dt in DTYPES:
        c = by.get(("L", dt))
        if c:
            ratio = c["memory"]["ratio_to_footprint"]
            lines.append(f"L {dt} peak ≤ 1.5× footprint: {ratio:.2f}× {'MET' if ratio <= 1.5 else 'MISSED'}")
    if st:
        v = st["verify_compute_median"]
        lines.append(f"verify default compute < 1 s: {fmt_s(v)} {'MET' if v < 1 else 'MISSED'}")
        r = st["ratio_to_minimal_app"]["version"]
        lines.append(f"--version < minimal app: {r:.2f}× {'MET' if r < 1 else 'MISSED'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="OUT", type=Path, help="write every figure to this JSON file")
    ap.add_argument("--quick", action="store_true", help="config S only, fewer repeats")
    ap.add_argument("--configs", default=None, help="comma-separated subset of S,M,L (default: all; S with --quick)")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated subset of float32,float64")
    ap.add_argument("--no-startup", action="store_true", help="skip the start-up section")
    args = ap.parse_args(argv)

    started = time.perf_counter()
    env = environment()
    print_environment(env)
    names = (args.configs or ("S" if args.quick else "S,M,L")).split(",")
    dtypes = args.dtypes.split(",")
    if any(n not in CONFIGS for n in names) or any(d not in DTYPES for d in dtypes):
        ap.error(f"--configs from {','.join(CONFIGS)}, --dtypes from {','.join(DTYPES)}")

    rng = np.random.default_rng(0)
    gemm = {dt: (rng.standard_normal((GEMM_N, GEMM_N)).astype(dt), rng.standard_normal((GEMM_N, GEMM_N)).astype(dt))
            for dt in dtypes}
    cases = []
    for name in names:
        for dt in dtypes:
            repeats = QUICK_REPEATS if args.quick else REPEATS[(name, dt)]
            t0 = time.perf_counter()
            case = bench_case(name, dt, repeats, gemm)
            case["wall_seconds"] = time.perf_counter() - t0
            case["loadavg_after"] = loadavg()
            print_case(case)
            cases.append(case)
    del gemm
    st = None
    if not args.no_startup:
        st = startup(QUICK_STARTUP_RUNS if args.quick else STARTUP_RUNS)
        print_startup(st)

    targets = summary(cases, st)
    say("\n== targets")
    for line in targets:
        say(f"  {line}")
    env["loadavg_end"] = loadavg()
    wall = time.perf_counter() - started
    say(f"\ntotal wall time {wall:.0f} s; load average at end {env['loadavg_end']}")
    mismatches = [f"{c['config']} {c['dtype']}" for c in cases if not c["agree"]]
    if mismatches:
        say(f"WARNING: blockcli and the naive block disagree at {', '.join(mismatches)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"environment": env, "gemm_n": GEMM_N, "cases": cases, "startup": st,
                                         "targets": targets, "wall_seconds": wall}, indent=2) + "\n")
        say(f"wrote {args.json}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
