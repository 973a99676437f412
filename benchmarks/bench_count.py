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
import resource
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

if "--rich" in sys.argv or "--numpy" in sys.argv:
    import rich.console
    import rich.table
if "--numpy" in sys.argv:
    import numpy

app = typer.Typer(add_completion=False)


@app.command()
def main(json_out: bool = typer.Option(False, "--json"), with_rich: bool = typer.Option(False, "--rich"),
         with_numpy: bool = typer.Option(False, "--numpy")) -> None:
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
        "issue #18's floor (typer, numpy, yaml, rich)": [py, str(tmp / "floor.py"), "--numpy"],
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
    cpu: dict[str, list[float]] = {k: [] for k in commands}  # user + system: what load from others inflates least
    names, failed = list(commands), {}
    for i in range(args.rounds + 1):  # round 0 warms the file cache and the bytecode
        for key in names[i % len(names):] + names[:i % len(names)]:
            r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            proc = subprocess.run(commands[key], capture_output=True, text=True, cwd=ROOT, env=env)
            elapsed, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode:
                failed[key] = proc.stderr.strip().splitlines()[-1:]
            if i:
                times[key].append(elapsed)
                cpu[key].append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    floors = ("floor --json (typer, yaml)", "floor table (typer, yaml, rich)")
    print(f"\nmedians of {args.rounds} interleaved rounds, wall and CPU (user + system) time; "
          f"ratios to the floor with the same libraries")
    for key in names:
        floor = floors[0] if "--json" in key or "floor" in key else floors[1]
        print(f"  {key:<36} wall {med[key] * 1e3:7.1f} ms {med[key] / med[floor]:5.2f}×   "
              f"CPU {med_cpu[key] * 1e3:6.1f} ms {med_cpu[key] / med_cpu[floor]:5.2f}×"
              + (f"  FAILED {failed[key]}" if key in failed else ""))
    ratio, ratio_cpu = med["count gpt2 --json"] / med[floors[0]], med_cpu["count gpt2 --json"] / med_cpu[floors[0]]
    presets = {k: v for k, v in med.items() if k.startswith("count ") and "--json" not in k}
    slowest = max(presets, key=presets.get)
    slowest_cpu = max(med_cpu[k] for k in presets)
    issue_floor = "issue #18's floor (typer, numpy, yaml, rich)"
    ratio_issue = med["count gpt2 --json"] / med[issue_floor]
    targets = [f"count gpt2 --json ≤ {FLOOR_RATIO}× floor: {ratio:.2f}× wall, {ratio_cpu:.2f}× CPU "
               f"{'MET' if ratio <= FLOOR_RATIO else 'MISSED'} (against the same libraries, without NumPy)",
               f"count gpt2 --json against the floor as issue #18 defines it, a Typer command importing NumPy, "
               f"PyYAML and Rich: {ratio_issue:.2f}× wall {'MET' if ratio_issue <= FLOOR_RATIO else 'MISSED'}",
               f"every preset's count < {PRESET_LIMIT} s: slowest {slowest} {presets[slowest] * 1e3:.0f} ms wall "
               f"{'MET' if presets[slowest] < PRESET_LIMIT else 'MISSED'} (slowest CPU time {slowest_cpu * 1e3:.0f} ms)"]
    print("\n== targets\n" + "\n".join(f"  {t}" for t in targets))
    if args.json:
        args.json.write_text(json.dumps({"machine": describe(), "rounds": args.rounds, "median_seconds": med,
                                         "median_cpu_seconds": med_cpu, "all_seconds": times, "all_cpu_seconds": cpu, "targets": targets, "failed": failed}, indent=2) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
