"""Turn results into tables, JSON-ready dicts, Markdown, CSV and Mermaid. Returns, never prints.

Only this module and `cli` import rich. The JSON dicts and the tables are built from the same
rows, so they cannot disagree.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Iterable, Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from blockcli.count import ParameterCount

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
    table = Table(title="Packaged presets", title_justify="left", header_style="bold")
    for header in ("name", "parameters", "description", "source"):
        table.add_column(header, justify="right" if header == "parameters" else "left")
    for name, description, source, parameters in rows:
        table.add_row(name, f"{parameters:,}" if parameters else "", description, source)
    return table
