"""verify: the checklist passes on the real block, every seeded bug is caught by the check meant
for it, and the exit codes and JSON a CI job relies on."""

import json

import pytest
from hypothesis import given, settings
from typer.testing import CliRunner

from blockcli.cli import app
from blockcli.config import parse_config, preset_names
from blockcli.sources import load_config
from blockcli.mutants import MUTANTS
from blockcli.verify import NAMES, verify
from conftest import CONFIGS
from strategies import block_mappings

runner = CliRunner()


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_example_config_passes(path):
    report = verify(load_config(path))
    assert [c.id for c in report.checks] == list(range(1, 20))
    dense = [c for c in report.checks if c.id <= 17]
    assert all(c.passed for c in dense), [(c.id, c.measured) for c in dense if not c.passed]
    # the mixture-of-experts items say why they cannot run on a dense block: never a PASS
    assert [(c.status, c.measured) for c in report.checks if c.id > 17] == \
        [("SKIP", "the block has no mixture of experts")] * 2


def test_the_head_split_check_reads_the_clamp_that_comes_after_the_qk_norms():
    """OLMoE's order (clip_after_qk_norm): the heads are split from the normalised-then-clamped projections, so
    item 2 must compare them with those (hypothesis found item 2 failing at 0.476 against the unclamped ones)."""
    block = {"d_model": 2, "n_heads": 1, "d_ff": 1, "rope": True, "bias": False, "qk_norm": "projection",
             "clip_qkv": 0.01, "clip_after_qk_norm": True}  # a clamp that binds
    report = verify(parse_config({"block": block, "run": {"batch": 2, "seq_len": 5}}))
    assert next(c for c in report.checks if c.id == 2).passed  # the head split


@settings(max_examples=25)
@given(block_mappings())
def test_random_valid_configs_pass(block):
    report = verify(parse_config({"block": block, "run": {"batch": 2, "seq_len": 5}}))
    assert report.passed, [(c.id, c.measured) for c in report.checks if not c.passed]


# Which items must catch which seeded bug (cell by cell where the expectation is clear).
MEANT = {
    "split-no-transpose": {2}, "softmax-query-axis": {3, 8}, "mask-after-softmax": {3, 4, 8, 9},
    "mask-hides-diagonal": {4, 9}, "no-mask": {4, 8}, "missing-wo": {5}, "heads-wrong-order": {5},
    "residual-broadcast": {6, 8}, "norm-time-axis": {7, 8}, "norm-batch-axis": {7},
    "unscaled-scores": {12}, "softmax-no-max": {17}, "count-forgets-biases": {10}, "rope-wrong-layout": {12},
    "alibi-naive-slopes": {12},
    "mla-rope-on-nope": {12}, "mla-latent-norm-skipped": {12},
    "router-softmax-token-axis": {8, 11, 12, 15}, "router-wrong-k": {12, 18}, "router-no-renormalize": {12, 19},
    "shared-expert-dropped": {12},
}
# DeepSeek-V2-Lite's attention shape, small: full Q projection (first bug) or Q through its latent (second)
_LATENT = {"d_model": 48, "n_heads": 4, "d_ff": 64, "norm": "rmsnorm", "activation": "swiglu", "bias": False,
           "rope": True, "mla": {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8}}
MOE = {"block": {"d_model": 16, "n_heads": 2, "activation": "swiglu", "bias": False, "norm": "rmsnorm",
                 "moe": {"n_experts": 4, "top_k": 2, "d_expert": 8, "renormalize": True, "d_shared": 6,
                         "shared_gate": True}}}
MOE_MUTANTS = ("router-softmax-token-axis", "router-wrong-k", "router-no-renormalize", "shared-expert-dropped")
# A bug that cannot show in the default config (RoPE off) is tried on one where it can.
SUBJECT = {"rope-wrong-layout": {"block": {"d_model": 64, "n_heads": 4, "d_ff": 96, "rope": True,
                                           "rope_layout": "interleaved"}},
           # 6 heads: BLOOM's rule and the naive 2^(-8i/h) disagree on every slope
           "alibi-naive-slopes": {"block": {"d_model": 48, "n_heads": 6, "d_ff": 96, "alibi": True}},
           "mla-rope-on-nope": {"block": _LATENT},
           "mla-latent-norm-skipped": {"block": {**_LATENT, "mla": {**_LATENT["mla"], "q_lora_rank": 12}}},
           **{name: MOE for name in MOE_MUTANTS}}
# Items a bug cannot touch: structure (1), the output shape (14), the count (10) for bugs in the
# forward pass, and float32 agreement (13) for every bug whose output stays finite.
UNTOUCHED = {name: {1, 14} | ({10} if name != "count-forgets-biases" else set())
             | ({13} if name != "mask-hides-diagonal" else set()) for name in MEANT}


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if not m.backward], ids=lambda m: m.name)
def test_each_seeded_bug_is_caught_by_its_check(mutant):
    config = parse_config(SUBJECT[mutant.name]) if mutant.name in SUBJECT else load_config()
    assert mutant.inapplicable(config.block) is None
    report = verify(config, ops=mutant.ops, formula=mutant.formula)
    failed = {c.id for c in report.checks if c.passed is False}
    assert MEANT[mutant.name] <= failed
    assert not failed & UNTOUCHED[mutant.name]
    assert set(mutant.expected) == MEANT[mutant.name]
    assert not report.passed


def test_every_required_bug_is_seeded():  # the backward's: tests/test_verify_grad.py
    assert set(MEANT) == {m.name for m in MUTANTS if not m.backward}


def test_exit_codes_and_json():
    ok = runner.invoke(app, ["verify", "--json"])
    assert ok.exit_code == 0
    data = json.loads(ok.stdout)
    assert data["passed"] is True and len(data["checks"]) == 19
    for check in data["checks"]:
        assert {"id", "name", "passed", "measured", "tolerance"} <= set(check)
    bad = runner.invoke(app, ["verify", "--inject", "no-mask", "--json"])
    assert bad.exit_code == 1
    failed = {c["id"] for c in json.loads(bad.stdout)["checks"] if not c["passed"]}
    assert {4, 8} <= failed
    assert runner.invoke(app, ["verify", "--inject", "nosuch"]).exit_code == 2
    assert runner.invoke(app, ["verify", "no-such-preset"]).exit_code == 2


def test_only_and_skip():
    data = json.loads(runner.invoke(app, ["verify", "--only", "4,8", "--json"]).stdout)
    assert [c["id"] for c in data["checks"]] == [4, 8]
    data = json.loads(runner.invoke(app, ["verify", "--skip", "12,13", "--json"]).stdout)
    assert [c["id"] for c in data["checks"]] == [i for i in range(1, 20) if i not in (12, 13)]
    assert runner.invoke(app, ["verify", "--only", "99"]).exit_code == 2


def test_several_configs_one_summary_line_each():
    # one line per config, or per kind of layer of a config whose layers differ (alternating-window.yaml:
    # its sliding and its global layers, named "layer N")
    args = ["verify"] + [str(p) for p in CONFIGS]
    result = runner.invoke(app, args)
    assert result.exit_code == 0
    lines = [l for l in result.stdout.splitlines() if l.startswith(("PASS", "FAIL"))]
    expected = []
    for path in CONFIGS:
        config = load_config(path)
        groups = config.layer_groups() if config.model and config.layers_differ else []
        expected += [f"PASS {path} layer {g.layers[0]}:" for g in groups] or [f"PASS {path}:"]
    assert [l.split(":")[0] + ":" for l in lines] == expected


def test_mutant_matrix_and_listing():
    listed = runner.invoke(app, ["verify", "--list-mutants"]).stdout.splitlines()
    assert [line.split()[0] for line in listed] == [m.name for m in MUTANTS]
    result = runner.invoke(app, ["verify", "--mutants", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    rows = {m["name"]: set(m["caught_by"]) for m in data["mutants"]}
    # the default block has no RoPE, no latent attention, no ALiBi and no mixture of experts
    latent = ["mla-rope-on-nope", "mla-latent-norm-skipped"]
    assert [m["name"] for m in data["not_applicable"]] == (["rope-wrong-layout"] + latent + ["alibi-naive-slopes"]
                                                           + list(MOE_MUTANTS)
                                                           + [m.name for m in MUTANTS if m.backward])  # no --grad
    for name, meant in MEANT.items():
        assert name in SUBJECT or name in MOE_MUTANTS or meant <= rows[name]


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_wrong_rope_layout_is_caught_either_way_and_needs_two_pairs(layout):
    mutant = next(m for m in MUTANTS if m.name == "rope-wrong-layout")
    config = parse_config({"block": {"d_model": 32, "n_heads": 2, "d_ff": 40, "rope": 0.25, "rope_layout": layout}})
    failed = {c.id for c in verify(config, ops=mutant.ops).checks if c.passed is False}
    assert failed == {12}
    one_pair = parse_config({"block": {"d_model": 32, "n_heads": 16, "d_ff": 40, "rope": True, "rope_layout": layout}})
    assert "one rotated pair" in mutant.inapplicable(one_pair.block)


def test_large_preset_is_verified_on_a_scaled_copy():
    report = verify(load_config("llama-2-70b"))
    assert report.passed and any("scaled" in n for n in report.notes)


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_passes_on_its_own_block(name):
    """blockcli's block of every packaged preset passes its own checklist (a large one on its scaled copy,
    which must keep the structure: Phi-3.5's longrope factors, one per rotated pair, included)."""
    report = verify(load_config(name))
    assert report.passed, [(c.id, c.measured) for c in report.checks if not c.passed and c.error]


def test_names_cover_the_chapter_checklist():
    assert len(NAMES) == 24 and all(NAMES[i] for i in range(1, 11))  # 20-24: the gradient checks (--grad)


def test_softmax_without_max_is_caught_under_qk_norm():
    """Q/K norms undo a W_Q/W_K scale: item 17 scales the norms' outputs instead, so the bug still shows."""
    from blockcli.mutants import find_mutant

    for qk_norm in ("head", "projection"):
        config = parse_config({"block": {"d_model": 16, "n_heads": 2, "d_ff": 32, "norm": "rmsnorm", "bias": False,
                                         "qk_norm": qk_norm, "norm_unit_offset": qk_norm == "head"}})
        mutant = find_mutant("softmax-no-max")
        report = verify(config, ops=mutant.ops, only={17})
        assert not report.passed, qk_norm
