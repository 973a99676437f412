"""trace: shapes of every step, FLOPs against the closed form, saved intermediates against an
independent loop reference, chunked attention, and the analytic (shapes-only) rows."""

import json
from pathlib import Path
import math
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st
from typer.testing import CliRunner

import reference as ref
from blockcli.block import DecoderBlock
from blockcli.cli import app
from blockcli.config import parse_config
from blockcli.sources import load_config
from blockcli.trace import _causal_fraction, analytic_trace, collapse_layers, run_trace, with_run
from conftest import ROOT
from strategies import block_mappings

runner = CliRunner()


def shapes(trace):
    return {r.key: r.output_shape for r in trace.rows}


def test_worked_example_shapes():
    # shared/reference 004: B=2, n=5, d=12, H=3 → heads (2, 3, 5, 4), scores (2, 3, 5, 5)
    s = shapes(run_trace(load_config(ROOT / "configs" / "worked-shapes.yaml")))
    assert s["ln1_out"] == (2, 5, 12)
    assert s["q_proj"] == s["k_proj"] == s["v_proj"] == (2, 5, 12)
    assert s["q"] == s["k"] == s["v"] == (2, 3, 5, 4)
    assert s["scores"] == s["masked_scores"] == s["attn_weights"] == (2, 3, 5, 5)
    assert s["attn_heads"] == (2, 3, 5, 4)
    assert s["attn_concat"] == s["attn_out"] == s["h"] == (2, 5, 12)
    assert s["mlp_pre"] == s["mlp_act"] == (2, 5, 48)
    assert s["mlp_out"] == s["y"] == (2, 5, 12)


def test_row_order_follows_the_forward_pass():
    keys = [r.key for r in run_trace(load_config()).rows]
    assert keys == ["ln1_out", "q_proj", "k_proj", "v_proj", "q", "k", "v", "scores", "masked_scores",
                    "attn_weights", "attn_heads", "attn_concat", "attn_out", "h", "ln2_out", "mlp_pre",
                    "mlp_act", "mlp_out", "y"]


def test_grouped_query_shapes():
    cfg = parse_config({"block": {"d_model": 32, "n_heads": 8, "n_kv_heads": 2, "d_ff": 40, "rope": True},
                        "run": {"batch": 3, "seq_len": 6}})
    s = shapes(run_trace(cfg))
    assert s["k_proj"] == s["v_proj"] == (3, 6, 8)
    assert s["k"] == s["v"] == s["k_rope"] == (3, 2, 6, 4)
    assert s["q"] == s["q_rope"] == (3, 8, 6, 4)
    assert s["scores"] == (3, 8, 6, 6)


def closed_form_matmul_flops(B, T, d, h, h_kv, d_h, d_ff, k):
    # the closed form: 2·B·T·(d·(h + 2·h_kv)·d_h + h·d_h·d + k·d·d_ff) + 4·B·h·T²·d_h
    return 2 * B * T * (d * (h + 2 * h_kv) * d_h + h * d_h * d + k * d * d_ff) + 4 * B * h * T**2 * d_h


@pytest.mark.parametrize("block", [
    {"d_model": 512, "n_heads": 8, "d_ff": 2048},
    {"d_model": 64, "n_heads": 8, "n_kv_heads": 2, "d_ff": 96, "activation": "swiglu", "bias": False},
    {"d_model": 48, "n_heads": 4, "head_dim": 16, "d_ff": 20, "activation": "geglu", "placement": "parallel"},
])
def test_matmul_flops_equal_closed_form(block):
    cfg = parse_config({"block": block, "run": {"batch": 3, "seq_len": 7}})
    b = cfg.block
    expected = closed_form_matmul_flops(3, 7, b.d_model, b.n_heads, b.n_kv_heads, b.head_dim, b.d_ff,
                                        3 if b.gated else 2)
    for trace in (run_trace(cfg), run_trace(cfg, attention="chunked"), analytic_trace(cfg)):
        assert trace.totals["matmul_flops"] == expected


@pytest.mark.parametrize("shapes_only", [False, True])
def test_shared_norm_is_one_norm_read_by_both_branches(shapes_only):
    """parallel_shared: one LN1 row (d + d parameters), no LN2 row; Q, K, V and the MLP expansion all
    read LN1's output, and the MLP's sum adds to the attention sum of the block input x."""
    cfg = parse_config({"block": {"d_model": 32, "n_heads": 2, "d_ff": 40, "placement": "parallel_shared",
                                  "rope": 0.25, "rope_layout": "interleaved"}, "run": {"batch": 2, "seq_len": 3}})
    trace = analytic_trace(cfg) if shapes_only else run_trace(cfg)
    rows = {r.key: r for r in trace.rows}
    assert "ln2_out" not in rows and rows["ln1_out"].params == 2 * 32
    ln1 = rows["ln1_out"].step
    for key in ("q_proj", "k_proj", "v_proj", "mlp_pre"):
        assert rows[key].sources[0] == ln1, key
    assert rows["h"].sources == [0, rows["attn_out"].step]  # x + attention
    assert rows["y"].sources == [rows["h"].step, rows["mlp_out"].step]
    assert rows["q_rope"].op == "RoPE on Q"


def test_causal_half_of_the_score_products():
    trace = run_trace(with_run(load_config(), 1, 4))
    row = next(r for r in trace.rows if r.key == "scores")
    # 4 queries see 1 + 2 + 3 + 4 = 10 of 16 keys
    assert row.causal_flops == row.matmul_flops * 10 // 16 == 2 * 8 * 10 * 64


def independent_intermediates(x, p, d_h, n_heads, eps):
    """Loop reference of every saved intermediate of the default (pre-norm, LayerNorm, tanh-GELU) block."""
    B, T, d = x.shape
    q = np.zeros((B, n_heads, T, d_h)); k = np.zeros_like(q); v = np.zeros_like(q)
    scores = np.zeros((B, n_heads, T, T)); weights = np.zeros_like(scores)
    concat = np.zeros((B, T, n_heads * d_h))
    ln1 = np.zeros_like(x); attn_out = np.zeros_like(x); h = np.zeros_like(x); ln2 = np.zeros_like(x)
    pre = np.zeros((B, T, p["w_up"].shape[1])); act = np.zeros_like(pre); mlp = np.zeros_like(x); y = np.zeros_like(x)
    for b in range(B):
        for t in range(T):
            ln1[b, t] = ref.layer_norm_vec(x[b, t], p["ln1_gamma"], p["ln1_beta"], eps)
            qt, kt, vt = (ref.linear_vec(ln1[b, t], p[f"w_{n}"], p[f"b_{n}"]) for n in "qkv")
            for i in range(n_heads):
                q[b, i, t], k[b, i, t], v[b, i, t] = (a[i * d_h:(i + 1) * d_h] for a in (qt, kt, vt))
        for i in range(n_heads):
            for t in range(T):
                for s in range(T):
                    scores[b, i, t, s] = float(np.dot(q[b, i, t], k[b, i, s])) / math.sqrt(d_h)
                probs = ref.softmax_list([scores[b, i, t, s] for s in range(t + 1)])
                for s in range(t + 1):
                    weights[b, i, t, s] = probs[s]
                concat[b, t, i * d_h:(i + 1) * d_h] = sum(weights[b, i, t, s] * v[b, i, s] for s in range(t + 1))
        for t in range(T):
            attn_out[b, t] = ref.linear_vec(concat[b, t], p["w_o"], p["b_o"])
            h[b, t] = x[b, t] + attn_out[b, t]
            ln2[b, t] = ref.layer_norm_vec(h[b, t], p["ln2_gamma"], p["ln2_beta"], eps)
            pre[b, t] = ref.linear_vec(ln2[b, t], p["w_up"], p["b_up"])
            act[b, t] = [ref.gelu_tanh(float(u)) for u in pre[b, t]]
            mlp[b, t] = ref.linear_vec(act[b, t], p["w_down"], p["b_down"])
            y[b, t] = h[b, t] + mlp[b, t]
    return {"ln1_out": ln1, "q": q, "k": k, "v": v, "scores": scores, "attn_weights": weights,
            "attn_concat": concat, "attn_out": attn_out, "h": h, "ln2_out": ln2, "mlp_pre": pre,
            "mlp_act": act, "mlp_out": mlp, "y": y}


def test_save_matches_independent_reference_intermediate_by_intermediate(tmp_path):
    cfg_path = tmp_path / "b.yaml"
    cfg_path.write_text("block: {d_model: 12, n_heads: 3, d_ff: 20}\nrun: {batch: 2, seq_len: 5, dtype: float64}\n")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 12))
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    result = runner.invoke(app, ["trace", str(cfg_path), "--input", str(tmp_path / "x.npy"), "--save", str(out),
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    cfg = load_config(cfg_path)
    params = DecoderBlock.from_config(cfg).params  # the same seeded weights trace used
    expected = independent_intermediates(x, {k: v.astype(float) for k, v in params.items()}, 4, 3, 1e-5)
    with np.load(out) as saved:
        for name, value in expected.items():
            assert saved[name].shape == value.shape, name
            assert np.max(np.abs(saved[name] - value)) < 1e-12, name
    # refuses to overwrite without --force, and the file is unchanged
    before = out.read_bytes()
    again = runner.invoke(app, ["trace", str(cfg_path), "--save", str(out)])
    assert again.exit_code == 2 and "--force" in again.stderr
    assert out.read_bytes() == before
    assert runner.invoke(app, ["trace", str(cfg_path), "--save", str(out), "--force"]).exit_code == 0


@pytest.mark.parametrize("block", [
    {"d_model": 24, "n_heads": 4, "d_ff": 30},
    {"d_model": 32, "n_heads": 8, "n_kv_heads": 2, "d_ff": 40, "rope": True, "norm": "rmsnorm"},
    {"d_model": 16, "n_heads": 2, "d_ff": 24, "placement": "post", "activation": "swiglu"},
])
def test_chunked_attention_equals_full_table(block, shared_tiles):
    cfg = parse_config({"block": block, "run": {"batch": 2, "seq_len": 37, "dtype": "float64"}})
    full = DecoderBlock.from_config(cfg, attention="full")
    chunked = DecoderBlock.from_config(cfg, attention="chunked")
    chunked.attn.tile_bytes = cfg.block.n_heads // cfg.block.n_kv_heads * 37 * 8 * 5  # 5 rows, 1 K/V head
    x = np.random.default_rng(0).standard_normal((2, 37, cfg.block.d_model))
    assert np.max(np.abs(full(x) - chunked(x))) < 1e-12


@given(block_mappings(), st.booleans(), st.integers(1, 3), st.integers(1, 6),
       st.sampled_from(["full", "chunked"]))
def test_analytic_rows_equal_executed_rows(block, with_model, batch, seq, attention):
    data = {"block": block, "run": {"batch": batch, "seq_len": seq}}
    if with_model:
        data["model"] = {"n_layers": 2, "vocab_size": 13, "max_positions": 8,
                         "positions": "rope" if block["rope"] else "learned", "tie_embeddings": seq % 2 == 0,
                         "embedding_norm": batch == 2, "embedding_dim": 5 if seq % 3 == 0 else 0}
    cfg = parse_config(data)
    # the data flow too: each input's producing step is the same (sources are compared)
    assert run_trace(cfg, attention=attention).rows == analytic_trace(cfg, attention).rows


def test_json_output_keys():
    data = json.loads(runner.invoke(app, ["trace", "--json"]).stdout)
    assert data["mode"] == "executed"
    for op in data["ops"]:
        assert {"op", "input_shapes", "output_shape", "symbolic", "flops", "bytes"} <= set(op)
    assert {"flops", "matmul_flops"} <= set(data["totals"])


def test_overrides_and_model_collapse():
    data = json.loads(runner.invoke(app, ["trace", str(ROOT / "configs" / "tiny-gpt.yaml"),
                                          "--batch", "1", "--seq", "3", "--json"]).stdout)
    assert data["batch"] == 1 and data["seq_len"] == 3
    repeated = [op for op in data["ops"] if op["repeat"] == 4]
    assert repeated and all(op["key"].startswith("blocks.*.") for op in repeated)
    assert data["ops"][-1]["output_shape"] == [1, 3, 1000]  # logits (B, T, V)
    every = json.loads(runner.invoke(app, ["trace", str(ROOT / "configs" / "tiny-gpt.yaml"), "--all-layers",
                                           "--json"]).stdout)
    assert {op["layer"] for op in every["ops"]} == {None, 0, 1, 2, 3}


def test_too_large_falls_back_to_shapes_only_and_demanded_pass_is_refused(tmp_path, monkeypatch):
    result = runner.invoke(app, ["trace", "llama-2-70b", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["mode"] == "analytic" and data["notes"]
    monkeypatch.setenv("BLOCKCLI_MEMORY_LIMIT", "1000")
    refused = runner.invoke(app, ["trace", "--save", str(tmp_path / "o.npz")])
    assert refused.exit_code == 2 and "--seq" in refused.stderr
    assert not (tmp_path / "o.npz").exists()


def test_mermaid_and_heatmap():
    mermaid = runner.invoke(app, ["trace", "--format", "mermaid"]).stdout
    assert mermaid.startswith("flowchart TD") and '|"(2, 8, 5, 5)"|' in mermaid
    heat = runner.invoke(app, ["trace", "--show-attention", "3"])
    assert heat.exit_code == 0 and "head 3" in heat.stdout
    assert runner.invoke(app, ["trace", "--show-attention", "9"]).exit_code == 2


def test_export_svg_and_html(tmp_path):
    svg, html = tmp_path / "t.svg", tmp_path / "t.html"
    result = runner.invoke(app, ["trace", "--export-svg", str(svg), "--export-html", str(html)])
    assert result.exit_code == 0
    assert svg.read_text().lstrip().startswith("<svg") and "scores Q·Kᵀ/√d_h" in html.read_text()
    again = runner.invoke(app, ["trace", "--export-svg", str(svg)])
    assert again.exit_code == 2 and "--force" in again.stderr


# ----------------------------------------------------------------------------- labels, estimates, closed form


def test_collapsed_rows_are_per_layer_and_the_tied_head_is_counted_once():
    cfg = load_config(ROOT / "configs" / "tiny-gpt.yaml")  # tied head; 954,112 by the hand count in its header
    trace = run_trace(cfg)
    rows = collapse_layers(trace.rows, 4)
    head = rows[-1]
    assert head.key == "logits" and head.tied and head.params == 0
    assert sum(r.params * r.repeat for r in rows) == 954_112 == trace.totals["parameters"]
    table = runner.invoke(app, ["trace", str(ROOT / "configs" / "tiny-gpt.yaml")]).stdout
    assert "×4, per layer" in table and "tied" in table and "one layer's" in table
    untied = parse_config({"block": {"d_model": 16, "n_heads": 2, "d_ff": 24},
                           "model": {"n_layers": 3, "vocab_size": 11, "tie_embeddings": False}})
    rows = collapse_layers(run_trace(untied).rows, 3)
    assert not rows[-1].tied and rows[-1].params == 16 * 11
    assert sum(r.params * r.repeat for r in rows) == run_trace(untied).totals["parameters"]


@pytest.mark.parametrize("shapes_only", [False, True])
def test_gated_activation_reads_gate_and_up(shapes_only):
    cfg = load_config(ROOT / "configs" / "gqa-swiglu-rope.yaml")
    trace = analytic_trace(cfg) if shapes_only else run_trace(cfg)
    steps = {r.key: r.step for r in trace.rows}
    act = next(r for r in trace.rows if r.key == "mlp_act")
    assert act.sources == [steps["mlp_pre"], steps["mlp_up"]]
    assert act.input_shapes == [(2, 16, cfg.block.d_ff)] * 2
    args = ["trace", str(ROOT / "configs" / "gqa-swiglu-rope.yaml"), "--format", "mermaid"]
    mermaid = runner.invoke(app, args + (["--shapes-only"] if shapes_only else [])).stdout
    for src in ("mlp_pre", "mlp_up"):
        assert f's{steps[src]} -->|"(2, 16, {cfg.block.d_ff})"| s{act.step}' in mermaid


@pytest.mark.parametrize("source,batch,seq,attention", [
    ("configs/worked-shapes.yaml", None, None, "auto"), ("configs/tiny-gpt.yaml", 2, 64, "auto"),
    ("configs/gqa-swiglu-rope.yaml", 2, 300, "full"), ("configs/gqa-swiglu-rope.yaml", 2, 300, "chunked"),
    (None, 2, 200, "full"), ("configs/rmsnorm-block.yaml", 1, 3, "auto"), ("gpt2", 1, 16, "auto"),
])
def test_shapes_only_peak_estimate_within_1_5x_of_measured(source, batch, seq, attention):
    cfg = with_run(load_config(None if source is None else ROOT / source if source.endswith(".yaml") else source),
                   batch, seq)
    measured = run_trace(cfg, attention=attention).peak_bytes
    estimate = analytic_trace(cfg, attention).peak_bytes
    assert measured / 1.5 <= estimate <= 1.5 * measured, (estimate, measured)


def test_measured_peak_of_a_fresh_process_excludes_module_imports():
    # a fresh interpreter: lazy imports during the pass would be counted as activations
    out = subprocess.run([sys.executable, "-m", "blockcli", "trace", str(ROOT / "configs" / "worked-shapes.yaml"),
                          "--json"], capture_output=True, text=True)
    measured = json.loads(out.stdout)["totals"]["peak_activation_bytes"]
    estimate = analytic_trace(load_config(ROOT / "configs" / "worked-shapes.yaml")).peak_bytes
    assert measured <= 1.5 * estimate, (measured, estimate)


@given(st.integers(1, 40), st.integers(0, 40))
def test_causal_fraction_closed_form_equals_counting(t_q, extra):
    t_k = t_q + extra  # the queries are the last t_q of t_k positions
    visible = sum(1 for i in range(t_q) for s in range(t_k) if s <= t_k - t_q + i)
    assert _causal_fraction(t_q, t_k) == Fraction(visible, t_q * t_k)


def test_analytic_trace_of_a_billion_tokens_is_closed_form():
    T = 10**9
    cfg = with_run(load_config(), 1, T)
    b = cfg.block
    totals = analytic_trace(cfg, "chunked").totals
    assert totals["matmul_flops"] == closed_form_matmul_flops(1, T, 512, 8, 8, 64, 2048, 2)
    dense = closed_form_matmul_flops(1, T, 512, 8, 8, 64, 2048, 2) - 4 * b.n_heads * T * T * b.head_dim
    assert totals["causal_matmul_flops"] == dense + 4 * b.n_heads * b.head_dim * T * (T + 1) // 2


def test_a_traced_pass_imports_no_module_while_its_peak_is_measured():
    # in a fresh interpreter, a pass large enough to share its tiles among threads (which loads
    # threadpoolctl and a thread pool on first use): nothing may be imported between start and stop
    script = f"""
import sys, tracemalloc
sys.path.insert(0, {str(ROOT)!r})
from blockcli.sources import load_config
from blockcli.trace import run_trace, with_run
seen = {{}}
start, stop = tracemalloc.start, tracemalloc.stop
tracemalloc.start = lambda *a: (seen.setdefault("start", set(sys.modules)), start(*a))
tracemalloc.stop = lambda: (seen.setdefault("stop", set(sys.modules)), stop())
run_trace(with_run(load_config({str(ROOT / "configs" / "chapter-block.yaml")!r}), 4, 256))
print(sorted(seen["stop"] - seen["start"]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("source", ["configs/tiny-gpt.yaml", "configs/gqa-swiglu-rope.yaml", "pythia-160m"])
def test_shapes_only_mermaid_draws_the_executed_graph(source):
    args = ["trace", str(ROOT / source) if source.endswith(".yaml") else source, "--seq", "4", "--format", "mermaid"]
    executed = runner.invoke(app, args).stdout
    assert runner.invoke(app, args + ["--shapes-only"]).stdout == executed
    assert executed.count("-->") > len(executed.splitlines()) // 2  # edges, not only nodes


# ----------------------------------------------------------------------------- --backward


FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir() if (p / "gradients.npz").is_file()))
def test_backward_gives_every_parameter_a_gradient_of_its_shape(name):
    from blockcli.trace import backward_report, collapse_layers

    cfg = with_run(load_config(FIXTURES / name), 2, 6)
    result = run_trace(cfg, weights=FIXTURES / name)
    rows = collapse_layers(result.rows, cfg.model.n_layers, [g.layers for g in cfg.layer_groups()])
    rep = backward_report(result, rows, FIXTURES / name)
    # an expert no token chose has none, nor has the sparse-attention indexer (no_grad, as in transformers), nor a layer
    # the pass skips (Mllama's cross-attention layers)
    assert rep.gradients + len(rep.unrouted) + len(rep.indexer) + len(rep.skipped) == rep.parameters > 0
    assert all(cfg.layer_block(int(k.split(".")[1])).cross_attention for k in rep.skipped)
    assert rep.saved_bytes > 0 and rep.closed_form_bytes in (None, rep.saved_bytes)
    assert rep.rows[0].key == "d:logits" and rep.rows[-1].key.startswith("d:tok_emb")  # the forward reversed


def test_backward_flops_by_hand_for_the_default_block():
    """Each linear layer: 2 × its forward (dX and dW) plus its bias's sum; the scores 3 × (recomputed, dQ, dK),
    weights·V 2 × (dV, dP): 4·(2·B·T·d·d)·2 + 2·(2·B·T·d·d_ff)·2 + 5·(2·B·h·T·T·d_h) for the matmuls."""
    from blockcli.trace import backward_report

    cfg = with_run(load_config(), 2, 5)
    rep = backward_report(run_trace(cfg), run_trace(cfg).rows)
    B, T, d, d_ff, h, d_h = 2, 5, 512, 2048, 8, 64
    assert rep.matmul_flops == 4 * (2 * B * T * d * d) * 2 + 2 * (2 * B * T * d * d_ff) * 2 + 5 * 2 * B * h * T * T * d_h


def test_backward_shapes_only_is_analytic_with_the_closed_form_of_the_saves():
    result = runner.invoke(app, ["trace", "configs/tiny-gpt.yaml", "--shapes-only", "--backward", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)["backward"]
    assert data["saved_bytes"] is None and data["closed_form_saved_bytes"] > 0
    assert data["ops"][0]["key"].endswith("logits") and data["ratio"] > 1.9


def test_backward_of_a_real_pass_reconciles_its_saves():
    result = runner.invoke(app, ["trace", "configs/gqa-swiglu-rope.yaml", "--backward", "--attention", "chunked"])
    assert result.exit_code == 0, result.output
    assert "closed form (blockcli.saved)" in result.stdout and ": match" in result.stdout


@pytest.mark.torch
def test_backward_matmul_flops_equal_torchs_flop_counter():
    """torch's FlopCounterMode over the same block's backward, SDPA on its math backend: each nn.Linear's two
    products, attention's four (dV, dP, dQ, dK) as autograd takes them from the kept table. blockcli's attention
    keeps no table and recomputes the scores: one product more (as torch's own count of its fused kernels'
    backward has it, sdpa_backward_flop_count)."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from blockcli.trace import backward_report

    cfg = with_run(load_config(), 2, 5)
    trace = run_trace(cfg)
    ours = backward_report(trace, trace.rows).matmul_flops
    TF, b = torch.nn.functional, cfg.block
    d, h, d_h, d_ff = b.d_model, b.n_heads, b.head_dim, b.d_ff
    gen = torch.Generator().manual_seed(0)
    w = {k: torch.randn(*s, generator=gen, requires_grad=True) for k, s in
         {"qkv": (3 * d, d), "o": (d, d), "up": (d_ff, d), "down": (d, d_ff)}.items()}
    x = torch.randn(2, 5, d, requires_grad=True)

    def block(x):
        n1 = TF.layer_norm(x, (d,))
        q, k, v = (a.view(2, 5, h, d_h).transpose(1, 2) for a in TF.linear(n1, w["qkv"]).split(d, dim=-1))
        a = TF.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 5, d)
        hres = x + TF.linear(a, w["o"])
        return hres + TF.linear(TF.gelu(TF.linear(TF.layer_norm(hres, (d,)), w["up"]), approximate="tanh"), w["down"])

    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        y = block(x)
        with FlopCounterMode(display=False) as counter:
            y.backward(torch.ones_like(y))
    recompute = 2 * 2 * h * 5 * 5 * d_h  # Q·Kᵀ once more: 2·B·h·T·T·d_h
    assert counter.get_total_flops() + recompute == ours


@pytest.mark.parametrize("name", ["deepseek_v3-moe", "apertus"])
def test_the_parameters_line_leaves_out_the_buffers_stored_beside_them(name: str) -> None:
    """DeepSeek-V3's selection bias and Apertus' xIELU β and ε are buffers: transformers' sum over parameters() (the
    fixture's figure, a vision-language model's language share aside) leaves them out, and so does trace."""
    folder = ROOT / "tests" / "fixtures" / "hf" / name
    cfg = with_run(load_config(folder), 1, 4)
    want = int(np.load(folder / "expected.npz")["parameters"])
    assert run_trace(cfg, weights=folder).totals["parameters"] == want
    assert analytic_trace(cfg).totals["parameters"] == want
