"""What a person sees: tables that keep every number whole at any width, a progress line on a terminal
and never in a pipe, and a closed pipe reported rather than ignored.

Each table is rendered at 80, 100 and 200 columns, and every number its JSON holds (counts, FLOPs,
parameters, the checks' figures as the table prints them) must appear whole, as one token, with no
line wider than the width.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys

import pytest
from rich.cells import cell_len
from rich.console import Console

from blockcli import render
from blockcli.count import count_parameters
from blockcli.mutants import run_mutants
from blockcli.sizing import inference, training
from blockcli.sources import load_config
from blockcli.trace import analytic_trace, collapse_layers, run_trace
from blockcli.verify import layers_to_verify, verify
from conftest import ROOT

WIDTHS = (80, 100, 200)
BOX = "│┃┏┓┗┛┣┫┳┻╋━─┡┩╇├┤┼┬┴└┘┌┐═"


def drawn(renderable, width: int) -> str:
    console = Console(width=width, record=True, file=open(os.devnull, "w"), color_system=None)
    console.print(renderable)
    return console.export_text()


def tokens(text: str) -> set[str]:
    return set(re.split(r"[\s" + BOX + r"]+", text))


def assert_fits(text: str, width: int, numbers: list[str]) -> None:
    for line in text.splitlines():
        assert cell_len(line.rstrip()) <= width, f"line wider than {width}: {line!r}"
    seen = tokens(text)  # a number is one token; a shape, several words, whole on one line
    missing = [n for n in numbers if (n not in seen if " " not in n else n not in text)]
    assert not missing, f"at {width} columns these numbers are not whole: {missing[:5]}"


def count_case(name: str, train: bool = False):
    cfg = load_config(name)
    result = count_parameters(cfg)
    inf = inference(cfg, result.total, cfg.run.seq_len, cfg.run.batch, cfg.run.dtype)
    tr = training(cfg, result.total, result.non_embedding, cfg.run.seq_len, cfg.run.batch) if train else None
    data = render.count_json(result, inf, tr)
    numbers = [f"{data['total']:,}"]
    for c in data["components"]:  # a row without biases may show its count alone (weights = count)
        numbers += [f"{c['count']:,}"] + ([f"{c['weights']:,}", f"{c['biases']:,}"] if c["biases"] else [])
    if tr is not None:
        numbers += [f"{t['bytes']:,}" for t in data["training"]["activations"]["layer_terms"]]
    return render.count_table(result, inf, tr), numbers


@pytest.mark.parametrize("name, train", [("gpt2", False), ("llama-3-8b", False), ("deepseek-v3", False),
                                         ("gemma-3-27b", False), ("gpt-oss-20b", False),
                                         (str(ROOT / "configs" / "gpt3-175b.yaml"), True)])
@pytest.mark.parametrize("width", WIDTHS)
def test_count_tables_keep_every_number_whole(name, train, width):
    table, numbers = count_case(name, train)
    assert_fits(drawn(table, width), width, numbers)


@pytest.mark.parametrize("width", WIDTHS)
def test_per_device_table_keeps_every_number_whole(width):
    from blockcli.ranks import Layout, plan

    cfg = load_config("llama-3.1-70b")
    result = count_parameters(cfg)
    inf = inference(cfg, result.total, 4096, 1, "bfloat16")
    tr = training(cfg, result.total, result.non_embedding, 4096, 1, dp=4, zero=1, micro_batches=8)
    ranks = plan(cfg, Layout(tp=8, pp=4, sp=True, dp=4, micro_batches=8), 4096, 1, training=True,
                 per=tr.per_parameter, zero=1)
    stages = render.count_json(result, inf, tr, ranks=ranks)["parallel"]["stages"]
    numbers = [f"{s[key]:,}" for s in stages for key in ("parameters", "activations", "memory_bytes")]
    numbers += [f"{s['states'][key]:,}" for s in stages for key in ("weights", "gradients", "optimizer")]
    assert_fits(drawn(render.count_table(result, inf, tr, ranks), width), width, numbers)


def trace_numbers(data: dict) -> list[str]:
    numbers = []
    for op in data["ops"]:
        numbers.append(str(op["step"]))
        numbers.append(f"{op['flops']:,}")
        if op["params"]:
            numbers.append(f"{op['params']:,}")
        numbers.append("(" + ", ".join(map(str, op["output_shape"])) + ")")
    return numbers


@pytest.mark.parametrize("name, real", [(str(ROOT / "configs" / "worked-shapes.yaml"), True),
                                        (str(ROOT / "configs" / "tiny-gpt.yaml"), True), ("gpt2", False),
                                        ("deepseek-v3", False)])
@pytest.mark.parametrize("width", WIDTHS)
def test_trace_tables_keep_every_number_whole(name, real, width):
    cfg = load_config(name)
    result = run_trace(cfg) if real else analytic_trace(cfg)
    rows = collapse_layers(result.rows, cfg.model.n_layers, [g.layers for g in cfg.layer_groups()]) \
        if cfg.model else result.rows
    text = drawn(render.trace_table(result, rows), width)
    assert_fits(text, width, trace_numbers(render.trace_json(result, rows)))


@pytest.fixture(scope="module")
def verified():
    cfg = load_config(str(ROOT / "configs" / "alternating-window.yaml"))
    return [verify(cfg, layer=layer) for layer in layers_to_verify(cfg)]


def measured_numbers(reports) -> list[str]:
    """The numbers of each check's prose, as words: `2.22e-16;` and `3,152,384`."""
    return [w for r in reports for c in r.checks for w in (c.measured + " " + c.tolerance).split()
            if any(ch.isdigit() for ch in w)]


@pytest.mark.parametrize("width", WIDTHS)
def test_verify_tables_keep_every_number_whole(verified, width):
    text = drawn(render.verify_tables(verified), width)
    assert_fits(text, width, measured_numbers(verified) + [str(c.id) for c in verified[0].checks])
    assert [r.layer for r in verified] == [0, 2]  # alternating-window.yaml: global layers, then sliding ones
    words = " ".join(text.split())  # a title wraps where the config's path length puts it
    assert "layer 0 (layers 0, 1," in words and "layer 2 (layers 2, 5" in words  # each kind of layer named


@pytest.fixture(scope="module")
def matrix():
    cfg = load_config(None)
    rows, skipped = run_mutants(cfg, only={2, 8, 12})
    return rows, skipped


@pytest.mark.parametrize("width", WIDTHS)
def test_mutants_matrix_keeps_ids_whole_with_a_legend(matrix, width):
    rows, skipped = matrix
    text = drawn(render.mutants_matrix(rows, skipped), width)
    assert_fits(text, width, [m.name for m, _ in rows])
    assert "checks: 2 head split" in text and "12 independent reference" in text  # the legend of the heads


@pytest.mark.parametrize("width", WIDTHS)
def test_presets_table_keeps_every_count_whole(width):
    from blockcli.config import preset_names

    rows = [(n, (a := load_config(n).about).description, a.source, a.parameters) for n in preset_names()]
    text = drawn(render.presets_table(rows), width)
    assert_fits(text, width, [f"{p:,}" for *_, p in rows] + [n for n, *_ in rows])


def test_a_pipe_gets_whole_tables_one_line_per_row():
    # no COLUMNS, not a terminal: as wide as the output needs, so grep finds a row with its formula
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = subprocess.run([sys.executable, "-m", "blockcli", "count", "deepseek-v3"], capture_output=True, text=True,
                         env=env, check=True).stdout
    row = next(line for line in out.splitlines() if "256 routed experts" in line)
    assert "11,274,289,152" in row and "3·E·d·d_e" in row and "256 × ((7168, 2048) + (7168, 2048) + (2048, 7168))" in row
    assert "…" not in out


def test_columns_narrows_a_piped_table():
    out = subprocess.run([sys.executable, "-m", "blockcli", "count", "llama-3-8b"], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "80"}, check=True).stdout
    assert max(cell_len(line.rstrip()) for line in out.splitlines()) <= 80
    assert "8,030,261,248" in tokens(out)


# ----------------------------------------------------------------------------- progress


def on_a_terminal(args: list[str]) -> tuple[int, str]:
    """Run blockcli with stdout and stderr on a pseudo-terminal; its exit code and all it drew."""
    import pty

    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "blockcli", *args], stdin=subprocess.DEVNULL, stdout=child,
                            stderr=child, env={**os.environ, "COLUMNS": "120"})
    os.close(child)
    drawn_bytes = b""
    while True:
        ready, _, _ = select.select([main], [], [], 0.2)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:
                break
            if not data:
                break
            drawn_bytes += data
        elif proc.poll() is not None:
            break
    proc.wait(timeout=120)
    os.close(main)
    return proc.returncode, drawn_bytes.decode("utf-8", "replace")


def test_long_work_shows_progress_on_a_terminal():
    # drawing GPT-2's 124M seeded weights takes over a second, past the delay before a line appears
    code, text = on_a_terminal(["trace", "gpt2", "--seq", "64"])
    assert code == 0
    assert "weights: drawing the seeded weights" in text or "forward pass: layer" in text
    assert "Trace of gpt2" in text


def test_no_progress_in_a_pipe_or_with_json():
    piped = subprocess.run([sys.executable, "-m", "blockcli", "trace", "gpt2", "--seq", "64"], capture_output=True,
                           text=True)
    assert piped.returncode == 0 and piped.stderr == ""
    assert "drawing the seeded weights" not in piped.stdout and "forward pass:" not in piped.stdout
    code, text = on_a_terminal(["trace", "gpt2", "--seq", "64", "--json"])
    assert code == 0 and "drawing the seeded weights" not in text and "forward pass:" not in text
    assert json.loads(text[text.index("{"):])["config"] == "gpt2"


# ----------------------------------------------------------------------------- a closed pipe


def test_a_reader_that_leaves_early_is_exit_2_with_one_line():
    # 167 KB, more than a pipe holds: the reader takes 100 bytes and closes, the rest cannot be written
    proc = subprocess.Popen([sys.executable, "-m", "blockcli", "trace", "gpt2-large", "--all-layers", "--shapes-only"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(100)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 2
    assert err == "blockcli: error: standard output: cannot write (Broken pipe)\n"


def test_output_that_fits_in_the_pipe_is_written_before_the_reader_leaves():
    proc = subprocess.Popen([sys.executable, "-m", "blockcli", "count", "gpt2", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.wait(timeout=60) == 0  # everything is in the pipe's buffer: written, so a success
    proc.stdout.read(10)
    proc.stdout.close()
    assert proc.stderr.read() == b""
