"""The mixture-of-experts MLP: count (total and active) equals the arrays, trace rows (executed per
expert, analytic as all experts together) agree, each expert runs only on its routed rows, routing
follows the slow reference, and property checks across every routing variant (hypothesis)."""

import json
import math
import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from typer.testing import CliRunner

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

from blockcli.block import DecoderBlock, Model  # noqa: E402
from blockcli.cli import app  # noqa: E402
from blockcli.config import ConfigError, parse_config  # noqa: E402
from blockcli.count import count_parameters  # noqa: E402
from blockcli.shapes import block_parameter_shapes  # noqa: E402
from blockcli.sizing import Dims, matmul_weights  # noqa: E402
from blockcli.trace import analytic_trace, merge_expert_rows, run_trace  # noqa: E402
from blockcli.verify import verify  # noqa: E402
from strategies import moe_mappings  # noqa: E402

runner = CliRunner()
MIXTRAL_LIKE = {"d_model": 16, "n_heads": 2, "d_ff": 32, "activation": "swiglu", "bias": False, "norm": "rmsnorm", "placement": "pre",
                "moe": {"n_experts": 4, "top_k": 2, "d_expert": 8, "renormalize": True}}


def config(block, model=None, batch=2, seq=5):
    data = {"block": block, "run": {"batch": batch, "seq_len": seq, "dtype": "float64"}}
    if model:
        data["model"] = model
    return parse_config(data)


@settings(max_examples=40, deadline=None)
@given(moe_mappings(), st.integers(1, 3), st.integers(1, 6))
def test_block_equals_the_slow_reference(block, batch, seq):
    cfg = config(block, batch=batch, seq=seq)
    blk = DecoderBlock.from_config(cfg)
    x = np.random.default_rng(seq).standard_normal((batch, seq, cfg.block.d_model))
    b = cfg.block  # the rotated fraction as blockcli rounds it (to whole pairs); RMSNorm's shift if it has one
    expected = ref.block_forward(block, {k: np.asarray(v) for k, v in blk.params.items()}, x,
                                 rope=b.rope_dims / b.head_dim, rms_beta="ln1_beta" in blk.params)
    assert np.max(np.abs(blk(x) - expected)) < 1e-10


@settings(max_examples=30, deadline=None)
@given(moe_mappings(), st.booleans(), st.integers(1, 3), st.integers(1, 6))
def test_analytic_rows_equal_executed_rows_with_experts_merged(block, with_model, batch, seq):
    model = {"n_layers": 2, "vocab_size": 13, "max_positions": 8, "positions": "rope" if block["rope"] else "learned"}
    cfg = config(block, model if with_model else None, batch, seq)
    executed = run_trace(cfg).rows
    # per expert, the executed rows hold that expert's own rows; together they are exactly B·T·k
    n_rows = sum(r.output_shape[0] for r in executed if r.key.endswith(".pre") and ".experts." in "." + r.key
                 and r.layer in (None, 0))
    assert n_rows == batch * seq * cfg.block.moe.top_k
    assert merge_expert_rows(executed, cfg, batch * seq) == analytic_trace(cfg).rows


@settings(max_examples=30, deadline=None)
@given(moe_mappings())
def test_count_formula_equals_the_arrays_and_the_hand_active_count(block):
    cfg = config(block, {"n_layers": 3, "vocab_size": 11, "max_positions": 8, "tie_embeddings": False,
                         "positions": "rope" if block["rope"] else "learned"})
    result = count_parameters(cfg)
    assert result.reconciled.match, result.reconciled.mismatches
    shapes = ref.model_param_shapes(block, cfg.model.__dict__, rms_beta=block["bias"]["norm"])
    moe, gated = block["moe"], block.get("gated", block["activation"] in ref.GATED_NAMES)
    # the selection bias is stored but, as transformers holds it (a buffer), not a parameter
    assert result.buffers == (3 * moe["n_experts"] if moe.get("selection_bias") else 0)
    assert result.total + result.buffers == sum(math.prod(s) for s in shapes.values())
    d, d_e = cfg.block.d_model, moe["d_expert"]
    one_expert = (3 if gated else 2) * d * d_e + ((2 if gated else 1) * d_e + d if block["bias"]["mlp"] else 0)
    # active: every parameter but the E − k routed experts a token is not sent to, in each of the 3 layers
    assert result.active_total == result.total - 3 * (moe["n_experts"] - moe["top_k"]) * one_expert


def test_mixtral_like_count_rows_by_hand():
    cfg = config(MIXTRAL_LIKE)
    rows = {c.name: c for c in count_parameters(cfg).components}
    d, E, k, d_e = 16, 4, 2, 8
    assert rows["mlp.router"].count == d * E
    assert rows["mlp.experts"].count == E * 3 * d * d_e and rows["mlp.experts"].active == k * 3 * d * d_e
    assert rows["mlp"].active == d * E + k * 3 * d * d_e


def test_flops_per_token_use_the_active_weights():
    cfg = config(MIXTRAL_LIKE)
    per_layer, _ = matmul_weights(Dims.of(cfg))
    d, E, k, d_e = 16, 4, 2, 8
    assert per_layer == 4 * d * d + d * E + k * 3 * d * d_e  # Q, K, V, O; router; k experts of 3 matrices


def test_an_expert_no_token_chooses_is_never_computed():
    moe = DecoderBlock.from_config(config(MIXTRAL_LIKE)).mlp
    moe.p["router"][:, 3] = -1.0  # for x = 1 (every feature), expert 3's logit is -16: below every other one
    moe.p["router"][:, :3] = np.abs(moe.p["router"][:, :3])
    for key in ("w_gate", "w_up", "w_down"):
        moe.p[f"experts.3.{key}"] = np.full_like(moe.p[f"experts.3.{key}"], np.nan)  # any use would show
    x = np.ones((2, 3, 16))
    chosen, _ = moe.route(x)
    assert 3 not in chosen
    assert np.all(np.isfinite(moe(x)))
    rows = []
    traced = moe(x, lambda key, op, out, inputs, **kw: rows.append((key, out.shape)))
    assert np.all(np.isfinite(traced))
    assert [shape for key, shape in rows if key.startswith("experts.3.")] == [(0, 16), (0, 8), (0, 8), (0, 8), (0, 16)]


def test_routing_equals_the_reference_for_each_variant():
    rng = np.random.default_rng(3)
    variants = [
        {"n_experts": 8, "top_k": 3, "d_expert": 4, "scoring": "sigmoid", "renormalize": True, "routed_scaling": 2.5,
         "n_groups": 4, "top_groups": 2, "group_score": "top2_sum", "selection_bias": True},
        {"n_experts": 6, "top_k": 2, "d_expert": 4, "n_groups": 3, "top_groups": 1, "routed_scaling": 16.0},
        {"n_experts": 5, "top_k": 2, "d_expert": 4, "order": "topk_softmax"},
    ]
    for moe in variants:
        block = dict(MIXTRAL_LIKE, moe=moe)
        blk = DecoderBlock.from_config(config(block))
        if "router_bias" in blk.params:
            blk.params["router_bias"] *= 10  # a bias large enough to change choices
        x = rng.standard_normal((2, 5, 16))
        chosen, weights = blk.mlp.route(x)
        for b in range(2):
            for t in range(5):
                want, w = ref.moe_routing(ref.resolve_block(block)["moe"], blk.params, "", x[b, t])
                assert list(chosen[b, t]) == want
                assert np.allclose(weights[b, t], w, rtol=1e-12, atol=0)


def test_ties_go_to_the_lower_expert_index():
    blk = DecoderBlock.from_config(config(dict(MIXTRAL_LIKE, moe={"n_experts": 4, "top_k": 2, "d_expert": 2})))
    blk.params["router"][...] = 0.0  # every expert scores 1/4: the choice is a pure tie
    chosen, weights = blk.mlp.route(np.ones((1, 3, 16)))
    assert chosen.tolist() == [[[0, 1]] * 3] and np.allclose(weights, 0.25)


@pytest.mark.parametrize("moe, message", [
    ({"n_experts": 4, "top_k": 5, "d_expert": 2}, "block.moe.top_k: expected at most n_experts=4"),
    ({"n_experts": 6, "top_k": 1, "d_expert": 2, "n_groups": 4}, "block.moe.n_groups: n_experts=6 is not divisible"),
    ({"n_experts": 4, "top_k": 3, "d_expert": 2, "n_groups": 4, "top_groups": 2},
     "block.moe.top_k: 3 experts cannot be chosen from 2 group(s) of 1"),
    ({"n_experts": 4, "top_k": 1}, "block.moe.d_expert: required"),
    ({"n_experts": 4, "top_k": 1, "d_expert": 2, "shared_gate": True}, "block.moe.shared_gate"),
    ({"n_experts": 4, "top_k": 1, "d_expert": 2, "order": "topk_softmax", "scoring": "sigmoid"}, "block.moe.order"),
    ({"n_experts": 4, "top_k": 1, "d_expert": 2, "experts": 3}, "block.moe.experts: unknown field"),
    ({"n_experts": 4, "top_k": 1, "d_expert": 2, "selection_bias_frozen": True}, "block.moe.selection_bias_frozen"),
    ({"n_experts": 4, "top_k": 3, "d_expert": 2, "order": "sparsemixer"}, "block.moe.order: sparsemixer"),
])
def test_bad_moe_fields_are_one_line_naming_the_field(moe, message):
    with pytest.raises(ConfigError) as err:
        parse_config({"block": dict(MIXTRAL_LIKE, moe=moe)})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bias_mlp_gives_every_expert_and_the_router_flag_its_biases():
    """gpt-oss: bias.mlp puts b_gate, b_up (d_e,) and b_down (d,) on every routed and shared expert; moe.logit_bias a
    (E,) bias on the router's logits; the count is the hand sum of those and of the bias-free rest (d = 16, 2 heads)."""
    moe = {"n_experts": 4, "top_k": 2, "d_expert": 6, "d_shared": 5, "logit_bias": True}
    cfg = parse_config({"block": dict(MIXTRAL_LIKE, bias={"qkv": False, "out": False, "mlp": True, "norm": False},
                                      moe=moe)})
    shapes = block_parameter_shapes(cfg.block)
    d = cfg.block.d_model
    assert shapes["b_router"] == (4,)
    for key, width in [(f"experts.{e}.", 6) for e in range(4)] + [("shared_", 5)]:
        assert (shapes[key + "b_gate"], shapes[key + "b_up"], shapes[key + "b_down"]) == ((width,), (width,), (d,))
    gated = lambda width: 3 * d * width + 2 * width + d  # w_gate, w_up, w_down and their biases
    router = d * 4 + 4
    norms = 2 * d
    attention = 4 * d * d  # W_Q, W_K, W_V, W_O without biases (bias.qkv and bias.out false)
    assert count_parameters(cfg).total == norms + attention + router + 4 * gated(6) + gated(5)


@settings(max_examples=15, deadline=None)
@given(moe_mappings())
def test_verify_passes_and_the_moe_checks_run(block):
    report = verify(config(block))
    assert report.passed, [(c.id, c.measured) for c in report.checks if c.passed is False]
    status = {c.id: c.status for c in report.checks}
    assert status[18] == "PASS"
    renormalised = block["moe"]["renormalize"] or block["moe"].get("order") == "topk_softmax"
    assert status[19] == ("PASS" if renormalised else "SKIP")


def test_cached_decoding_of_a_moe_model_equals_the_full_pass():
    cfg = config(MIXTRAL_LIKE, {"n_layers": 2, "vocab_size": 13, "max_positions": 8, "positions": "rope"})
    model = Model.from_config(cfg)
    ids = np.random.default_rng(1).integers(0, 13, (2, 6))
    caches = model.new_cache()
    steps = [model.step(ids[:, t:t + 1], caches) for t in range(6)]
    assert np.max(np.abs(np.concatenate(steps, axis=1) - model(ids))) < 1e-10


def test_count_json_reports_active_parameters():
    data = json.loads(runner.invoke(app, ["count", "-", "--json"], input=json.dumps({"block": MIXTRAL_LIKE})).stdout)
    d, E, k, d_e = 16, 4, 2, 8
    assert data["total"] - data["active_per_token"] == (E - k) * 3 * d * d_e
    experts = next(c for c in data["components"] if c["name"] == "mlp.experts")
    assert experts["count"] == E * 3 * d * d_e and experts["active"] == k * 3 * d * d_e


# ----------------------------------------------------------------------------- against transformers

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf")


def test_deepseek_v3_routing_equals_transformers_deepseekv3moe():
    """transformers' DeepseekV3MoE (tests/fixtures/hf/generate.py: sigmoid scores, e_score_correction_bias for
    the choice only, 4 groups of which the best 2 by their top-two sums, top 3 of 8 renormalised, × 2.5, and
    2 shared experts of width 4), its weights and its float64 output on a random input."""
    with np.load(os.path.join(FIXTURES, "deepseek_v3_moe", "expected.npz")) as data:
        want = {k: data[k] for k in data.files}
    spec = json.loads(str(want["config"]))
    d, E, width = spec["hidden_size"], spec["n_routed_experts"], spec["moe_intermediate_size"]
    block = {"d_model": d, "n_heads": 2, "d_ff": 8, "activation": "swiglu", "bias": False, "norm": "rmsnorm",
             "moe": {"n_experts": E, "top_k": spec["num_experts_per_tok"], "d_expert": width, "scoring": "sigmoid",
                     "renormalize": spec["norm_topk_prob"], "routed_scaling": spec["routed_scaling_factor"],
                     "n_groups": spec["n_group"], "top_groups": spec["topk_group"], "group_score": "top2_sum",
                     "selection_bias": True, "d_shared": spec["n_shared_experts"] * width}}
    blk = DecoderBlock.from_config(config(block))
    p = blk.params
    p["router"], p["router_bias"] = want["gate.weight"].T, want["gate.e_score_correction_bias"]
    for e in range(E):
        gate_up = want["experts.gate_up_proj"][e]  # (2·width, d): gate rows, then up rows
        p[f"experts.{e}.w_gate"], p[f"experts.{e}.w_up"] = gate_up[:width].T, gate_up[width:].T
        p[f"experts.{e}.w_down"] = want["experts.down_proj"][e].T
    for ours, theirs in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
        p[f"shared_{ours}"] = want[f"shared_experts.{theirs}.weight"].T
    y = blk.mlp(want["x"])
    assert np.max(np.abs(y - want["y"])) / np.max(np.abs(want["y"])) < 1e-12
    # the bias matters: without it the choice (and so the output) differs
    p["router_bias"] = np.zeros(E)
    assert np.max(np.abs(blk.mlp(want["x"]) - want["y"])) > 1e-3


@pytest.mark.parametrize("name, change", [
    ("qwen2_moe", {"renormalize": True}),  # its norm_topk_prob is false: the weights are not renormalised
    ("mixtral", {"renormalize": False}),  # Mixtral always renormalises
    ("qwen3_moe", {"top_k": 1}),
])
def test_each_routing_feature_matters_for_transformers_logits(name, change):
    import dataclasses

    from blockcli import load_config

    folder = os.path.join(FIXTURES, name)
    cfg = load_config(folder)
    with np.load(os.path.join(folder, "expected.npz")) as data:
        ids, want = data["input_ids"], data["logits_float64"]
    moe = dataclasses.replace(cfg.block.moe, **change)
    wrong = dataclasses.replace(cfg, block=dataclasses.replace(cfg.block, moe=moe))
    got = Model.from_config(wrong, weights=folder, dtype="float64")(ids)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) > 1e-4


def test_qwen2_moe_shared_expert_and_its_gate_matter():
    from blockcli import load_config

    folder = os.path.join(FIXTURES, "qwen2_moe")
    with np.load(os.path.join(folder, "expected.npz")) as data:
        ids, want = data["input_ids"], data["logits_float64"]
    model = Model.from_config(load_config(folder), weights=folder, dtype="float64")
    assert np.max(np.abs(model(ids) - want)) / np.max(np.abs(want)) < 1e-9
    for block in model.blocks:  # a constant gate of sigmoid(0) = 1/2 in place of sigmoid(x·w_gate)
        block.params["shared_gate"][...] = 0.0
    assert np.max(np.abs(model(ids) - want)) / np.max(np.abs(want)) > 1e-4
