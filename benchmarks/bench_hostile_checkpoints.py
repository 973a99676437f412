#!/usr/bin/env python3
"""What hostile model folders cost: refusing 300,000 unexpected tensors, and tracing a bfloat16 folder whose header
is padded to 99 MB (issue 30, item 9), each beside the same command on the plain fixture folder.

    python benchmarks/bench_hostile_checkpoints.py [--runs N] [--tensors N] [--compare REV]

In a temporary folder it writes (a) the GPT-NeoX fixture with N extra tensors `gpt_neox.layers.{i}.extra.weight`
(each one F32 value) in its model.safetensors, which `count` must refuse, and (b) the bfloat16 Llama fixture with a
99 MB `__metadata__` string in its header. It times `blockcli count` on (a) and `blockcli trace`/`count` on (b),
in interleaved subprocess runs, beside `blockcli count`/`trace` of the unchanged fixture (the baseline), and prints
the medians and their ratios. With `--compare REV` (a git revision, e.g. `0c0fdae^`, the tree before the fix of
issue 30's item 9) every command also runs with that revision's blockcli — a detached `git worktree` of REV in the
temporary folder, removed afterwards — side by side, and the ratio of this tree's median to REV's is printed.
Nothing is written outside the temporary folder (and git's worktree list, cleaned up again).
"""

from __future__ import annotations

import argparse
import contextlib
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)
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


REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def revision_tree(rev: str | None, path: Path):
    """A detached git worktree of `rev` at `path` (None: no revision, nothing made), removed on the way out."""
    if rev is None:
        yield None
        return
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(path), rev], check=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=False)


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int]:
    """(seconds, exit code): 2 for the refusal is expected."""
    start = time.perf_counter()
    code = subprocess.run(command, capture_output=True, env=env, cwd=cwd).returncode
    return time.perf_counter() - start, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tensors", type=int, default=300_000)
    parser.add_argument("--compare", metavar="REV", help="a git revision whose blockcli is timed side by side")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, revision_tree(args.compare, Path(tmp) / "rev") as other:
        tmp_path = Path(tmp)
        trees = {"this tree": None} | ({f"{args.compare}": other} if other else {})
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
        codes: dict[tuple[str, str], set[int]] = {k: set() for k in commands}
        for i in range(args.runs):
            order = list(commands) if i % 2 == 0 else list(commands)[::-1]
            for key in order:
                seconds, code = timed(*commands[key], tmp_path)
                times[key].append(seconds)
                codes[key].add(code)
    print(f"{cpu_model()}, {os.cpu_count()} CPUs; {args.runs} interleaved runs each; medians")
    medians = {key: statistics.median(values) for key, values in times.items()}
    for tree in trees:
        print(tree)
        base = {"count": medians[(tree, "count, the GPT-NeoX fixture (baseline)")],
                "trace": medians[(tree, "trace, the bf16 fixture (baseline)")]}
        for name in cases:
            ratio = medians[(tree, name)] / base[name.split(",")[0]]
            exits = ",".join(map(str, sorted(codes[(tree, name)])))
            print(f"  {name:<44} {medians[(tree, name)]:7.2f} s   {ratio:6.1f}× its baseline   exit {exits}")
    if args.compare:
        print(f"this tree / {args.compare}")
        for name in cases:
            ratio = medians[("this tree", name)] / medians[(args.compare, name)]
            print(f"  {name:<44} {ratio:7.3f}×")


if __name__ == "__main__":
    main()
