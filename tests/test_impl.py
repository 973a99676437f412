"""verify --impl: a user's own block is checked with the same checklist, through the documented contract."""

import json

import pytest
from typer.testing import CliRunner

from blockcli.cli import app
from conftest import ROOT

runner = CliRunner()
BUGGY = str(ROOT / "tests" / "impls" / "buggy_blocks.py")
EXAMPLE = ROOT / "examples" / "my_block.py"


def run(target, *args):
    result = runner.invoke(app, ["verify", "--impl", target, "--json", *args])
    data = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    return result, data


def statuses(data):
    return {c["id"]: c["status"] for c in data["checks"]}


def test_readme_example_is_the_tested_file_and_passes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert EXAMPLE.read_text(encoding="utf-8").strip() in readme
    result, data = run(f"{EXAMPLE}:MyBlock")
    assert result.exit_code == 0, result.output
    s = statuses(data)
    assert all(s[i] == "PASS" for i in range(1, 11)) and s[11] == "SKIP"
    assert all(s[i] == "PASS" for i in range(12, 18))


def test_independent_correct_implementation_passes():
    result, data = run(f"{BUGGY}:Correct")
    assert result.exit_code == 0 and data["passed"]


# Which items must fail for each bug written as a user implementation.
EXPECTED = {
    "SplitNoTranspose": {2, 12}, "SoftmaxQueryAxis": {3, 8, 12}, "MaskAfterSoftmax": {3, 4, 8, 9, 12},
    "MaskHidesDiagonal": {4, 9}, "NoMask": {4, 8, 12}, "MissingWo": {5, 12}, "HeadsWrongOrder": {5, 12},
    "ResidualBroadcast": {6, 8, 12}, "NormTimeAxis": {7, 8, 12}, "NormBatchAxis": {7, 12, 15},
    "UnscaledScores": {12}, "CountsWithoutBiases": {10},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_classic_bugs_fail_the_right_items(name):
    result, data = run(f"{BUGGY}:{name}")
    assert result.exit_code == 1
    failed = {c["id"] for c in data["checks"] if c["status"] == "FAIL"}
    assert EXPECTED[name] <= failed, failed
    assert 1 not in failed


def test_first_diverging_intermediate_is_named():
    _, data = run(f"{BUGGY}:UnscaledScores")
    check = next(c for c in data["checks"] if c["id"] == 12)
    assert "first diverging intermediate: scores" in check["measured"]


def test_black_box_skips_what_it_cannot_see():
    result, data = run(f"{BUGGY}:BlackBox")
    s = statuses(data)
    assert result.exit_code == 0
    assert {s[i] for i in (2, 3, 4, 5, 6, 7, 9)} == {"SKIP"}
    assert all(s[i] == "PASS" for i in (8, 12, 13, 14, 15, 16, 17))


def test_runtime_errors_wrong_shapes_and_timeouts_fail_with_the_users_message():
    result, data = run(f"{BUGGY}:Raises")
    assert result.exit_code == 1
    assert "ValueError: shapes do not align in my attention" in data["checks"][2]["measured"]
    result, data = run(f"{BUGGY}:WrongShape")
    assert result.exit_code == 1 and "returned shape (2, 4, 512)" in data["checks"][-1]["measured"]
    result, data = run(f"{BUGGY}:Slow", "--timeout", "0.5", "--only", "14")
    assert result.exit_code == 1 and "longer than 0.5 s" in data["checks"][0]["measured"]


@pytest.mark.parametrize("target,message", [
    ("nosuchfile.py:X", "not found"),
    (f"{BUGGY}:Nope", "no name 'Nope'"),
    (f"{BUGGY}:wrong_signature", "cannot be called as wrong_signature(weights, config)"),
    ("no_module_here:X", "cannot import"),
    ("missing-colon", "expected FILE.py:Name"),
])
def test_unloadable_targets_exit_2(target, message):
    result = runner.invoke(app, ["verify", "--impl", target])
    assert result.exit_code == 2 and message in result.stderr


def test_syntax_error_exits_2_with_the_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("class B:\n    def __init__(self, w, c)\n        pass\n")
    result = runner.invoke(app, ["verify", "--impl", f"{bad}:B"])
    assert result.exit_code == 2 and "syntax error" in result.stderr and "line 2" in result.stderr
