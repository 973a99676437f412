"""verify --grad: the gradient checks (items 20-23) pass on blockcli's block for every preset and fixture, on
a hand-written NumPy backward and on torch autograd; each seeded backward bug and each wrong backward of a
target is caught by the check meant for it, and by no forward check."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from blockcli.block import DecoderBlock, block_parameter_shapes, init_parameters
from blockcli.cli import app
from blockcli.config import parse_config, preset_names
from blockcli.mutants import MUTANTS, why_not
from blockcli.sources import load_config
from blockcli.verify import GRAD_CHECKS, verify
from conftest import NO_BACKWARD, ROOT

runner = CliRunner()
GRAD = set(GRAD_CHECKS)
FIXTURES = ROOT / "tests" / "fixtures" / "hf"
FOLDERS = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file() and p.name not in NO_BACKWARD)
BACKWARD = [m for m in MUTANTS if m.backward]
IMPLS = ROOT / "tests" / "impls" / "backward_blocks.py"
EXAMPLE = f"{ROOT / 'examples' / 'my_block_backward.py'}:MyBlockWithBackward"
# the default block has LayerNorm, one K/V head per query head and no RoPE; this one RMSNorm, GQA and RoPE
GQA_ROPE = ROOT / "configs" / "gqa-swiglu-rope.yaml"
# item 24 (the model's gradients) catches each too, on a model config; on a lone block it skips
MEANT = {"softmax-backward-no-row-sum": {20, 23, 24}, "layernorm-backward-no-mean": {20, 23, 24},
         "rmsnorm-backward-no-cross": {20, 23, 24}, "weight-grad-transposed": {20, 23, 24},
         "score-grad-unmasked": {20, 21, 23, 24}, "gqa-grad-one-head": {20, 23, 24},
         "rope-backward-forward-rotation": {20, 23, 24}, "tied-embedding-one-use": {24}}
BLOCK_LEVEL = [m for m in BACKWARD if not m.tied_head]


def failed(report):
    return {c.id for c in report.checks if c.passed is False}


def run_json(*args):
    result = runner.invoke(app, ["verify", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize("mutant", BLOCK_LEVEL, ids=lambda m: m.name)
@pytest.mark.parametrize("source", [None, GQA_ROPE], ids=["default", "gqa-rope"])
def test_each_backward_bug_is_caught_by_its_gradient_check_only(mutant, source):
    config = load_config(source)
    if mutant.inapplicable(config.block):
        pytest.skip(mutant.inapplicable(config.block))  # tried on the other config
    report = verify(config, ops=mutant.ops, formula=mutant.formula, grad=True)
    assert failed(report) == MEANT[mutant.name] - {24}  # the forward is right: every forward check passes
    assert set(mutant.expected) == MEANT[mutant.name]


@pytest.mark.parametrize("mutant", BACKWARD, ids=lambda m: m.name)
@pytest.mark.parametrize("preset", ["gpt2", "llama-3.1-8b"])  # tied LayerNorm MHA; untied RMSNorm GQA RoPE
def test_on_a_model_the_model_check_catches_each_backward_bug_too(mutant, preset):
    config = load_config(preset)
    why = why_not(mutant, config, None, grad=True)
    if why:
        pytest.skip(why)
    report = verify(config, ops=mutant.ops, formula=mutant.formula, grad=True)
    assert failed(report) == MEANT[mutant.name]


def test_every_backward_bug_shows_on_one_of_the_configs():
    assert set(MEANT) == {m.name for m in BACKWARD}
    configs = [load_config(s) for s in (None, GQA_ROPE, "gpt2", "llama-3.1-8b")]
    assert all(any(why_not(m, c, None, grad=True) is None for c in configs[:2]) for m in BLOCK_LEVEL)
    assert all(any(why_not(m, c, None, grad=True) is None for c in configs[2:]) for m in BACKWARD)


def _no_backward(config) -> str | None:
    """What the CLI says of a preset whose layers have no backward: state-space (Mamba) or lightning layers."""
    blocks = [config.layer_block(i) for i in range(config.model.n_layers)]
    if any(b.mamba is not None for b in blocks):
        return "gradients through a Mamba-1 or Mamba-2 (state-space) layer are not implemented"
    if any(b.lightning is not None for b in blocks):
        return "gradients through a lightning-attention layer are not implemented"
    return None


@pytest.mark.parametrize("name", preset_names())
def test_gradient_checks_pass_on_every_preset(name):
    config = load_config(name)
    refused = _no_backward(config)
    if refused:  # layers without a backward: verify --grad refuses the preset in one line
        result = runner.invoke(app, ["verify", "--grad", name])
        assert result.exit_code == 2 and result.stdout == ""
        assert refused in result.stderr
        assert result.stderr.count("\n") == 1
        return
    report = verify(config, only=GRAD)  # layer 0's block, scaled down where the preset is large
    assert report.passed, [(c.id, c.measured) for c in report.checks if not c.passed]
    assert [c.id for c in report.checks] == sorted(GRAD)
    model = next(c for c in report.checks if c.id == 24)
    assert model.status == "PASS", model.measured  # every preset is a model: its embeddings and head checked


@pytest.mark.parametrize("name", FOLDERS)
def test_gradient_checks_pass_on_every_fixture_with_its_own_weights(name):
    folder = FIXTURES / name
    report = verify(load_config(folder / "config.json"), weights=folder, layer=0, only=GRAD)
    assert report.passed, [(c.id, c.measured) for c in report.checks if not c.passed]


def test_a_hand_written_numpy_backward_passes_and_is_held_to_blockcli():
    code, data = run_json("--impl", EXAMPLE, "--grad")
    assert code == 0, data
    status = {c["id"]: c["status"] for c in data["checks"]}
    assert all(status[i] == "PASS" for i in GRAD - {24}) and status[24] == "SKIP"  # a block, no model


@pytest.mark.parametrize("target, meant, words", [
    ("SlightlyOff", {20, 23}, "differ:"),           # 0.1 % off: far outside finite differences' 1e-5
    ("ForgetsWo", {20, 22, 23}, "none returned: w_o"),
    ("ZeroesItsScale", {12, 22, 23}, "all zeros: ln2_gamma"),  # its forward differs too (item 12)
    ("LeaksBackward", {20, 21, 23}, "later positions"),
])
def test_a_wrong_backward_fails_the_check_meant_for_it(target, meant, words):
    code, data = run_json("--impl", f"{IMPLS}:{target}", "--grad")
    assert code == 1
    assert {c["id"] for c in data["checks"] if c["passed"] is False} == meant
    assert any(words in c["measured"] for c in data["checks"] if c["id"] in meant & GRAD)


def test_a_backward_returning_the_wrong_thing_is_an_error_not_a_pass():
    code, data = run_json("--impl", f"{IMPLS}:ReturnsOnlyDx", "--grad")
    assert code == 1
    assert {c["id"]: c["status"] for c in data["checks"] if c["id"] in GRAD} == {**dict.fromkeys(GRAD - {24}, "ERROR"),
                                                                                  24: "SKIP"}
    assert "must return (dx, {weight key: gradient})" in data["errors"][0]


def test_a_target_without_backward_skips_the_gradient_checks_saying_why():
    code, data = run_json("--impl", f"{ROOT / 'examples' / 'my_block.py'}:MyBlock", "--grad")
    assert code == 0
    skipped = [c for c in data["checks"] if c["id"] in GRAD]
    assert [c["status"] for c in skipped] == ["SKIP"] * 5
    assert all("has no backward" in c["measured"] for c in skipped[:4])
    assert "no model around it" in skipped[4]["measured"]


def test_grad_is_off_by_default_and_only_names_them():
    _, data = run_json()
    assert [c["id"] for c in data["checks"]] == list(range(1, 20))
    _, data = run_json("--grad")
    assert [c["id"] for c in data["checks"]] == list(range(1, 25))
    _, data = run_json("--only", "21")
    assert [(c["id"], c["status"]) for c in data["checks"]] == [(21, "PASS")]


def test_the_mutant_matrix_takes_the_backward_bugs_with_grad():
    code, data = run_json("--mutants", str(GQA_ROPE), "--grad")
    assert code == 0
    names = {m["name"] for m in data["mutants"]}
    assert {"rmsnorm-backward-no-cross", "gqa-grad-one-head", "rope-backward-forward-rotation"} <= names
    for m in data["mutants"]:  # a lone block: item 24 (a model's) skips
        assert set(m["caught_by"]) == set(m["expected"]) - {24} or not set(m["expected"]) & GRAD
    code, data = run_json("--mutants", str(GQA_ROPE))  # without --grad: the backward's bugs are not run
    assert code == 0 and not {m["name"] for m in data["mutants"]} & set(MEANT)
    listed = run_json("--list-mutants")[1]["mutants"]
    assert {m["name"] for m in listed if m["backward"]} == set(MEANT)


@pytest.mark.parametrize("args, words", [
    (["--inject", "rope-backward-forward-rotation", "--grad"], "(RoPE is off); it shows on the preset llama-3.1-8b"),
    (["--inject", "rope-wrong-layout"], "RoPE is off"),
    (["--inject", "router-wrong-k"], "no mixture of experts); it shows on the preset mixtral-8x7b"),
    (["--inject", "softmax-backward-no-row-sum"], "a bug of the backward: --grad"),
])
def test_inject_of_a_bug_that_cannot_show_is_a_usage_error(args, words):
    result = runner.invoke(app, ["verify", *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "--inject" in lines[0]


def test_finite_differences_are_an_independent_derivation():
    """Item 20 needs no backward of blockcli's to pass: the hand-written NumPy backward passes it, and a
    forward-consistent gradient 0.1 % off fails it (test above); here blockcli's own gradient of ⟨dy, y⟩ along
    a direction against a five-point stencil computed in this test."""
    config = parse_config({"block": {"d_model": 16, "n_heads": 2, "d_ff": 24, "rope": True, "norm": "rmsnorm"},
                           "run": {"batch": 2, "seq_len": 5}})
    rng = np.random.default_rng(0)
    params = init_parameters(block_parameter_shapes(config.block), 3, "float64")
    block = DecoderBlock(config.block, params, attention="full")
    x, dy = rng.standard_normal((2, 5, 16)), rng.standard_normal((2, 5, 16))
    _, grads = block.vjp(x, dy)
    for key in ("w_q", "ln1_gamma", "w_down"):
        u = rng.standard_normal(params[key].shape)
        f = [float(np.vdot(dy, DecoderBlock(config.block, {**params, key: params[key] + s * 1e-3 * u},
                                            attention="full")(x))) for s in (-2, -1, 1, 2)]
        numeric = (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * 1e-3)
        assert abs(float(np.vdot(grads[key], u)) - numeric) <= 1e-6 * abs(numeric)


def test_verify_grad_on_ngpt_is_refused_in_one_line():
    """Dory's nGPT block (its L2 norms, interpolated residuals, looped layers) has no backward in blockcli: verify
    --grad says so in one line, exit 2."""
    from test_checkpoint import cli

    proc = cli("verify", str(FIXTURES / "dory"), "--grad")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nGPT" in proc.stderr, proc.stderr
