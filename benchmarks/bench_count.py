#!/usr/bin/env python3
"""`blockcli count` against the start-up floor: a minimal Typer app importing the same libraries.

    python benchmarks/bench_count.py [--rounds N] [--json OUT]

count never imports NumPy, so its floor is Python + Typer + PyYAML (+ Rich for the table): the
minimal app below imports exactly the non-NumPy libraries the measured command imports (the
script checks that with `-X importtime` and says so if they differ). Every command runs once per
round, in an order rotated each round, so load from other processes hits all of them alike; the
figures are medians over the rounds, after one warm-up round. The commands run with bytecode
cached, as an installed package runs (into a temporary PYTHONPYCACHEPREFIX, even where
PYTHONDONTWRITEBYTECODE is set: nothing is written beside the sources). Targets: `count gpt2 --json` at most
1.1× its floor, and every preset's count (table form, the slower one) under 0.25 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe, summary_line  # benchmarks/machine.py

ROOT = Path(__file__).resolve().parent.parent
FLOOR_APP = '''\
import json
import sys

import typer
import yaml

if "--rich" in sys.argv:
    import rich.console
    import rich.table

app = typer.Typer(add_completion=False)


@app.command()
def main(json_out: bool = typer.Option(False, "--json"), with_rich: bool = typer.Option(False, "--rich")) -> None:
    """One command, two options."""
    print(json.dumps({"ok": True, "yaml": yaml.__version__}))


if __name__ == "__main__":
    app()
'''
PRESET_LIMIT = 0.25  # seconds, issue #13
FLOOR_RATIO = 1.1  # issue #18


def third_party_imports(cmd: list[str], cwd: Path, env: dict[str, str]) -> list[str]:
    """Top-level non-stdlib packages a command imports, from -X importtime."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, text=True, cwd=cwd,
                          env=env)
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
             if line.startswith("import time:") and "cumulative" not in line}
    return sorted(n for n in names - set(sys.stdlib_module_names) if not n.startswith("_") and n != "blockcli")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9, help="timed rounds after the warm-up (default 9)")
    ap.add_argument("--json", metavar="OUT", type=Path, help="write the figures to this JSON file")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from blockcli.config import preset_names

    tmp = Path(tempfile.mkdtemp(prefix="bench_count_"))
    (tmp / "floor.py").write_text(FLOOR_APP)
    py, cli = sys.executable, [sys.executable, "-m", "blockcli"]
    hf = str(ROOT / "tests" / "fixtures" / "hf" / "llama" / "config.json")
    commands = {
        "floor --json (typer, yaml)": [py, str(tmp / "floor.py"), "--json"],
        "floor table (typer, yaml, rich)": [py, str(tmp / "floor.py"), "--rich"],
        "count gpt2 --json": cli + ["count", "gpt2", "--json"],
        "count gpt2": cli + ["count", "gpt2"],
        "count config.json --json": cli + ["count", hf, "--json"],
        **{f"count {p}": cli + ["count", p] for p in preset_names() if p != "gpt2"},
    }
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    print(f"machine: {summary_line(describe())}")
    print(f"python {sys.version.split()[0]}; blockcli from {ROOT}; bytecode cached in {tmp / 'pycache'}")
    floor_json, floor_table = (third_party_imports(commands[k], tmp, env) for k in
                               ("floor --json (typer, yaml)", "floor table (typer, yaml, rich)"))
    for key, floor in (("count gpt2 --json", floor_json), ("count gpt2", floor_table)):
        found = third_party_imports(commands[key], ROOT, env)
        print(f"{key} imports {', '.join(found)}" + ("" if found == floor else f"  ← floor imports {', '.join(floor)}"))

    times: dict[str, list[float]] = {k: [] for k in commands}
    names, failed = list(commands), {}
    for i in range(args.rounds + 1):  # round 0 warms the file cache and the bytecode
        for key in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter()
            proc = subprocess.run(commands[key], capture_output=True, text=True, cwd=ROOT, env=env)
            elapsed = time.perf_counter() - t0
            if proc.returncode:
                failed[key] = proc.stderr.strip().splitlines()[-1:]
            if i:
                times[key].append(elapsed)
    med = {k: statistics.median(v) for k, v in times.items()}
    base_json, base_table = med["floor --json (typer, yaml)"], med["floor table (typer, yaml, rich)"]
    print(f"\nmedian of {args.rounds} interleaved rounds; ratio to the floor with the same libraries")
    for key in names:
        floor = base_json if "--json" in key else base_table
        print(f"  {key:<36} {med[key] * 1e3:7.1f} ms  {med[key] / floor:.2f}×" + (f"  FAILED {failed[key]}"
                                                                                   if key in failed else ""))
    ratio = med["count gpt2 --json"] / base_json
    presets = {k: v for k, v in med.items() if k.startswith("count ") and "--json" not in k}
    slowest = max(presets, key=presets.get)
    targets = [f"count gpt2 --json ≤ {FLOOR_RATIO}× floor: {ratio:.2f}× {'MET' if ratio <= FLOOR_RATIO else 'MISSED'}",
               f"every preset's count < {PRESET_LIMIT} s: slowest {slowest} {presets[slowest] * 1e3:.0f} ms "
               f"{'MET' if presets[slowest] < PRESET_LIMIT else 'MISSED'}"]
    print("\n== targets\n" + "\n".join(f"  {t}" for t in targets))
    if args.json:
        args.json.write_text(json.dumps({"machine": describe(), "rounds": args.rounds, "median_seconds": med,
                                         "all_seconds": times, "targets": targets, "failed": failed}, indent=2) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
