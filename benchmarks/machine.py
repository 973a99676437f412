"""What the benchmarks ran on: CPU model, its SIMD flags, cores, and the BLAS NumPy uses.

Shared by the scripts in this folder (each puts its own folder first on sys.path when run as a
script). Timings on another machine are not comparable; the ratios between contenders timed in
the same run are what the benchmarks report.
"""

from __future__ import annotations

import os
import platform
from typing import Any

# The instruction-set extensions that decide a GEMM or exp kernel's speed, in the order printed.
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "amx_tile")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def isa_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line.split(":", 1)[1].split() for line in f if line.startswith("flags")))
    except (OSError, StopIteration):
        return []
    return [f for f in ISA_FLAGS if f in flags]


def blas() -> list[dict[str, Any]]:
    """The BLAS libraries loaded in this process (NumPy's, once NumPy is imported), via threadpoolctl."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [{k: p.get(k) for k in ("internal_api", "version", "architecture", "num_threads", "threading_layer")}
            for p in threadpool_info() if p.get("user_api") == "blas"]


def describe() -> dict[str, Any]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_model(), "isa": isa_flags(), "cores": cores, "blas": blas()}


def summary_line(m: dict[str, Any]) -> str:
    """'AMD EPYC, 2 cores, ISA avx avx2 fma; BLAS openblas 0.3.27 Haswell ×2'."""
    libs = ", ".join(f"{b['internal_api']} {b.get('version') or ''} {b.get('architecture') or ''} ×{b['num_threads']}"
                     .replace("  ", " ") for b in m["blas"]) or "no BLAS loaded"
    return f"{m['cpu']}, {m['cores']} cores, ISA {' '.join(m['isa']) or '?'}; BLAS {libs}"
