"""count --solve seq|batch: the largest T or B whose memory fits --max-memory, checked against single runs."""

import json

import pytest
from typer.testing import CliRunner

from blockcli.cli import app
from blockcli.sizing import solve_largest

runner = CliRunner()
ROPE = "configs/gqa-swiglu-rope.yaml"  # rotary positions: no cap on T
LEARNED = "configs/gpt3-175b.yaml"  # learned positions: T stops at 2,048


def solved(args):
    result = runner.invoke(app, ["count", *args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["solve"]


def exit_code(args):
    return runner.invoke(app, ["count", *args]).exit_code


@pytest.mark.parametrize("args, option", [
    ([ROPE, "--max-memory", "1GiB"], "seq"),
    ([ROPE, "--max-memory", "1GiB"], "batch"),
    ([ROPE, "--max-memory", "1GiB", "--train"], "seq"),
    ([ROPE, "--max-memory", "3GiB", "--train", "--seq", "512"], "batch"),
    ([LEARNED, "--max-memory", "80GiB", "--train", "--dp", "64", "--zero", "3", "--recompute", "full"], "batch"),
])
def test_the_answer_fits_and_one_past_it_does_not(args, option):
    answer = solved([*args, "--solve", option])
    assert answer["solve"] == option and answer["answer"] >= 1
    assert answer["memory_bytes"] <= int(args[2].removesuffix("GiB")) * 2**30 < answer["next_memory_bytes"]
    assert exit_code([*args, f"--{option}", str(answer["answer"])]) == 0  # single runs, the gate of today
    assert exit_code([*args, f"--{option}", str(answer["answer"] + 1)]) == 1


def test_learned_positions_cap_the_sequence():
    args = [LEARNED, "--max-memory", "80GiB", "--train", "--dp", "64", "--zero", "3", "--recompute", "full"]
    answer = solved([*args, "--solve", "seq"])
    assert answer == {**answer, "answer": 2048, "cap": 2048, "next_memory_bytes": None}
    assert exit_code([*args, "--seq", "2048"]) == 0
    assert exit_code([*args, "--seq", "2049"]) == 2  # no position row for token 2,049


def test_the_table_says_one_line_and_is_at_the_answer():
    result = runner.invoke(app, ["count", ROPE, "--max-memory", "1GiB", "--solve", "batch"])
    assert result.exit_code == 0
    answer = solved([ROPE, "--max-memory", "1GiB", "--solve", "batch"])["answer"]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(f"--batch {answer:,} fits --max-memory 1GiB") and f"--batch {answer + 1:,} needs" in last


def test_nothing_fits_exits_1():
    result = runner.invoke(app, ["count", ROPE, "--max-memory", "1KiB", "--solve", "seq"])
    assert result.exit_code == 1
    assert "nothing fits" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert exit_code([ROPE, "--max-memory", "1KiB", "--seq", "1"]) == 1


@pytest.mark.parametrize("args", [
    ["--solve", "seq"],
    ["--solve", "batch", "--batch", "4", "--max-memory", "1GiB"],
    ["--solve", "seq", "--seq", "4", "--max-memory", "1GiB"],
    ["--solve", "seq", "--seq", "4", "--batch", "2", "--max-memory", "1GiB"],
    ["--solve", "tokens", "--max-memory", "1GiB"],
])
def test_bad_usage_exits_2(args):
    result = runner.invoke(app, ["count", ROPE, *args])
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("budget", [0, 1, 5, 17, 99, 100, 1000, 12345])
@pytest.mark.parametrize("cap", [None, 7, 64])
def test_search_matches_a_linear_scan(budget, cap):
    def memory(n):
        return 3 * n + n * n // 4

    scan = max((n for n in range(1, 20000) if memory(n) <= budget and (cap is None or n <= cap)), default=0)
    got = solve_largest(memory, budget, cap)
    assert got.answer == scan
    if scan and (cap is None or scan < cap):
        assert got.memory_bytes == memory(scan) and got.next_memory_bytes == memory(scan + 1) > budget


def single(args, key):
    data = json.loads(runner.invoke(app, ["count", *args, "--json"]).stdout)
    return data["inference"]["memory_bytes"] if key == "inference" else data["training"]["memory_bytes_per_device"]


@pytest.mark.parametrize("sweep, option, values, extra, key", [
    ("seq=1k,4k,32k", "--seq", ["1024", "4096", "32768"], [], "inference"),
    ("batch=1,8,64", "--batch", ["1", "8", "64"], [], "inference"),
    ("dtype=float32,bfloat16,int8", "--dtype", ["float32", "bfloat16", "int8"], [], "inference"),
    ("seq=512,2k", "--seq", ["512", "2048"], ["--train"], "training"),
])
def test_each_sweep_row_is_the_single_run(sweep, option, values, extra, key):
    result = runner.invoke(app, ["count", ROPE, *extra, "--sweep", sweep, "--json"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert [r["memory_bytes"] for r in rows] == [single([ROPE, *extra, option, v], key) for v in values]


def test_a_sweep_row_over_the_budget_exits_1_as_its_single_run_does():
    result = runner.invoke(app, ["count", ROPE, "--sweep", "seq=1k,128k", "--max-memory", "1GiB", "--format", "csv"])
    assert result.exit_code == 1 and "seq=131072" in result.stderr
    assert [line.split(",")[-1] for line in result.stdout.splitlines()[1:]] == ["yes", "no"]
    assert exit_code([ROPE, "--seq", "1024", "--max-memory", "1GiB"]) == 0
    assert exit_code([ROPE, "--seq", "131072", "--max-memory", "1GiB"]) == 1


@pytest.mark.parametrize("args", [
    ["--sweep", "tokens=1k"], ["--sweep", "seq="], ["--sweep", "seq=0"], ["--sweep", "seq=4q"],
    ["--sweep", "dtype=float7"], ["--sweep", "seq=1k", "--seq", "4"], ["--sweep", "dtype=float32", "--train"],
    ["--sweep", "seq=1k", "--solve", "batch", "--max-memory", "1GiB"],
])
def test_bad_sweeps_exit_2(args):
    result = runner.invoke(app, ["count", ROPE, *args])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
