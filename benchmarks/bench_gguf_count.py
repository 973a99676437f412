#!/usr/bin/env python3
"""How long `blockcli count model.gguf` takes on a Llama-3-8B-size GGUF, against counting a preset.

    python benchmarks/bench_gguf_count.py [--runs N]

It writes Llama-3-8B's shapes at Q4_0 (4.7 GB on paper, every byte of tensor data a hole of a sparse file)
with a real-size tokenizer in its header (128,256 token strings, as many merges and token types: what
makes a real GGUF header tens of MB), then times, in process, `read_gguf` and the reconciliation
(`checkpoint_sizes`), and in interleaved subprocess runs (a) `blockcli count FILE --json` and
(b) `blockcli count llama-3-8b --json` (the preset: the baseline). It prints the medians. Nothing is
written outside the temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_checkpoint_count import timed  # noqa: E402
import gguf  # noqa: E402
from test_gguf import header_only_llama  # noqa: E402  (the tests' own writer of the sparse file)

from blockcli import load_config  # noqa: E402
from blockcli.checkpoint import checkpoint_sizes  # noqa: E402
from blockcli.gguf_file import _read_gguf, read_gguf  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama-3-8b.Q4_0.gguf"
        size = header_only_llama(path, 4096, 32, 14336, 128256, 32, gguf.GGMLQuantizationType.Q4_0, kv_heads=8,
                                 tokenizer=True)
        cfg = load_config(path)
        header, reconcile = [], []
        for _ in range(runs):
            _read_gguf.cache_clear()  # parsed afresh each run (a command parses it once)
            start = time.perf_counter()
            read_gguf(path)
            header.append(time.perf_counter() - start)
            _read_gguf.cache_clear()
            start = time.perf_counter()
            sizes, _ = checkpoint_sizes(path, cfg)
            reconcile.append(time.perf_counter() - start)
        print(f"file: {size:,} bytes (sparse), {sum(sizes.values()):,} parameters")
        print(f"read_gguf (header, tokenizer walked): median {statistics.median(header) * 1e3:.1f} ms")
        print(f"checkpoint_sizes (header + reconciliation): median {statistics.median(reconcile) * 1e3:.1f} ms")
        command = [sys.executable, "-m", "blockcli", "count"]
        file_runs, preset_runs = [], []
        for _ in range(runs):
            file_runs.append(timed([*command, str(path), "--json"]))
            preset_runs.append(timed([*command, "llama-3-8b", "--json"]))
        print(f"blockcli count FILE --json: median {statistics.median(file_runs):.3f} s")
        print(f"blockcli count llama-3-8b --json (preset): median {statistics.median(preset_runs):.3f} s")


if __name__ == "__main__":
    main()
