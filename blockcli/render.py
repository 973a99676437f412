"""Turn results into tables, JSON-ready dicts, Markdown, CSV and Mermaid. Returns, never prints.

Only this module and `cli` import rich. The JSON dicts and the tables are built from the same
rows, so they cannot disagree.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from blockcli.units import human_bytes

if TYPE_CHECKING:  # rich and the NumPy-based modules load only when a table is drawn
    from rich.console import Group
    from rich.table import Table

    from blockcli.count import Component, ParameterCount
    from blockcli.mutants import Mutant
    from blockcli.sizing import Inference, Term, Training
    from blockcli.trace import OpRow, Trace
    from blockcli.verify import Report

BAR_WIDTH = 12


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


def bar(share: float, width: int = BAR_WIDTH) -> str:
    """A share in [0, 1] drawn with eighth blocks, so small shares still show."""
    eighths = round(max(0.0, min(1.0, share)) * width * 8)
    full, rest = divmod(eighths, 8)
    return ("█" * full + (" ▏▎▍▌▋▊▉"[rest] if rest else "")).ljust(width)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> str:
    """A GitHub Markdown table; `align` holds 'l' or 'r' per column."""
    align = align or "l" * len(headers)
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join(" ---: " if a == "r" else " --- " for a in align) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def csv_text(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return out.getvalue()


def human(n: float) -> str:
    """1234567 → '1.23M' (for footers; tables show exact counts)."""
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:g}"


# ----------------------------------------------------------------------------- count

COUNT_HEADERS = ("component", "shape", "weights", "biases", "count", "share", "formula")


def count_json(result: ParameterCount, inference: Inference, training: Training | None = None,
               budget: int | None = None) -> dict[str, Any]:
    rec = result.reconciled
    data = {
        "config": result.config.name,
        "total": result.total,
        "per_block": result.per_block,
        "n_layers": result.n_layers,
        "non_embedding": result.non_embedding,
        "active_per_token": result.active_total,
        "buffers": result.buffers,
        "components": [
            {"name": c.name, "label": c.label, "kind": c.kind, "shape": c.shape, "weights": c.weights,
             "biases": c.biases, "count": c.count, "active": c.active_count, "share": _share(c.count, result.total),
             "formula": c.expression, **({"group": c.group} if c.group is not None else {})}
            for c in result.components
        ],
        "layer_groups": [{"layers": list(g.layers), "n_layers": len(g.layers), "overrides": g.overrides,
                          "per_block": n} for g, n in zip(result.groups, result.group_counts)],
        "reconciled": {"formula": rec.formula, "arrays": rec.arrays, "match": rec.match, "method": rec.method,
                       "mismatches": list(rec.mismatches), "buffers_formula": rec.buffers_formula,
                       "buffers_arrays": rec.buffers_arrays},
        "inference": inference_json(inference),
    }
    if result.checkpoint is not None:
        data["checkpoint"] = result.checkpoint
    if training is not None:
        data["training"] = training_json(training)
    if budget is not None:
        used = (training or inference).memory_bytes
        data["budget"] = {"max_memory_bytes": budget, "memory_bytes": used, "within": used <= budget}
    return data


def _flops(n: int) -> dict[str, int]:
    return {"flops": n, "macs": n // 2}


KV_LATENT_LABEL = "compressed latent, what MLA-aware inference engines store"
KV_EXPANDED_LABEL = "expanded keys and values, as a plain K/V cache holds them"


def _kv_cache_json(inf: Inference) -> dict[str, Any]:
    """bytes_per_token is exact (16.5 for 33 int4 values: a number, not always an integer); bits_per_token says
    the same as an integer; bytes is the packed total, rounded up to a whole byte once."""
    if not inf.kv_expanded_bits_per_token:
        return {"dtype": inf.kv_dtype, "bytes_per_token": inf.kv_bytes_per_token,
                "bits_per_token": inf.kv_bits_per_token, "bytes": inf.kv_bytes, "formula": "2·L·h_kv·d_h per token"}
    return {"dtype": inf.kv_dtype, "bytes_per_token": inf.kv_bytes_per_token, "bits_per_token": inf.kv_bits_per_token,
            "bytes": inf.kv_bytes, "formula": "L·(r_kv + d_rope) per token", "stores": KV_LATENT_LABEL,
            "expanded": {"bytes_per_token": inf.kv_expanded_bytes_per_token,
                         "bits_per_token": inf.kv_expanded_bits_per_token, "bytes": inf.kv_expanded_bytes,
                         "formula": "L·h·(d_h + d_v) per token", "stores": KV_EXPANDED_LABEL}}


def _kv_line(label: str, per_token: int | float, formula: str, dtype: str, total: int, B: int, T: int) -> str:
    """'K/V cache: 4,096 bytes per token (2·L·h_kv·d_h × float32); 40 KiB for 2 × 5 tokens'; half a byte per token
    (an odd number of int4 values) is printed as it is, 16.5, and the total says how it is rounded."""
    packed = isinstance(per_token, float)
    return (f"{label}: {per_token:,} bytes per token ({formula} × {dtype}{', two values a byte' if packed else ''}); "
            f"{human_bytes(total)} for {B} × {T:,} tokens" + (" (packed, rounded up to a whole byte)" if packed else ""))


def _kv_cache_lines(inf: Inference, B: int, T: int) -> list[str]:
    if not inf.kv_expanded_bits_per_token:
        return [_kv_line("K/V cache", inf.kv_bytes_per_token, "2·L·h_kv·d_h", inf.kv_dtype, inf.kv_bytes, B, T)]
    return [_kv_line(f"K/V cache, {KV_LATENT_LABEL}", inf.kv_bytes_per_token, "L·(r_kv + d_rope)", inf.kv_dtype,
                     inf.kv_bytes, B, T),
            _kv_line(f"K/V cache, {KV_EXPANDED_LABEL}", inf.kv_expanded_bytes_per_token, "L·h·(d_h + d_v)",
                     inf.kv_dtype, inf.kv_expanded_bytes, B, T)]


def inference_json(inf: Inference) -> dict[str, Any]:
    tokens = inf.batch * inf.seq_len
    return {
        "seq_len": inf.seq_len, "batch": inf.batch, "dtype": inf.dtype, "kv_dtype": inf.kv_dtype,
        "parameter_bytes": inf.parameter_bytes,
        "parameter_bytes_by_dtype": inf.parameter_bytes_at(),
        "kv_cache": _kv_cache_json(inf),
        "activation_bytes": inf.activation_bytes,
        "memory_bytes": inf.memory_bytes,
        "prefill": {"full": _flops(inf.prefill.total()), "causal": _flops(inf.prefill.total(causal=True))},
        "prefill_per_token": {"full": _flops(inf.prefill.total() // tokens),
                              "causal": _flops(inf.prefill.total(causal=True) // tokens)},
        "decode_step": _flops(inf.decode),
        "decode_per_token": _flops(inf.decode // inf.batch),
        "flops_convention": SIZING_FLOPS_NOTE,
    }


def _terms_json(terms: Sequence[Term]) -> list[dict[str, Any]]:
    return [{"name": t.name, "formula": t.formula, "bytes": t.bytes, "korthikanti_sbh": t.korthikanti}
            for t in terms]


def training_json(tr: Training) -> dict[str, Any]:
    per = tr.per_parameter
    return {
        "optimizer": tr.optimizer, "precision": tr.precision, "dp": tr.dp, "zero": tr.zero,
        "recompute": tr.recompute, "seq_len": tr.seq_len, "batch": tr.batch, "tokens_per_step": tr.tokens,
        "bytes_per_parameter": {"weights": per.weights, "gradients": per.gradients, "optimizer": per.optimizer,
                                "total": per.total},
        "states_per_device": {**tr.states, "total": tr.state_bytes},
        "activations": {"per_layer": tr.activations_per_layer, "n_layers": tr.n_layers,
                        "other_layers": [{"n_layers": n, "per_layer": size} for n, size in tr.other_layers],
                        "layer_terms": _terms_json(tr.layer_terms), "other_terms": _terms_json(tr.other_terms),
                        "total": tr.activation_bytes},
        "memory_bytes_per_device": tr.memory_bytes,
        "step": {"forward": {"full": _flops(tr.forward.total()), "causal": _flops(tr.forward.total(True))},
                 "backward": {"full": _flops(2 * tr.forward.total()), "causal": _flops(2 * tr.forward.total(True))},
                 "recompute": {"full": _flops(tr.recompute_flops.total()),
                               "causal": _flops(tr.recompute_flops.total(True))},
                 "total": {"full": _flops(tr.step_flops()), "causal": _flops(tr.step_flops(True))},
                 "per_token": {"full": _flops(tr.step_flops() // tr.tokens),
                               "causal": _flops(tr.step_flops(True) // tr.tokens)},
                 "six_n": tr.six_n},
        "notes": tr.notes,
    }


def _share(count: int, total: int) -> float:
    return round(count / total, 6) if total else 0.0


def _group_name(c: Component) -> str:
    """A row's name, with its block's number when layers differ: block2.attn.q."""
    return c.name if c.group is None else f"block{c.group + 1}.{c.name}"


def _count_rows(result: ParameterCount) -> list[list[str]]:
    return [[c.label, c.shape, f"{c.weights:,}", f"{c.biases:,}", f"{c.count:,}",
             f"{100 * _share(c.count, result.total):.2f}%", c.expression] for c in result.components]


SIZING_FLOPS_NOTE = ("FLOPs = 2 × multiply-adds of the matrix products (projections, MLP, LM head, Q·Kᵀ and "
                     "weights·V); full = the whole T×T score table, causal = the pairs s <= t (within the sliding "
                     "window, if any); a decode step at context T sees T keys (at most the window); elementwise "
                     "work not included (see trace)")


def _group_header(result: ParameterCount, c: Component) -> str | None:
    """When layers differ: the line naming the group whose block rows start at `c`."""
    if result.layers_differ and c.group is not None and c.name == "ln1":
        return f"block {c.group + 1}: {result.groups[c.group].describe()}"
    return None


def count_markdown(result: ParameterCount, inference: Inference, training: Training | None = None) -> str:
    rows = []
    for c, row in zip(result.components, _count_rows(result)):
        if (header := _group_header(result, c)) is not None:
            rows.append([f"**{header}**"] + [""] * (len(COUNT_HEADERS) - 1))
        rows.append(row)
    text = markdown_table(COUNT_HEADERS, rows, "llrrrrl") + "\n" + "\n".join(
        f"- {line}" for line in count_footer_lines(result, inference, training)) + "\n"
    if training is not None:
        text += "\n" + markdown_table(TERM_HEADERS, _term_rows(training), "llrl")
    return text


def count_csv(result: ParameterCount) -> str:
    rows = [[_group_name(c), c.shape, c.weights, c.biases, c.count, _share(c.count, result.total), c.expression]
            for c in result.components]
    return csv_text(("name",) + COUNT_HEADERS[1:], rows)


def _both(full: int, causal: int) -> str:
    return f"{full:,} ({human(full)}) full table, {causal:,} ({human(causal)}) causal"


def count_footer_lines(result: ParameterCount, inf: Inference, tr: Training | None = None) -> list[str]:
    rec = result.reconciled
    check = "match" if rec.match else "MISMATCH: " + "; ".join(rec.mismatches or [f"{rec.formula:,} vs {rec.arrays:,}"])
    B, T = inf.batch, inf.seq_len
    prefill, causal = inf.prefill.total(), inf.prefill.total(causal=True)
    lines = [f"formula {rec.formula:,} vs {'checkpoint tensors' if rec.method == 'checkpoint' else rec.method} "
             f"{rec.arrays:,}: {check}"]
    if result.buffers or rec.buffers_arrays:
        lines.append(f"buffers (stored, not parameters: in no total): formula {rec.buffers_formula:,} vs "
                     f"{rec.buffers_arrays:,}: {'match' if rec.buffers_formula == rec.buffers_arrays else 'MISMATCH'}")
    if result.active:
        lines.append(active_line(result))
    if result.checkpoint is not None:
        ck = result.checkpoint
        files = ck["files"][0] if len(ck["files"]) == 1 else f"{len(ck['files'])} shards"
        dtypes = ", ".join(f"{name} ({count:,})" for name, count in ck["stored_dtypes"].items())
        lines.append(f"checkpoint: {ck['tensors']} tensors in {files}, {human_bytes(ck['bytes_on_disk'])} on disk; "
                     f"stored as {dtypes}" + "".join(f"; {n}" for n in ck["notes"]))
    lines += [
        f"workload: batch {B} × {T:,} tokens, weights and activations {inf.dtype}, K/V cache {inf.kv_dtype}",
        f"parameter memory: {human_bytes(inf.parameter_bytes)} ({result.total:,} × {inf.dtype})",
        *_kv_cache_lines(inf, B, T),
        f"inference memory: {human_bytes(inf.memory_bytes)} = weights + K/V cache + "
        f"{human_bytes(inf.activation_bytes)} activations (one layer's prefill working set)",
        f"prefill of {T:,} tokens × {B}: {_both(prefill, causal)} FLOPs; per token "
        f"{human(prefill // (B * T))} full, {human(causal // (B * T))} causal",
        f"decode step at context {T:,}: {inf.decode // B:,} ({human(inf.decode // B)}) FLOPs per sequence"
        + (f", {human(inf.decode)} for the batch" if B > 1 else ""),
        SIZING_FLOPS_NOTE,
    ]
    return lines + (training_lines(tr) if tr is not None else [])


def active_line(result: ParameterCount) -> str:
    """What one token uses of a mixture of experts' parameters, component by component."""
    moe = result.config.block.moe
    assert moe is not None
    def label(c: Component) -> str:  # when layers differ, which block's row, as the table numbers them
        return f"block {c.group + 1}: {c.label}" if result.layers_differ and c.group is not None else c.label

    parts = "; ".join(f"{label(c)} {c.active_count:,} of {c.count:,}" for c in result.components
                      if c.active is not None and c.kind != "total")
    where = "embeddings and LM head included" if result.config.model else "one block"
    return (f"active per token: {result.active_total:,} of {result.total:,} ({where}; the routed experts a token "
            f"is not sent to excluded: {moe.top_k} of {moe.n_experts} used); {parts}")


OPTIMIZER_NAMES = {"adamw": "AdamW", "sgd": "SGD", "sgd-momentum": "SGD with momentum"}


def training_lines(tr: Training) -> list[str]:
    per, st = tr.per_parameter, tr.states
    zero = f", ZeRO stage {tr.zero}" if tr.zero else ""
    return [
        f"training: {OPTIMIZER_NAMES[tr.optimizer]}, {tr.precision} precision: {per.total} bytes per parameter "
        f"({per.weights} weights + {per.gradients} gradients + {per.optimizer} optimizer); "
        f"{tr.dp} data-parallel device{'s' if tr.dp > 1 else ''}{zero}; micro-batch {tr.batch} × {tr.seq_len:,} tokens",
        f"model states per device: {human_bytes(tr.state_bytes)} (weights {human_bytes(st['weights'])}, gradients "
        f"{human_bytes(st['gradients'])}, optimizer {human_bytes(st['optimizer'])})",
        f"activations kept for the backward pass (recompute {tr.recompute}): {human_bytes(tr.activations_per_layer)} "
        f"per layer ({tr.activations_per_layer:,} bytes) × {tr.n_layers} + "
        + (f"{human_bytes(sum(n * size for n, size in tr.other_layers))} in the other layers + " if tr.other_layers else "")
        + f"{human_bytes(tr.activations_outside_layers)} "
        f"outside the layers = {human_bytes(tr.activation_bytes)}",
        f"training memory per device: {human_bytes(tr.memory_bytes)} = model states + activations",
        f"FLOPs per step ({tr.tokens:,} tokens): forward + backward (2× forward)"
        + (f" + recomputed forward ({tr.recompute})" if tr.recompute != "none" else "")
        + f" = {_both(tr.step_flops(), tr.step_flops(True))}; per token {human(tr.step_flops() // tr.tokens)} full; "
        f"6·N rule (Kaplan et al. 2020, N non-embedding): {tr.six_n:,} ({human(tr.six_n)})",
        *tr.notes,
    ]


TERM_HEADERS = ("kept for the backward pass", "size", "bytes", "Korthikanti (s·b·h)")


def _term_rows(tr: Training) -> list[list[str]]:
    rows = [[t.name, t.formula, f"{t.bytes:,}", t.korthikanti] for t in tr.layer_terms]
    rows.append([f"one layer ×{tr.n_layers}", "", f"{tr.activations_per_layer:,}", ""])
    rows += [[f"a layer of another block ×{n}", "", f"{size:,}", ""] for n, size in tr.other_layers]
    rows += [[t.name, t.formula, f"{t.bytes:,}", ""] for t in tr.other_terms]
    rows.append(["total", "", f"{tr.activation_bytes:,}", ""])
    return rows


def count_table(result: ParameterCount, inference: Inference, training: Training | None = None) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    title = f"Parameters of {result.config.name}"
    table = Table(title=title, title_justify="left", header_style="bold")
    for header in COUNT_HEADERS:
        table.add_column(header, justify="right" if header in ("weights", "biases", "count", "share") else "left",
                         no_wrap=header != "formula")
    # a rule after each block's attention part (through its norms) and after its MLP part
    parts = ["mlp" if c.name.startswith("mlp.") else "attn" if c.name.startswith(("attn.", "ln")) else ""
             for c in result.components]
    section_ends = {i for i in range(1, len(parts)) if parts[i - 1] and parts[i] != parts[i - 1]}
    for i, (c, row) in enumerate(zip(result.components, _count_rows(result))):
        if (header := _group_header(result, c)) is not None:  # each group's rows under its name, which
            name, what = header.split(": ", 1)  # goes in the wrapping column: a long one cannot widen the others
            table.add_row(name, *[""] * (len(COUNT_HEADERS) - 2), what, style="bold italic")
        style = "bold" if c.kind == "total" else "dim" if c.kind in ("tied", "buffer") else None
        share = _share(c.count, result.total)
        row[5] = f"{bar(share)} {100 * share:5.1f}%"
        table.add_row(*row, style=style, end_section=c.kind == "total" or i + 1 in section_ends)
    footer = Text("\n".join(count_footer_lines(result, inference, training)))
    if not result.reconciled.match:
        footer.stylize("bold red", 0, len(footer.plain.split("\n")[0]))
    parts: list[Any] = [table, footer]
    if training is not None:
        terms = Table(title=f"Activations per layer, recompute {training.recompute} (Korthikanti et al. 2022, §4)",
                      title_justify="left", header_style="bold")
        for header in TERM_HEADERS:
            terms.add_column(header, justify="right" if header == "bytes" else "left")
        rows = _term_rows(training)
        for i, row in enumerate(rows):
            terms.add_row(*row, style="bold" if row[0] == "total" or row[0].startswith("one layer") else None,
                          end_section=i in (len(training.layer_terms) - 1, len(training.layer_terms)
                                            + len(training.other_layers), len(rows) - 2))
        parts.append(terms)
    return Group(*parts)


def presets_table(rows: Sequence[tuple[str, str, str, int | None]]) -> Table:
    from rich.table import Table

    table = Table(title="Packaged presets", title_justify="left", header_style="bold")
    for header in ("name", "parameters", "description", "source"):
        table.add_column(header, justify="right" if header == "parameters" else "left")
    for name, description, source, parameters in rows:
        table.add_row(name, f"{parameters:,}" if parameters else "", description, source)
    return table


# ----------------------------------------------------------------------------- trace

TRACE_HEADERS = ("#", "operation", "inputs", "output", "symbolic", "params", "FLOPs", "bytes")
FLOPS_NOTE = ("FLOPs = 2 × multiply-adds for matmuls (scores count the full T×T table; the causal half is in "
              "brackets) plus fixed per-element costs for elementwise ops")


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ")"


def trace_json(trace: Trace, rows: Sequence[OpRow]) -> dict[str, Any]:
    return {
        "config": trace.config.name, "mode": trace.mode, "attention": trace.attention,
        "batch": trace.batch, "seq_len": trace.seq_len, "dtype": trace.dtype,
        "ops": [{"step": r.step, "key": r.key, "op": r.op, "kind": r.kind, "layer": r.layer, "repeat": r.repeat,
                 "input_shapes": [list(s) for s in r.input_shapes], "output_shape": list(r.output_shape),
                 "symbolic": r.symbolic, "params": r.params, "flops": r.flops, "matmul_flops": r.matmul_flops,
                 "causal_matmul_flops": r.causal_flops, "bytes": r.bytes, "tied": r.tied} for r in rows],
        "totals": trace.totals, "flops_convention": FLOPS_NOTE, "notes": trace.notes,
    }


def _trace_rows(rows: Sequence[OpRow]) -> list[list[str]]:
    out = []
    for r in rows:
        flops = f"{r.flops:,}" + (f" ({r.causal_flops:,})" if r.causal_flops is not None else "")
        name = r.op + (f" ×{r.repeat}, per layer" if r.repeat > 1 else "")
        if r.tied:
            name += " (tied: its weights are the token embedding's, counted there)"
        if r.layer is not None and r.repeat == 1:
            name = f"[{r.layer}] {name}"
        out.append([str(r.step), name, " ".join(_shape(s) for s in r.input_shapes), _shape(r.output_shape),
                    r.symbolic, f"{r.params:,}" if r.params else "", flops, human_bytes(r.bytes)])
    return out


def trace_header(trace: Trace) -> str:
    b = trace.config.block
    what = "model" if trace.config.model else "block"
    how = ("real forward pass" if trace.mode == "executed"
           else "shapes only (analytic: nothing allocated)")
    return (f"Trace of {trace.config.name} ({what}): {how}, B={trace.batch}, T={trace.seq_len}, {trace.dtype}, "
            f"d={b.d_model}, h={b.n_heads}, h_kv={b.n_kv_heads}, d_h={b.head_dim}, d_ff={b.d_ff}, "
            f"{trace.attention} attention")


def trace_footer_lines(trace: Trace, rows: Sequence[OpRow] = ()) -> list[str]:
    t = trace.totals
    peak = "measured" if t["peak_measured"] else "estimated"
    lines = [
        f"total FLOPs {t['flops']:,} ({human(t['flops'])}); matmul FLOPs {t['matmul_flops']:,} "
        f"(causal half {t['causal_matmul_flops']:,})",
        f"parameters {t['parameters']:,}; peak activation memory {human_bytes(t['peak_activation_bytes'])} ({peak}); "
        f"largest score table {human_bytes(t['largest_score_table_bytes'])}; "
        f"K/V cache {human_bytes(t['kv_cache_bytes'])}",
        FLOPS_NOTE,
    ]
    repeated = next((r.repeat for r in rows if r.repeat > 1), 0)
    if repeated:
        lines.append(f"rows marked ×{repeated}, per layer, stand for every layer: their params, FLOPs and bytes are "
                     f"one layer's; the totals above count all {repeated}")
    return lines + trace.notes


def trace_table(trace: Trace, rows: Sequence[OpRow]) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=trace_header(trace), title_justify="left", header_style="bold")
    for h in TRACE_HEADERS:
        table.add_column(h, justify="right" if h in ("#", "params", "FLOPs", "bytes") else "left",
                         overflow="fold")
    for r, cells in zip(rows, _trace_rows(rows)):
        table.add_row(*cells, end_section=r.key.endswith(".y") or r.key == "y")
    return Group(table, Text("\n".join(trace_footer_lines(trace, rows))))


def trace_markdown(trace: Trace, rows: Sequence[OpRow]) -> str:
    return (f"**{trace_header(trace)}**\n\n" + markdown_table(TRACE_HEADERS, _trace_rows(rows), "rllllrrr")
            + "\n" + "\n".join(f"- {line}" for line in trace_footer_lines(trace, rows)) + "\n")


def trace_mermaid(trace: Trace, rows: Sequence[OpRow]) -> str:
    """The data flow of the pass as a Mermaid flowchart, each edge labelled with the shape it carries."""
    shown = {r.step for r in rows}
    by_step = {r.step: r for r in trace.rows}
    # a hidden step (another layer) stands in for its layer-0 twin, which is shown
    layer0 = {r.key.split(".", 2)[-1]: r.step for r in rows if r.repeat > 1}
    input_shape = (trace.batch, trace.seq_len) + (() if trace.config.model else (trace.config.block.d_model,))
    lines = ["flowchart TD", f'    s0["input {_shape(input_shape)}"]']
    for r in rows:
        label = r.op.replace('"', "'") + (f" ×{r.repeat}, per layer" if r.repeat > 1 else "") + (" (tied)" if r.tied else "")
        lines.append(f'    s{r.step}["{label}"]')
        for src, shape in zip(r.sources, r.input_shapes):
            if src is None:
                continue
            if src not in shown and src:
                src = layer0.get(by_step[src].key.split(".", 2)[-1], src)
            lines.append(f'    s{src} -->|"{_shape(shape)}"| s{r.step}')
    last = rows[-1]
    lines.append(f'    s{last.step} -->|"{_shape(last.output_shape)}"| out["output"]')
    return "\n".join(lines) + "\n"


def attention_heatmap(weights: Any, title: str) -> Group:
    """One head's (T, T) attention weights as shaded cells; the masked triangle shows as `·`."""
    from rich.console import Group
    from rich.text import Text

    T = weights.shape[0]
    shades = " ░▒▓█"
    text = Text()
    width = len(str(T - 1))
    text.append(" " * (width + 1) + " ".join(str(s).rjust(2) for s in range(T)) + "   key →\n", style="dim")
    for t in range(T):
        text.append(str(t).rjust(width) + " ", style="dim")
        for s in range(T):
            w = float(weights[t, s])
            cell = shades[min(4, int(w * 4.999))] * 2 if w > 0 else " ·"
            level = int(90 + 165 * w)
            text.append(cell, style=f"rgb({level},{level},{level})" if w > 0 else "dim")
            text.append(" ")
        text.append("\n")
    text.append("query ↓   (darker blocks = larger weight; · = masked, exactly 0)", style="dim")
    return Group(Text(title, style="bold"), text)


# ----------------------------------------------------------------------------- verify

STATUS_STYLE = {"PASS": "green", "FAIL": "bold red", "SKIP": "yellow", "ERROR": "bold magenta"}


def verify_json(report: Report) -> dict[str, Any]:
    return {
        "config": report.config.name, "passed": report.passed, "notes": report.notes, "errors": report.errors,
        "checks": [{"id": c.id, "name": c.name, "status": c.status, "passed": c.passed, "measured": c.measured,
                    "tolerance": c.tolerance, "hint": c.hint} for c in report.checks],
    }


def verify_summary(report: Report) -> str:
    counts = {s: sum(c.status == s for c in report.checks) for s in ("PASS", "FAIL", "SKIP", "ERROR")}
    failed = [str(c.id) for c in report.checks if c.passed is False]
    verdict = "PASS" if report.passed else "FAIL"
    text = f"{verdict} {report.config.name}: {counts['PASS']} passed, {counts['FAIL']} failed"
    if counts["ERROR"]:
        text += f", {counts['ERROR']} not run (error)"
    if counts["SKIP"]:
        text += f", {counts['SKIP']} skipped"
    named = {m[1] for c in report.checks if c.error and (m := re.match(r"not run: error (\d+)", c.measured))}
    outside = len(report.errors) - len(named)  # errors no row points at (a thread left running after the checks)
    if outside > 0:
        text += f", {outside} error{'s' if outside > 1 else ''} outside the checks"
    return text + (f" (items {', '.join(failed)})" if failed else "")


def verify_table(report: Report, title: str = "") -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title or f"Checklist for {report.config.name}", title_justify="left", header_style="bold")
    for h, justify in (("#", "right"), ("check", "left"), ("result", "left"), ("measured", "left"),
                       ("tolerance", "left")):
        table.add_column(h, justify=justify, overflow="fold")
    for c in report.checks:
        table.add_row(str(c.id), c.name, Text(c.status, style=STATUS_STYLE[c.status]), c.measured, c.tolerance,
                      end_section=c.id == 10)
    parts: list[Any] = [table]
    for c in report.checks:
        if c.passed is False and c.hint:
            parts.append(Text(f"  {c.id}. hint: {c.hint}", style="red"))
    parts += [Text(f"error {n}: {e}", style="bold magenta") for n, e in enumerate(report.errors, 1)]
    parts += [Text(f"note: {n}", style="dim") for n in report.notes]
    parts.append(Text(verify_summary(report), style="bold green" if report.passed else "bold red"))
    return Group(*parts)


def verify_summaries(reports: Sequence[Report]) -> Group:
    """One summary line per config, then its failures and notes."""
    from rich.console import Group
    from rich.text import Text

    lines = []
    for r in reports:
        lines.append(Text(verify_summary(r), style="green" if r.passed else "bold red"))
        lines += [Text(f"  {c.id}. {c.name}: {c.measured}" + (f" — hint: {c.hint}" if c.hint else ""))
                  for c in r.checks if c.passed is False]
        lines += [Text(f"  error {n}: {e}", style="bold magenta") for n, e in enumerate(r.errors, 1)]
        lines += [Text(f"  note: {note}", style="dim") for note in r.notes]
    return Group(*lines)


def mutants_json(rows: Sequence[tuple[Mutant, Report]], skipped: dict[str, str]) -> dict[str, Any]:
    return {
        "passed": all(not r.passed for _, r in rows),
        "not_applicable": [{"name": name, "reason": why} for name, why in skipped.items()],
        "mutants": [{"name": m.name, "description": m.description, "expected": list(m.expected),
                     "caught_by": [c.id for c in r.checks if c.passed is False]} for m, r in rows],
    }


def mutants_matrix(rows: Sequence[tuple[Mutant, Report]], skipped: dict[str, str]) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    ids = [c.id for c in rows[0][1].checks] if rows else []
    table = Table(title="Seeded bugs × checks (✗ = the check failed, i.e. caught the bug)", title_justify="left",
                  header_style="bold")
    table.add_column("seeded bug")
    for i in ids:
        table.add_column(str(i), justify="center")
    table.add_column("caught")
    for mutant, report in rows:
        status = {c.id: c.passed for c in report.checks}
        cells = [Text("✗", style="bold red" if i in mutant.expected else "red") if status[i] is False
                 else Text("·", style="dim") for i in ids]
        caught = not report.passed
        table.add_row(mutant.name, *cells, Text("yes" if caught else "NO", style="green" if caught else "bold red"))
    missed = [m.name for m, r in rows if r.passed]
    verdict = (Text(f"every seeded bug is caught ({len(rows)} bugs)", style="bold green") if not missed
               else Text(f"NOT caught: {', '.join(missed)}", style="bold red"))
    notes = [Text(f"not applicable to this config: {name} ({why})", style="dim") for name, why in skipped.items()]
    return Group(table, *notes, verdict)


# ----------------------------------------------------------------------------- train


def train_json(name: str, steps: Sequence[Any], vocab_size: int, expect_loss: float | None,
               saved: Sequence[str]) -> dict[str, Any]:
    final = steps[-1].loss
    return {"config": name, "steps": [{"step": s.step, "loss": s.loss, "grad_norm": s.grad_norm} for s in steps],
            "initial_loss": steps[0].loss, "final_loss": final, "ln_vocab": math.log(vocab_size),
            "expect_loss": expect_loss, "passed": expect_loss is None or final < expect_loss, "saved": list(saved)}


def _sampled(steps: Sequence[Any], rows: int = 10) -> list[Any]:
    """About `rows` steps to show: the first, the last, evenly between."""
    if len(steps) <= rows:
        return list(steps)
    picks = sorted({round(i * (len(steps) - 1) / (rows - 1)) for i in range(rows)})
    return [steps[i] for i in picks]


def train_table(name: str, steps: Sequence[Any], vocab_size: int, expect_loss: float | None) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from blockcli.train import sparkline

    table = Table()
    for header in ("step", "loss", "gradient norm"):
        table.add_column(header, justify="right")
    for s in _sampled(steps):
        table.add_row(f"{s.step:,}", f"{s.loss:.4f}", f"{s.grad_norm:.3g}")
    final = steps[-1].loss
    lines = [f"loss {steps[0].loss:.4f} → {final:.4f} in {len(steps):,} steps (ln V = {math.log(vocab_size):.4f}, "
             f"the loss of a uniform guess)", f"curve: {sparkline([s.loss for s in steps])}"]
    if expect_loss is not None:
        lines.append(f"--expect-loss {expect_loss:g}: " + ("PASS" if final < expect_loss else
                                                             f"FAIL (the final loss {final:.4f} is not below it)"))
    return Group(Text(f"Training {name}: loss by step"), table, *map(Text, lines))


# ----------------------------------------------------------------------------- trace --backward

BACKWARD_HEADERS = ("#", "operation (backward)", "gradients it produces", "dY, symbolic", "FLOPs")


def _backward_cells(rows: Sequence[Any]) -> list[list[str]]:
    out = []
    for r in rows:
        name = r.op + (f" ×{r.repeat}, per layer" if r.repeat > 1 else "")
        if r.layer is not None and r.repeat == 1:
            name = f"[{r.layer}] {name}"
        out.append([str(r.step), name, " ".join(_shape(s) for s in r.grad_shapes), r.symbolic,
                    f"{r.flops:,}" if r.flops else ""])
    return out


def backward_lines(rep: Any) -> list[str]:
    """The footer of trace --backward: FLOPs against the forward's, the gradients, what the forward saved."""
    ratio = rep.flops / rep.forward_flops if rep.forward_flops else 0.0
    lines = [f"backward FLOPs {rep.flops:,} ({human(rep.flops)}; matmul {rep.matmul_flops:,}) = {ratio:.2f} × the "
             f"forward's {rep.forward_flops:,}: each linear layer's backward is two products (dX and dW) where its "
             f"forward is one, the attention's recomputes its score tiles (a third product) and takes four more; "
             f"elementwise work is costed by convention, and the token lookup's backward is a scatter-add"]
    if rep.saved_bytes is not None:
        lines.append(f"gradients: {rep.gradients} of {rep.parameters} parameter tensors, each of its parameter's "
                     f"shape" + (f"; {len(rep.unrouted)} of experts no token was routed to got none (zero)"
                                 if rep.unrouted else "")
                     + ("" if rep.gradients + len(rep.unrouted) == rep.parameters else "; some others got none"))
        closed = ("" if rep.closed_form_bytes is None else
                  f"; closed form (blockcli.saved) {rep.closed_form_bytes:,} bytes: "
                  + ("match" if rep.closed_form_bytes == rep.saved_bytes else
                     f"DIFFERS by {rep.saved_bytes - rep.closed_form_bytes:+,}"))
        lines.append(f"saved for the backward: {human_bytes(rep.saved_bytes)} ({rep.saved_bytes:,} bytes, measured: "
                     f"the tape's peak){closed}" + ("; latent attention and mixtures of experts: measured only"
                                                    if rep.closed_form_bytes is None else ""))
    elif rep.closed_form_bytes is not None:
        lines.append(f"saved for the backward (closed form, blockcli.saved): {human_bytes(rep.closed_form_bytes)} "
                     f"({rep.closed_form_bytes:,} bytes)")
    if rep.korthikanti_bytes:
        base = rep.saved_bytes if rep.saved_bytes is not None else rep.closed_form_bytes
        versus = f" (blockcli's is {base / rep.korthikanti_bytes:.2f} × it)" if base else ""
        lines.append(f"count --train's activation figure for the same workload (Korthikanti et al.'s terms, "
                     f"Megatron's implementation, fp32, no recomputation): {rep.korthikanti_bytes:,} bytes{versus}; "
                     f"they keep different tensors by design: Megatron's the softmax table and dropout masks, "
                     f"blockcli's each norm's input, the whole Q/K/V output, each row's log-sum-exp (never the "
                     f"table) and the MLP's pre-activations (the activation is recomputed from them)")
    return lines


def backward_json(rep: Any) -> dict[str, Any]:
    return {"ops": [{"step": r.step, "key": r.key, "op": r.op, "layer": r.layer, "repeat": r.repeat,
                     "grad_shapes": [list(s) for s in r.grad_shapes], "symbolic": r.symbolic, "flops": r.flops,
                     "matmul_flops": r.matmul_flops} for r in rep.rows],
            "flops": rep.flops, "matmul_flops": rep.matmul_flops, "forward_flops": rep.forward_flops,
            "ratio": rep.flops / rep.forward_flops if rep.forward_flops else None,
            "saved_bytes": rep.saved_bytes, "closed_form_saved_bytes": rep.closed_form_bytes,
            "saved_by_operation": rep.saved_by_operation, "gradients": rep.gradients, "parameters": rep.parameters,
            "unrouted": rep.unrouted,
            "korthikanti_activation_bytes": rep.korthikanti_bytes}


def backward_table(rep: Any) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Backward, in the order it runs", title_justify="left", header_style="bold")
    for h in BACKWARD_HEADERS:
        table.add_column(h, justify="right" if h in ("#", "FLOPs") else "left", overflow="fold")
    for cells in _backward_cells(rep.rows):
        table.add_row(*cells)
    return Group(table, Text("\n".join(backward_lines(rep))))


def backward_markdown(rep: Any) -> str:
    return ("\n**Backward, in the order it runs**\n\n" + markdown_table(BACKWARD_HEADERS, _backward_cells(rep.rows),
                                                                      "rlllr")
            + "\n" + "\n".join(f"- {line}" for line in backward_lines(rep)) + "\n")
