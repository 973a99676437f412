"""Dory (blockcli/families/dory.py): nGPT's looped normalized transformer. Its parameter counts against transformers 5.24's
own totals (the causal LM built on the meta device, tied weights once) and a hand count, for the config class's defaults
and for a random config; the torch-marked test recomputes both totals. Its forward, every layer pass (the recurrent
layers once a loop, as transformers' hooks see them) and the decode step are held to transformers by
tests/test_checkpoint.py on tests/fixtures/hf/dory and by tests/test_random_configs.py on fuzz-dory-0; here: decoding
token by token through the per-loop caches, what the fixture exercises, the trace and sizing, and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blockcli import Model
from blockcli.checkpoint import load_config
from blockcli.config import parse_config
from blockcli.count import count_parameters
from blockcli.hf import hf_to_mapping
from conftest import ROOT, config_error_message
from test_dense_families import _sizes, assert_totals_are_transformers_own

FIXTURE = ROOT / "tests" / "fixtures" / "hf" / "dory"


def dory_by_hand(d: int, f: int, layers: int, q: int, kv: int, vocab: int, tied: bool, mlp_bias: bool) -> int:
    """Q, the gate, O (d·q each), K, V (d·kv each), the query and gate scales s_qk, s_gate (q each); the SwiGLU MLP
    (3·d·f, and 2·f + d biases with mlp_bias) and its scales s_uv gate, up (f each); the residual rates λ_1, λ_2 (d
    each); no norm has a weight. Embeddings, an untied head, the logit scale (V)."""
    layer = 3 * d * q + 2 * d * kv + 2 * q + 3 * d * f + (2 * f + d if mlp_bias else 0) + 2 * f + 2 * d
    return layers * layer + vocab * d * (1 if tied else 2) + vocab


# DoryConfig's sizes (Dory1.0-4B)
_DORY_SIZES = _sizes(2560, 7168, 36, 16, 131072, 8192)
_DORY_DEFAULTS_TOTAL = 3_975_229_440  # the census's meta-device total of the defaults
# a random Dory: 6 heads of 10 over 3 K/V heads, 5 layers (1 before the recurrent section, 2 in it run 3 times, 2 after),
# MLP biases, tied, every second layer global
_DORY_RANDOM = dict(hidden_size=48, intermediate_size=40, num_hidden_layers=5, num_attention_heads=6,
                    num_key_value_heads=3, head_dim=10, vocab_size=300, n_input_layers=1, n_output_layers=2,
                    n_recurrent_loops=3, tie_word_embeddings=True, mlp_bias=True, sliding_window=16,
                    max_position_embeddings=96, initializer_range=0.03, ngpt_alpha_init=0.1,
                    layer_types=["sliding_attention", "full_attention"] * 2 + ["sliding_attention"])
_DORY_RANDOM_TOTAL = 103_220


def _count(fields: dict) -> int:
    return count_parameters(parse_config(hf_to_mapping({"model_type": "dory", **fields}, "config.json"))).total


def test_counts_equal_transformers_totals_and_the_hand_formula() -> None:
    assert dory_by_hand(2560, 7168, 36, 4096, 1024, 131072, False, False) == _DORY_DEFAULTS_TOTAL
    assert dory_by_hand(48, 40, 5, 60, 30, 300, True, True) == _DORY_RANDOM_TOTAL
    assert _count(_DORY_RANDOM) == _DORY_RANDOM_TOTAL
    # the released layout: each layer an attention and an mlp entry, every layer count doubled (DoryConfig halves them)
    released = {**_DORY_RANDOM, "num_hidden_layers": 10, "n_input_layers": 2, "n_output_layers": 4,
                "layer_types": [kind for t in _DORY_RANDOM["layer_types"] for kind in (t, "mlp")]}
    assert _count(released) == _DORY_RANDOM_TOTAL
    config = parse_config(hf_to_mapping({"model_type": "dory", **released}, "config.json"))
    m = config.model
    assert (m.n_layers, m.recurrent_start, m.recurrent_layers, m.recurrent_loops) == (5, 1, 2, 3)


@pytest.mark.torch
def test_the_totals_and_sizes_here_are_transformers_own() -> None:
    assert_totals_are_transformers_own("dory", _DORY_SIZES, (), _DORY_DEFAULTS_TOTAL, _DORY_RANDOM, _DORY_RANDOM_TOTAL)


@pytest.mark.parametrize("fields, named", [
    ({"attention_bias": True}, "attention_bias"),
    ({"recurrent_kv_cache_mode": "last_loop"}, "recurrent_kv_cache_mode"),
    ({"n_recurrent_layers": 3}, "n_recurrent_layers"),
    ({"layer_types": ["full_attention"] * 3}, "layer_types"),
    ({"layer_types": ["chunked_attention"] * 5}, "layer_types"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}, "rope_parameters"),
    ({"initializer_range": None}, "initializer_range"),
    ({"n_recurrent_loops": 0}, "n_recurrent_loops"),
])
def test_what_blockcli_does_not_implement_is_refused_naming_the_field(fields: dict, named: str) -> None:
    data = {"model_type": "dory", **_DORY_RANDOM, **fields}
    message = config_error_message(lambda: parse_config(hf_to_mapping(data, "config.json")), fields)
    assert named in message


def test_token_by_token_decoding_through_the_loops_caches_equals_transformers_full_pass() -> None:
    """Each recurrent loop keeps its own K/V cache (per_loop): seven one-token steps give transformers' logits."""
    with np.load(FIXTURE / "expected.npz") as data:
        ids, want = data["input_ids"], data["logits_float64"]
    model = Model.from_config(load_config(FIXTURE), weights=FIXTURE, dtype="float64")
    caches = model.new_cache()
    assert len(caches) == 5 + 2  # 5 layers, and the 2 recurrent ones again for the second loop
    steps = np.concatenate([model.step(ids[:, t:t + 1], caches) for t in range(ids.shape[1])], axis=1)
    assert np.max(np.abs(steps - want)) / np.max(np.abs(want)) <= 1e-10


@pytest.mark.parametrize("model_change, block_change", [
    ({"recurrent_loops": 1}, {}),  # the second loop
    ({"logit_scale": 1.0}, {}),
    ({}, {"ngpt": {"alpha": 1.0, "qk": 1.0, "gate": 1.0, "mlp": 1.0}}),
])
def test_the_loops_and_the_ngpt_scales_matter_for_the_fixture(model_change: dict, block_change: dict) -> None:
    with np.load(FIXTURE / "expected.npz") as data:
        ids, want = data["input_ids"], data["logits_float64"]
    mapping = hf_to_mapping(json.loads((FIXTURE / "config.json").read_text()), "config.json")
    mapping["model"].update(model_change)
    mapping["block"].update(block_change)
    changed = parse_config(mapping)
    got = Model.from_config(changed, weights=FIXTURE, dtype="float64")(ids)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) > 1e-3


def test_analytic_trace_rows_equal_the_executed_ones_and_sizing_counts_every_pass() -> None:
    from blockcli.sizing import inference
    from blockcli.trace import analytic_trace, run_trace, with_run

    config = with_run(load_config(FIXTURE), batch=2, seq_len=5)
    for attention in ("full", "chunked"):
        assert run_trace(config, attention=attention).rows == analytic_trace(config, attention).rows
    traced = run_trace(config, attention="full")
    rows = [r.key for r in traced.rows]
    assert "loop_1_in" in rows and "loop_1.blocks.2.attn_out" in rows  # the second loop's pass of layer 2
    assert traced.totals["parameters"] == 13_024
    # 7 layer passes, each its own K/V: B·T·(K + V of h_kv·d_h) in float32
    assert traced.totals["kv_cache_bytes"] == 7 * 2 * 5 * 2 * 8 * 4
    # within the window (4), where sizing's windowed caches keep every token as the trace's do
    within = run_trace(with_run(config, batch=2, seq_len=4), attention="full").totals
    sized = inference(load_config(FIXTURE), 13_024, 4, 2, "float32")
    assert sized.kv_bytes == within["kv_cache_bytes"] == 7 * 2 * 4 * 2 * 8 * 4
    assert sized.prefill.total() == within["matmul_flops"]


def test_the_backward_is_refused_in_one_line() -> None:
    from test_checkpoint import cli

    for args in (("train", FIXTURE, "--steps", "1"), ("count", FIXTURE, "--train"), ("trace", FIXTURE, "--backward")):
        proc = cli(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nGPT" in proc.stderr, (args, proc.stderr)


def test_verify_passes_and_catches_every_seeded_bug_that_applies() -> None:
    """verify on the fixture passes (items 6, 7 and 12 skipped saying why); the seeded bugs that an nGPT block can show
    are caught, the residual and softmax-overflow ones named not applicable."""
    from test_checkpoint import cli

    assert cli("verify", FIXTURE).returncode == 0
    proc = cli("verify", FIXTURE, "--mutants")
    assert proc.returncode == 0 and "every seeded bug is caught" in proc.stdout, proc.stdout[-2000:]
    assert "residual-broadcast (nGPT's residual is an interpolation" in proc.stdout + proc.stderr


def test_the_loss_runs_every_loop() -> None:
    """Model.loss (train's evaluation) is the cross-entropy of the logits the looped forward gives, by hand."""
    with np.load(FIXTURE / "expected.npz") as data:
        ids, logits = data["input_ids"], data["logits_float64"]
    model = Model.from_config(load_config(FIXTURE), weights=FIXTURE, dtype="float64")
    shifted = logits[:, :-1] - logits[:, :-1].max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    want = -np.mean(np.take_along_axis(log_probs, ids[:, 1:, None], axis=-1))
    assert abs(model.loss(ids) - want) <= 1e-10 * abs(want)


def test_the_report_names_the_ngpt_block(tmp_path) -> None:
    from test_checkpoint import cli

    out = tmp_path / "dory.html"
    proc = cli("report", FIXTURE, "-o", out)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert "L2 norm (onto the unit sphere)" in page and "nGPT: each residual add an interpolation" in page


def test_l2norm_is_the_ngpt_blocks_norm_only() -> None:
    message = config_error_message(lambda: parse_config({"block": {"d_model": 16, "n_heads": 2, "d_ff": 32,
                                                                   "norm": "l2norm"}}))
    assert message.startswith("block.norm: l2norm is the norm of nGPT's block")
