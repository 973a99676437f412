"""The Mamba-2 (SSD) mixer and the hybrid state-space families (issue #28).

Expected numbers come from outside blockcli: transformers' outputs stored by tests/fixtures/ssm/generate.py
(logits, every layer, decode steps one token at a time after a prompt, the parameter total), the plain
loop-over-time recurrence of tests/reference.py, transformers' meta-device totals (recomputed by the
torch-marked test at the end) and counts by hand.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference as ref
from test_checkpoint import cli, one_error_line, relative
from blockcli import DecoderBlock, Model, load_config
from blockcli.config import BlockConfig, ConfigError, InputError, Mamba1, Mamba2, parse_config
from blockcli.count import count_parameters
from blockcli.hf import hf_to_mapping
from blockcli.mamba import selective_scan, ssd_scan
from blockcli.ops import causal_conv1d
from blockcli.sizing import Dims, inference, model_decode_flops, model_forward_flops
from blockcli.trace import analytic_trace, run_trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ssm"
FOLDERS = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}  # relative to the reference's largest magnitude
PROMPT = 3  # generate.py's prompt before its one-token decode steps


def expected(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / name / "expected.npz") as data:
        return {k: data[k] for k in data.files}


# ----------------------------------------------------------------------------- parity with transformers


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", FOLDERS)
def test_logits_every_layer_and_decode_steps_equal_transformers(name: str, dtype: str) -> None:
    folder, want = FIXTURES / name, expected(name)
    model = Model.from_config(load_config(folder), weights=folder, dtype=dtype)
    ids, tol = want["input_ids"], TOLERANCE[dtype]
    assert relative(model(ids), want[f"logits_{dtype}"]) <= tol
    x = model.embed(ids)
    for i, block in enumerate(model.blocks):
        x = block(x)
        assert relative(x, want[f"layers_{dtype}"][i]) <= tol, f"layer {i}"
    caches = model.new_cache()
    model.step(ids[:, :PROMPT], caches)
    steps = np.concatenate([model.step(ids[:, t:t + 1], caches) for t in range(PROMPT, ids.shape[1])], axis=1)
    assert relative(steps, want[f"decode_logits_{dtype}"]) <= tol
    assert relative(steps, want[f"logits_{dtype}"][:, PROMPT:]) <= tol  # and decoding is the full pass


@pytest.mark.parametrize("name", FOLDERS)
def test_parameter_total_equals_transformers_and_the_checkpoint_reconciles(name: str) -> None:
    folder, want = FIXTURES / name, expected(name)
    assert count_parameters(load_config(folder)).total == int(want["parameters"])
    proc = cli("count", folder)
    assert proc.returncode == 0, proc.stderr
    assert f"formula {int(want['parameters']):,} vs checkpoint tensors {int(want['parameters']):,}: match" in proc.stdout


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", FOLDERS)
def test_cache_bytes_equal_what_transformers_cache_holds(name: str, dtype: str) -> None:
    """After a prompt of 3 tokens at batch 2: the attention layers' keys and values, and the Mamba layers' conv
    and SSM states, as transformers' cache holds them; the state does not grow with T, the K/V does (a sliding
    layer's up to its window W: LFM3's; every fixture's W exceeds the prompt)."""
    folder, want = FIXTURES / name, expected(name)
    config = load_config(folder)
    total = count_parameters(config).total
    inf = inference(config, total, PROMPT, 2, dtype)
    assert (inf.kv_bytes, inf.state_bytes) == (int(want[f"kv_bytes_{dtype}"]), int(want[f"state_bytes_{dtype}"]))
    longer = inference(config, total, 100 * PROMPT, 2, dtype)
    blocks = [config.layer_block(i) for i in range(config.model.n_layers)]
    # by hand: 2·h_kv·d_h values a token at batch 2, each sliding layer holding its last W tokens only
    windowed = [(b.sliding_window, 2 * 2 * b.n_kv_heads * b.head_dim * np.dtype(dtype).itemsize) for b in blocks
                if b.sliding_window]
    assert all(w > PROMPT for w, _ in windowed)
    if windowed:
        assert longer.kv_bytes == (100 * (inf.kv_bytes - sum(PROMPT * t for _, t in windowed))
                                   + sum(w * t for w, t in windowed))
        assert longer.state_bytes == inf.state_bytes
    else:
        assert (longer.kv_bytes, longer.state_bytes) == (100 * inf.kv_bytes, inf.state_bytes)
    assert longer.memory_bytes == longer.parameter_bytes + longer.kv_bytes + longer.state_bytes + longer.activation_bytes


def test_a_mamba_layers_flops_do_not_grow_with_the_context() -> None:
    """Per token, by hand: the in- and out-projections, the conv's K taps per channel and the scan's two h_s·p·N
    products (x ⊗ B into the state, the state times C), times 2; the same at any context in a decode step."""
    config = parse_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 16, "norm": "rmsnorm", "activation": "swiglu",
                                     "bias": False, "mamba": {"n_heads": 4, "head_dim": 3, "d_state": 5,
                                                              "n_groups": 2, "conv_kernel": 3}}})
    d, h, p, N, g, K, d_ff = 8, 4, 3, 5, 2, 3, 16
    per_token = 2 * (d * (2 * h * p + 2 * g * N + h) + h * p * d + K * (h * p + 2 * g * N) + 2 * h * p * N + 3 * d * d_ff)
    groups = Dims.per_group(config)
    assert model_forward_flops(groups, 10, 2).total() == 2 * 10 * per_token
    assert model_decode_flops(groups, 10, 1) == model_decode_flops(groups, 1000, 1) == per_token


HYBRID = {  # Mamba-2, attention, a mixer-only Mamba layer, an MLP-only layer
    "block": {"d_model": 16, "n_heads": 4, "d_ff": 24, "norm": "rmsnorm", "activation": "swiglu", "bias": False,
              "rope": True, "mamba": {"n_heads": 4, "head_dim": 6, "d_state": 3, "n_groups": 2, "proj_bias": True}},
    "model": {"n_layers": 4, "vocab_size": 50, "positions": "rope"},
    "layers": [{"indices": [1], "block": {"mamba": None}}, {"indices": [2], "block": {"parts": "mixer"}},
               {"indices": [3], "block": {"parts": "mlp", "mamba": None}}],
    "run": {"batch": 2, "seq_len": 5}}


def test_trace_rows_name_the_mixers_ops_and_equal_the_analytic_rows() -> None:
    config = parse_config(HYBRID)
    executed = run_trace(config)
    assert executed.rows == analytic_trace(config).rows  # shapes, FLOPs and data flow, from shapes alone
    ops = {r.key.split(".", 2)[-1]: r for r in executed.rows if r.key.startswith("blocks.0.")}
    assert list(ops) == ["ln1_out", "ssm_in", "ssm_conv", "ssm_conv_act", "ssm_dt", "ssm_scan", "ssm_skip", "ssm_norm",
                         "attn_out", "h", "ln2_out", "mlp_pre", "mlp_up", "mlp_act", "mlp_out", "y"]
    assert "state (B, h_s=4, p=6, N=3), constant in T" in ops["ssm_scan"].op
    assert ops["ssm_scan"].symbolic == "(B, T, h_s, p)" and ops["ssm_scan"].output_shape == (2, 5, 4, 6)
    # by hand: the conv's K = 4 taps per channel (c = 24 + 2·2·3 = 36) and its bias; the scan's 4·N per output
    # (x ⊗ B into the state and S·C) and N (the decay)
    assert ops["ssm_conv"].flops == 2 * 5 * 36 * (2 * 4 + 1)
    assert ops["ssm_scan"].flops == 2 * 5 * 24 * (4 * 3 + 3)
    mixer_only = [r.key.split(".", 2)[-1] for r in executed.rows if r.key.startswith("blocks.2.")]
    mlp_only = [r.key.split(".", 2)[-1] for r in executed.rows if r.key.startswith("blocks.3.")]
    assert mixer_only[0] == "ln1_out" and mixer_only[-2:] == ["attn_out", "y"] and "ln2_out" not in mixer_only
    assert mlp_only == ["ln2_out", "mlp_pre", "mlp_up", "mlp_act", "mlp_out", "y"]


def test_decoding_counts_positions_when_layer_0_is_an_mlp_alone() -> None:
    """Learned positions in decode steps count the tokens a layer has seen, not layer 0's empty cache."""
    data = copy.deepcopy(HYBRID)
    data["block"]["rope"] = False
    data["model"].update(positions="learned", max_positions=16)
    data["layers"] = [{"indices": [0], "block": {"parts": "mlp", "mamba": None}},
                      {"indices": [1], "block": {"mamba": None}}]
    model = Model.from_config(parse_config(data), dtype="float64", seed=2)
    ids = np.arange(10).reshape(2, 5)
    caches = model.new_cache()
    steps = [model.step(ids[:, t:t + 1], caches) for t in range(5)]
    assert relative(np.concatenate(steps, axis=1), model(ids)) <= 1e-12


def test_layers_of_one_part_hold_only_their_part() -> None:
    config = parse_config(HYBRID)
    model = Model.from_config(config, dtype="float64", seed=1)
    assert not any(k.startswith(("blocks.2.ln2", "blocks.2.w_gate")) for k in model.params)
    assert sorted(k[len("blocks.3."):] for k in model.params if k.startswith("blocks.3.")) == [
        "ln2_gamma", "w_down", "w_gate", "w_up"]
    ids = np.arange(10).reshape(2, 5)
    x = model.embed(ids)
    for i in range(3):
        x = model.blocks[i](x)
    b3 = model.blocks[3]
    p = b3.params
    n = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + b3.cfg.norm_eps) * p["ln2_gamma"]
    gate = n @ p["w_gate"]
    want = x + (gate / (1 + np.exp(-gate)) * (n @ p["w_up"])) @ p["w_down"]  # Y = X + MLP(LN2(X)), by hand
    assert relative(b3(x), want) <= 1e-12
    caches = model.new_cache()
    steps = [model.step(ids[:, t:t + 1], caches) for t in range(5)]
    assert relative(np.concatenate(steps, axis=1), model(ids)) <= 1e-12


# ----------------------------------------------------------------------------- the mixer against the loop


def _mixer_config(**mamba: int | bool) -> BlockConfig:
    m = {"n_heads": 4, "head_dim": 3, "d_state": 5, "n_groups": 2, "conv_kernel": 3, "proj_bias": True, **mamba}
    return parse_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 16, "norm": "rmsnorm", "activation": "swiglu",
                                   "bias": False, "mamba": m}}).block


@pytest.mark.parametrize("mamba", [{}, {"n_groups": 1, "conv_bias": False, "proj_bias": False, "conv_kernel": 4},
                                   {"dt_min": 0.8},  # Δ clamped below (Nemotron-H's time_step_min), biting here
                                   {"n_groups": 4, "d_state": 1, "head_dim": 1},
                                   # Falcon-H1's: no norm, or the norm before the gate; its µP multipliers
                                   {"norm": "none", "in_multiplier": 1.7, "multipliers": [0.5, 1.5, 0.8, 1.25, 2.0]},
                                   {"norm": "norm_gate", "out_bias": False, "multipliers": [1.2, 0.7, 1.0, 1.5, 0.5]}])
def test_the_mixer_equals_the_plain_recurrence(mamba: dict) -> None:
    """Random weights (A_log around 0, so that the state decays slowly and every step matters) through the
    block's mixer and through tests/reference.py's loop over time, head by head."""
    cfg = _mixer_config(**mamba)
    block = DecoderBlock.from_config(cfg, seed=3, dtype="float64")
    p = block.params
    rng = np.random.default_rng(7)
    for key in ("ssm_dt_bias", "ssm_A_log", "ssm_D"):
        p[key][...] = 0.3 * rng.standard_normal(p[key].shape)
    if "ssm_norm_gamma" in p:
        p["ssm_norm_gamma"][...] = 1.0 + 0.1 * rng.standard_normal(p["ssm_norm_gamma"].shape)
    u = rng.standard_normal((2, 9, cfg.d_model))
    got = block.attn(u, lambda *a, **k: None)
    m = cfg.mamba
    weights = {k: v for k, v in p.items() if "ssm" in k}
    want = ref.mamba2_mixer({"n_heads": m.n_heads, "head_dim": m.head_dim, "d_state": m.d_state,
                             "n_groups": m.n_groups, "conv_kernel": m.conv_kernel, "eps": m.norm_eps,
                             "dt_min": m.dt_min, "norm": m.norm, "in_multiplier": m.in_multiplier,
                             "multipliers": m.multipliers}, weights, u)
    assert relative(got, want) <= 1e-12


@pytest.mark.parametrize("short_conv", [{"kernel": 3, "bias": True}, {"kernel": 1}, {"kernel": 4, "bias": False}])
def test_the_short_conv_equals_the_plain_loop_and_decodes_through_its_window(short_conv: dict) -> None:
    data = {"block": {"d_model": 6, "n_heads": 2, "d_ff": 8, "norm": "rmsnorm", "activation": "swiglu", "bias": False,
                      "short_conv": short_conv},
            "model": {"n_layers": 2, "vocab_size": 20, "positions": "none"}, "run": {"batch": 2, "seq_len": 5}}
    config = parse_config(data)
    block = DecoderBlock.from_config(config.block, seed=4, dtype="float64")
    u = np.random.default_rng(3).standard_normal((2, 7, 6))
    want = ref.short_conv_mixer(short_conv["kernel"], {k: v for k, v in block.params.items() if "conv" in k}, u)
    assert relative(block.attn(u, lambda *a, **k: None), want) <= 1e-12
    model = Model.from_config(config, dtype="float64", seed=4)
    ids = np.random.default_rng(1).integers(0, 20, (2, 7))
    caches = model.new_cache()
    steps = [model.step(ids[:, t:t + 1], caches) for t in range(7)]
    assert relative(np.concatenate(steps, axis=1), model(ids)) <= 1e-12
    assert run_trace(config).rows == analytic_trace(config).rows  # the trace's rows from shapes alone too


@pytest.mark.parametrize("chunk", [1, 2, 5, 64])
def test_every_chunking_of_the_scan_is_the_same_sums(chunk: int) -> None:
    rng = np.random.default_rng(1)
    B, T, h, p, N = 2, 11, 3, 2, 4
    x, Bm, Cm = rng.standard_normal((B, T, h, p)), rng.standard_normal((B, T, h, N)), rng.standard_normal((B, T, h, N))
    dt, A = rng.uniform(0.1, 1.5, (B, T, h)), -rng.uniform(0.2, 2.0, h)
    state0 = rng.standard_normal((B, h, p, N))
    y, last = ssd_scan(x, dt, A, Bm, Cm, state0, chunk=chunk)
    S = state0.copy()
    for t in range(T):  # the recurrence itself, one step at a time
        S = np.exp(dt[:, t] * A)[..., None, None] * S + (dt[:, t][..., None] * x[:, t])[..., None] * Bm[:, t][:, :, None]
        assert np.allclose(y[:, t], np.einsum("bhpn,bhn->bhp", S, Cm[:, t]), rtol=0, atol=1e-12)
    assert np.allclose(last, S, rtol=0, atol=1e-12)


def test_causal_conv_reads_the_previous_inputs_and_returns_the_last_ones() -> None:
    rng = np.random.default_rng(2)
    x, w, b = rng.standard_normal((2, 6, 3)), rng.standard_normal((3, 4)), rng.standard_normal(3)
    y, state = causal_conv1d(x, w, b)
    for t in range(6):  # y[t] = b + Σ_k w[:, k]·x[t − 3 + k], zeros before the first input
        want = b + sum(w[:, k] * x[:, t - 3 + k] for k in range(4) if t - 3 + k >= 0)
        assert np.allclose(y[:, t], want, rtol=0, atol=1e-14)
    assert np.array_equal(state, x[:, -3:])
    head, s = causal_conv1d(x[:, :4], w, b)  # in two pieces, through the state
    tail, s = causal_conv1d(x[:, 4:], w, b, s)
    assert np.allclose(np.concatenate([head, tail], axis=1), y, rtol=0, atol=1e-14) and np.array_equal(s, state)


def test_decoding_one_token_at_a_time_equals_the_full_pass_on_a_seeded_hybrid() -> None:
    config = parse_config({
        "block": {"d_model": 16, "n_heads": 4, "d_ff": 24, "norm": "rmsnorm", "activation": "swiglu", "bias": False,
                  "rope": True, "mamba": {"n_heads": 4, "head_dim": 6, "d_state": 3, "n_groups": 2}},
        "model": {"n_layers": 3, "vocab_size": 50, "positions": "rope"},
        "layers": [{"indices": [1], "block": {"mamba": None}}]})
    model = Model.from_config(config, dtype="float64", seed=5)
    ids = np.random.default_rng(0).integers(0, 50, (2, 9))
    full = model(ids)
    caches = model.new_cache()
    steps = [model.step(ids[:, t:t + 1], caches) for t in range(9)]
    assert relative(np.concatenate(steps, axis=1), full) <= 1e-12
    assert caches[0].ssm.shape == (2, 4, 6, 3) and caches[0].conv.shape == (2, 3, 24 + 2 * 2 * 3)


# ----------------------------------------------------------------------------- counts


def _granite_by_hand(d: int, layers: int, vocab: int, heads: int, kv: int, d_e: int, experts: int, shared: int,
                     h: int, p: int, N: int, g: int, K: int, mamba_layers: int, tied: bool, conv_bias: bool = True,
                     proj_bias: bool = False, attn_bias: bool = False) -> int:
    d_in = h * p
    width = 2 * d_in + 2 * g * N + h
    mixer = (d * width + (width if proj_bias else 0) + (d_in + 2 * g * N) * (K + conv_bias) + 3 * h + d_in
             + d_in * d + (d if proj_bias else 0))
    d_h = d // heads
    attention = 2 * d * heads * d_h + 2 * d * kv * d_h  # q and o, k and v
    if attn_bias:  # q, k, v and o biases
        attention += heads * d_h + 2 * kv * d_h + d
    mlp = (d * experts + 3 * experts * d * d_e if experts else 0) + 3 * d * shared
    per_layer = 2 * d + mlp
    return (mamba_layers * (per_layer + mixer) + (layers - mamba_layers) * (per_layer + attention)
            + vocab * d * (1 if tied else 2) + d)


# transformers 5.24's GraniteMoeHybridForCausalLM on the meta device (the torch-marked test recomputes them)
GRANITE_CASES = {
    "defaults": ({}, 38_601_064_448),
    "random": (dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, num_hidden_layers=5,
                    intermediate_size=40, shared_intermediate_size=24, num_local_experts=3, num_experts_per_tok=1,
                    vocab_size=300, mamba_n_heads=8, mamba_d_state=12, mamba_n_groups=2, mamba_d_conv=3,
                    mamba_conv_bias=False, mamba_proj_bias=True, attention_bias=True, tie_word_embeddings=True,
                    position_embedding_type="rope", layer_types=["mamba", "attention", "mamba", "mamba", "attention"]),
               474_752),
    "dense": (dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=4, shared_intermediate_size=80,
                   num_local_experts=0, vocab_size=500, mamba_n_heads=16, mamba_expand=3, mamba_d_state=20,
                   mamba_d_conv=5, layer_types=["attention", "mamba", "mamba", "mamba"]), 268_640),
}
GRANITE_DEFAULTS = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                        num_local_experts=8, shared_intermediate_size=1024, vocab_size=32000, mamba_n_heads=128,
                        mamba_d_state=256, mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2, rms_norm_eps=1e-6,
                        max_position_embeddings=2048)


def test_granite_hybrid_totals_by_hand() -> None:
    """The meta-device totals above, derived again term by term."""
    assert _granite_by_hand(4096, 32, 32000, 32, 32, 11008, 8, 1024, 128, 64, 256, 1, 4, 32, False) == 38_601_064_448
    assert _granite_by_hand(96, 5, 300, 6, 2, 40, 3, 24, 8, 24, 12, 2, 3, 3, True, conv_bias=False, proj_bias=True,
                            attn_bias=True) == 474_752
    assert _granite_by_hand(64, 4, 500, 4, 4, 0, 0, 80, 16, 12, 20, 1, 5, 3, False) == 268_640


def _granite_config(fields: dict) -> dict:
    return {**{"model_type": "granitemoehybrid"}, **GRANITE_DEFAULTS, **fields}


@pytest.mark.parametrize("case", sorted(GRANITE_CASES))
def test_granite_hybrid_counts_as_transformers(case: str) -> None:
    fields, want = GRANITE_CASES[case]
    layers = fields.get("num_hidden_layers", 32)
    data = _granite_config({"layer_types": ["mamba"] * layers, **fields})
    assert count_parameters(parse_config(hf_to_mapping(data, "x.json"))).total == want


def test_granite_hybrid_layer_types_pick_each_layers_mixer() -> None:
    data = _granite_config({"num_hidden_layers": 4, "layer_types": ["attention", "mamba", "linear_attention",
                                                                    "full_attention"]})
    config = parse_config(hf_to_mapping(data, "x.json"))
    assert [config.layer_block(i).mamba is not None for i in range(4)] == [False, True, True, False]
    assert config.layer_block(1).mamba == Mamba2(n_heads=128, head_dim=64, d_state=256)
    assert config.model.positions == "none" and not config.block.rope  # position_embedding_type null: no RoPE
    nope = parse_config(hf_to_mapping({**data, "position_embedding_type": "nope"}, "x.json"))
    assert nope.model.positions == "none" and nope == replace(config, name=nope.name)  # as transformers: not "rope"


@pytest.mark.parametrize("fields, message", [
    ({"layer_types": ["mamba"] * 31 + ["moe"]}, "layer_types"),
    ({"mamba_d_head": 32}, "mamba_d_head"),
    ({"mamba_n_groups": 3}, "mamba_n_groups"),
    ({"time_step_limit": [0.0, 10.0]}, "time_step_limit"),
    ({"position_embedding_type": "alibi"}, "position_embedding_type"),
])
def test_granite_hybrid_fields_blockcli_cannot_run_are_named(tmp_path: Path, fields: dict, message: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_granite_config(fields)))
    assert message in one_error_line(cli("count", tmp_path / "config.json"))


def test_transformers_5_infinity_in_time_step_limit_is_the_default() -> None:
    data = _granite_config({"time_step_limit": [0.0, {"__float__": "Infinity"}]})
    config = parse_config(hf_to_mapping(data, "x.json"))
    assert count_parameters(config).total == 38_601_064_448 and config.block.mamba.dt_min == 0.0
    clamped = parse_config(hf_to_mapping({**data, "time_step_limit": [0.01, {"__float__": "Infinity"}]}, "x.json"))
    assert clamped.block.mamba.dt_min == 0.01  # Δ clamped below, as BambaMixer's scan clamps it


def _mixer_by_hand(d: int, h: int, p: int, N: int, g: int, K: int, conv_bias: bool, proj_bias: bool) -> int:
    d_in = h * p
    width = 2 * d_in + 2 * g * N + h  # z, x, B, C, dt
    return (d + proj_bias) * width + (d_in + 2 * g * N) * (K + conv_bias) + 3 * h + d_in + (d_in + proj_bias) * d


# transformers 5.24's BambaForCausalLM on the meta device (recomputed by the torch-marked test)
BAMBA_CASES = {
    "defaults": ({}, 9_992_765_440),
    "random": (dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=3, num_hidden_layers=5,
                    intermediate_size=50, vocab_size=300, mamba_n_heads=12, mamba_d_state=7, mamba_n_groups=3,
                    mamba_d_conv=2, mamba_expand=3, mamba_conv_bias=False, mamba_proj_bias=True, attention_bias=True,
                    mlp_bias=True, tie_word_embeddings=True, attn_layer_indices=[1, 4]), 428_222),
}
BAMBA_DEFAULTS = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128000, mamba_n_heads=128, mamba_d_state=256, mamba_n_groups=1,
                      mamba_d_conv=4, mamba_expand=2, rms_norm_eps=1e-5, max_position_embeddings=262144)


def test_bamba_totals_by_hand() -> None:
    d, f, V = 4096, 14336, 128000  # defaults: every layer Mamba-2, untied
    mixer = _mixer_by_hand(d, 128, 64, 256, 1, 4, True, False)
    assert 32 * (mixer + 3 * d * f + 2 * d) + 2 * V * d + d == 9_992_765_440
    d, f, d_h = 96, 50, 16  # random: layers 1 and 4 attention (6 heads, 3 K/V heads, biases), tied
    attention = 2 * (d * 6 * d_h + 6 * d_h) + 2 * (d * 3 * d_h + 3 * d_h) - 6 * d_h + d
    mlp = 3 * d * f + 2 * f + d
    mixer = _mixer_by_hand(d, 12, 24, 7, 3, 2, False, True)
    assert 3 * (mixer + mlp + 2 * d) + 2 * (attention + mlp + 2 * d) + 300 * d + d == 428_222


@pytest.mark.parametrize("case", sorted(BAMBA_CASES))
def test_bamba_counts_as_transformers(case: str) -> None:
    fields, want = BAMBA_CASES[case]
    data = {"model_type": "bamba", **BAMBA_DEFAULTS, **fields}
    config = parse_config(hf_to_mapping(data, "x.json"))
    assert count_parameters(config).total == want
    assert config.block.rope == 0.5 or config.layer_block(fields.get("attn_layer_indices", [0])[0]).rope == 0.5


# transformers 5.24's NemotronHForCausalLM on the meta device (recomputed by the torch-marked test)
NEMOTRON_CASES = {
    "defaults": ({}, 1_968_355_712),  # [linear_attention, moe, full_attention, mlp]
    "random": (dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=20, intermediate_size=72,
                    vocab_size=300, mamba_num_heads=12, mamba_head_dim=10, ssm_state_size=9, n_groups=4, conv_kernel=5,
                    use_conv_bias=False, use_bias=True, n_routed_experts=6, num_experts_per_tok=3,
                    moe_intermediate_size=20, moe_shared_expert_intermediate_size=28, tie_word_embeddings=True,
                    layers_block_type=["linear_attention", "mlp", "linear_attention", "full_attention", "moe", "mlp",
                                       "linear_attention"]), 278_208),
    "pattern": (dict(hybrid_override_pattern="M-M-M*-M"), 2_082_747_904),  # the legacy spelling of the layers
}
NEMOTRON_DEFAULTS = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                         intermediate_size=21504, vocab_size=131072, mamba_num_heads=128, mamba_head_dim=64,
                         ssm_state_size=128, n_groups=8, conv_kernel=4, n_routed_experts=8, num_experts_per_tok=2,
                         moe_intermediate_size=7688, moe_shared_expert_intermediate_size=7688, layer_norm_epsilon=1e-5)


def test_nemotron_h_totals_by_hand() -> None:
    """Each layer one norm d and one part: a Mamba-2 mixer, attention (no biases, no positions), a ReLU² MLP
    (2·d·d_ff), or the router d·E and E experts of 2·d·d_e and a shared one of 2·d·d_s; an untied head always."""
    d, V = 4096, 131072
    mamba = _mixer_by_hand(d, 128, 64, 128, 8, 4, True, False)
    attention = 2 * d * 32 * 128 + 2 * d * 8 * 128
    moe = d * 8 + 8 * 2 * d * 7688 + 2 * d * 7688
    mlp = 2 * d * 21504
    assert mamba + moe + attention + mlp + 4 * d + 2 * V * d + d == 1_968_355_712
    assert 4 * mamba + attention + 3 * mlp + 8 * d + 2 * V * d + d == 2_082_747_904  # M-M-M*-M
    d, V = 96, 300  # the random config: tied, as it says, but NemotronHForCausalLM ties nothing
    mamba = _mixer_by_hand(d, 12, 10, 9, 4, 5, False, True)
    attention = 2 * d * 6 * 20 + 2 * d * 2 * 20
    moe = d * 6 + 6 * 2 * d * 20 + 2 * d * 28
    assert 3 * mamba + 2 * (2 * d * 72) + attention + moe + 7 * d + 2 * V * d + d == 278_208


@pytest.mark.parametrize("case", sorted(NEMOTRON_CASES))
def test_nemotron_h_counts_as_transformers(case: str) -> None:
    fields, want = NEMOTRON_CASES[case]
    config = parse_config(hf_to_mapping({"model_type": "nemotron_h", **NEMOTRON_DEFAULTS, **fields}, "x.json"))
    assert count_parameters(config).total == want


def test_nemotron_h_layers_hold_one_part_each() -> None:
    data = {"model_type": "nemotron_h", **NEMOTRON_DEFAULTS, "hybrid_override_pattern": "M*-E"}
    config = parse_config(hf_to_mapping(data, "x.json"))
    blocks = [config.layer_block(i) for i in range(4)]
    assert [(b.parts, b.mamba is not None, b.moe is not None) for b in blocks] == [
        ("mixer", True, False), ("mixer", False, False), ("mlp", False, False), ("mlp", False, True)]
    assert blocks[0].mamba.dt_min == 0.001 and not blocks[1].rope and config.model.positions == "none"
    assert blocks[3].moe.scoring == "sigmoid" and blocks[3].moe.selection_bias and blocks[3].moe.d_shared == 7688
    assert not config.model.tie_embeddings


@pytest.mark.parametrize("fields, message", [
    ({"hybrid_override_pattern": "M*X"}, "hybrid_override_pattern"),
    ({"mlp_bias": True}, "mlp_bias"),  # the default layers have a mixture, whose experts have no biases
    ({"moe_latent_size": 64}, "moe_latent_size"),
    ({"num_nextn_predict_layers": 1}, "num_nextn_predict_layers"),
])
def test_nemotron_h_fields_blockcli_cannot_run_are_named(tmp_path: Path, fields: dict, message: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nemotron_h", **NEMOTRON_DEFAULTS, **fields}))
    assert message in one_error_line(cli("count", tmp_path / "config.json"))


# transformers 5.24's Lfm2ForCausalLM on the meta device (recomputed by the torch-marked test)
LFM2_CASES = {
    "defaults": ({}, 2_705_497_600),  # every layer attention (full_attn_idxs: all), tied
    "random": (dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=3, num_hidden_layers=5,
                    intermediate_size=300, block_multiple_of=64, block_ffn_dim_multiplier=1.3, vocab_size=300,
                    conv_L_cache=4, conv_bias=True, tie_word_embeddings=False, full_attn_idxs=[1, 3]), 688_000),
}
LFM2_DEFAULTS = dict(hidden_size=2560, intermediate_size=12288, num_hidden_layers=32, num_attention_heads=32,
                     num_key_value_heads=8, vocab_size=65536, norm_eps=1e-5, conv_L_cache=3, block_multiple_of=256,
                     max_position_embeddings=128_000)


def test_lfm2_totals_by_hand() -> None:
    """Lfm2MLP's width ⌊2·d_ff/3⌋ × the multiplier, rounded up to the multiple; attention with per-head q/k norms; the
    short conv 3·d² + K·d + d² (and 3·d + d + d biases)."""
    d, f, d_h = 2560, 8192, 80  # ⌊2·12288/3⌋ = 8192, a multiple of 256
    layer = 2 * d * 32 * d_h + 2 * d * 8 * d_h + 2 * d_h + 3 * d * f + 2 * d
    assert 32 * layer + 65536 * d + d == 2_705_497_600
    d, f, d_h = 96, 320, 16  # ⌊2·300/3⌋ = 200, × 1.3 = 260, up to a multiple of 64: 320
    attention = 2 * d * 6 * d_h + 2 * d * 3 * d_h + 2 * d_h
    conv = 3 * d * d + 3 * d + 4 * d + d + d * d + d
    assert 2 * (attention + 3 * d * f + 2 * d) + 3 * (conv + 3 * d * f + 2 * d) + 2 * 300 * d + d == 688_000


@pytest.mark.parametrize("case", sorted(LFM2_CASES))
def test_lfm2_counts_as_transformers(case: str) -> None:
    fields, want = LFM2_CASES[case]
    config = parse_config(hf_to_mapping({"model_type": "lfm2", **LFM2_DEFAULTS, **fields}, "x.json"))
    assert count_parameters(config).total == want


def test_lfm2_layers_and_the_mlp_width() -> None:
    data = {"model_type": "lfm2", **LFM2_DEFAULTS, "num_hidden_layers": 3, "layer_types": ["conv", "full_attention",
                                                                                           "conv"]}
    config = parse_config(hf_to_mapping(data, "x.json"))
    assert [config.layer_block(i).short_conv is not None for i in range(3)] == [True, False, True]
    assert config.block.d_ff == 8192 and config.layer_block(1).qk_norm == "head" and config.block.rope_theta == 1e6
    plain = parse_config(hf_to_mapping({**data, "block_auto_adjust_ff_dim": False}, "x.json"))
    assert plain.block.d_ff == 12288  # the width as given
    legacy = parse_config(hf_to_mapping({**data, "block_ff_dim": 600, "tie_embedding": False}, "x.json"))
    assert legacy.block.d_ff == 512 and not legacy.model.tie_embeddings  # ⌊2·600/3⌋ = 400, up to 512; untied


# transformers 5.24's Lfm2MoeForCausalLM on the meta device (recomputed by the torch-marked test); its config class
# derives no layer_types (its default null fails in transformers: the census case), so each case gives them
_LFM2_MOE_TYPES = ["conv", "conv", "full_attention"] + ["conv"] * 29
LFM2_MOE_CASES = {
    "defaults": (dict(layer_types=_LFM2_MOE_TYPES), 11_324_813_440),  # 2 dense layers, then 32 experts of 1,792
    "random": (dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, intermediate_size=50,
                    moe_intermediate_size=20, num_hidden_layers=5, vocab_size=300, num_experts=6, num_experts_per_tok=3,
                    num_dense_layers=1, conv_bias=True, conv_L_cache=4, tie_word_embeddings=False,
                    use_expert_bias=False, routed_scaling_factor=2.5, norm_topk_prob=False,
                    layer_types=["conv", "full_attention", "conv", "conv", "full_attention"]), 376_000),
}
LFM2_MOE_DEFAULTS = dict(hidden_size=2048, intermediate_size=7168, moe_intermediate_size=1792, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=65536, norm_eps=1e-5,
                         conv_L_cache=3, num_dense_layers=2, num_experts=32, num_experts_per_tok=4,
                         max_position_embeddings=128_000)


def test_lfm2_moe_totals_by_hand() -> None:
    """LFM2's attention (per-head q/k norms) and short convs (4·d² + K·d, and 3·d + d + d biases); the SwiGLU of
    intermediate_size as given on the first num_dense_layers layers, then the router d·E and E experts of 3·d·d_e
    (the expert_bias buffer outside the total); two norms a layer."""
    d, f, d_e, E, V = 2048, 7168, 1792, 32, 65536  # one attention layer (2), tied
    attention, conv = 2 * d * 32 * 64 + 2 * d * 8 * 64 + 2 * 64, 4 * d * d + 3 * d
    moe = d * E + E * 3 * d * d_e
    assert 31 * conv + attention + 2 * 3 * d * f + 30 * moe + 32 * 2 * d + V * d + d == 11_324_813_440
    d, f, d_e, E, V = 96, 50, 20, 6, 300  # attention on 1 and 4, one dense layer, untied
    attention, conv = 2 * d * 6 * 16 + 2 * d * 2 * 16 + 2 * 16, 4 * d * d + 4 * d + 3 * d + d + d
    moe = d * E + E * 3 * d * d_e
    assert 3 * conv + 2 * attention + 3 * d * f + 4 * moe + 5 * 2 * d + 2 * V * d + d == 376_000


@pytest.mark.parametrize("case", sorted(LFM2_MOE_CASES))
def test_lfm2_moe_counts_as_transformers(case: str) -> None:
    fields, want = LFM2_MOE_CASES[case]
    config = parse_config(hf_to_mapping({"model_type": "lfm2_moe", **LFM2_MOE_DEFAULTS, **fields}, "x.json"))
    assert count_parameters(config).total == want


def test_lfm2_moe_layers_and_routing() -> None:
    """The mixers by layer_types; experts from num_dense_layers on (sigmoid, the expert_bias for the choice,
    renormalised with Lfm2MoeTopKRouter's + 1e-6, times routed_scaling_factor); the MLP width as given."""
    data = {"model_type": "lfm2_moe", **LFM2_MOE_DEFAULTS, "num_hidden_layers": 4, "num_dense_layers": 1,
            "routed_scaling_factor": 1.5, "layer_types": ["conv", "full_attention", "conv", "conv"]}
    config = parse_config(hf_to_mapping(data, "x.json"))
    assert [config.layer_block(i).short_conv is not None for i in range(4)] == [True, False, True, True]
    assert config.block.moe is None and config.block.d_ff == 7168 and config.layer_block(1).qk_norm == "head"
    moe = config.layer_block(2).moe
    assert (moe.n_experts, moe.top_k, moe.d_expert, moe.scoring, moe.selection_bias, moe.renormalize,
            moe.renormalize_eps, moe.routed_scaling) == (32, 4, 1792, "sigmoid", True, True, 1e-6, 1.5)
    assert config.block.rope_theta == 1e6 and config.model.tie_embeddings
    legacy = parse_config(hf_to_mapping({**data, "tie_embedding": False, "num_dense_layers": 0}, "x.json"))
    assert not legacy.model.tie_embeddings and legacy.block.moe is not None
    assert all(legacy.layer_block(i).moe is not None for i in range(4))


@pytest.mark.parametrize("fields, message", [
    ({"layer_types": None}, "field 'layer_types' is null"),
    ({"layer_types": ["conv", "sliding_attention"]}, "'layer_types': expected an array of 2 of conv, full_attention"),
    ({"rms_norm_eps": 1e-6}, "'rms_norm_eps'"),
    ({"hidden_act": "gelu"}, "'hidden_act'"),  # Lfm2MoeConfig has none: its MLP and experts run SiLU
    ({"block_auto_adjust_ff_dim": True}, "'block_auto_adjust_ff_dim'"),  # LFM2's, not LFM2-MoE's
    ({"num_experts_per_tok": 40}, "'num_experts_per_tok': expected at most num_experts = 32"),
])
def test_lfm2_moe_fields_blockcli_cannot_run_are_named(tmp_path: Path, fields: dict, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "lfm2_moe", "num_hidden_layers": 2,
                                "layer_types": ["conv", "full_attention"], **fields}))
    assert message in one_error_line(cli("count", path))


# ----------------------------------------------------------------------------- LFM3 (lfm3)


# transformers 5.24's Lfm3ForCausalLM on the meta device (recomputed by the torch-marked test)
_LFM3_RANDOM_TYPES = ["sliding_attention", "conv", "full_attention", "conv", "sliding_attention"]
LFM3_CASES = {
    "defaults": ({}, 1_728_801_536),  # 13 conv, 6 full, 5 sliding layers (Lfm3Config's pattern), tied
    "random": (dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=12, intermediate_size=50,
                    num_hidden_layers=5, vocab_size=300, pad_token_id=0, conv_bias=True, conv_L_cache=4,
                    tie_word_embeddings=False, layer_types=_LFM3_RANDOM_TYPES, sliding_window=8), 264_168),
    "plain": (dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=20, intermediate_size=72,
                   num_hidden_layers=3, vocab_size=200, pad_token_id=0, use_sandwich_norm=False,
                   use_attention_gate=False, attention_bias=True, layer_types=["conv", "full_attention", "conv"]),
              109_208),
}
LFM3_DEFAULTS = dict(hidden_size=2048, intermediate_size=7680, num_hidden_layers=24, num_attention_heads=16,
                     num_key_value_heads=4, head_dim=128, vocab_size=128_000, norm_eps=1e-5, conv_L_cache=7,
                     sliding_window=256, max_position_embeddings=128_000)


def test_lfm3_totals_by_hand() -> None:
    """Attention: Q and W_O d·h·d_h each, K and V d·h_kv·d_h each, the per-head q/k norms 2·d_h, the gate d·h (and
    q/k/v/o biases without it); the short conv 4·d² + K·d (biases 3·d + d + d); every layer a SwiGLU 3·d·d_ff and
    four norms (two without the sandwich); the embedding (and the untied head), the final norm."""
    d, h, kv, d_h, f, V = 2048, 16, 4, 128, 7680, 128_000
    attention, conv = d * h * d_h * 2 + 2 * d * kv * d_h + 2 * d_h + d * h, 4 * d * d + 7 * d
    assert 11 * attention + 13 * conv + 24 * (3 * d * f + 4 * d) + V * d + d == 1_728_801_536
    d, h, kv, d_h, f, V = 96, 6, 2, 12, 50, 300
    attention, conv = d * h * d_h * 2 + 2 * d * kv * d_h + 2 * d_h + d * h, 4 * d * d + 4 * d + 5 * d
    assert 3 * attention + 2 * conv + 5 * (3 * d * f + 4 * d) + 2 * V * d + d == 264_168
    d, h, kv, d_h, f, V = 64, 4, 4, 20, 72, 200
    attention = d * h * d_h * 2 + 2 * d * kv * d_h + 2 * d_h + (h * d_h + 2 * kv * d_h + d)
    assert attention + 2 * (4 * d * d + 7 * d) + 3 * (3 * d * f + 2 * d) + V * d + d == 109_208


@pytest.mark.parametrize("case", sorted(LFM3_CASES))
def test_lfm3_counts_as_transformers(case: str) -> None:
    fields, want = LFM3_CASES[case]
    config = parse_config(hf_to_mapping({"model_type": "lfm3", **LFM3_DEFAULTS, **fields}, "x.json"))
    assert count_parameters(config).total == want


def test_lfm3_layers_windows_ropes_gate_and_norms() -> None:
    """Lfm3Config's default pattern (full where i % 4 == 2, sliding where i % 4 == 0 past 0, conv elsewhere), the
    window on the sliding layers only, each attention kind's RoPE (full: proportional over half the pairs, base 10⁶;
    sliding: default, base 10⁴), σ per head, the sandwich norms, the short convs' 7 taps."""
    config = parse_config(hf_to_mapping({"model_type": "lfm3", "num_hidden_layers": 8}, "x.json"))
    blocks = [config.layer_block(i) for i in range(8)]
    assert [b.short_conv is not None for b in blocks] == [True, True, False, True, False, True, False, True]
    assert [b.sliding_window for b in blocks] == [0, 0, 0, 0, 256, 0, 0, 0]
    full, sliding = blocks[2], blocks[4]
    assert (full.rope_theta, full.rope_scaling.type, full.rope_scaling.fraction) == (1e6, "proportional", 0.5)
    assert (sliding.rope_theta, sliding.rope_scaling) == (1e4, None)
    assert (full.attention_gate, full.attention_gate_form, full.placement, full.qk_norm) == (
        True, "sigmoid_head", "sandwich", "head")
    assert blocks[0].short_conv.kernel == 7 and not blocks[0].short_conv.bias and config.model.tie_embeddings
    plain = parse_config(hf_to_mapping({"model_type": "lfm3", "num_hidden_layers": 3, "use_sandwich_norm": False,
                                        "use_attention_gate": False, "layer_types": ["conv", "sliding_attention",
                                                                                     "conv"],
                                        "rope_parameters": {"sliding_attention": {"rope_type": "default"}}},
                                       "x.json"))
    b = plain.layer_block(1)
    assert (b.placement, b.attention_gate, b.rope_theta) == ("pre", False, 1e6)  # default_theta when missing


def test_lfm3s_attention_layer_alone_passes_the_gradient_checks() -> None:
    """LFM3's attention layer alone (its σ gate one per head, the sandwich norms): the gradient checks pass (the whole
    model is refused: its short convs have no backward)."""
    from blockcli.verify import verify

    block = {"d_model": 16, "n_heads": 4, "n_kv_heads": 2, "d_ff": 24, "norm": "rmsnorm", "activation": "swiglu",
             "placement": "sandwich", "rope": 1.0, "qk_norm": "head", "attention_gate": True,
             "attention_gate_form": "sigmoid_head"}
    report = verify(parse_config({"block": block}), only={20, 21, 22})
    assert report.passed and [c.status for c in report.checks] == ["PASS"] * 3
    assert DecoderBlock.from_config(parse_config({"block": block})).params["w_attn_gate"].shape == (16, 4)


@pytest.mark.parametrize("fields, message", [
    ({"rms_norm_eps": 1e-6}, "'rms_norm_eps'"),
    ({"attention_bias": True}, "'attention_bias'"),  # biased q/k/v/o beside the bias-free gate
    ({"hidden_act": "gelu"}, "'hidden_act'"),  # Lfm3Config has none: its MLP runs SiLU
    ({"block_multiple_of": 256}, "'block_multiple_of'"),  # LFM2's, not LFM3's
    ({"layer_types": ["conv", "linear_attention"]}, "'layer_types': expected an array of 2 of conv, full_attention, "
                                                    "sliding_attention"),
    ({"sliding_window": None}, "'sliding_window'"),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "yarn", "factor": 2.0}}},
     "'rope_parameters.sliding_attention.rope_type'"),
    ({"rope_parameters": {"sliding_attention": {"rope_type": "default", "partial_rotary_factor": 0.5}}},
     "'rope_parameters.sliding_attention.partial_rotary_factor'"),  # the default RoPE turns the whole head
    ({"rope_parameters": {"full_attention": {"rope_type": "default"}}},
     "'rope_parameters.sliding_attention': expected an object"),  # a kind of layer_types without its RoPE
    ({"rope_parameters": {"chunked_attention": {}}}, "'rope_parameters.chunked_attention'"),
])
def test_lfm3_fields_blockcli_cannot_run_are_named(tmp_path: Path, fields: dict, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "lfm3", "num_hidden_layers": 2,
                                "layer_types": ["conv", "sliding_attention"], **fields}))
    assert message in one_error_line(cli("count", path))


# ----------------------------------------------------------------------------- Mamba-2 alone (mamba2)


# transformers 5.24's Mamba2ForCausalLM on the meta device (recomputed by the torch-marked test)
MAMBA2_CASES = {
    "defaults": ({}, 7_285_403_648),
    "random": (dict(hidden_size=96, num_heads=12, head_dim=24, expand=3, state_size=7, n_groups=3, conv_kernel=2,
                    use_conv_bias=False, use_bias=True, num_hidden_layers=5, vocab_size=300, tie_word_embeddings=True,
                    time_step_rank=11), 478_566),
}
MAMBA2_DEFAULTS = dict(hidden_size=4096, num_heads=128, head_dim=64, expand=2, state_size=128, n_groups=8,
                       conv_kernel=4, num_hidden_layers=64, vocab_size=32768, layer_norm_epsilon=1e-5, use_bias=False,
                       use_conv_bias=True, tie_word_embeddings=False)


def test_mamba2_totals_by_hand() -> None:
    """Every layer a norm d and the Mamba-2 mixer; the embedding V·d (and the head, untied), the final norm d."""
    d, V = 4096, 32768
    assert 64 * (d + _mixer_by_hand(d, 128, 64, 128, 8, 4, True, False)) + 2 * V * d + d == 7_285_403_648
    d, V = 96, 300  # tied; time_step_rank sizes nothing
    assert 5 * (d + _mixer_by_hand(d, 12, 24, 7, 3, 2, False, True)) + V * d + d == 478_566


@pytest.mark.parametrize("case", sorted(MAMBA2_CASES))
def test_mamba2_counts_as_transformers(case: str) -> None:
    fields, want = MAMBA2_CASES[case]
    config = parse_config(hf_to_mapping({"model_type": "mamba2", **MAMBA2_DEFAULTS, **fields}, "x.json"))
    assert count_parameters(config).total == want


def test_the_mamba2_models_layers() -> None:
    """The mixer alone on every layer, no positions, untied; its widths from num_heads, head_dim, state_size."""
    config = parse_config(hf_to_mapping({"model_type": "mamba2", "num_hidden_layers": 2}, "x.json"))
    assert config.block.parts == "mixer" and not config.layers_differ and config.model.positions == "none"
    assert config.block.mamba == Mamba2(n_heads=128, head_dim=64, d_state=128, n_groups=8, norm_eps=1e-5)
    assert not config.model.tie_embeddings


@pytest.mark.parametrize("fields, message", [
    ({"hidden_act": "gelu"}, "'hidden_act'"),
    ({"num_heads": 64}, "'num_heads': expected num_heads·head_dim = 4096 equal to expand·hidden_size = 8192"),
    ({"n_groups": 5}, "'n_groups': expected a divisor of num_heads = 128"),
    ({"time_step_limit": [0.0, 10.0]}, "'time_step_limit'"),
    ({"time_step_rank": "big"}, "'time_step_rank'"),
])
def test_mamba2_fields_blockcli_cannot_run_are_named(tmp_path: Path, fields: dict, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba2", **fields}))
    assert message in one_error_line(cli("count", path))


# ----------------------------------------------------------------------------- Mamba-1: the selective scan


def _mamba1_by_hand(d: int, d_in: int, N: int, R: int, K: int, conv_bias: bool, proj_bias: bool,
                    learned_norms: bool) -> int:
    """A Mamba-1 mixer: in (x, z), conv over x, x-projection to δ, B, C, Δ's projection and bias, A_log and D, the
    norms' scales (Jamba), out."""
    return ((d + proj_bias) * 2 * d_in + d_in * (K + conv_bias) + d_in * (R + 2 * N) + (R + 1) * d_in
            + d_in * N + d_in + learned_norms * (R + 2 * N) + (d_in + proj_bias) * d)


# transformers 5.24's MambaForCausalLM / FalconMambaForCausalLM / JambaForCausalLM on the meta device (recomputed by
# the torch-marked test)
# published config.json files, transcribed (the keys that size the model, and those that test blockcli's reading)
MAMBA_2P8B = dict(hidden_size=2560, num_hidden_layers=64, n_layer=64, intermediate_size=5120, expand=2, state_size=16,
                  conv_kernel=4, time_step_rank=160, use_bias=False, use_conv_bias=True, vocab_size=50280,
                  layer_norm_epsilon=1e-5, rms_norm=True, fused_add_norm=True, pad_vocab_size_multiple=8,
                  residual_in_fp32=True)  # state-spaces/mamba-2.8b-hf, with mamba_ssm's keys
FALCON_MAMBA_7B = dict(hidden_size=4096, num_hidden_layers=64, intermediate_size=8192, expand=16, state_size=16,
                       conv_kernel=4, time_step_rank=256, use_bias=False, use_conv_bias=True, vocab_size=65024,
                       layer_norm_epsilon=1e-5, tie_word_embeddings=False)  # tiiuae/falcon-mamba-7b: expand 16 unread
JAMBA_1P5_MINI = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, num_experts=16, num_experts_per_tok=2, expert_layer_period=2,
                      expert_layer_offset=1, attn_layer_period=8, attn_layer_offset=4, mamba_d_state=16,
                      mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=256, mamba_conv_bias=True, mamba_proj_bias=False,
                      vocab_size=65536, rms_norm_eps=1e-6, sliding_window=None, num_logits_to_keep=1,
                      use_mamba_kernels=False, tie_word_embeddings=False)  # ai21labs/AI21-Jamba-1.5-Mini
MAMBA_CASES = {
    "defaults": ({}, 159_308_544),
    "mamba-2.8b-hf": (MAMBA_2P8B, 2_768_345_600),
    "random": (dict(hidden_size=96, state_size=7, num_hidden_layers=5, expand=3, conv_kernel=2, time_step_rank=5,
                    use_bias=True, use_conv_bias=False, vocab_size=300, tie_word_embeddings=False), 526_656),
}
MAMBA_DEFAULTS = dict(hidden_size=768, state_size=16, num_hidden_layers=32, expand=2, conv_kernel=4, vocab_size=50280,
                      layer_norm_epsilon=1e-5, use_bias=False, use_conv_bias=True)
FALCON_MAMBA_CASES = {
    "falcon-mamba-7b": (FALCON_MAMBA_7B, 7_272_665_088),
    "defaults": ({}, 159_308_544),  # MambaConfig's sizes: the norms of δ, B and C have no weights
    "random": (dict(hidden_size=80, state_size=9, num_hidden_layers=3, expand=2, conv_kernel=3, use_bias=True,
                    vocab_size=260, mixer_rms_eps=1e-4, tie_word_embeddings=False), 178_960),
    # a stored width over expand (Falcon-Mamba-7B's config.json: expand 16 beside intermediate_size 8192 = 2·4096):
    # transformers builds the stored width, so this is the random case's total again
    "stored width": (dict(hidden_size=80, state_size=9, num_hidden_layers=3, expand=16, intermediate_size=160,
                          conv_kernel=3, use_bias=True, vocab_size=260, mixer_rms_eps=1e-4, tie_word_embeddings=False),
                     178_960),
}
FALCON_MAMBA_DEFAULTS = {**MAMBA_DEFAULTS, "mixer_rms_eps": 1e-6}
JAMBA_CASES = {
    "defaults": ({}, 51_570_323_328),
    "jamba-1.5-mini": (JAMBA_1P5_MINI, 51_570_323_328),
    "random": (dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, num_hidden_layers=7,
                    intermediate_size=50, num_experts=5, num_experts_per_tok=3, expert_layer_period=3,
                    expert_layer_offset=2, attn_layer_period=4, attn_layer_offset=1, mamba_d_state=7, mamba_d_conv=3,
                    mamba_expand=3, mamba_dt_rank=11, mamba_conv_bias=False, mamba_proj_bias=True, vocab_size=300,
                    tie_word_embeddings=True), 783_677),
    "dense": (dict(num_experts=1, num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=0), 1_536_053_824),
    # every layer attention: no Mamba-1 conv runs hidden_act, so a GeGLU MLP is fine
    "attention only": (dict(num_hidden_layers=2, attn_layer_period=1, attn_layer_offset=0, hidden_act="gelu",
                            hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                            num_experts=2, vocab_size=100), 93_120),
}
JAMBA_DEFAULTS = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=65536, num_experts=16, num_experts_per_tok=2,
                      expert_layer_period=2, expert_layer_offset=1, attn_layer_period=8, attn_layer_offset=4,
                      mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, rms_norm_eps=1e-6)


MAMBA1_CASES = {"mamba": (MAMBA_CASES, MAMBA_DEFAULTS), "falcon_mamba": (FALCON_MAMBA_CASES, FALCON_MAMBA_DEFAULTS),
                "jamba": (JAMBA_CASES, JAMBA_DEFAULTS)}


def test_mamba_totals_by_hand() -> None:
    """Every layer a norm d and the mixer; the embedding V·d (and the head, untied), the final norm d."""
    mixer = _mamba1_by_hand(768, 1536, 16, 48, 4, True, False, False)  # Δ's rank ⌈768/16⌉ = 48
    assert 32 * (768 + mixer) + 50280 * 768 + 768 == 159_308_544
    mixer = _mamba1_by_hand(96, 288, 7, 5, 2, False, True, False)
    assert 5 * (96 + mixer) + 2 * 300 * 96 + 96 == 526_656
    mixer = _mamba1_by_hand(80, 160, 9, 5, 3, True, True, False)  # Falcon-Mamba: Δ's rank ⌈80/16⌉ = 5
    assert 3 * (80 + mixer) + 2 * 260 * 80 + 80 == 178_960


def test_jamba_totals_by_hand() -> None:
    """Two norms a layer; Mamba-1 (with its norms' scales) or attention (no biases); a SwiGLU of 3·d·f or the router
    d·E and E of them; untied by default."""
    d, f, V = 4096, 14336, 65536
    mixer = _mamba1_by_hand(d, 8192, 16, 256, 4, True, False, True)
    attention = 2 * d * 4096 + 2 * d * 1024
    dense, moe = 3 * d * f, d * 16 + 16 * 3 * d * f
    # 32 layers: attention on 4, 12, 20, 28 (i % 8 == 4), experts on the odd ones
    assert 28 * mixer + 4 * attention + 16 * dense + 16 * moe + 64 * d + 2 * V * d + d == 51_570_323_328
    d, f = 96, 50  # random: attention on 1 and 5 (i % 4 == 1), experts on 2 and 5 (i % 3 == 2), tied
    mixer = _mamba1_by_hand(d, 288, 7, 11, 3, False, True, True)
    attention = 2 * d * 96 + 2 * d * 32
    dense, moe = 3 * d * f, d * 5 + 5 * 3 * d * f
    assert 5 * mixer + 2 * attention + 5 * dense + 2 * moe + 14 * d + 300 * d + d == 783_677


@pytest.mark.parametrize("model_type, case", [(t, c) for t in ("mamba", "falcon_mamba", "jamba")
                                              for c in sorted(MAMBA1_CASES[t][0])])
def test_mamba1_families_count_as_transformers(model_type: str, case: str) -> None:
    cases, defaults = MAMBA1_CASES[model_type]
    fields, want = cases[case]
    config = parse_config(hf_to_mapping({"model_type": model_type, **defaults, **fields}, "x.json"))
    assert count_parameters(config).total == want


def test_the_mamba1_families_layers() -> None:
    """Mamba: the mixer alone on every layer; Jamba: attention where i % period == offset, experts likewise."""
    mamba = parse_config(hf_to_mapping({"model_type": "mamba", "num_hidden_layers": 2}, "x.json"))
    assert mamba.block.parts == "mixer" and mamba.block.mamba == Mamba1(d_inner=1536, d_state=16, dt_rank=48)
    assert not mamba.layers_differ and mamba.model.tie_embeddings and mamba.model.positions == "none"
    falcon = parse_config(hf_to_mapping({"model_type": "falcon_mamba", "mixer_rms_eps": 1e-3}, "x.json"))
    assert (falcon.block.mamba.bc_norm, falcon.block.mamba.bc_norm_eps) == ("weightless", 1e-3)
    jamba = parse_config(hf_to_mapping({"model_type": "jamba", **JAMBA_DEFAULTS}, "x.json"))
    kinds = [(jamba.layer_block(i).mamba is not None, jamba.layer_block(i).moe is not None) for i in range(32)]
    assert kinds[:8] == [(True, False), (True, True), (True, False), (True, True), (False, False), (True, True),
                         (True, False), (True, True)] and kinds[8:16] == kinds[:8]
    assert jamba.layer_block(1).moe.renormalize is False and not jamba.block.rope
    assert jamba.block.mamba.bc_norm == "learned" and jamba.block.mamba.dt_rank == 256


def _mamba1_config(**mamba: Any) -> Any:
    m = {"version": 1, "d_inner": 10, "d_state": 4, "dt_rank": 3, "conv_kernel": 3, "proj_bias": True, **mamba}
    return parse_config({"block": {"d_model": 8, "n_heads": 2, "d_ff": 16, "norm": "rmsnorm", "activation": "swiglu",
                                   "bias": False, "mamba": m, "parts": "mixer"},
                         "model": {"n_layers": 2, "vocab_size": 30, "positions": "none"},
                         "run": {"batch": 2, "seq_len": 6}})


@pytest.mark.parametrize("mamba", [{}, {"bc_norm": "weightless", "bc_norm_eps": 1e-3, "conv_bias": False},
                                   {"bc_norm": "learned", "proj_bias": False, "conv_kernel": 1},
                                   {"dt_rank": 1, "d_state": 1, "conv_kernel": 4, "bc_norm": "learned"}])
def test_the_mamba1_mixer_equals_the_plain_recurrence_and_decodes_through_its_state(mamba: dict) -> None:
    """Random weights (A_log and the norms' scales away from their initial values) through the block's mixer and
    tests/reference.py's loop over time, channel by channel; one token at a time through the cache equals the
    full pass; the trace's rows from shapes alone equal the executed ones."""
    config = _mamba1_config(**mamba)
    block = DecoderBlock.from_config(config.block, seed=3, dtype="float64")
    p = block.params
    rng = np.random.default_rng(7)
    for key in ("b_ssm_dt", "ssm_A_log", "ssm_D"):
        p[key][...] = 0.3 * rng.standard_normal(p[key].shape)
    for key in ("ssm_dt_norm", "ssm_B_norm", "ssm_C_norm"):
        if key in p:
            p[key][...] = 1.0 + 0.3 * rng.standard_normal(p[key].shape)
    u = rng.standard_normal((2, 9, 8))
    m = config.block.mamba
    want = ref.mamba1_mixer({"d_inner": m.d_inner, "d_state": m.d_state, "dt_rank": m.dt_rank,
                             "conv_kernel": m.conv_kernel, "bc_norm": m.bc_norm, "eps": m.bc_norm_eps},
                            {k: v for k, v in p.items() if "ssm" in k}, u)
    assert relative(block.attn(u, lambda *a, **k: None), want) <= 1e-12
    model = Model.from_config(config, dtype="float64", seed=4)
    ids = np.random.default_rng(1).integers(0, 30, (2, 7))
    caches = model.new_cache()
    steps = [model.step(ids[:, t:t + 1], caches) for t in range(7)]
    assert relative(np.concatenate(steps, axis=1), model(ids)) <= 1e-12
    assert caches[0].ssm.shape == (2, 10, m.d_state) and caches[0].conv.shape == (2, m.conv_kernel - 1, 10)
    assert run_trace(config).rows == analytic_trace(config).rows


def test_the_selective_scan_is_the_recurrence_from_a_given_state() -> None:
    rng = np.random.default_rng(4)
    B, T, C, N = 2, 6, 3, 4
    x, Bm, Cm = rng.standard_normal((B, T, C)), rng.standard_normal((B, T, N)), rng.standard_normal((B, T, N))
    dt, A, S0 = rng.uniform(0.1, 1.5, (B, T, C)), -rng.uniform(0.2, 2.0, (C, N)), rng.standard_normal((B, C, N))
    y, last = selective_scan(x, dt, A, Bm, Cm, S0)
    for b in range(B):
        S = S0[b].copy()
        for t in range(T):
            for c in range(C):
                for n in range(N):
                    S[c, n] = np.exp(dt[b, t, c] * A[c, n]) * S[c, n] + dt[b, t, c] * x[b, t, c] * Bm[b, t, n]
                assert abs(y[b, t, c] - sum(S[c, n] * Cm[b, t, n] for n in range(N))) <= 1e-12
        assert np.allclose(last[b], S, rtol=0, atol=1e-12)


@pytest.mark.parametrize("fields, message", [
    ({"model_type": "mamba", "hidden_act": "gelu"}, "'hidden_act'"),
    ({"model_type": "falcon_mamba", "time_step_rank": "big"}, "'time_step_rank'"),
    ({"model_type": "jamba", "attn_layer_offset": 8}, "'attn_layer_offset': expected an integer below"),
    ({"model_type": "jamba", "sliding_window": 4096}, "'sliding_window'"),
    ({"model_type": "jamba", "num_experts_per_tok": 20}, "'num_experts_per_tok'"),
])
def test_mamba1_fields_blockcli_cannot_run_are_named(tmp_path: Path, fields: dict, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    assert message in one_error_line(cli("count", path))
# transformers 5.24's FalconH1ForCausalLM on the meta device (recomputed by the torch-marked test)
FALCON_H1_CASES = {
    "defaults": ({}, 8_514_961_408),  # the SSM 1024 wide (mamba_d_ssm), no norm before W_out (mamba_rms_norm false)
    "random": (dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=3, head_dim=20, num_hidden_layers=3,
                    intermediate_size=50, vocab_size=300, mamba_d_ssm=84, mamba_n_heads=12, mamba_d_state=7,
                    mamba_n_groups=3, mamba_d_conv=2, mamba_conv_bias=False, mamba_proj_bias=True,
                    projectors_bias=True, mamba_rms_norm=True, attention_bias=True, mlp_bias=True,
                    tie_word_embeddings=True, ssm_multipliers=[0.5, 1.5, 2.0, 0.25, 3.0], mlp_multipliers=[0.7, 1.3],
                    key_multiplier=0.6), 268_146),
    # mamba_d_ssm null: mamba_expand·hidden_size; the norm after the gate (mamba_norm_before_gate false)
    "expand": (dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=2,
                    intermediate_size=40, vocab_size=200, mamba_d_ssm=None, mamba_expand=3, mamba_n_heads=6,
                    mamba_d_state=5, mamba_rms_norm=True, mamba_norm_before_gate=False), 152_264),
}
FALCON_H1_DEFAULTS = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                          num_key_value_heads=8, vocab_size=128000, mamba_d_ssm=1024, mamba_n_heads=128,
                          mamba_d_state=256, mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2, rms_norm_eps=1e-5,
                          max_position_embeddings=8192)


def test_falcon_h1_totals_by_hand() -> None:
    """Every layer: two norms, the Mamba-2 mixer (its norm's scale only with mamba_rms_norm, W_out's bias with
    projectors_bias), attention beside it (Q, K, V, O, biases with attention_bias) and the SwiGLU."""
    d, f, V = 4096, 14336, 128000  # defaults: d_ssm 1024 = 128 heads of 8, no norm scale, untied
    mixer = _mixer_by_hand(d, 128, 8, 256, 1, 4, True, False) - 1024
    attention = 2 * d * 32 * 128 + 2 * d * 8 * 128
    assert 32 * (mixer + attention + 3 * d * f + 2 * d) + 2 * V * d + d == 8_514_961_408
    d, f, V = 96, 50, 300  # random: 12 heads of 84 / 12 = 7, biases everywhere, the norm's scale, tied
    mixer = _mixer_by_hand(d, 12, 7, 7, 3, 2, False, True)
    attention = 2 * d * 6 * 20 + 6 * 20 + d + 2 * (d * 3 * 20 + 3 * 20)  # Q, O (its bias d wide), K, V
    assert 3 * (mixer + attention + 3 * d * f + 2 * f + d + 2 * d) + V * d + d == 268_146
    d, f, V = 64, 40, 200  # expand: the SSM 3·64 = 192 wide, 6 heads of 32
    mixer = _mixer_by_hand(d, 6, 32, 5, 1, 4, True, False)
    assert 2 * (mixer + 4 * d * d + 3 * d * f + 2 * d) + 2 * V * d + d == 152_264


def _falcon_h1(fields: dict) -> dict:
    return {"model_type": "falcon_h1", **FALCON_H1_DEFAULTS, **fields}


@pytest.mark.parametrize("case", sorted(FALCON_H1_CASES))
def test_falcon_h1_counts_as_transformers(case: str) -> None:
    fields, want = FALCON_H1_CASES[case]
    assert count_parameters(parse_config(hf_to_mapping(_falcon_h1(fields), "x.json"))).total == want


def test_falcon_h1_reads_its_multipliers_and_its_norm() -> None:
    data = _falcon_h1({"ssm_multipliers": [0.5, 1.5, 2.0, 0.25, 3.0], "mlp_multipliers": [0.7, 1.3],
                       "key_multiplier": 0.6, "attention_in_multiplier": 1.1, "attention_out_multiplier": 0.9,
                       "ssm_in_multiplier": 1.2, "ssm_out_multiplier": 0.8, "embedding_multiplier": 5.5,
                       "lm_head_multiplier": 0.04, "layers_block_type": ["hybrid"] * 32})
    config = parse_config(hf_to_mapping(data, "x.json"))
    b, m = config.block, config.block.mamba
    assert b.parts == "hybrid" and b.mlp_multipliers == (0.7, 1.3) and b.attention_scale == 0.6 / 128 ** 0.5
    assert (b.attention_in_multiplier, b.attention_out_multiplier) == (1.1, 0.9)
    assert m == Mamba2(n_heads=128, head_dim=8, d_state=256, norm_eps=1e-5, norm="none", out_bias=False,
                       in_multiplier=1.2, multipliers=(0.5, 1.5, 2.0, 0.25, 3.0), out_multiplier=0.8)
    assert (config.model.embedding_multiplier, config.model.logit_multiplier) == (5.5, 0.04)
    normed = parse_config(hf_to_mapping(_falcon_h1({"mamba_rms_norm": True}), "x.json")).block.mamba
    gated = parse_config(hf_to_mapping(_falcon_h1({"mamba_rms_norm": True, "mamba_norm_before_gate": False}),
                                       "x.json")).block.mamba
    assert (normed.norm, gated.norm) == ("norm_gate", "gated")


def test_falcon_h1_fields_its_modelling_code_never_reads_are_noted(tmp_path: Path) -> None:
    """The original FalconH1Config's fields in the released configs (attn_layer_indices, mamba_use_mlp, ...), which
    transformers 5.24 never reads: accepted at any value, the count unchanged, a note naming them."""
    extra = {"attn_layer_indices": None, "mamba_use_mlp": True, "mlp_expansion_factor": 8, "time_step_min": 0.001,
             "time_step_max": 0.1, "time_step_floor": 1e-4, "rope_theta": 1e11, "rope_scaling": None}
    (tmp_path / "config.json").write_text(json.dumps(_falcon_h1(extra)))
    proc = cli("count", tmp_path / "config.json")
    assert proc.returncode == 0, proc.stderr
    assert "8,514,961,408" in proc.stdout and "attn_layer_indices" in proc.stderr and "mamba_use_mlp" in proc.stderr
    assert load_config(tmp_path / "config.json").block.rope_theta == 1e11


@pytest.mark.parametrize("fields, message", [
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"time_step_limit": [0.0, 10.0]}, "time_step_limit"),
    ({"layers_block_type": ["attention"] * 32}, "layers_block_type"),
    ({"mamba_d_head": 16}, "mamba_d_head"),
    ({"mamba_n_groups": 3}, "mamba_n_groups"),
    ({"ssm_multipliers": [1.0, 2.0]}, "ssm_multipliers"),
    ({"mlp_multipliers": [1.0, 0.0]}, "mlp_multipliers"),
    ({"key_multiplier": 0}, "key_multiplier"),
])
def test_falcon_h1_fields_blockcli_cannot_run_are_named(tmp_path: Path, fields: dict, message: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_falcon_h1(fields)))
    assert message in one_error_line(cli("count", tmp_path / "config.json"))


@pytest.mark.parametrize("block, message", [
    ({"parts": "hybrid"}, "block.parts: hybrid"),  # no block.mamba beside the attention
    ({"parts": "hybrid", "mamba": {"version": 1, "d_inner": 8, "d_state": 2, "dt_rank": 1}},
     "block.parts: hybrid"),  # Falcon-H1's side-by-side layer is Mamba-2's
    ({"attention_in_multiplier": 2.0}, "block.attention_in_multiplier"),
    ({"mlp_multipliers": [2.0, 1.0], "activation": "gelu"}, "block.mlp_multipliers"),
    ({"mlp_multipliers": [2.0]}, "block.mlp_multipliers"),
    ({"mamba": {"n_heads": 2, "head_dim": 4, "d_state": 2, "out_multiplier": 2.0}}, "block.mamba.out_multiplier"),
    ({"mamba": {"n_heads": 2, "head_dim": 4, "d_state": 2, "norm": "layer"}}, "block.mamba.norm"),
    ({"mamba": {"n_heads": 2, "head_dim": 4, "d_state": 2, "multipliers": [1, 2, 3]}}, "block.mamba.multipliers"),
])
def test_the_hybrid_layers_settings_are_checked(block: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_config({"block": {"d_model": 8, "n_heads": 2, "activation": "swiglu", **block}})


def test_a_hybrid_layer_is_its_mixers_sum_and_decodes_through_both_caches() -> None:
    """block.parts hybrid by hand: the block's output is x + m_ssm·(a Mamba-2 block's mixer on LN1(x)) + m_out·(an
    attention block's mixer on m_in·LN1(x)) + the MLP, each from the same weights; and decoding one token at a time
    through its K/V and its state equals the full pass."""
    data = {"block": {"d_model": 12, "n_heads": 3, "n_kv_heads": 1, "d_ff": 20, "norm": "rmsnorm",
                      "activation": "swiglu", "bias": False, "rope": True, "parts": "hybrid",
                      "attention_in_multiplier": 1.4, "attention_out_multiplier": 0.6, "mlp_multipliers": [0.8, 1.2],
                      "mamba": {"n_heads": 4, "head_dim": 4, "d_state": 3, "n_groups": 2, "norm": "norm_gate",
                                "out_multiplier": 1.3, "in_multiplier": 0.7, "multipliers": [0.5, 1.5, 0.9, 1.1, 2.0]}},
            "model": {"n_layers": 2, "vocab_size": 30, "positions": "rope"}, "run": {"batch": 2, "seq_len": 6}}
    config = parse_config(data)
    block = DecoderBlock.from_config(config.block, seed=5, dtype="float64")
    x = np.random.default_rng(2).standard_normal((2, 6, 12))
    ssm_cfg = replace(config.block, parts="both", mamba=replace(config.block.mamba, out_multiplier=1.0),
                      attention_in_multiplier=1.0, attention_out_multiplier=1.0)
    alone = {k: v for k, v in block.params.items() if k in DecoderBlock.from_config(ssm_cfg, seed=0).params}
    attention = {k: v for k, v in block.params.items()
                 if k in DecoderBlock.from_config(config.block.attention_part, seed=0).params}
    ssm_block = DecoderBlock(ssm_cfg, alone)
    attn_block = DecoderBlock(config.block.attention_part, attention)
    n1 = block.ln1(x)
    mixed = 1.3 * ssm_block.attn(n1, lambda *a, **k: None) + 0.6 * attn_block.attn(1.4 * n1, lambda *a, **k: None)
    h = x + mixed
    assert relative(block(x), h + block.mlp(block.ln2(h))) <= 1e-13
    m = config.block.mamba
    want = ref.mamba2_mixer({"n_heads": m.n_heads, "head_dim": m.head_dim, "d_state": m.d_state,
                             "n_groups": m.n_groups, "conv_kernel": m.conv_kernel, "eps": m.norm_eps,
                             "norm": m.norm, "in_multiplier": m.in_multiplier, "multipliers": m.multipliers},
                            {k: v for k, v in block.params.items() if "ssm" in k}, n1)
    assert relative(block.attn.mamba(n1, lambda *a, **k: None), want) <= 1e-12
    model = Model.from_config(config, dtype="float64")
    ids = np.arange(12).reshape(2, 6) % 30
    caches = model.new_cache()
    model.step(ids[:, :2], caches)
    steps = np.concatenate([model.step(ids[:, t:t + 1], caches) for t in range(2, 6)], axis=1)
    assert relative(steps, model(ids)[:, 2:]) <= 1e-12


# ----------------------------------------------------------------------------- the schema


@pytest.mark.parametrize("mamba, message", [
    ({"n_heads": 4, "head_dim": 2}, "block.mamba.d_state: required"),
    ({"n_heads": 4, "head_dim": 2, "d_state": 2, "n_groups": 3}, "block.mamba.n_groups"),
    ({"n_heads": 4, "head_dim": 2, "d_state": 2, "expand": 2}, "block.mamba.expand"),
    ("yes", "block.mamba: expected a mapping"),
    ({"version": 3, "d_inner": 4}, "block.mamba.version: expected 1"),
    ({"version": 1, "d_inner": 4, "d_state": 2}, "block.mamba.dt_rank: required"),
    ({"version": 1, "d_inner": 4, "d_state": 2, "dt_rank": 1, "bc_norm": "layer"}, "block.mamba.bc_norm"),
    ({"version": 1, "d_inner": 4, "d_state": 2, "dt_rank": 1, "n_heads": 2}, "block.mamba.n_heads"),
])
def test_bad_mamba_sections_are_named(mamba: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_config({"block": {"d_model": 8, "n_heads": 2, "mamba": mamba}})


@pytest.mark.parametrize("name", FOLDERS)
def test_backward_through_a_mamba_or_conv_layer_is_refused_in_one_line(name: str) -> None:
    folder = FIXTURES / name
    config = load_config(folder)
    conv = any(config.layer_block(i).short_conv is not None for i in range(config.model.n_layers))
    mixer = "short-convolution" if conv else "Mamba-1 or Mamba-2"
    for args in (("train", folder), ("trace", folder, "--backward"), ("verify", folder, "--grad"),
                 ("verify", folder, "--only", "20"), ("count", folder, "--train")):
        line = one_error_line(cli(*args))
        assert ("not modelled" if args[-1] == "--train" else mixer) in line, (args, line)


# ----------------------------------------------------------------------------- against transformers itself


# transformers 5.24's Zamba2ForCausalLM on the meta device (recomputed by the torch-marked test)
ZAMBA2_CASES = {
    "defaults": ({}, 2_481_848_336),  # 54 Mamba-2 layers, 9 of them running the one shared block first, tied
    "random": (dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2, intermediate_size=40, adapter_rank=5,
                    n_mamba_heads=6, mamba_d_state=7, mamba_ngroups=3, mamba_d_conv=5, mamba_expand=2,
                    num_mem_blocks=3, add_bias_linear=True, vocab_size=300, use_mem_rope=True, num_hidden_layers=7,
                    layers_block_type=["mamba", "hybrid", "hybrid", "mamba", "hybrid", "hybrid", "mamba"]), 226_066),
    "adapters": (dict(hidden_size=40, num_attention_heads=5, intermediate_size=None, adapter_rank=4, n_mamba_heads=4,
                      mamba_d_state=6, num_mem_blocks=2, use_shared_attention_adapter=True, vocab_size=200,
                      num_hidden_layers=5, layers_block_type=["hybrid", "mamba", "hybrid", "hybrid", "mamba"]), 160_520),
}
ZAMBA2_DEFAULTS = dict(hidden_size=2560, num_hidden_layers=54, num_attention_heads=32, vocab_size=32000,
                       mamba_d_state=64, mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1, n_mamba_heads=8,
                       adapter_rank=128, num_mem_blocks=1, rms_norm_eps=1e-5)


def _zamba2_by_hand(d: int, V: int, types: list[str], h: int, h_kv: int, d_ff: int, r: int, m_heads: int, N: int,
                    g: int, K: int, blocks: int, bias: bool, tied: bool, qkv_adapters: bool) -> int:
    """Every layer a norm d and a Mamba-2 mixer (its in_proj and out_proj biased with add_bias_linear, its conv always);
    each shared block once: the norm 2d, Q, K, V from 2d (head width 2d/h), O to d, the norm d, gate | up and down
    (biased with add_bias_linear); each use its own linear d² and adapters: gate | up d·r + r·2·d_ff, and Q, K, V
    2d·r + r·2d each with the attention adapters."""
    d_h, uses = 2 * d // h, sum(t == "hybrid" for t in types)
    mamba = _mixer_by_hand(d, m_heads, 2 * d // m_heads, N, g, K, True, bias) + d
    shared = 2 * d + 2 * d * h * d_h + 2 * (2 * d * h_kv * d_h) + h * d_h * d + d + 3 * d * d_ff + bias * (2 * d_ff + d)
    use = d * d + d * r + r * 2 * d_ff + qkv_adapters * 3 * (2 * d * r + r * 2 * d)
    return len(types) * mamba + min(blocks, uses) * shared + uses * use + V * d * (1 if tied else 2) + d


def test_zamba2_totals_by_hand() -> None:
    defaults = ["mamba"] + (["mamba"] * 5 + ["hybrid"]) * 7 + ["mamba"] * 4 + ["hybrid"] + ["mamba"] * 3 + ["hybrid"] \
        + ["mamba"] * 2
    assert _zamba2_by_hand(2560, 32000, defaults, 32, 32, 10240, 128, 8, 64, 1, 4, 1, False, True, False) == 2_481_848_336
    _, want = ZAMBA2_CASES["random"]
    types = ZAMBA2_CASES["random"][0]["layers_block_type"]
    assert _zamba2_by_hand(48, 300, types, 6, 2, 40, 5, 6, 7, 3, 5, 3, True, True, False) == want
    types = ZAMBA2_CASES["adapters"][0]["layers_block_type"]
    assert _zamba2_by_hand(40, 200, types, 5, 5, 160, 4, 4, 6, 1, 4, 2, False, True, True) == 160_520


@pytest.mark.parametrize("case", sorted(ZAMBA2_CASES))
def test_zamba2_counts_as_transformers(case: str) -> None:
    fields, want = ZAMBA2_CASES[case]
    config = parse_config(hf_to_mapping({"model_type": "zamba2", **ZAMBA2_DEFAULTS, **fields}, "x.json"))
    assert count_parameters(config).total == want


def test_zamba2_layers_use_the_shared_blocks_in_turn_and_count_them_once() -> None:
    """num_mem_blocks 3 over 4 uses: blocks 0, 1, 2, 0; the model holds each block's weights once (shared.{k}.*), each
    using layer its own adapters and projection; the layers without one are Mamba-2 alone."""
    from blockcli.shapes import model_parameter_shapes

    fields, _ = ZAMBA2_CASES["random"]
    config = parse_config(hf_to_mapping({"model_type": "zamba2", **ZAMBA2_DEFAULTS, **fields}, "x.json"))
    uses = [(i, config.layer_block(i).shared) for i in range(7)]
    assert [(i, s.index) for i, s in uses if s is not None] == [(1, 0), (2, 1), (4, 2), (5, 0)]
    assert all(config.layer_block(i).parts == "mixer" and config.layer_block(i).mamba is not None for i in range(7))
    shapes = model_parameter_shapes(config)
    assert sorted({k.split(".")[1] for k in shapes if k.startswith("shared.")}) == ["0", "1", "2"]
    assert shapes["shared.0.w_q"] == (96, 6 * 16) and shapes["shared.0.w_k"] == (96, 2 * 16)
    assert shapes["shared.0.w_o"] == (96, 48) and shapes["blocks.5.w_shared_out"] == (48, 48)
    assert shapes["blocks.5.adapter_mlp_a"] == (48, 5) and shapes["blocks.5.adapter_gate_b"] == (5, 40)
    assert not any(k.startswith("blocks.0.") and ("adapter" in k or "shared" in k) for k in shapes)


@pytest.mark.parametrize("fields, message", [
    ({"num_hidden_layers": 5}, "num_hidden_layers"),  # the default layers_block_type has 54
    ({"layers_block_type": ["mamba", "attention"], "num_hidden_layers": 2}, "layers_block_type"),
    ({"use_shared_attention_adapter": True, "num_key_value_heads": 8}, "use_shared_attention_adapter"),
    ({"n_mamba_heads": 7}, "n_mamba_heads"),
    ({"num_attention_heads": 3}, "num_attention_heads"),
    ({"hidden_act": "xielu"}, "hidden_act"),
    # transformers 5.24 ties the shared blocks only with tied embeddings: untied, each use is a block of its own
    ({"tie_word_embeddings": False}, "tie_word_embeddings"),
    ({"use_mem_rope": True, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
     "rope_parameters"),
])
def test_zamba2_fields_blockcli_cannot_run_are_named(tmp_path: Path, fields: dict, message: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "zamba2", **ZAMBA2_DEFAULTS, **fields}))
    assert message in one_error_line(cli("count", tmp_path / "config.json"))


def test_a_zamba2_layer_with_a_shared_block_runs_only_inside_its_model() -> None:
    """Alone, such a layer has neither the shared block's weights nor the token embeddings: one line saying so, from
    the block and from verify --layer."""
    config = load_config(FIXTURES / "zamba2")
    with pytest.raises(InputError, match="runs only inside its model"):
        DecoderBlock.from_config(config, layer=1, weights=FIXTURES / "zamba2")(np.zeros((1, 2, 16)))
    assert "--layer 1: it runs a shared transformer block" in one_error_line(cli("verify", FIXTURES / "zamba2",
                                                                                 "--layer", "1"))


TORCH_CASES = {"granitemoehybrid": (GRANITE_CASES, GRANITE_DEFAULTS), "bamba": (BAMBA_CASES, BAMBA_DEFAULTS),
               "nemotron_h": (NEMOTRON_CASES, NEMOTRON_DEFAULTS), "lfm2": (LFM2_CASES, LFM2_DEFAULTS),
               "falcon_h1": (FALCON_H1_CASES, FALCON_H1_DEFAULTS), "mamba2": (MAMBA2_CASES, MAMBA2_DEFAULTS),
               "lfm2_moe": (LFM2_MOE_CASES, LFM2_MOE_DEFAULTS), "zamba2": (ZAMBA2_CASES, ZAMBA2_DEFAULTS),
               "lfm3": (LFM3_CASES, LFM3_DEFAULTS),
               **MAMBA1_CASES}


@pytest.mark.torch
@pytest.mark.parametrize("model_type, case", [(t, c) for t, (cases, _) in TORCH_CASES.items() for c in sorted(cases)])
def test_the_totals_here_are_transformers_own(model_type: str, case: str) -> None:
    """The config class's sizes are the defaults written above, and transformers on the meta device counts the
    totals written above; blockcli reads the config class's whole to_dict() to the same total."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cases, defaults = TORCH_CASES[model_type]
    fields, want = cases[case]
    config = transformers.AutoConfig.for_model(model_type, **fields)
    assert {k: getattr(config, k) for k in defaults} == {**defaults, **{k: v for k, v in fields.items() if k in defaults}}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == want
    data = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}
    assert count_parameters(parse_config(hf_to_mapping(data, "x.json"))).total == want


@pytest.mark.parametrize("name", FOLDERS)
def test_verify_passes_one_layer_of_each_kind(name: str) -> None:
    """The checklist on a Mamba layer (its widths, the slow reference loop, decoding through its state), an
    attention layer and a layer of its MLP alone; the checks that need attention weights skip saying why."""
    proc = cli("verify", FIXTURES / name)
    assert proc.returncode == 0, proc.stdout[-2000:]
    config = load_config(FIXTURES / name)
    if any(config.layer_block(i).shared is not None for i in range(config.model.n_layers)):  # Zamba2's cannot run alone
        assert "layers 1-3 run a shared transformer block (block.shared)" in proc.stderr and "not verified" in proc.stderr
    elif config.layers_differ:  # an attention-free Mamba's and Falcon-H1's layers are all one kind
        assert "one layer of each of its" in proc.stdout


@pytest.mark.parametrize("name", FOLDERS)
def test_report_and_seeded_bugs_on_the_hybrids(tmp_path: Path, name: str) -> None:
    """The report draws attention maps of the attention layers only; on a Mamba layer the seeded bugs of
    attention's operations are not applicable (saying why), and every other one is caught."""
    page = tmp_path / "page.html"
    proc = cli("report", FIXTURES / name, "-o", page)
    assert proc.returncode == 0 and page.is_file(), proc.stderr[-2000:]
    proc = cli("verify", FIXTURES / name, "--mutants", "--layer", "0")
    assert proc.returncode == 0, proc.stdout[-2000:]
    first = load_config(FIXTURES / name).layer_block(0)
    if first.parts == "hybrid":  # Falcon-H1's layer has attention beside its Mamba-2 mixer: every attention bug applies
        assert "│ no-mask" in proc.stdout and "every seeded bug is caught" in proc.stdout
        assert 'class="map"' in page.read_text() and "no maps of the layers without attention" not in page.read_text()
    elif first.mamba is not None:
        version = 1 if isinstance(first.mamba, Mamba1) else 2
        assert f"no-mask (the checked layer has no attention: a Mamba-{version} mixer)" in proc.stdout
    if load_config(FIXTURES / name).layer_block(0).short_conv is not None:
        assert "no-mask (the checked layer has no attention: a short convolution)" in proc.stdout


@pytest.mark.parametrize("name", FOLDERS)
def test_the_trace_counts_what_the_decode_caches_hold(name: str) -> None:
    """trace's kv_cache_bytes is what blockcli's own caches hold after the pass: measured here by running the
    model's decode step and summing the arrays each layer's cache keeps (K/V, SSM state, conv windows; nothing for
    an MLP alone)."""
    from blockcli.block import KVCache
    from blockcli.trace import with_run

    config = with_run(load_config(FIXTURES / name), batch=2, seq_len=5)
    model = Model.from_config(config, dtype="float32")
    caches = model.new_cache()
    model.step(np.arange(10).reshape(2, 5) % config.model.vocab_size, caches)
    def held(cache: object) -> int:  # a K/V cache's filled part, not its capacity; both of a hybrid layer's caches
        parts = (cache.k, cache.v) if isinstance(cache, KVCache) else vars(cache).values()
        return sum(a.nbytes if isinstance(a, np.ndarray) else held(a) if hasattr(a, "__dict__") else 0 for a in parts)

    assert run_trace(config).totals["kv_cache_bytes"] == sum(held(cache) for cache in caches)


def test_tensor_parallelism_splits_the_kv_heads_and_the_mamba_state() -> None:
    """--tp 2 on granitemoehybrid's fixture, 1 × 8 tokens: its attention layer's 2 K/V heads of 4, one per rank
    (8 tokens × K and V × 4 × float32), and half of each of its two Mamba layers' state, S 4·8·8 and the conv's
    window of K = 4 inputs over 32 + 2·2·8 channels."""
    data = json.loads(cli("count", FIXTURES / "granitemoehybrid", "--tp", 2, "--batch", 1, "--seq", 8, "--json").stdout)
    assert data["parallel"]["stages"][0]["kv_cache_bytes"] == 8 * 2 * 4 * 4 + 2 * (4 * 8 * 8 + 4 * 64) // 2 * 4


@pytest.mark.parametrize("preset, scaled", [("falcon-mamba-7b", "Mamba-1 d_inner 512, dt_rank 16"),
                                            ("mamba-2.8b", "Mamba-1 d_inner 512, dt_rank 16")])
def test_verify_runs_a_large_mamba1_preset_on_a_scaled_copy(preset: str, scaled: str) -> None:
    """A 7B Mamba-1 layer is checked on a copy k times narrower (d_in / k channels, Δ's rank / k, the same state):
    the slow reference loop runs channel by channel."""
    proc = cli("verify", preset)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert scaled in proc.stdout


def test_tensor_parallelism_splits_a_mamba1_layers_channels() -> None:
    """--tp 2 on Mamba-2.8B: each rank d_in / 2 = 2,560 of the 5,120 channels (in_proj and dt_proj by columns, x_proj
    and out_proj by rows, the conv, A_log and D by channel), Δ's rank and the state whole, the norm whole; the
    vocabulary-parallel table's rows of the padded vocabulary; the state halved. By hand from MambaMixer's shapes."""
    from blockcli.ranks import Layout, plan

    config = load_config("mamba-2.8b")
    d, c, R, N, K = 2560, 2560, 160, 16, 4  # c: one rank's channels
    layer = d + d * 2 * c + c * K + c + c * (R + 2 * N) + R * c + c + c * N + c + c * d
    table = 50432 // 2 * d  # 50,280 padded to a multiple of 128·2
    stage = plan(config, Layout(tp=2), 8, 1, training=False, kv_bits=32).stages[0]
    assert stage.parameters == 64 * layer + table + d == 1_384_450_560
    assert stage.kv_cache == 64 * (5120 * N + K * 5120) * 4 // 2  # the state and the conv's window, halved
    with pytest.raises(InputError, match="mamba.d_inner = 5120"):
        plan(config, Layout(tp=3), 8, 1, training=False)


def test_an_attention_free_models_trace_names_its_mixer_not_placeholder_heads() -> None:
    """Mamba's block carries placeholder attention fields (one head, d_ff = d) that no layer uses: the trace's header
    names the Mamba-1 widths instead; the rows name the scan's state."""
    proc = cli("trace", FIXTURES / "mamba", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    assert "d=16, Mamba-1 d_in=32, N=6, R=3, attention-free" in proc.stdout.splitlines()[0]
    assert "selective scan: state (B, d_in=32, N=6), constant in T" in proc.stdout


def test_a_mamba1_layers_flops_by_hand_and_constant_in_the_context() -> None:
    """Per token, by hand: in (d → 2·d_in), x (d_in → R + 2·N), Δ (R → d_in), out (d_in → d), the conv's K taps per
    channel and the scan's two d_in·N products, times 2; a decode step the same at any context. The trace's matmul
    FLOPs of a pass are the same sums."""
    config = _mamba1_config(bc_norm="learned")
    d, d_in, N, R, K, V, L = 8, 10, 4, 3, 3, 30, 2
    per_token = 2 * L * (d * 2 * d_in + d_in * (R + 2 * N) + R * d_in + d_in * d + K * d_in + 2 * d_in * N)
    head = 2 * d * V
    groups = Dims.per_group(config)
    assert model_forward_flops(groups, 10, 2).total() == 2 * 10 * (per_token + head)
    assert model_decode_flops(groups, 10, 1) == model_decode_flops(groups, 1000, 1) == per_token + head
    trace = run_trace(config)  # B = 2, T = 6: the products, and 4·N per output of the scan, 2·K of the conv
    assert sum(r.matmul_flops for r in trace.rows) == 2 * 6 * (per_token + head)
    ops = {r.key.split(".", 2)[-1]: r for r in trace.rows if r.key.startswith("blocks.0.")}
    assert list(ops) == ["ln1_out", "ssm_in", "ssm_conv", "ssm_conv_act", "ssm_x", "ssm_bc_norm", "ssm_dt_proj",
                         "ssm_dt", "ssm_scan", "ssm_skip", "ssm_gate", "attn_out", "y"]
    assert ops["ssm_scan"].flops == 2 * 6 * d_in * (4 * N + N)  # x ⊗ B in, S·C out, the decay
def test_tensor_parallelism_splits_a_hybrid_layers_kv_heads_and_its_state() -> None:
    """--tp 2 on falcon_h1's fixture, 1 × 8 tokens: each of its 2 layers holds K/V (2 heads of 4: one per rank, 8 tokens
    × K and V × 4 × float32) and half of its Mamba-2 state (S 4·6·6 and the conv's window of K = 3 inputs over
    24 + 2·2·6 channels, float32)."""
    data = json.loads(cli("count", FIXTURES / "falcon_h1", "--tp", 2, "--batch", 1, "--seq", 8, "--json").stdout)
    assert data["parallel"]["stages"][0]["kv_cache_bytes"] == 2 * (8 * 2 * 4 * 4 + (4 * 6 * 6 + 3 * 48) // 2 * 4)


def test_zamba2_tensor_parallelism_splits_the_shared_blocks_and_their_uses() -> None:
    """--tp 2 on zamba2's fixture: each rank holds half of every shared block's heads and MLP (the norms whole), half
    of each use's adapter outputs (r·h·d_h/2 …) and W_s whole, every Mamba-2 layer whole (as Bamba's), and 128 of the
    padded 256 embedding rows. By hand, d = 16, r = 3, h = h_kv = 4 of 8, d_ff = 24."""
    data = json.loads(cli("count", FIXTURES / "zamba2", "--tp", 2, "--batch", 1, "--seq", 8, "--json").stdout)
    d, r, half, ff = 16, 3, 2 * 8, 12  # half: h/2·d_h; ff: d_ff/2
    block = 2 * d + 3 * 2 * d * half + half * d + d + 3 * d * ff + 2 * ff + d  # norms, Q K V, O, norm, MLP and biases
    use = 3 * (2 * d * r + r * half) + d * r + 2 * r * ff + d * d
    mamba = _mixer_by_hand(d, 4, 8, 6, 2, 3, True, True) + d  # a Mamba-2 layer: 4 heads of 8, N 6, 2 groups, K 3
    stage = data["parallel"]["stages"][0] if "parallel" in data else data["ranks"]["stages"][0]
    assert stage["parameters"] == 128 * d + d + 4 * mamba + 3 * use + 2 * block == 18_904
