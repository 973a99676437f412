#!/usr/bin/env python3
"""blockcli on a busy machine: the default threading against a fixed synthetic load.

    python benchmarks/bench_contention.py [--baseline main] [--rounds 3] [--loads 0,1,2] [--json out.json]

The load is N processes, each spinning a pure-Python loop (one busy core apiece), started before a
load level's runs and stopped after; N = 0 is the machine as it is. Under each load, every contender
runs each workload once per round, in a rotating order, each in a fresh process:

  workloads  `verify --mutants` on the default block (the issue's case: many small matrix products),
             `trace gpt2 --seq 512` (a traced real pass: weights drawn, every step recorded), and one
             untraced forward pass of the forward benchmark's M block (d=768, 12 heads,
             d_ff=3072, B=2, T=1024, float32: the tiles shared among the cores);
  contenders this tree; the baseline (`--baseline`, a git revision, exported with `git archive`) as
             it runs by default; and the baseline with OPENBLAS_NUM_THREADS=1 (and OMP_NUM_THREADS=1),
             the one-thread figure the issue compares against.

It prints the machine (benchmarks/machine.py) and its load average, then per load and workload the
median seconds of each contender and the ratios baseline / this tree and (one BLAS thread) / this tree,
side by side, with the threads this tree chose (the BLAS threads for the commands, the tile workers for the forward pass).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe, summary_line  # benchmarks/machine.py

ROOT = Path(__file__).resolve().parent.parent
SPIN = "while True:\n    pass\n"
FORWARD = """
import time, numpy as np
from blockcli.block import DecoderBlock
from blockcli.config import parse_config
from blockcli.parallel import worker_count
cfg = parse_config({"block": {"d_model": 768, "n_heads": 12, "d_ff": 3072}, "run": {"batch": 2, "seq_len": 1024,
                                                                                   "dtype": "float32"}})
block = DecoderBlock.from_config(cfg)
x = np.random.default_rng(0).standard_normal((2, 1024, 768)).astype(np.float32)
block(x)
start = time.perf_counter()
block(x)
print(time.perf_counter() - start, worker_count())
"""
COMMAND = """
import sys, time
from blockcli.cli import main
from blockcli import parallel
sys.argv = ["blockcli", *ARGS]
start = time.perf_counter()
try:
    main()
except SystemExit:
    pass
sys.stderr.write(f"{time.perf_counter() - start} {parallel._state.get('fitted', '-')}\\n")
"""


COMMANDS = {"verify": ["verify", "--mutants", "--json"], "trace": ["trace", "gpt2", "--seq", "512", "--json"]}


def export(revision: str, into: Path) -> Path:
    """The baseline's blockcli package, from `git archive` of `revision`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "blockcli"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run(workload: str, tree: Path, one_thread: bool) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("BLOCKCLI_THREADS", None)
    if one_thread:
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    code = FORWARD if workload == "forward" else COMMAND.replace("ARGS", repr(COMMANDS[workload]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tree)
    line = (proc.stdout if workload == "forward" else proc.stderr).strip().splitlines()[-1]
    seconds, threads = line.split()
    return float(seconds), threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="main", help="git revision to compare with (default main)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per load (default 3)")
    ap.add_argument("--loads", default="0,1,2", help="busy processes per load level (default 0,1,2)")
    ap.add_argument("--workloads", default="verify,trace,forward", help="any of verify, trace, forward (default all)")
    ap.add_argument("--json", metavar="OUT", type=Path, help="write the figures to this JSON file")
    args = ap.parse_args()

    import numpy  # noqa: F401  (so machine.py sees NumPy's BLAS)

    print(summary_line(describe()))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline], check=True,
                              capture_output=True, text=True).stdout.strip()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        base = export(args.baseline, Path(tmp))
        contenders = {"this tree": (ROOT, False), f"{revision} default": (base, False),
                      f"{revision} 1 BLAS thread": (base, True)}
        names = list(contenders)
        for load in [int(n) for n in args.loads.split(",")]:
            spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(load)]
            try:
                time.sleep(1.0 if load else 0.0)  # let the spinners reach their loop
                for workload in args.workloads.split(","):
                    times: dict[str, list[float]] = {n: [] for n in names}
                    threads: list[str] = []
                    for r in range(args.rounds + 1):  # the first round warms the caches and is not counted
                        order = names[r % len(names):] + names[:r % len(names)]
                        for name in order:
                            seconds, used = run(workload, *contenders[name])
                            if r:
                                times[name].append(seconds)
                                if name == "this tree":
                                    threads.append(used)
                    med = {n: statistics.median(t) for n, t in times.items()}
                    results.append({"load": load, "workload": workload, "median_seconds": med,
                                    "this_tree_threads": threads,
                                    "baseline_over_this": med[names[1]] / med[names[0]],
                                    "one_thread_over_this": med[names[2]] / med[names[0]]})
                    print(f"{load} busy, {workload:7}: " + "; ".join(f"{n} {med[n]:.2f} s" for n in names)
                          + f"; {names[1]} / this tree {med[names[1]] / med[names[0]]:.2f}×, "
                          f"{names[2]} / this tree {med[names[2]] / med[names[0]]:.2f}× "
                          f"(this tree's threads: {', '.join(threads)})", flush=True)
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps({"machine": describe(), "baseline": revision, "results": results}, indent=2))


if __name__ == "__main__":
    main()
