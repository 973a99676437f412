"""`blockcli report` without a browser: the page's numbers are those `count`, `trace` and `verify --json`
print for the same config (and, where a figure is published or follows from a hand formula, that
figure), the attention maps are the weights a traced pass keeps, the page is self-contained and
deterministic, and bad inputs exit 2 with one line. What a browser shows is tests/test_report_browser.py.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

GEMMA3 = ROOT / "tests" / "fixtures" / "hf" / "gemma3_text"
SECTIONS = ("overview", "architecture", "parameters", "shapes", "attention", "cost", "checklist")


def blockcli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """One command with the threads pinned: a report and the verify it is compared with then reduce their float32
    sums in the same order (left to the machine's load, the two processes may choose different thread counts, and
    item 13's figure differs in its last digits)."""
    return subprocess.run([sys.executable, "-m", "blockcli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, env={**os.environ, "BLOCKCLI_THREADS": "1"})


def cli_json(*args: str):
    out = blockcli(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def rows(page: str, attribute: str) -> dict[str, dict[str, str]]:
    """For each <tr> with `attribute`: its value → {cell class: text} (the first class word of each cell)."""
    out: dict[str, dict[str, str]] = {}
    for match in re.finditer(rf'<tr [^>]*?\b{attribute}="([^"]*)"[^>]*>(.*?)</tr>', page, flags=re.S):
        cells = {}
        for cell in re.finditer(r'<td(?: class="([^"]*)")?[^>]*>(.*?)</td>', match.group(2), flags=re.S):
            text = re.sub(r"<[^>]+>", " ", cell.group(2))
            cells.setdefault((cell.group(1) or "").split(" ")[-1] or str(len(cells)), " ".join(html.unescape(text).split()))
        out.setdefault(match.group(1), cells)
    return out


def number(text: str) -> int:
    return int(text.split()[0].replace(",", ""))


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Pages written once for the module: a preset, the Gemma 3 fixture folder, and a comparison."""
    folder = tmp_path_factory.mktemp("pages")
    made = {}
    for name, args in {"llama": ["llama-3.1-8b"], "gemma3": [str(GEMMA3)], "gpt2": ["gpt2"],
                       "compare": ["gpt2", "gpt2-medium"]}.items():
        out = blockcli("report", *args, "-o", str(folder / f"{name}.html"))
        assert out.returncode == 0, out.stderr
        assert out.stderr == ""
        made[name] = (folder / f"{name}.html").read_text("utf-8")
    return made


def test_every_section_is_there_once(pages):
    for name in ("llama", "gemma3", "gpt2"):
        ids = re.findall(r'<section id="([^"]+)"', pages[name])
        assert ids == list(SECTIONS), (name, ids)
    compared = re.findall(r'<section id="([^"]+)"', pages["compare"])
    assert compared[0] == "differences"
    assert compared[1:] == [f"{side}-{s}" for s in SECTIONS for side in "ab"]


def test_the_page_is_self_contained(pages):
    for name, page in pages.items():
        assert "<script" not in page.lower() and "@import" not in page and "url(" not in page, name
        for attr, value in re.findall(r'\s(src|href|xlink:href|action|srcset)="([^"]*)"', page):
            assert value.startswith("#"), (name, attr, value)  # only links within the page
        assert "http:" not in re.sub(r"<code>[^<]*</code>|published as [^<]*", "", page).replace(
            "https:", ""), name  # a config's published source is shown as text, never linked
        assert "<link" not in page and "<img" not in page and "<iframe" not in page


def test_overview_and_parameter_table_equal_count_json(pages):
    for name, args in (("llama", ["llama-3.1-8b"]), ("gemma3", [str(GEMMA3)])):
        page, data = pages[name], cli_json("count", *args)
        figures = dict(re.findall(r'<dd data-figure="([a-z_]+)">([^<]+)</dd>', page))
        assert number(figures["total"]) == data["total"]
        assert number(figures["active"]) == data["active_per_token"]
        assert number(figures["non_embedding"]) == data["non_embedding"]
        assert number(figures["per_block"]) == data["per_block"]
        assert number(figures["memory"]) == data["inference"]["memory_bytes"]
        assert number(figures["kv_per_token"]) == data["inference"]["kv_cache"]["bytes_per_token"]
        shown = re.findall(r'<tr data-component="([^"]+)"(?: data-group="(\d+)")?[^>]*>(.*?)</tr>', page, flags=re.S)
        assert len(shown) == len(data["components"])
        for (key, group, cells), comp in zip(shown, data["components"]):
            assert key == comp["name"] and (int(group) if group else None) == comp.get("group")
            count = re.search(r'class="num count">([^<]+)<', cells).group(1)
            assert number(count) == comp["count"], key
            assert html.unescape(re.search(r'class="formula">([^<]*)<', cells).group(1)) == comp["formula"]
        verdict = "match" if data["reconciled"]["match"] else "MISMATCH"
        assert f'data-reconciled="{verdict}"' in page and f"{data['reconciled']['arrays']:,}" in page
    assert "checkpoint" in pages["gemma3"]  # the folder's tensors were what the count was reconciled with


def test_llama_figures_equal_hand_formulas(pages):
    """Llama 3.1 8B: 8,030,261,248 parameters (Meta's model card: 8.03B); K/V cache 2·L·h_kv·d_h float32
    bytes per token = 2·32·8·128·4; at T the cache is that times T (batch 1)."""
    page = pages["llama"]
    assert '<dd data-figure="total">8,030,261,248</dd>' in page
    assert '<dd data-figure="kv_per_token">262,144</dd>' in page
    sweep = rows(page, "data-seq")
    assert list(sweep) == [str(2 ** k) for k in range(7, 18)]  # 128 … 131,072, the model's context
    for T, cells in sweep.items():
        assert number(cells["kv"]) == 262_144 * int(T)
        assert number(cells["weights"]) == 4 * 8_030_261_248


def test_gpt2_shares_add_up_to_the_published_total(pages):
    """GPT-2 small: 124,439,808 parameters (the published 124M); the chart's parts from hand formulas,
    d = 768, 12 layers: attention 4d² + 4d, MLP 8d² + 5d, two norms 4d per layer; wte 50257·d, wpe 1024·d."""
    d = 768
    expected = {"attention (Q, K, V, O) × 12": 12 * (4 * d * d + 4 * d), "MLP × 12": 12 * (8 * d * d + 5 * d),
                "two norms × 12": 12 * 4 * d, "token embedding": 50257 * d, "position embedding": 1024 * d,
                "final LayerNorm": 2 * d}
    parts = dict(re.findall(r'data-part="([^"]+)" data-count="(\d+)"', pages["gpt2"]))
    assert {k: int(v) for k, v in parts.items()} == expected
    assert sum(expected.values()) == 124_439_808


def test_shape_flow_equals_trace_json(pages):
    data = cli_json("trace", "llama-3.1-8b", "--shapes-only")
    shown = rows(pages["llama"], "data-step")
    assert list(shown) == [str(op["step"]) for op in data["ops"]]
    for op in data["ops"]:
        cells = shown[str(op["step"])]
        assert cells["op"] == op["op"]
        assert cells["out"] == "(" + ", ".join(map(str, op["output_shape"])) + ")"
        assert cells["sym"] == op["symbolic"]
        assert number(cells["flops"]) == op["flops"]
        assert number(cells["bytes"]) == op["bytes"]
        if op["causal_matmul_flops"] is not None:
            assert f"{op['causal_matmul_flops']:,} causal" in cells["flops"]
    assert f'data-total-flops="{data["totals"]["flops"]}"' in pages["llama"]


def test_checklist_equals_verify_json(pages):
    for name, args in (("llama", ["llama-3.1-8b"]), ("gemma3", [str(GEMMA3)])):
        data = cli_json("verify", *args)
        shown = rows(pages[name], "data-check")
        several = len(data["layers"]) > 1  # one layer of each kind, as verify runs them: rows keyed layer:id
        key = {id(c): f"{c['layer']}:{c['id']}" if several else str(c["id"]) for c in data["checks"]}
        assert list(shown) == list(key.values())
        for check in data["checks"]:
            cells = shown[key[id(check)]]
            if several:
                assert cells["layer"] == str(check["layer"])
            assert cells["status"] == check["status"]
            assert cells["measured"] == " ".join(check["measured"].split())
            assert cells["name"] == " ".join(check["name"].split())
        assert f'data-passed="{str(data["passed"]).lower()}"' in pages[name]


def test_cost_table_equals_count_json_at_those_lengths(pages):
    sweep = rows(pages["gemma3"], "data-seq")
    assert list(sweep) == ["2", "4", "8", "16", "32", "64"]  # up to the fixture's 64 positions
    for T in ("16", "64"):
        inference = cli_json("count", str(GEMMA3), "--seq", T)["inference"]
        cells = sweep[T]
        assert number(cells["weights"]) == inference["parameter_bytes"]
        assert number(cells["kv"]) == inference["kv_cache"]["bytes"]
        assert number(cells["act"]) == inference["activation_bytes"]
        assert number(cells["memory"]) == inference["memory_bytes"]
        assert number(cells["prefill"]) == inference["prefill"]["causal"]["flops"]
        assert number(cells["decode"]) == inference["decode_step"]["flops"]


def _map_titles(page: str, layer: int, head: int) -> dict[tuple[int, int], float]:
    figure = re.search(rf'<figure class="map" data-layer="{layer}" data-head="{head}">(.*?)</figure>', page,
                       flags=re.S).group(1)
    return {(int(t), int(s)): float(w) for t, s, w in
            re.findall(r"<title>query (\d+), key (\d+): ([0-9.]+)</title>", figure)}


def test_attention_maps_are_the_weights_trace_keeps(pages, tmp_path):
    """The fixture runs whole (its own weights): each drawn head equals `trace --save`'s attn_weights to
    the 4 decimals shown; a cell is drawn exactly where the weight is not 0 (causal, and within the
    4-key window of the sliding layer 0)."""
    saved = tmp_path / "t.npz"
    out = blockcli("trace", str(GEMMA3), "--seq", "24", "--batch", "1", "--save", str(saved))
    assert out.returncode == 0, out.stderr
    arrays = np.load(saved)
    for layer, window in ((0, 4), (1, 0)):
        weights = arrays[f"blocks.{layer}.attn_weights"][0]
        for head in range(4):
            drawn = _map_titles(pages["gemma3"], layer, head)
            allowed = {(t, s) for t in range(24) for s in range(24) if s <= t and (not window or t - s < window)}
            assert set(drawn) == allowed
            for (t, s), w in drawn.items():
                assert abs(w - weights[head, t, s]) <= 5e-5
            for t in range(24):  # softmax rows: the drawn cells of each row hold all its weight
                assert abs(sum(w for (q, _), w in drawn.items() if q == t) - 1) < 24 * 5e-5


def test_a_large_blocks_maps_come_from_its_own_pass_and_narrowing_the_mlp_changes_nothing(monkeypatch):
    """gpt2 is over the whole-model limit: its maps are layer 0's block pass, as `trace --layer 0` runs it.
    Narrowing the MLP (done past BLOCK_PASS_LIMIT) must leave them exactly as they were."""
    from blockcli import report
    from blockcli.sources import load_config
    from blockcli.trace import run_trace, with_run
    from dataclasses import replace

    cfg = load_config("gpt2")
    maps, _ = report.attention_maps(cfg, None)
    block = with_run(replace(cfg.for_layer(0), model=None), 1, report.MAP_SEQ, "float32")
    truth = run_trace(block, attention="full", keep=True).arrays["attn_weights"][0]
    assert [m.head for m in maps] == [0, 3, 6, 9]
    for m in maps:
        np.testing.assert_array_equal(m.weights, truth[m.head])
    monkeypatch.setattr(report, "BLOCK_PASS_LIMIT", 0)
    narrowed, notes = report.attention_maps(cfg, None)
    assert any("narrowed" in n for n in notes)
    for a, b in zip(maps, narrowed):
        np.testing.assert_array_equal(a.weights, b.weights)


def test_same_input_same_bytes(tmp_path):
    for name in ("a", "b"):
        assert blockcli("report", str(GEMMA3), "-o", str(tmp_path / f"{name}.html")).returncode == 0
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    out = blockcli("report", str(GEMMA3), "-o", "-")
    assert out.stdout.encode() == (tmp_path / "a.html").read_bytes()


def test_comparison_highlights_what_differs(pages):
    page = pages["compare"]
    figures = {f: c for c, f in re.findall(r'<tr class="(diff|same)" data-figure="([^"]+)"', page)}
    assert figures["parameters"] == "diff" and figures["d_model"] == "diff" and figures["layers"] == "diff"
    assert figures["vocabulary"] == "same" and figures["context"] == "same"
    fields = rows(page, "data-field")
    # GPT-2 medium: d 1024, 16 heads, 24 layers, d_ff 4096 (GPT-2 small: 768, 12, 12, 3072)
    assert {k: (v["a"], v["b"]) for k, v in fields.items()} == {
        "block.d_model": ("768", "1,024"), "block.n_heads": ("12", "16"), "block.n_kv_heads": ("12", "16"),
        "block.d_ff": ("3,072", "4,096"), "model.n_layers": ("12", "24")}
    assert '<tr class="diff" data-figure="parameters"><td>parameters</td><td class="num a">124,439,808</td>' \
           '<td class="num b">354,823,168</td>' in page  # both published totals (124M, 355M)


def test_train_log_is_drawn_with_its_own_numbers(tmp_path):
    log = {"steps": [{"step": i, "loss": 4.0 / (1 + i), "grad_norm": 1.0 + 0.1 * i} for i in range(0, 50, 7)]}
    log["steps"][3]["lr"] = 1e-3  # other keys are allowed
    path = tmp_path / "run.json"
    path.write_text(json.dumps(log))
    out = blockcli("report", "--train-log", str(path), "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "r.html").read_text()
    assert '<section id="training"' in page
    table = rows(page, "data-row")
    assert table["first"]["step"] == "0" and float(table["first"]["loss"]) == 4.0
    assert table["last"]["step"] == "49" and float(table["last"]["loss"]) == pytest.approx(4 / 50)
    assert (table["lowest"]["step"], table["lowest"]["loss"]) == (table["last"]["step"], table["last"]["loss"])
    assert page.count("<title>loss: ") == len(log["steps"])


@pytest.mark.parametrize("body, message", [
    ("{", "invalid JSON at line 1"),
    ("[]", '"steps" list'),
    ('{"steps": []}', "steps is empty"),
    ('{"steps": [{"step": 1.5, "loss": 1, "grad_norm": 1}]}', "steps[0].step: expected an integer"),
    ('{"steps": [{"step": true, "loss": 1, "grad_norm": 1}]}', "steps[0].step: expected an integer"),
    ('{"steps": [{"step": 1, "loss": NaN, "grad_norm": 1}]}', "NaN is not a JSON number"),
    ('{"steps": [{"step": 1, "loss": "1", "grad_norm": 1}]}', "steps[0].loss: expected a finite number"),
    ('{"steps": [{"step": 1, "loss": 1}]}', "steps[0].grad_norm: expected a finite number, got null"),
    ('{"steps": [{"step": 1, "loss": 1, "grad_norm": -1}]}', "steps[0].grad_norm: a norm is ≥ 0"),
    ('{"steps": [{"step": 2, "loss": 1, "grad_norm": 1}, {"step": 2, "loss": 1, "grad_norm": 1}]}',
     "steps[1].step: 2 after 2"),
])
def test_a_bad_train_log_exits_2_naming_the_field(tmp_path, body, message):
    path = tmp_path / "log.json"
    path.write_text(body)
    out = blockcli("report", "--train-log", str(path), "-o", str(tmp_path / "r.html"))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"blockcli: error: --train-log {path}: ")
    assert message in out.stderr
    assert not (tmp_path / "r.html").exists()


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    cases = [
        (["report", "no-such-model"], "no-such-model"),
        (["report", "gpt2", "gpt2", "gpt2"], "one config, or two"),
        (["report", "gpt2", "--seq", "5000"], "max_positions=1024"),
        (["report", "gpt2", "-o", str(tmp_path / "missing" / "r.html")], "does not exist"),
        (["report", "gpt2", "-o", str(tmp_path) + "/"], "trailing slash"),
        (["report", "gpt2", "--train-log", str(tmp_path / "none.json")], "none.json"),
        (["report", "--dtype", "float7"], "float7"),
    ]
    for args, fragment in cases:
        out = blockcli(*args, cwd=tmp_path)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("blockcli: error: "), out.stderr
        assert fragment in out.stderr, (args, out.stderr)
    assert list(tmp_path.iterdir()) == []  # nothing written, no temporary file left


def test_output_is_never_overwritten_without_force(tmp_path):
    target = tmp_path / "report.html"
    target.write_text("mine")
    out = blockcli("report", cwd=tmp_path)  # the default output, report.html, exists
    assert out.returncode == 2 and "file exists; pass --force" in out.stderr
    assert target.read_text() == "mine"
    out = blockcli("report", "--force", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("wrote report.html (")
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # the temporary file was renamed


@pytest.mark.parametrize("preset, total", [("deepseek-v3", 671_026_404_352), ("gpt-oss-120b", 116_829_156_672)])
def test_the_largest_pages_stay_small(tmp_path, preset, total):
    """deepseek-v3, the largest preset (671B without its MTP layer, as published: 61 layers in two groups,
    256 experts), and gpt-oss-120b, the largest page measured (117B as published; two layer groups, so
    two sets of maps): each at most 512 KiB."""
    out = blockcli("report", preset, "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    size = (tmp_path / "r.html").stat().st_size
    assert size <= 512 * 1024, size
    page = (tmp_path / "r.html").read_text()
    assert f'<dd data-figure="total">{total:,}</dd>' in page


def test_report_modules_sit_at_the_render_level():
    from test_architecture import MODULES

    importers = {m for m, names in MODULES.items() if {"blockcli.report", "blockcli.svg"} & names}
    assert importers <= {"blockcli.cli", "blockcli.report"}
    for module in ("blockcli.report", "blockcli.svg"):
        assert not {"typer", "rich", "yaml", "torch"} & {n.split(".")[0] for n in MODULES[module]}
