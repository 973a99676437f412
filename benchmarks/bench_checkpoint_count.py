#!/usr/bin/env python3
"""How long `blockcli count DIR` takes on a 7B-size sharded checkpoint, against counting the same
model's config alone.

    python benchmarks/bench_checkpoint_count.py [--runs N]

It writes Llama-2-7B as two real-size float16 shards and an index in a temporary folder, every
byte of tensor data a hole (a sparse file: 13.5 GB on paper, nothing on disk), then times, in
interleaved subprocess runs:
  (a) `blockcli count DIR --json`: headers of both shards read and reconciled, and
  (b) `blockcli count DIR/config.json --json`: the same model from its config alone (the baseline).
It prints the medians and their ratio. Nothing is written outside the temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_checkpoint import sparse_llama_7b  # noqa: E402  (the tests' own writer of the sparse folder)


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sparse_llama_7b(folder)
        paper = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
        commands = {"count DIR (checkpoint headers)": [sys.executable, "-m", "blockcli", "count", str(folder), "--json"],
                    "count config.json (baseline)": [sys.executable, "-m", "blockcli", "count",
                                                     str(folder / "config.json"), "--json"]}
        times: dict[str, list[float]] = {k: [] for k in commands}
        for name, command in commands.items():
            timed(command)  # warm-up: file cache and .pyc
        for i in range(runs):
            for name in (list(commands) if i % 2 == 0 else list(commands)[::-1]):
                times[name].append(timed(commands[name]))
    print(f"Llama-2-7B, 2 sparse shards, {paper / 1e9:.1f} GB on paper; {runs} interleaved runs each")
    base = statistics.median(times["count config.json (baseline)"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<34} median {median * 1000:7.1f} ms   {median / base:.2f}× the baseline")


if __name__ == "__main__":
    main()
