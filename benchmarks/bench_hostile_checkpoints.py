#!/usr/bin/env python3
"""What hostile model folders cost: refusing 300,000 unexpected tensors, and tracing a bfloat16 folder whose header
is padded to 99 MB (issue 30, item 9), each beside the same command on the plain fixture folder.

    python benchmarks/bench_hostile_checkpoints.py [--runs N] [--tensors N] [--compare SRC]

In a temporary folder it writes (a) the GPT-NeoX fixture with N extra tensors `gpt_neox.layers.{i}.extra.weight`
(each one F32 value) in its model.safetensors, which `count` must refuse, and (b) the bfloat16 Llama fixture with a
99 MB `__metadata__` string in its header. It times `blockcli count` on (a) and `blockcli trace`/`count` on (b),
in interleaved subprocess runs, beside `blockcli count`/`trace` of the unchanged fixture (the baseline), and prints
the medians and their ratios. With `--compare SRC` (a checkout of another commit, e.g. `git archive <commit> |
tar -x -C SRC`) every command also runs with that tree's blockcli, side by side. Nothing is written outside the
temporary folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_checkpoint import FIXTURES  # noqa: E402  (the tests' fixture folders)
from test_unreadable_checkpoints import header_and_data, write_header  # noqa: E402


def copy_fixture(name: str, to: Path) -> Path:
    shutil.copytree(FIXTURES / name, to, ignore=shutil.ignore_patterns("expected.npz"))
    return to


def many_unexpected(folder: Path, n: int) -> None:
    path = folder / "model.safetensors"
    header, data = header_and_data(path)
    for i in range(n):
        header[f"gpt_neox.layers.{i}.extra.weight"] = {"dtype": "F32", "shape": [1],
                                                      "data_offsets": [len(data) + 4 * i, len(data) + 4 * i + 4]}
    write_header(path, header, data + b"\0" * (4 * n))


def padded_header(folder: Path, size: int) -> None:
    path = folder / "model.safetensors"
    header, data = header_and_data(path)
    header["__metadata__"] = {"format": "pt", "padding": "x" * size}
    write_header(path, header, data)


def timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, env=env, cwd=cwd)  # exit 2 for the refusal: expected
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tensors", type=int, default=300_000)
    parser.add_argument("--compare", type=Path, help="another blockcli source tree to time side by side")
    args = parser.parse_args()
    trees = {"this tree": None} | ({f"--compare {args.compare}": args.compare} if args.compare else {})
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        plain_neox, plain_bf16 = FIXTURES / "gpt_neox", FIXTURES / "llama-bf16"
        neox = copy_fixture("gpt_neox", tmp_path / "neox-many")
        many_unexpected(neox, args.tensors)
        bf16 = copy_fixture("llama-bf16", tmp_path / "bf16-padded")
        padded_header(bf16, 99_000_000)
        header_mb = struct.unpack("<Q", (bf16 / "model.safetensors").read_bytes()[:8])[0] / 1e6
        cases = {
            f"count, {args.tensors:,} unexpected tensors": ["count", str(neox)],
            "count, the GPT-NeoX fixture (baseline)": ["count", str(plain_neox)],
            f"trace, bf16 header of {header_mb:.0f} MB": ["trace", str(bf16)],
            f"count, bf16 header of {header_mb:.0f} MB": ["count", str(bf16)],
            "trace, the bf16 fixture (baseline)": ["trace", str(plain_bf16)],
        }
        commands = {}
        for tree, src in trees.items():
            here = str(Path(__file__).resolve().parent.parent)
            env = {**os.environ, "PYTHONPATH": str(src.resolve()) if src else here}
            for name, command in cases.items():
                commands[(tree, name)] = ([sys.executable, "-m", "blockcli", *command], env)
        for command, env in commands.values():  # run from tmp: `-m` puts the working folder first on sys.path
            timed(command, env, tmp_path)  # warm-up: file cache and .pyc
        times: dict[tuple[str, str], list[float]] = {k: [] for k in commands}
        for i in range(args.runs):
            order = list(commands) if i % 2 == 0 else list(commands)[::-1]
            for key in order:
                times[key].append(timed(*commands[key], tmp_path))
    print(f"{args.runs} interleaved runs each; medians")
    for tree in trees:
        print(tree)
        base = {"count": statistics.median(times[(tree, "count, the GPT-NeoX fixture (baseline)")]),
                "trace": statistics.median(times[(tree, "trace, the bf16 fixture (baseline)")])}
        for name in cases:
            median = statistics.median(times[(tree, name)])
            ratio = median / base[name.split(",")[0]]
            print(f"  {name:<44} {median:7.2f} s   {ratio:6.1f}× its baseline")


if __name__ == "__main__":
    main()
