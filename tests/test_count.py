"""Parameter counts: the chapters' worked figures, formula against arrays, output formats, CI budgets."""

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st
from typer.testing import CliRunner

from blockcli.block import DecoderBlock, Model
from blockcli.cli import app
from blockcli.config import parse_config
from blockcli.sources import load_config
from blockcli.shapes import is_buffer
from blockcli.count import count_parameters, parse_amount
from conftest import CONFIGS
from strategies import block_mappings

runner = CliRunner()


def components(result):
    return {c.name: c for c in result.components}


def test_reference_chapter_table():
    # shared/reference 000 §17: d=512, h=8, d_ff=2048, LayerNorm, biases
    rows = components(count_parameters(load_config()))
    assert rows["attention"].count == 4 * 512**2 + 4 * 512 == 1_050_624
    assert rows["mlp"].count == 2 * 512 * 2048 + 2048 + 512 == 2_099_712
    assert rows["norms"].count == 2 * (512 + 512) == 2_048
    assert rows["block"].count == 3_152_384
    assert rows["attention"].expression == "4·d² + 4·d"


def test_rmsnorm_block_without_attention_biases():
    # shared/reference 001: d=256, h=8, d_ff=1024, RMSNorm scale only, no attention biases, MLP biases
    cfg = parse_config({"block": {"d_model": 256, "n_heads": 8, "d_ff": 1024, "norm": "rmsnorm",
                                  "bias": {"qkv": False, "out": False, "mlp": True, "norm": False}}})
    assert count_parameters(cfg).total == 788_224


def test_matrices_only_twelve_d_squared():
    # shared/reference 004: d=768, matrices only (no biases, no norms): 12·d² = 7,077,888
    cfg = parse_config({"block": {"d_model": 768, "n_heads": 12, "d_ff": 3072, "bias": False}})
    rows = components(count_parameters(cfg))
    assert rows["attention"].weights + rows["mlp"].weights == 12 * 768**2 == 7_077_888


def test_grouped_query_shapes_and_counts():
    cfg = parse_config({"block": {"d_model": 64, "n_heads": 8, "n_kv_heads": 2, "d_ff": 100, "bias": False,
                                  "activation": "swiglu", "norm": "rmsnorm"}})
    rows = components(count_parameters(cfg))
    assert rows["attn.k"].shape == "(64, 16)" and rows["attn.k"].count == 64 * 16
    assert rows["attn.q"].count == 64 * 64
    assert rows["mlp.up"].count == 64 * 100  # the third (gate partner) matrix
    assert count_parameters(cfg).total == 2 * 64 * 64 + 2 * 64 * 16 + 3 * 64 * 100 + 2 * 64


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_example_config_matches_its_stated_count(path):
    cfg = load_config(path)
    assert cfg.about.parameters is not None, "each example config states its expected count"
    result = count_parameters(cfg)
    assert result.total == cfg.about.parameters
    assert result.reconciled.match


def test_tied_head_counted_once():
    cfg = load_config("gpt2")
    rows = components(count_parameters(cfg))
    assert rows["lm_head"].count == 0 and rows["lm_head"].kind == "tied"
    untied = parse_config({"block": {"d_model": 768, "n_heads": 12, "d_ff": 3072},
                           "model": {"n_layers": 12, "vocab_size": 50257, "tie_embeddings": False}})
    assert count_parameters(untied).total - count_parameters(cfg).total == 768 * 50257


@given(block_mappings(), st.booleans(), st.booleans())
def test_formula_equals_arrays_for_random_configs(block, with_model, tie):
    data = {"block": block}
    if with_model:
        data["model"] = {"n_layers": 2, "vocab_size": 11, "max_positions": 9, "position_offset": 2,
                         "tie_embeddings": tie, "positions": "rope" if block["rope"] else "learned",
                         "lm_head_bias": not tie}
    cfg = parse_config(data)
    result = count_parameters(cfg)
    assert result.reconciled.match, result.reconciled.mismatches
    net = (Model if with_model else DecoderBlock).from_config(cfg)
    assert result.total == sum(a.size for k, a in net.params.items() if not is_buffer(k))  # buffers: not parameters
    layer0 = {k.removeprefix("blocks.0."): v for k, v in net.params.items() if not k.startswith("blocks.")
              or k.startswith("blocks.0.")}
    for c in result.components:
        if c.kind == "tensor" and c.keys:
            assert c.count == sum(layer0[k].size for k in c.keys if k in layer0)


def test_a_block_holds_exactly_the_declared_shapes_count_reconciles_with():
    # count never builds a block: it trusts that a block's parameters are the declared shapes, so a
    # block given any other set (a key missing or extra, a shape off) must refuse to exist
    from blockcli.config import InputError
    from blockcli.shapes import block_parameter_shapes

    cfg = load_config("configs/gqa-swiglu-rope.yaml")
    params = DecoderBlock.from_config(cfg).params
    assert {k: v.shape for k, v in params.items()} == block_parameter_shapes(cfg.block)
    wrong_shape = {**params, "w_k": params["w_k"][:, :-1]}
    missing = {k: v for k, v in params.items() if k != "w_up"}
    extra = {**params, "w_extra": params["w_gate"]}
    for weights, named in ((wrong_shape, "w_k"), (missing, "w_up"), (extra, "w_extra")):
        with pytest.raises(InputError, match=named):
            DecoderBlock(cfg.block, weights)


NO_NUMPY_RUN = """
import sys
from blockcli.cli import main
sys.argv = ["blockcli", *sys.argv[1:]]
try:
    main()
except SystemExit as stop:
    print(f"exit {stop.code}", "numpy" in sys.modules, file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["gpt2", "--json"], ["gpt2"], ["llama-3.1-8b", "--json", "--train"],
                                  ["tests/fixtures/hf/llama/config.json", "--json"], ["configs/tiny-gpt.yaml"],
                                  ["deepseek-v3", "--json"], ["deepseek-v3"]])
def test_count_imports_no_numpy(args):
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", NO_NUMPY_RUN, "count", *args], capture_output=True, text=True,
                          cwd=root, timeout=60)
    assert proc.stderr.splitlines()[-1] == "exit 0 False", proc.stderr
    assert json.loads(proc.stdout)["reconciled"]["match"] if "--json" in args else "match" in proc.stdout


def test_large_model_is_counted_from_declared_shapes_without_allocating():
    result = count_parameters(load_config("llama-2-70b"))
    assert result.total == 68_976_648_192  # Meta's Llama-2-70b-hf as instantiated by transformers
    assert "declared shapes" in result.reconciled.method and result.reconciled.match


def test_workload_defaults_to_the_run_section():
    # no --seq/--batch/--dtype: the preset's run section (T=8, batch 1, float32)
    cfg = load_config("llama-2-7b")
    result = count_parameters(cfg)
    T, L = cfg.run.seq_len, cfg.model.n_layers
    assert result.non_embedding == 6_738_415_616 - 32000 * 4096  # untied head stays in
    data = json.loads(runner.invoke(app, ["count", "llama-2-7b", "--json"]).stdout)["inference"]
    assert (data["seq_len"], data["batch"], data["dtype"]) == (T, 1, "float32")
    per_token = 2 * (L * (4 * 4096**2 + 3 * 4096 * 11008) + 4096 * 32000)  # matrices only: no norms
    assert data["prefill_per_token"]["full"]["flops"] == per_token + 4 * L * T * 32 * 128
    assert data["kv_cache"]["bytes_per_token"] == 2 * L * 32 * 128 * 4
    assert data["parameter_bytes_by_dtype"]["bfloat16"] == 2 * 6_738_415_616


@pytest.mark.parametrize("text,value,tol", [("3152384", 3152384, 0), ("3,152,384", 3152384, 0),
                                            ("3.15M", 3150000, 5000), ("7B", 7 * 10**9, 5 * 10**8),
                                            ("1_000", 1000, 0)])
def test_parse_amount(text, value, tol):
    assert parse_amount(text) == (value, tol)


def test_json_matches_table_and_has_stable_keys():
    out = runner.invoke(app, ["count", "--json"])
    assert out.exit_code == 0
    data = json.loads(out.stdout)
    for key in ("total", "per_block", "n_layers", "components", "reconciled", "inference"):
        assert key in data
    assert data["total"] == 3_152_384 and data["reconciled"]["match"] is True
    assert {"formula", "arrays", "match"} <= set(data["reconciled"])
    table = runner.invoke(app, ["count"]).stdout
    for comp in data["components"]:
        assert {"name", "shapes", "copies", "weights", "biases", "count"} <= set(comp)
        assert f"{comp['count']:,}" in table


def test_markdown_and_csv():
    md = runner.invoke(app, ["count", "--format", "markdown"]).stdout
    assert md.startswith("| component |") and "3,152,384" in md
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, ["count", "--format", "csv"]).stdout)))
    assert {r["name"]: int(r["count"]) for r in rows}["block"] == 3_152_384


@pytest.mark.parametrize("args,code", [(["--expect", "3152384"], 0), (["--expect", "3,152,384"], 0),
                                       (["--expect", "3.15M"], 0), (["--expect", "3152385"], 1),
                                       (["--expect", "3.1M"], 1), (["--expect", "3.2M"], 0), (["--max", "4M"], 0), (["--max", "3M"], 1),
                                       (["--expect", "lots"], 2)])
def test_expect_and_max_exit_codes(args, code):
    assert runner.invoke(app, ["count", *args]).exit_code == code


def test_presets_listing():
    out = runner.invoke(app, ["presets", "--json"])
    data = json.loads(out.stdout)
    assert data["schema_version"] == 1
    names = {p["name"] for p in data["presets"]}
    assert {"gpt2", "llama-2-7b", "gemma-2b", "opt-125m", "pythia-160m"} <= names


# DeepSeek-V3's routing, small: 8 experts with a selection bias (transformers' e_score_correction_bias, a buffer)
SELECTION_BIAS = {"block": {"d_model": 16, "n_heads": 2, "d_ff": 32, "norm": "rmsnorm", "activation": "swiglu",
                            "bias": False, "rope": True,
                            "moe": {"n_experts": 8, "top_k": 2, "d_expert": 4, "scoring": "sigmoid",
                                    "selection_bias": True}},
                  "model": {"n_layers": 3, "vocab_size": 20, "positions": "rope", "tie_embeddings": False}}


def test_selection_bias_is_a_stored_buffer_outside_every_total(tmp_path):
    d, h_dh, E, d_e, L, V = 16, 16, 8, 4, 3, 20
    per_block = 2 * d + 4 * d * h_dh + d * E + E * 3 * d * d_e  # norms, Q K V O, router, experts: no bias
    cfg = parse_config(SELECTION_BIAS)
    result = count_parameters(cfg)
    assert result.total == L * per_block + 2 * V * d + d and result.buffers == L * E
    row = next(c for c in result.components if c.name == "mlp.router_bias")
    assert (row.kind, row.count, row.keys) == ("buffer", E, ("router_bias",))
    assert next(c for c in result.components if c.name == "block").count == per_block
    assert result.reconciled.match and (result.reconciled.buffers_formula, result.reconciled.buffers_arrays) == (24, 24)
    path = tmp_path / "bias.yaml"
    path.write_text(json.dumps(SELECTION_BIAS))
    data = json.loads(runner.invoke(app, ["count", str(path), "--json"]).stdout)
    assert data["total"] == result.total and data["buffers"] == L * E
    assert data["reconciled"]["buffers_formula"] == data["reconciled"]["buffers_arrays"] == L * E
    assert {c["kind"] for c in data["components"] if c["name"] == "mlp.router_bias"} == {"buffer"}
    table = runner.invoke(app, ["count", str(path)], env={"COLUMNS": "200"}).stdout
    assert "router selection bias (buffer, not a parameter)" in table
    assert "buffers (stored, not parameters: in no total): formula 24 vs 24: match" in table


def test_checkpoint_reconciliation_keeps_buffers_apart_and_exact():
    import math

    from blockcli.shapes import model_parameter_shapes

    cfg = parse_config(SELECTION_BIAS)
    stored = {k: math.prod(s) for k, s in model_parameter_shapes(cfg).items()}
    rec = count_parameters(cfg, checkpoint=stored, checkpoint_info={"files": ["m.safetensors"]}).reconciled
    assert rec.match and rec.arrays == rec.formula and rec.buffers_arrays == 24  # parameters alone, buffers apart
    short = {**stored, "blocks.1.router_bias": 7}
    rec = count_parameters(cfg, checkpoint=short, checkpoint_info={}).reconciled
    assert not rec.match and rec.arrays == rec.formula and rec.buffers_arrays == 23
    assert rec.mismatches == ("layer 1 mlp.router_bias: formula 8 vs checkpoint 7",)


def test_declared_sizes_sum_every_declared_shape():
    import math

    from blockcli.shapes import declared_sizes, model_parameter_shapes

    mixed = parse_config({**SELECTION_BIAS, "layers": [{"indices": [0], "block": {"moe": None}}]})
    shapes = model_parameter_shapes(mixed)
    buffers = sum(math.prod(s) for k, s in shapes.items() if k.endswith(".router_bias"))
    assert declared_sizes(mixed) == (sum(math.prod(s) for s in shapes.values()) - buffers, buffers) != (0, 0)
    assert buffers == 2 * 8  # layers 1 and 2 route; layer 0 is dense


@pytest.mark.parametrize("config, renamed", [
    ("configs/gqa-swiglu-rope.yaml", {"w_1": "w_gate", "w_3": "w_up", "w_2": "w_down"}),  # gated
    ("configs/tiny-gpt.yaml", {"w_1": "w_up", "b_1": "b_up", "w_2": "w_down", "b_2": "b_down"}),  # plain
])
def test_weights_under_the_old_mlp_keys_still_load(tmp_path, config, renamed):
    """blockcli 0.1 named the MLP's matrices w_1 (activated), w_3 (its partner) and w_2: such an .npz loads."""
    cfg = load_config(config)
    blk = DecoderBlock.from_config(cfg.for_layer(0) if cfg.model else cfg)
    inverse = {new: old for old, new in renamed.items()}
    old = {inverse.get(k, k): v for k, v in blk.params.items()}
    assert set(old) != set(blk.params)
    np.savez(tmp_path / "old.npz", **old)
    again = DecoderBlock.from_config(cfg.for_layer(0) if cfg.model else cfg, weights=tmp_path / "old.npz")
    assert any("blockcli 0.1" in note for note in again.notes)
    x = np.random.default_rng(0).standard_normal((1, 3, cfg.block.d_model))
    assert np.array_equal(blk(x), again(x))
