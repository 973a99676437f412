"""Turn results into tables, JSON-ready dicts, Markdown, CSV and Mermaid. Returns, never prints.

Only this module and `cli` import rich. The JSON dicts and the tables are built from the same
rows, so they cannot disagree.
"""

from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:  # rich and the NumPy-based modules load only when a table is drawn
    from rich.console import Group
    from rich.table import Table

    from blockcli.count import ParameterCount
    from blockcli.mutants import Mutant
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
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:g}"


def human_bytes(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


# ----------------------------------------------------------------------------- count

COUNT_HEADERS = ("component", "shape", "weights", "biases", "count", "share", "formula")


def count_json(result: ParameterCount) -> dict[str, Any]:
    rec = result.reconciled
    return {
        "config": result.config.name,
        "total": result.total,
        "per_block": result.per_block,
        "n_layers": result.n_layers,
        "non_embedding": result.non_embedding,
        "components": [
            {"name": c.name, "label": c.label, "kind": c.kind, "shape": c.shape, "weights": c.weights,
             "biases": c.biases, "count": c.count, "share": _share(c.count, result.total),
             "formula": c.expression}
            for c in result.components
        ],
        "reconciled": {"formula": rec.formula, "arrays": rec.arrays, "match": rec.match, "method": rec.method,
                       "mismatches": list(rec.mismatches)},
        **result.extras,
    }


def _share(count: int, total: int) -> float:
    return round(count / total, 6) if total else 0.0


def _count_rows(result: ParameterCount) -> list[list[str]]:
    return [[c.label, c.shape, f"{c.weights:,}", f"{c.biases:,}", f"{c.count:,}",
             f"{100 * _share(c.count, result.total):.2f}%", c.expression] for c in result.components]


def count_markdown(result: ParameterCount) -> str:
    return markdown_table(COUNT_HEADERS, _count_rows(result), "llrrrrl") + "\n" + "\n".join(
        f"- {line}" for line in count_footer_lines(result)) + "\n"


def count_csv(result: ParameterCount) -> str:
    rows = [[c.name, c.shape, c.weights, c.biases, c.count, _share(c.count, result.total), c.expression]
            for c in result.components]
    return csv_text(("name",) + COUNT_HEADERS[1:], rows)


def count_footer_lines(result: ParameterCount) -> list[str]:
    rec, ex = result.reconciled, result.extras
    check = "match" if rec.match else "MISMATCH: " + "; ".join(rec.mismatches or [f"{rec.formula:,} vs {rec.arrays:,}"])
    kv = ex["kv_cache"]
    mem = ex["memory_bytes"]
    return [
        f"formula {rec.formula:,} vs {rec.method} {rec.arrays:,}: {check}",
        f"forward FLOPs per token: {ex['flops_per_token']:,} ({human(ex['flops_per_token'])}); {ex['flops_convention']}",
        f"parameter memory: {human_bytes(mem['float32'])} float32, {human_bytes(mem['bfloat16'])} bfloat16, "
        f"{human_bytes(mem['int8'])} int8",
        f"K/V cache ({kv['dtype']}): {kv['bytes_per_token']:,} bytes per token; "
        f"{human_bytes(kv['bytes'])} for batch {kv['batch']} × {kv['seq_len']} tokens",
    ]


def count_table(result: ParameterCount) -> Group:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    title = f"Parameters of {result.config.name}"
    table = Table(title=title, title_justify="left", header_style="bold")
    for header in COUNT_HEADERS:
        table.add_column(header, justify="right" if header in ("weights", "biases", "count", "share") else "left",
                         no_wrap=header != "formula")
    for c, row in zip(result.components, _count_rows(result)):
        style = "bold" if c.kind == "total" else "dim" if c.kind == "tied" else None
        share = _share(c.count, result.total)
        row[5] = f"{bar(share)} {100 * share:5.1f}%"
        table.add_row(*row, style=style, end_section=c.kind == "total" or c.name in ("mlp.2", "ln2"))
    footer = Text("\n".join(count_footer_lines(result)))
    if not result.reconciled.match:
        footer.stylize("bold red", 0, len(footer.plain.split("\n")[0]))
    return Group(table, footer)


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
                 "causal_matmul_flops": r.causal_flops, "bytes": r.bytes} for r in rows],
        "totals": trace.totals, "flops_convention": FLOPS_NOTE, "notes": trace.notes,
    }


def _trace_rows(rows: Sequence[OpRow]) -> list[list[str]]:
    out = []
    for r in rows:
        flops = f"{r.flops:,}" + (f" ({r.causal_flops:,})" if r.causal_flops is not None else "")
        name = r.op + (f" ×{r.repeat}" if r.repeat > 1 else "")
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


def trace_footer_lines(trace: Trace) -> list[str]:
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
    return Group(table, Text("\n".join(trace_footer_lines(trace))))


def trace_markdown(trace: Trace, rows: Sequence[OpRow]) -> str:
    return (f"**{trace_header(trace)}**\n\n" + markdown_table(TRACE_HEADERS, _trace_rows(rows), "rllllrrr")
            + "\n" + "\n".join(f"- {line}" for line in trace_footer_lines(trace)) + "\n")


def trace_mermaid(trace: Trace, rows: Sequence[OpRow]) -> str:
    """The data flow of the pass as a Mermaid flowchart, each edge labelled with the shape it carries."""
    shown = {r.step for r in rows}
    by_step = {r.step: r for r in trace.rows}
    # a hidden step (another layer) stands in for its layer-0 twin, which is shown
    layer0 = {r.key.split(".", 2)[-1]: r.step for r in rows if r.repeat > 1}
    input_shape = (trace.batch, trace.seq_len) + (() if trace.config.model else (trace.config.block.d_model,))
    lines = ["flowchart TD", f'    s0["input {_shape(input_shape)}"]']
    for r in rows:
        label = r.op.replace('"', "'") + (f" ×{r.repeat}" if r.repeat > 1 else "")
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
