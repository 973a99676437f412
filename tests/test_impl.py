"""verify --impl: a user's own block is checked with the same checklist, through the documented contract."""

import json
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from blockcli.cli import app
from conftest import ROOT

runner = CliRunner()
BUGGY = str(ROOT / "tests" / "impls" / "buggy_blocks.py")
sys.path.insert(0, str(ROOT / "tests" / "impls"))  # buggy_blocks importable as a module, for --impl module:Name
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


def test_an_exception_is_one_error_and_the_checks_it_prevented_are_error_rows():
    result, data = run(f"{BUGGY}:Raises")
    assert result.exit_code == 1 and data["passed"] is False
    assert len(data["errors"]) == 1 and "ValueError: shapes do not align in my attention" in data["errors"][0]
    s = statuses(data)
    assert s[1] == s[10] == "PASS" and s[11] == "SKIP"  # structure needs no call; no cache interface
    assert {s[i] for i in s if i not in (1, 10, 11)} == {"ERROR"}
    errors = [c for c in data["checks"] if c["status"] == "ERROR"]
    assert all(c["measured"] == "not run: error 1 (the first call failed)" and c["hint"] == "" for c in errors)
    assert result.stdout.count("shapes do not align") == 1


def test_traceback_option_prints_the_users_frames_to_stderr():
    result = runner.invoke(app, ["verify", "--impl", f"{BUGGY}:Raises", "--only", "14", "--traceback"])
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr and "buggy_blocks.py" in result.stderr
    assert "ValueError: shapes do not align" in result.stderr and "impl.py" not in result.stderr
    assert "Traceback" not in runner.invoke(app, ["verify", "--impl", f"{BUGGY}:Raises", "--only", "14"]).stderr


def test_wrong_shapes_and_timeouts_are_errors_with_the_message():
    result, data = run(f"{BUGGY}:WrongShape")
    assert result.exit_code == 1 and "returned shape (2, 4, 512)" in data["errors"][0]
    result, data = run(f"{BUGGY}:Slow", "--timeout", "0.5", "--only", "14")
    assert result.exit_code == 1 and "longer than 0.5 s" in data["errors"][0]
    assert statuses(data) == {14: "ERROR"}


def test_what_the_target_prints_goes_to_stderr_and_json_stays_json():
    result, data = run(f"{BUGGY}:Prints", "--only", "12,14")
    assert result.exit_code == 0 and data is not None and data["passed"]
    assert "x has shape" not in result.stdout and "building my block" not in result.stdout
    assert "x has shape (2, 5, 512)" in result.stderr and "building my block" in result.stderr


def test_sys_exit_in_a_call_is_an_error_never_a_silent_0():
    result, data = run(f"{BUGGY}:ExitsInCall")
    assert result.exit_code == 1 and data["errors"] == [
        f"calling {BUGGY}:ExitsInCall called sys.exit(0)"]
    assert {statuses(data)[i] for i in (8, 12, 14)} == {"ERROR"}


@pytest.mark.parametrize("where", ["import", "build"])
def test_sys_exit_at_import_or_build_exits_2(tmp_path, where):
    target = tmp_path / "exits.py"
    body = "import sys\nsys.exit(0)\nclass B: pass\n" if where == "import" else \
        "import sys\nclass B:\n    def __init__(self, w, c):\n        sys.exit(0)\n"
    target.write_text(body)
    result = runner.invoke(app, ["verify", "--impl", f"{target}:B", "--json"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "sys.exit(0)" in result.stderr and ("importing" if where == "import" else "building") in result.stderr


def test_a_target_changing_its_input_in_place_is_named():
    result, data = run(f"{BUGGY}:UpdatesInPlace")
    assert result.exit_code == 1
    assert len(data["errors"]) == 1 and "changed its input x in place (5,120 of 5,120 entries)" in data["errors"][0]


def test_a_single_sequence_block_is_detected_and_called_per_sequence():
    target, config = f"{ROOT / 'tests' / 'impls' / 'sequence_block.py'}:build", str(ROOT / "configs" / "rmsnorm-block.yaml")
    result, data = run(target, config)
    assert result.exit_code == 0, result.stdout
    s = statuses(data)
    assert all(s[i] == "PASS" for i in (8, 12, 13, 14, 15, 16, 17))
    assert any("takes one sequence (T, d) = (10, 256)" in n and "once per sequence" in n for n in data["notes"])
    declared = run(target, config, "--per-sequence", "--only", "12")[1]
    assert statuses(declared) == {12: "PASS"} and any("--per-sequence" in n for n in declared["notes"])


def test_float32_internals_get_the_float32_hint_and_pass_with_rtol():
    result, data = run(f"{BUGGY}:Float32Norm", "--only", "12")
    check = data["checks"][0]
    assert result.exit_code == 1 and check["status"] == "FAIL"
    assert "float32 arithmetic happens somewhere" in check["hint"] and "√d_h" not in check["hint"]
    result, data = run(f"{BUGGY}:Float32Norm", "--only", "12", "--rtol", "1e-6")
    assert result.exit_code == 0 and statuses(data) == {12: "PASS"}


def test_unscaled_scores_keep_the_scale_hint():
    _, data = run(f"{BUGGY}:UnscaledScores", "--only", "12")
    assert "1/√d_h" in data["checks"][0]["hint"]


@pytest.mark.parametrize("target,message", [
    ("nosuchfile.py:X", "not found"),
    (f"{BUGGY}:Nope", "no name 'Nope'"),
    (f"{BUGGY}:wrong_signature", "cannot be called as wrong_signature(weights, config) or wrong_signature(config)"),
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


def test_items_use_only_what_the_target_returned(tmp_path):
    """A block returning q, k, v but not the projections, and attn_concat but not attn_heads: items 2 and 5 skip
    (or check only what they can) rather than borrowing blockcli's own projections and heads."""
    target = tmp_path / "partial.py"
    target.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tests' / 'impls')!r})\n"
        "from buggy_blocks import Correct\n"
        "class Partial(Correct):\n"
        "    def __call__(self, x, return_intermediates=False):\n"
        "        if not return_intermediates:\n"
        "            return Correct.__call__(self, x)\n"
        "        y, inter = Correct.__call__(self, x, True)\n"
        "        return y, {k: inter[k] for k in ('q', 'k', 'v', 'attn_concat')}\n")
    _, data = run(f"{target}:Partial", "--only", "2,5")
    s = {c["id"]: c for c in data["checks"]}
    assert s[2]["status"] == "SKIP" and "q_proj, k_proj, v_proj" in s[2]["measured"]
    assert s[5]["status"] == "SKIP" and "attn_heads" in s[5]["measured"]


def test_first_divergence_is_the_true_first_with_minus_inf_masks():
    """MissingWo's masked scores hold −inf above the diagonal, equal to blockcli's: the first intermediate that
    differs is attn_out (−inf − (−inf) is NaN and must not count as a difference)."""
    _, data = run(f"{BUGGY}:MissingWo", "--only", "12")
    assert data["checks"][0]["measured"].endswith("first diverging intermediate: attn_out")


def test_softmax_without_the_max_shift_fails_item_17_only():
    result, data = run(f"{BUGGY}:SoftmaxWithoutMax")
    failed = {c["id"] for c in data["checks"] if c["status"] == "FAIL"}
    assert result.exit_code == 1 and failed == {17}
    item17 = next(c for c in data["checks"] if c["id"] == 17)
    assert "with W_Q, W_K scaled by 100 (scores ×10000): False" in item17["measured"]


def test_the_factory_is_called_as_the_readme_says():
    """Three times: float64 weights, float32 copies (item 13), and float64 with W_Q, W_K ×100 (item 17)."""
    import buggy_blocks

    buggy_blocks.BUILT.clear()
    result = runner.invoke(app, ["verify", "--impl", "buggy_blocks:counts_builds", "--json"])
    assert result.exit_code == 0, result.output
    dtypes = [w["w_q"].dtype.name for w in buggy_blocks.BUILT]
    assert dtypes == ["float64", "float32", "float64"]
    first, _, scaled = buggy_blocks.BUILT
    assert np.array_equal(scaled["w_q"], first["w_q"] * 100) and np.array_equal(scaled["w_v"], first["w_v"])


@pytest.mark.parametrize("name", ["nanogpt_block.py", "llama_layer.py"])
def test_readme_shows_the_torch_examples_as_they_are(name):
    """The code of each example (after its docstring) is in the README verbatim; the torch tests run them."""
    code = (ROOT / "examples" / name).read_text(encoding="utf-8").split('"""', 2)[2].strip()
    assert code in (ROOT / "README.md").read_text(encoding="utf-8")


def test_an_output_dtype_different_from_the_input_is_flagged():
    result, data = run(f"{BUGGY}:ReturnsFloat32", "--only", "14")
    check = data["checks"][0]
    assert result.exit_code == 1 and check["status"] == "FAIL"
    assert "output (2, 5, 512) float32" in check["measured"] and "float32 for float64 input" in check["hint"]


def test_c_level_writes_to_stdout_also_go_to_stderr():
    """A real process: file descriptor 1 is blockcli's stdout, and C's stdio buffer drains to stderr."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "blockcli", "verify", "--impl", f"{BUGGY}:WritesToFd1", "--json",
                          "--only", "14,16"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["passed"] is True
    assert "raw bytes on fd 1" in out.stderr and "C printf line" in out.stderr


def test_torch_and_sequence_options_refused_where_they_mean_nothing(tmp_path):
    result = runner.invoke(app, ["verify", "--per-sequence"])
    assert result.exit_code == 2 and "--per-sequence applies to an --impl target" in result.stderr
    wmap = tmp_path / "map.yaml"
    wmap.write_text("attn.qkv.weight: [w_q, w_k, w_v]\n")
    result = runner.invoke(app, ["verify", "--impl", f"{BUGGY}:Correct", "--weights-map", str(wmap)])
    assert result.exit_code == 2 and "built a Correct, not a torch.nn.Module" in result.stderr
    wmap.write_text("- not a mapping\n")
    result = runner.invoke(app, ["verify", "--impl", f"{BUGGY}:Correct", "--weights-map", str(wmap)])
    assert result.exit_code == 2 and "--weights-map: expected a mapping" in result.stderr


def test_a_mask_cached_for_16_positions_fails_at_the_long_t():
    """At the config's T = 5 the mask is right; at T = 64 every position past 15 sees the future."""
    result, data = run(f"{BUGGY}:MaskCachedAt16", "--only", "4,8,12")
    s = {c["id"]: c for c in data["checks"]}
    assert result.exit_code == 1 and s[4]["status"] == "PASS"
    assert s[8]["status"] == "FAIL" and "at T=64" in s[8]["measured"]
    assert s[12]["status"] == "FAIL" and "agrees at T=5 but not at T=64" in s[12]["hint"]


def test_a_module_target_imports_from_the_working_directory_under_both_entry_points(tmp_path):
    """`--impl package.module:Name` finds the package in the working directory under the `blockcli` script
    (whose sys.path starts at its own folder) as under `python -m blockcli` (whose starts at the cwd)."""
    import shutil
    import subprocess
    from pathlib import Path

    package = tmp_path / "myblocks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(ROOT / "examples" / "my_block.py", package / "mine.py")
    script = shutil.which("blockcli", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the blockcli script is not installed beside this interpreter")
    results = []
    for command in ([script], [sys.executable, "-m", "blockcli"]):
        out = subprocess.run([*command, "verify", "--impl", "myblocks.mine:MyBlock", "--only", "12,14", "--json"],
                             cwd=tmp_path, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        results.append([(c["id"], c["status"]) for c in json.loads(out.stdout)["checks"]])
    assert results[0] == results[1] == [(12, "PASS"), (14, "PASS")]


def test_every_path_an_example_names_is_shipped():
    import re

    for example in sorted((ROOT / "examples").glob("*.py")):
        docstring = example.read_text(encoding="utf-8").split('"""')[1]
        for path in re.findall(r"\b((?:configs|examples|tests)/[\w./-]+\.(?:yaml|py))", docstring):
            assert (ROOT / path).is_file(), f"{example.name} names {path}, which is not in the repository"
