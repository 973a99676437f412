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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from blockcli.units import human_bytes

if TYPE_CHECKING:  # rich and the NumPy-based modules load only when a table is drawn
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from blockcli.count import Component, ParameterCount
    from blockcli.mutants import Mutant
    from blockcli.ranks import RankPlan, Stage
    from blockcli.sizing import Inference, Lora, Term, Training
    from blockcli.trace import OpRow, Trace
    from blockcli.verify import Report

BAR_WIDTH = 12
# The JSON contract's version: every command's JSON object carries it as "schema_version". It grows by one
# when a key is renamed, removed or changes its type; new keys do not change it.
SCHEMA_VERSION = 1


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)


def versioned(data: dict[str, Any]) -> dict[str, Any]:
    """A command's JSON object, "schema_version" first."""
    return {"schema_version": SCHEMA_VERSION, **data}


def number(value: float) -> float | None:
    """A measured figure for JSON: None where it is not finite (a NaN, or the inf of a shape mismatch)."""
    return value if math.isfinite(value) else None


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


# ----------------------------------------------------------------------------- tables that fit the width
#
# A table is drawn at the width it is printed at (a terminal's, or as wide as it needs in a pipe), choosing
# the first of its layouts that fits: the full table; then layouts that move a column (a formula, a symbolic
# shape, a tolerance) under another column's text; last, one record per row. A cell wraps only between its
# atoms: words, and whole shapes such as (4096, 14336); a number is never cut, and no column is squeezed below
# its longest atom. blockcli lays out the lines itself, so Rich never wraps or truncates a cell.

MAX_ATOM = 24  # a parenthesised group longer than this wraps between its words instead


@dataclass(frozen=True)
class Column:
    """A column of a fitted table: `wrap` False draws each line of a cell whole (numbers, bars);
    wrapping never makes a column narrower than min(its natural width, `comfort`)."""

    header: str
    justify: str = "left"
    wrap: bool = True
    comfort: int = 14


def _text(cell: Any) -> Text:
    from rich.text import Text

    return cell if isinstance(cell, Text) else Text(str(cell))


def atom_spans(plain: str) -> list[tuple[int, int]]:
    """Where a line may break: its words, except that a parenthesised group opened in a word stays whole
    with the words up to its closing parenthesis, `(2, 5, 12)` or `L·(4·d² + 2·d)`, up to MAX_ATOM."""
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", plain)]
    spans: list[tuple[int, int]] = []
    depth, i = 0, 0
    while i < len(words):
        start_depth, deepest, j = depth, depth, i
        while True:
            for ch in plain[words[j][0]:words[j][1]]:
                depth += (ch == "(") - (ch == ")")
                deepest = max(deepest, depth)
            if deepest > start_depth and depth >= deepest and j + 1 < len(words):
                j += 1
                continue
            break
        if j > i and words[j][1] - words[i][0] > MAX_ATOM:  # too long to keep whole: its words, one by one
            depth = start_depth
            for ch in plain[words[i][0]:words[i][1]]:
                depth += (ch == "(") - (ch == ")")
            spans.append(words[i])
            i += 1
            continue
        spans.append((words[i][0], words[j][1]))
        i = j + 1
    return spans


def _cell_lines(cell: Any, wrap: bool) -> list[list[Text]]:
    """A cell's explicit lines, each as its atoms (one atom per line when the column does not wrap)."""
    lines = _text(cell).split("\n", allow_blank=True)
    if not wrap:
        return [[line] for line in lines]
    return [[line[a:b] for a, b in atom_spans(line.plain)] for line in lines]


def lay_out(atoms: Sequence[Text], width: int) -> list[Text]:
    """Atoms joined by single spaces into lines of at most `width` cells (an atom wider than that
    gets a line of its own)."""
    from rich.cells import cell_len
    from rich.text import Text

    lines: list[Text] = []
    current: Text | None = None
    for atom in atoms:
        if current is not None and cell_len(current.plain) + 1 + cell_len(atom.plain) <= width:
            current.append(" ")
            current.append_text(atom)
        else:
            if current is not None:
                lines.append(current)
            current = atom.copy()
    if current is not None:
        lines.append(current)
    return lines or [Text("")]


@dataclass
class Grid:
    """A table's columns and rows, drawn at a given width only if every cell fits whole."""

    title: Any
    columns: Sequence[Column]
    rows: list[list[Any]] = field(default_factory=list)
    styles: list[str | None] = field(default_factory=list)
    ends: list[bool] = field(default_factory=list)
    compact: bool = False  # no borders and no padding: one space between columns, a rule under the header

    def add(self, *cells: Any, style: str | None = None, end_section: bool = False) -> None:
        self.rows.append(list(cells))
        self.styles.append(style)
        self.ends.append(end_section)

    def widths(self, width: int) -> list[int] | None:
        """Each column's width at a total of `width` (borders and padding included), or None when the
        longest atoms alone do not fit."""
        from rich.cells import cell_len

        n = len(self.columns)
        lowest, natural = [], []
        for k, col in enumerate(self.columns):
            cells = [_cell_lines(col.header, True)] + [_cell_lines(row[k], col.wrap) for row in self.rows]
            atoms = [cell_len(a.plain) for lines in cells for line in lines for a in line]
            full = [sum(cell_len(a.plain) for a in line) + len(line) - 1 for lines in cells for line in lines]
            longest, nat = max(atoms, default=0), max(full, default=0)
            lowest.append(nat if not col.wrap else max(longest, min(nat, col.comfort)))
            natural.append(nat)
        # a vertical line between and around the columns and one space each side of a cell; compact: one space
        room = width - (n - 1 if self.compact else 3 * n + 1)
        spare = room - sum(lowest)
        if spare < 0:
            return None
        if sum(natural) <= room:
            return natural

        def at(level: int) -> list[int]:  # every column that wraps raised to `level`, none past its natural width
            return [min(b, max(a, level)) for a, b in zip(lowest, natural)]

        level = 0  # at(0) is `lowest`, which fits
        while sum(at(level + 1)) <= room:
            level += 1
        got = at(level)
        for k in range(n):  # what is left goes to the first columns still short of their natural width
            grow = min(natural[k] - got[k], room - sum(got))
            got[k] += grow
        return got

    def table(self, widths: Sequence[int]) -> Table:
        from rich.table import Table
        from rich.text import Text

        table = Table(header_style="bold")
        if self.compact:
            from rich import box

            table = Table(header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, padding=0, pad_edge=False)
        for col, w in zip(self.columns, widths):
            header = [ln for atoms in _cell_lines(col.header, True) for ln in lay_out(atoms, w)]
            table.add_column(Text("\n").join(header), justify=col.justify, width=w, no_wrap=True)
        for row, style, end in zip(self.rows, self.styles, self.ends):
            cells = []
            for cell, col, w in zip(row, self.columns, widths):
                lines = [ln for atoms in _cell_lines(cell, col.wrap) for ln in
                         (lay_out(atoms, w) if col.wrap else atoms)]
                cells.append(Text("\n").join(lines))
            table.add_row(*cells, style=style, end_section=end)
        return table


class Fitted:
    """The first of `grids` that fits the width it is drawn at; else `fallback(width)`."""

    def __init__(self, grids: Sequence[Grid], fallback: Callable[[int], Any]) -> None:
        self.grids, self.fallback = list(grids), fallback

    def __rich_console__(self, console: Any, options: Any) -> Any:
        for grid in self.grids:
            widths = grid.widths(options.max_width)
            if widths is not None:
                if grid.title:  # its own line, wrapped at the width: a table's title would be padded to the table's
                    title = _text(grid.title).copy()
                    title.stylize("bold")
                    yield title
                yield grid.table(widths)
                return
        yield self.fallback(options.max_width)

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement

        return Measurement(min(options.max_width, 40), options.max_width)


class Indented:
    """A line indented by `by`, its wrapped continuation lines too (broken only between atoms)."""

    def __init__(self, text: str, style: str = "", by: int = 2) -> None:
        self.text, self.style, self.by = text, style, by

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        for atoms in _cell_lines(Text(self.text, style=self.style), True):
            for line in lay_out(atoms, max(1, options.max_width - self.by)):
                yield Text(" " * self.by) + line


class Flow:
    """Items laid out in lines of the width they are drawn at, broken only between items."""

    def __init__(self, items: Sequence[Any], prefix: str = "", separator: str = " ") -> None:
        self.items, self.prefix, self.separator = list(items), prefix, separator

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        atoms = [_text(item).copy() for item in self.items]
        for atom in atoms[:-1]:
            atom.append(self.separator.rstrip())
        if atoms:
            atoms[0] = Text(self.prefix).append_text(atoms[0])
        pad = len(self.separator) - len(self.separator.rstrip()) - 1  # lay_out puts one space between atoms
        for atom in atoms[:-1]:
            atom.append(" " * pad)
        yield from lay_out(atoms, options.max_width)


def records(title: Any, entries: Sequence[tuple[Any, Sequence[Any]]], width: int) -> Group:
    """The last layout: each row a heading line and its fields below, indented, wrapped between atoms."""
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = [_text(title)] if title else []
    for heading, fields in entries:
        parts += lay_out([a for line in _cell_lines(heading, True) for a in line], width)
        for item in fields:
            for line in _cell_lines(item, True):
                parts += [Text("  ") + ln for ln in lay_out(line, max(1, width - 2))]
    return Group(*parts)


# ----------------------------------------------------------------------------- count

COUNT_HEADERS = ("component", "shape", "weights", "biases", "count", "share", "formula")


def count_json(result: ParameterCount, inference: Inference, training: Training | None = None,
               budget: int | None = None, ranks: RankPlan | None = None) -> dict[str, Any]:
    rec = result.reconciled
    data = {
        "schema_version": SCHEMA_VERSION,
        "config": result.config.name,
        "total": result.total,
        "per_block": result.per_block,
        "n_layers": result.n_layers,
        "non_embedding": result.non_embedding,
        "active_per_token": result.active_total,
        "buffers": result.buffers,
        "components": [
            {"name": c.name, "label": c.label, "kind": c.kind, "shapes": [list(t) for t in c.shapes],
             "copies": c.copies, "weights": c.weights, "biases": c.biases, "count": c.count, "active": c.active_count,
             "share": _share(c.count, result.total), "formula": c.expression,
             **({"group": c.group} if c.group is not None else {})}
            for c in result.components
        ],
        "layer_groups": [{"layers": list(g.layers), "n_layers": len(g.layers), "overrides": g.overrides,
                          "varies": list(g.varies), "per_block": n} for g, n in zip(result.groups, result.group_counts)],
        "reconciled": {"formula": rec.formula, "arrays": rec.arrays, "match": rec.match, "method": rec.method,
                       "mismatches": list(rec.mismatches), "buffers_formula": rec.buffers_formula,
                       "buffers_arrays": rec.buffers_arrays},
        "inference": inference_json(inference),
    }
    if result.checkpoint is not None:
        data["checkpoint"] = result.checkpoint
    if training is not None:
        data["training"] = training_json(training)
    if ranks is not None:
        data["parallel"] = ranks_json(ranks)
    if budget is not None:
        used = (ranks or training or inference).memory_bytes
        data["budget"] = {"max_memory_bytes": budget, "memory_bytes": used, "within": used <= budget}
    return data


def _flops(n: int) -> dict[str, int]:
    return {"flops": n, "macs": n // 2}


KV_LATENT_LABEL = "compressed latent, what MLA-aware inference engines store"
KV_EXPANDED_LABEL = "expanded keys and values, as a plain K/V cache holds them"


STATE_FORMULAS = {"Gated DeltaNet": "B·L_dn·(h_v·d_k·d_v + K·C)", "Mamba-1": "B·L_ssm·(d_in·N + K·d_in)",
                  "Mamba-2": "B·L_ssm·(h_s·p·N + K·(h_s·p + 2·g·N))",
                  "short-conv": "B·L_conv·K·d", "Kimi Delta Attention": "B·L_kda·(h·d_k·d_v + K·C)",
                  "lightning": "B·L_la·h·d_h²"}


def _state_formula(inf: Inference) -> str:
    return " + ".join(STATE_FORMULAS[kind] for kind in inf.state_of.split(" and "))


def _latent_formula(inf: Inference, layers: str = "L") -> str:
    return f"{layers}·(r_kv + d_rope + d_I)" if inf.indexed else f"{layers}·(r_kv + d_rope)"


def _latent_label(inf: Inference) -> str:
    """The latent cache's description; with DeepSeek Sparse Attention, and the indexer's keys beside it."""
    return KV_LATENT_LABEL + (", with the indexer's keys (d_I)" if inf.indexed else "")


def _kv_cache_json(inf: Inference) -> dict[str, Any]:
    """bytes_per_token is exact (16.5 for 33 int4 values: a number, not always an integer); bits_per_token says
    the same as an integer; bytes is the packed total, rounded up to a whole byte once."""
    if inf.state_bytes:
        state = {"of": inf.state_of, "dtype": inf.dtype, "bytes": inf.state_bytes, "constant_in_T": True,
                 "formula": _state_formula(inf)}
        if inf.kv_expanded_bits_per_token:  # the attention layers are latent attention (Kimi-Linear's)
            return {**_latent_json(inf, "L_attn"), "state": state}
        return {"dtype": inf.kv_dtype, "bytes_per_token": inf.kv_bytes_per_token,
                "bits_per_token": inf.kv_bits_per_token, "bytes": inf.kv_bytes,
                "formula": f"{_kv_formula(inf, 'L_attn')} per token (attention layers only)", "state": state}
    if not inf.kv_expanded_bits_per_token:
        only = " per token (attention layers only)" if inf.attention_only else " per token"
        return {"dtype": inf.kv_dtype, "bytes_per_token": inf.kv_bytes_per_token,
                "bits_per_token": inf.kv_bits_per_token, "bytes": inf.kv_bytes,
                "formula": _kv_formula(inf, "L_attn" if inf.attention_only else "L") + only}
    return _latent_json(inf)


def _kv_formula(inf: Inference, layers: str = "L") -> str:
    """A plain K/V cache's elements per token: K and V of h_kv heads in every layer (values d_v wide: MiMo-V2-Flash's)."""
    return f"{layers}·h_kv·(d_h + d_v)" if inf.narrow_values else f"2·{layers}·h_kv·d_h"


def _latent_json(inf: Inference, layers: str = "L") -> dict[str, Any]:
    """Latent attention's cache, compressed and expanded; `layers` the letter counting its layers (L_attn beside
    recurrent layers)."""
    return {"dtype": inf.kv_dtype, "bytes_per_token": inf.kv_bytes_per_token, "bits_per_token": inf.kv_bits_per_token,
            "bytes": inf.kv_bytes, "formula": f"{_latent_formula(inf, layers)} per token", "stores": _latent_label(inf),
            "expanded": {"bytes_per_token": inf.kv_expanded_bytes_per_token,
                         "bits_per_token": inf.kv_expanded_bits_per_token, "bytes": inf.kv_expanded_bytes,
                         "formula": f"{layers}·h·(d_h + d_v) per token", "stores": KV_EXPANDED_LABEL}}


def _kv_line(label: str, per_token: int | float, formula: str, dtype: str, total: int, B: int, T: int) -> str:
    """'K/V cache: 4,096 bytes per token (2·L·h_kv·d_h × float32); 40 KiB for 2 × 5 tokens'; half a byte per token
    (an odd number of int4 values) is printed as it is, 16.5, and the total says how it is rounded."""
    packed = isinstance(per_token, float)
    return (f"{label}: {per_token:,} bytes per token ({formula} × {dtype}{', two values a byte' if packed else ''}); "
            f"{human_bytes(total)} for {B} × {T:,} tokens" + (" (packed, rounded up to a whole byte)" if packed else ""))


def _kv_cache_lines(inf: Inference, B: int, T: int) -> list[str]:
    if inf.state_bytes:  # recurrent layers: K/V of the attention layers only, and a state that does not grow with T
        held = "the state" if inf.state_of == "lightning" else "the state and the conv's window"  # lightning: no conv
        attention = ([_kv_line(f"K/V cache (attention layers only), {_latent_label(inf)}", inf.kv_bytes_per_token,
                               _latent_formula(inf, "L_attn"), inf.kv_dtype, inf.kv_bytes, B, T),
                      _kv_line(f"K/V cache (attention layers only), {KV_EXPANDED_LABEL}",
                               inf.kv_expanded_bytes_per_token, "L_attn·h·(d_h + d_v)", inf.kv_dtype,
                               inf.kv_expanded_bytes, B, T)]
                     if inf.kv_expanded_bits_per_token else  # latent attention beside them (Kimi-Linear)
                     [_kv_line("K/V cache (attention layers only)", inf.kv_bytes_per_token, _kv_formula(inf, "L_attn"),
                               inf.kv_dtype, inf.kv_bytes, B, T)])
        return attention + [
                f"recurrent state ({inf.state_of} layers, constant in T): {human_bytes(inf.state_bytes)} for {B} "
                f"sequence{'s' if B > 1 else ''} ({_state_formula(inf)} × {inf.dtype}: {held})"]
    if not inf.kv_expanded_bits_per_token:
        if inf.attention_only:  # layers with neither attention nor a state beside the attention layers
            return [_kv_line("K/V cache (attention layers only)", inf.kv_bytes_per_token, _kv_formula(inf, "L_attn"),
                             inf.kv_dtype, inf.kv_bytes, B, T)]
        return [_kv_line("K/V cache", inf.kv_bytes_per_token, _kv_formula(inf), inf.kv_dtype, inf.kv_bytes, B, T)]
    return [_kv_line(f"K/V cache, {_latent_label(inf)}", inf.kv_bytes_per_token, _latent_formula(inf), inf.kv_dtype,
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
        "recompute": tr.recompute, "attention": tr.attention, "seq_len": tr.seq_len, "batch": tr.batch, "micro_batches": tr.micro_batches,
        "tokens_per_step": tr.tokens,
        "bytes_per_parameter": {"weights": per.weights, "gradients": per.gradients, "optimizer": per.optimizer,
                                "total": per.total},
        "states_per_device": {**tr.states, "total": tr.state_bytes},
        "activations": {"per_layer": tr.activations_per_layer, "n_layers": tr.n_layers,
                        "other_layers": [{"n_layers": n, "per_layer": size} for n, size in tr.other_layers],
                        "layer_terms": _terms_json(tr.layer_terms), "other_terms": _terms_json(tr.other_terms),
                        "total": tr.activation_bytes},
        "memory_bytes_per_device": tr.memory_bytes,
        "step": {"forward": {"full": _flops(tr.forward_flops()), "causal": _flops(tr.forward_flops(True))},
                 "backward": {"full": _flops(tr.backward_flops()), "causal": _flops(tr.backward_flops(True))},
                 "recompute": {"full": _flops(tr.recomputed_flops()),
                               "causal": _flops(tr.recomputed_flops(True))},
                 "total": {"full": _flops(tr.step_flops()), "causal": _flops(tr.step_flops(True))},
                 "per_token": {"full": _flops(tr.step_flops() // tr.tokens),
                               "causal": _flops(tr.step_flops(True) // tr.tokens)},
                 "six_n": tr.six_n, "six_n_parameters": tr.six_n_parameters,
                 "six_n_basis": "active_non_embedding" if tr.six_n_active else "non_embedding"},
        "notes": tr.notes,
        **({"lora": lora_json(tr.lora, tr)} if tr.lora is not None else {}),
    }


def lora_json(lo: Lora, tr: Training) -> dict[str, Any]:
    return {
        "rank": lo.rank, "alpha": lo.alpha, "scale": lo.scale, "targets": list(lo.targets), "layout": lo.layout,
        "trainable_parameters": lo.trainable, "trainable_share": _share(lo.trainable, lo.frozen_parameters),
        "adapters": [{"module": a.module, "roles": list(a.roles), "in": a.fan_in, "out": a.fan_out,
                      "layers": a.layers, "per_layer": a.n, "copies": a.copies,
                      "parameters": a.parameters(lo.rank), "formula": _adapter_formula(a)} for a in lo.adapters],
        "frozen": {"parameters": lo.frozen_parameters, "dtype": lo.frozen_dtype,
                   "quantized_parameters": lo.quantized_parameters, "bytes": lo.frozen_bytes},
        "flops_per_token": _flops(lo.flops_per_token()),
    }


def _adapter_formula(a: Any) -> str:
    copies = f"{a.layers}·{a.n}" if a.n > 1 else f"{a.layers}"
    return f"{copies}·r·({a.fan_in} + {a.fan_out})"


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


def count_markdown(result: ParameterCount, inference: Inference, training: Training | None = None,
                   ranks: RankPlan | None = None) -> str:
    rows = []
    for c, row in zip(result.components, _count_rows(result)):
        if (header := _group_header(result, c)) is not None:
            rows.append([f"**{header}**"] + [""] * (len(COUNT_HEADERS) - 1))
        rows.append(row)
    text = markdown_table(COUNT_HEADERS, rows, "llrrrrl") + "\n" + "\n".join(
        f"- {line}" for line in count_footer_lines(result, inference, training)) + "\n"
    if training is not None:
        text += "\n" + markdown_table(TERM_HEADERS, _term_rows(training), "llrl")
        if training.lora is not None:
            text += "\n" + markdown_table(ADAPTER_HEADERS, _adapter_rows(training.lora), "lrrrl")
    if ranks is not None:
        headers = rank_headers(ranks)
        text += (f"\n**{_rank_title(ranks)}**\n\n" + markdown_table(headers, _rank_rows(ranks), "l" + "r" * (len(headers) - 1))
                 + "\n" + "".join(f"- {line}\n" for line in ranks_lines(ranks)))
    return text


COUNT_CSV_HEADERS = ("component", "shape", "weights", "biases", "count", "share", "formula", "name", "kind")


def count_csv(result: ParameterCount) -> str:
    """The table's rows under the table's headers (a block row of a model whose layers differ names its
    block: "block 2: Q projection"), then the JSON's `name` and `kind` of each."""
    rows = [[_csv_label(result, c), c.shape, c.weights, c.biases, c.count, _share(c.count, result.total),
             c.expression, _group_name(c), c.kind] for c in result.components]
    return csv_text(COUNT_CSV_HEADERS, rows)


def _csv_label(result: ParameterCount, c: Component) -> str:
    return f"block {c.group + 1}: {c.label}" if result.layers_differ and c.group is not None else c.label


def _both(full: int, causal: int) -> str:
    return f"{full:,} ({human(full)}) full table, {causal:,} ({human(causal)}) causal"


def quantized_line(q: Mapping[str, Any]) -> str:
    """A quantized checkpoint's stored bytes: its quantized weights' codes, scales and zero points, the rest."""
    parts = ", ".join(f"{role} {n:,}" for role, n in q["parts"].items())
    schemes = "; ".join(f"{name} ({n:,} weights)" for name, n in q["schemes"].items())
    return (f"quantized: {schemes}: {q['bytes']:,} bytes ({parts}), {q['bits_per_weight']:.3f} bits per weight "
            f"(scales and zero points included); {q['unquantized_parameters']:,} parameters unquantized "
            f"({q['unquantized_bytes']:,} bytes); {q['total_bytes']:,} bytes of weights, "
            f"{q['bits_per_parameter']:.3f} bits per parameter; bits per weight by component: "
            + ", ".join(f"{name} {c['bits_per_weight']:.3f}" for name, c in q["by_component"].items()))


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
        if (q := ck.get("quantized")) is not None:
            lines.append(quantized_line(q))
        if "gguf" in ck:
            lines += gguf_lines(ck["gguf"])
    lines += [
        f"workload: batch {B} × {T:,} tokens, weights and activations {inf.dtype}, K/V cache {inf.kv_dtype}",
        f"parameter memory: {human_bytes(inf.parameter_bytes)} " + (f"({result.total:,} × {inf.dtype})"
                                                                       if inf.stored_weight_bytes is None else
                                                                       f"({inf.stored_weight_bytes:,} bytes: the weights as stored)"),
        *_kv_cache_lines(inf, B, T),
        *([f"K/V cache of the windowed layers: the last {min(windows):,} tokens' keys and values, exact for a cache "
           f"that keeps only them; transformers' sliding-window cache keeps a whole prefill's {T:,} until the next "
           f"update"] if (windows := [g.block.sliding_window for g in result.config.layer_groups()
                                      if 0 < g.block.sliding_window < T]) else []),
        *([f"K/V cache of the chunked layers: at most {min(chunks):,} tokens' keys and values, as a window of "
           f"{min(chunks):,} keeps them (a query sees only the keys of its own chunk; transformers caches a chunked "
           f"layer as a sliding window)"]
          if (chunks := [g.block.attention_chunk for g in result.config.layer_groups()
                         if 0 < g.block.attention_chunk < T]) else []),
        f"inference memory: {human_bytes(inf.memory_bytes)} = weights + K/V cache + "
        + ("recurrent state + " if inf.state_bytes else "") +
        f"{human_bytes(inf.activation_bytes)} activations (one layer's prefill working set)",
        f"prefill of {T:,} tokens × {B}: {_both(prefill, causal)} FLOPs; per token "
        f"{human(prefill // (B * T))} full, {human(causal // (B * T))} causal",
        f"decode step at context {T:,}: {inf.decode // B:,} ({human(inf.decode // B)}) FLOPs per sequence"
        + (f", {human(inf.decode)} for the batch" if B > 1 else ""),
        SIZING_FLOPS_NOTE,
    ]
    return lines + (training_lines(tr) if tr is not None else [])


def gguf_lines(summary: Mapping[str, Any]) -> list[str]:
    """A GGUF file's tensor groups: their ggml types, stored bytes and bits per weight, then the file's."""
    lines = []
    for group, row in summary["groups"].items():
        types = ", ".join(f"{name} {n:,}" for name, n in row["types"].items())
        lines.append(f"  {group}: {types} weights in {row['bytes']:,} bytes "
                     f"({8 * row['bytes'] / row['weights']:.4g} bits per weight)")
    return [f"GGUF tensors: {summary['weights']:,} weights in {summary['bytes']:,} bytes, "
            f"{summary['bits_per_weight']:.4g} bits per weight (scales included)", *lines]


def active_line(result: ParameterCount) -> str:
    """What one token uses of a mixture of experts' parameters, component by component."""
    config = result.config
    moe = next(b.moe for b in (config.block, *config.layer_blocks) if b.moe is not None)  # a layer's, if not the base's
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
        f"{tr.dp} data-parallel device{'s' if tr.dp > 1 else ''}{zero}; micro-batch {tr.batch} × {tr.seq_len:,} tokens"
        + (f", {tr.micro_batches} per step" if tr.micro_batches > 1 else ""),
        f"model states per device: {human_bytes(tr.state_bytes)} (weights {human_bytes(st['weights'])}, gradients "
        f"{human_bytes(st['gradients'])}, optimizer {human_bytes(st['optimizer'])}"
        + (f", gathered layer {human_bytes(st['gathered_layer'])}" if "gathered_layer" in st else "") + ")",
        f"activations kept for the backward pass (recompute {tr.recompute}): {human_bytes(tr.activations_per_layer)} "
        f"per layer ({tr.activations_per_layer:,} bytes) × {tr.n_layers} + "
        + (f"{human_bytes(sum(n * size for n, size in tr.other_layers))} in the other layers + " if tr.other_layers else "")
        + f"{human_bytes(tr.activations_outside_layers)} "
        f"outside the layers = {human_bytes(tr.activation_bytes)}",
        f"training memory per device: {human_bytes(tr.memory_bytes)} = model states + activations",
        f"FLOPs per step ({tr.tokens:,} tokens): forward + backward ("
        + ("the frozen weights' products once, the scores' and the adapters' twice" if tr.lora is not None
           else "2× forward") + ")"
        + (f" + recomputed forward ({tr.recompute})" if tr.recompute != "none" else "")
        + f" = {_both(tr.step_flops(), tr.step_flops(True))}; per token {human(tr.step_flops() // tr.tokens)} full; "
        + (f"6·N rule (Kaplan et al. 2020, N = {tr.six_n_parameters:,} active non-embedding parameters per token, "
           f"a mixture of experts): " if tr.six_n_active else "6·N rule (Kaplan et al. 2020, N non-embedding): ")
        + f"{tr.six_n:,} ({human(tr.six_n)})",
        *(lora_lines(tr.lora) if tr.lora is not None else []),
        *tr.notes,
    ]


FROZEN_NAMES = {"bf16": "bfloat16", "int8": "int8 (LLM.int8(): a float32 scale per output row)",
                "nf4": "NF4 with double quantization (QLoRA: 4.127 bits a weight)",
                "int4": "int4 (4 bits, no constants)"}


def lora_lines(lo: Lora) -> list[str]:
    targets = ", ".join(lo.targets)
    return [
        f"LoRA: rank {lo.rank} on {targets}: {lo.trainable:,} trainable parameters "
        f"({100 * _share(lo.trainable, lo.frozen_parameters):.4f}% of {lo.frozen_parameters:,}), r·(in + out) per "
        f"adapted module, {lo.layout}; gradients and optimizer states for these only; alpha {lo.alpha:g} (scale "
        f"alpha/r = {lo.scale:g}: the update's size, nothing in memory or FLOPs)",
        f"frozen base: {human_bytes(lo.frozen_bytes)} ({lo.frozen_bytes:,} bytes): "
        + (f"{lo.frozen_parameters:,} weights at bfloat16" if lo.frozen_dtype == "bf16" else
           f"{lo.quantized_parameters:,} weights of the blocks' matrices at {FROZEN_NAMES[lo.frozen_dtype]}, the other "
           f"{lo.frozen_parameters - lo.quantized_parameters:,} (embeddings, norms, biases, LM head) at bfloat16"),
    ]


TERM_HEADERS = ("kept for the backward pass", "size", "bytes", "Korthikanti (s·b·h)")


def _term_rows(tr: Training) -> list[list[str]]:
    rows = [[t.name, t.formula, f"{t.bytes:,}", t.korthikanti] for t in tr.layer_terms]
    rows.append([f"one layer ×{tr.n_layers}", "", f"{tr.activations_per_layer:,}", ""])
    rows += [[f"a layer of another block ×{n}", "", f"{size:,}", ""] for n, size in tr.other_layers]
    rows += [[t.name, t.formula, f"{t.bytes:,}", ""] for t in tr.other_terms]
    rows.append(["total", "", f"{tr.activation_bytes:,}", ""])
    return rows


def count_table(result: ParameterCount, inference: Inference, training: Training | None = None,
                ranks: RankPlan | None = None) -> Group:
    """The breakdown as a table fitted to the width it is drawn at (see Fitted), the footer below it."""
    from rich.console import Group
    from rich.text import Text

    footer = Text("\n".join(count_footer_lines(result, inference, training)))
    if not result.reconciled.match:
        footer.stylize("bold red", 0, len(footer.plain.split("\n")[0]))
    parts: list[Any] = [_count_fitted(result), footer]
    if training is not None:
        parts.append(_terms_fitted(training))
        if training.lora is not None:
            parts.append(_adapters_fitted(training.lora))
    if ranks is not None:
        parts += [_ranks_fitted(ranks), Text("\n".join(ranks_lines(ranks)))]
    return Group(*parts)


def _count_fitted(result: ParameterCount) -> Fitted:
    from rich.text import Text

    title = f"Parameters of {result.config.name}"
    # a rule after each block's attention part (through its norms) and after its MLP part
    parts = ["mlp" if c.name.startswith("mlp.") else "attn" if c.name.startswith(("attn.", "ln")) else ""
             for c in result.components]
    ends = {i for i in range(1, len(parts)) if parts[i - 1] and parts[i] != parts[i - 1]}
    biased = any(c.biases for c in result.components)

    def style(c: Component) -> str | None:
        return "bold" if c.kind == "total" else "dim" if c.kind in ("tied", "buffer") else None

    def share(c: Component, drawn: bool) -> str:
        value = _share(c.count, result.total)
        return f"{bar(value)} {100 * value:5.1f}%" if drawn else f"{100 * value:.1f}%"

    def under(*lines: str) -> Text:  # a row's first line, and what moved under it, dimmed
        text = Text(lines[0])
        for line in lines[1:]:
            if line:
                text.append("\n" + line, style="dim")
        return text

    def grid(drawn_bar: bool, formula_under: bool, split_count: bool, shape_under: bool) -> Grid:
        columns = [Column("component", comfort=18)] + ([] if shape_under else [Column("shape", comfort=16)])
        if split_count:
            columns += [Column("weights", "right", False), Column("biases", "right", False)]
        columns += [Column("count" if split_count or not biased else "count\nweights + biases", "right", False),
                    Column("share", "right", False)]
        if not formula_under:
            columns.append(Column("formula", comfort=16))
        g = Grid(title, columns)
        for i, c in enumerate(result.components):
            if (header := _group_header(result, c)) is not None:  # each group's rows under its name
                name, what = header.split(": ", 1)
                if formula_under:
                    g.add(Text(f"{name}: {what}"), *[""] * (len(columns) - 1), style="bold italic")
                else:
                    g.add(name, *[""] * (len(columns) - 2), what, style="bold italic")
            first = under(c.label, c.shape if shape_under else "", c.expression if formula_under else "")
            cells: list[Any] = [first] + ([] if shape_under else [c.shape])
            if split_count:
                cells += [f"{c.weights:,}", f"{c.biases:,}", f"{c.count:,}"]
            else:
                cells.append(under(f"{c.count:,}", f"{c.weights:,} + {c.biases:,}" if biased and c.biases else ""))
            cells.append(share(c, drawn_bar))
            if not formula_under:
                cells.append(c.expression)
            g.add(*cells, style=style(c), end_section=c.kind == "total" or i + 1 in ends)
        return g

    # (bar drawn, formula under the label, weights and biases columns, shape under the label)
    layouts = [(True, False, True, False), (False, False, True, False)]
    layouts += [(False, True, True, False), (False, True, False, False)] if biased else \
        [(False, False, False, False), (False, True, False, False)]  # no biases: weights = count
    grids = [grid(*layout) for layout in layouts + [(False, True, False, True)]]

    def fallback(width: int) -> Any:
        entries = []
        for c in result.components:
            counts = f"{c.count:,}" + (f" = {c.weights:,} weights + {c.biases:,} biases" if c.biases else "")
            entries.append((Text(c.label, style=style(c) or ""),
                            [f"count {counts} · {share(c, False)}", *(f"shape {s}" for s in [c.shape] if s),
                             *(f"formula {e}" for e in [c.expression] if e)]))
        return records(title, entries, width)

    return Fitted(grids, fallback)


def _terms_fitted(training: Training) -> Fitted:
    from rich.text import Text

    source = {"megatron": "Korthikanti et al. 2022, §4", "eager": "transformers' eager attention",
              "sdpa": "transformers' SDPA attention", "blockcli": "blockcli's own backward"}[training.attention]
    title = f"Activations per layer, recompute {training.recompute} ({source})"
    rows = _term_rows(training)
    ends = {len(training.layer_terms) - 1, len(training.layer_terms) + len(training.other_layers), len(rows) - 2}

    def style(row: list[str]) -> str | None:
        return "bold" if row[0] == "total" or row[0].startswith("one layer") else None

    full = Grid(title, [Column(TERM_HEADERS[0], comfort=20), Column(TERM_HEADERS[1], comfort=14),
                        Column(TERM_HEADERS[2], "right", False), Column(TERM_HEADERS[3], comfort=10)])
    stacked = Grid(title, [Column(f"{TERM_HEADERS[0]}\nsize; Korthikanti (s·b·h)", comfort=20),
                           Column(TERM_HEADERS[2], "right", False)])
    for i, row in enumerate(rows):
        full.add(*row, style=style(row), end_section=i in ends)
        text = Text(row[0])
        if row[1]:
            text.append("\n" + row[1] + (f"; Korthikanti {row[3]}" if row[3] else ""), style="dim")
        stacked.add(text, row[2], style=style(row), end_section=i in ends)
    return Fitted([full, stacked], lambda width: records(title, [(r[0], [f"{r[2]} bytes", r[1], r[3]])
                                                                for r in rows], width))


def _shown_stages(plan: RankPlan) -> list[Stage]:
    """The stages a table shows: every one up to four, else the first, the second, the last and the most loaded."""
    if len(plan.stages) <= 4:
        return plan.stages
    picked = {0, 1, len(plan.stages) - 1, plan.most_loaded.index}
    return [s for s in plan.stages if s.index in picked]


def _rank_rows(plan: RankPlan) -> list[list[str]]:
    from blockcli.config import layer_list

    stages = _shown_stages(plan)
    rows = [["layers", *(layer_list(s.layers) for s in stages)],
            ["parameters", *(f"{s.parameters:,}" for s in stages)]]
    if any(s.expert_parameters for s in plan.stages):
        rows.append(["  of which routed experts", *(f"{s.expert_parameters:,}" for s in stages)])
    if plan.training:
        rows += [[name, *(f"{s.states[name]:,}" for s in stages)] for name in ("weights", "gradients", "optimizer")]
        rows.append(["activations per micro-batch", *(f"{s.layer_activations + s.other_activations:,}" for s in stages)])
        rows.append(["micro-batches in flight", *(f"{s.in_flight:g}" for s in stages)])
        rows.append(["activations", *(f"{s.activations:,}" for s in stages)])
    else:
        rows.append([f"weights ({plan.dtype})", *(f"{plan.weight_bytes(s):,}" for s in stages)])
        rows.append(["K/V cache", *(f"{s.kv_cache:,}" for s in stages)])
    rows.append(["total bytes", *(f"{plan.memory(s):,}" for s in stages)])
    rows.append(["total", *(human_bytes(plan.memory(s)) + (" (most)" if s is plan.most_loaded else "") for s in stages)])
    return rows


def _rank_title(plan: RankPlan) -> str:
    lo = plan.layout
    parts = [f"tp {lo.tp}" + (" with sp" if lo.sp and lo.tp > 1 else ""), f"pp {lo.pp}"
             + (f" × vpp {lo.vpp}" if lo.vpp > 1 else "")] + ([f"ep {lo.ep}"] if lo.ep > 1 else [])
    if plan.training:
        parts += [f"dp {lo.dp}", f"{lo.micro_batches} micro-batch{'es' if lo.micro_batches > 1 else ''}"]
    return f"Per device, by pipeline stage ({', '.join(parts)}; {lo.devices} devices)"


def rank_headers(plan: RankPlan) -> list[str]:
    return ["per device"] + [f"stage {s.index}" for s in _shown_stages(plan)]


def _ranks_fitted(plan: RankPlan) -> Fitted:
    title, rows = _rank_title(plan), _rank_rows(plan)
    grids = [Grid(title, [Column("per device", comfort=12)] + [Column(h, "right", False) for h in rank_headers(plan)[1:]],
                  compact=compact) for compact in (False, True)]
    for grid in grids:
        for row in rows:
            grid.add(*row, style="bold" if row[0].startswith("total") else None)
    return Fitted(grids, lambda width: records(title, [(h, [f"{r[0]}: {r[i]}" for r in rows if r[0]])
                                                        for i, h in enumerate(rank_headers(plan)) if i], width))


def ranks_lines(plan: RankPlan) -> list[str]:
    worst = plan.most_loaded
    return [f"the figures above hold the whole model on one device; split as laid out, the most loaded device is "
            f"stage {worst.index}'s: {human_bytes(plan.memory_bytes)} ({plan.memory_bytes:,} bytes)"
            + ("; activations: Korthikanti et al. 2022's split over tp (d-wide tensors only with --sp), "
               "1F1B's micro-batches in flight" if plan.training else "; K/V heads per device as tensor parallelism "
                                                                     "splits them"), *plan.notes]


def ranks_json(plan: RankPlan) -> dict[str, Any]:
    lo = plan.layout
    return {
        "tp": lo.tp, "pp": lo.pp, "sp": lo.sp and lo.tp > 1, "ep": lo.ep, "dp": lo.dp,
        "micro_batches": lo.micro_batches, "vpp": lo.vpp, "devices": lo.devices,
        "vocab_padded": plan.vocab_padded,
        "stages": [{"stage": s.index, "layers": list(s.layers), "parameters": s.parameters,
                    "expert_parameters": s.expert_parameters,
                    **({"states": {**s.states, "total": sum(s.states.values())}, "in_flight": s.in_flight,
                        "activations_per_micro_batch": s.layer_activations + s.other_activations,
                        "activations": s.activations} if plan.training else
                       {"weight_bytes": plan.weight_bytes(s), "kv_cache_bytes": s.kv_cache}),
                    "memory_bytes": plan.memory(s)} for s in plan.stages],
        "most_loaded_stage": plan.most_loaded.index,
        "memory_bytes": plan.memory_bytes,
        "notes": plan.notes,
    }


ADAPTER_HEADERS = ("LoRA adapter", "in → out", "copies", "trainable", "formula")


def _adapter_rows(lo: Lora) -> list[list[str]]:
    rows = [[f"{a.module}" + (f" ({', '.join(a.roles)})" if a.roles and a.roles != (a.module,) else ""),
             f"{a.fan_in:,} → {a.fan_out:,}", f"{a.copies:,}", f"{a.parameters(lo.rank):,}", _adapter_formula(a)]
            for a in lo.adapters]
    return rows + [["total", "", "", f"{lo.trainable:,}", f"r = {lo.rank}"]]


def _adapters_fitted(lo: Lora) -> Fitted:
    title = f"LoRA adapters, rank {lo.rank}: A (r × in) and B (out × r) per module"
    rows = _adapter_rows(lo)
    full = Grid(title, [Column(ADAPTER_HEADERS[0], comfort=16), Column(ADAPTER_HEADERS[1], "right", False),
                        Column(ADAPTER_HEADERS[2], "right", False), Column(ADAPTER_HEADERS[3], "right", False),
                        Column(ADAPTER_HEADERS[4], comfort=12)])
    for i, row in enumerate(rows):
        full.add(*row, style="bold" if row[0] == "total" else None, end_section=i == len(rows) - 2)
    return Fitted([full], lambda width: records(title, [(r[0], [f"{r[3]} trainable", r[1], r[4]]) for r in rows],
                                                width))


def hub_id(source: str) -> str:
    """A preset's source as a table shows it: the Hub repository of a huggingface.co config URL."""
    return re.sub(r"https://huggingface\.co/([^/\s]+/[^/\s]+)/(?:blob|resolve)/[^/\s]+/config\.json", r"\1", source)


def presets_table(rows: Sequence[tuple[str, str, str, int | None]]) -> Fitted:
    from rich.text import Text

    title = "Packaged presets (the JSON has each source's full address)"
    full = Grid(title, [Column("name", comfort=10), Column("parameters", "right", False),
                        Column("description", comfort=30), Column("source", comfort=20)])
    stacked = Grid(title, [Column("name", comfort=10), Column("parameters", "right", False),
                           Column("description\nsource", comfort=30)])
    for name, description, source, parameters in rows:
        count = f"{parameters:,}" if parameters else ""
        full.add(name, count, description, hub_id(source))
        stacked.add(name, count, Text(description).append("\n" + hub_id(source), style="dim"))
    return Fitted([full, stacked], lambda width: records(title, [
        (f"{name}  {f'{p:,}' if p else ''}", [d, hub_id(s)]) for name, d, s, p in rows], width))


# ----------------------------------------------------------------------------- trace

TRACE_HEADERS = ("#", "operation", "inputs", "output", "symbolic", "params", "FLOPs", "bytes")
FLOPS_NOTE = ("FLOPs = 2 × multiply-adds for matmuls (scores count the full T×T table; the causal half is in "
              "brackets) plus fixed per-element costs for elementwise ops")


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ")"


def trace_json(trace: Trace, rows: Sequence[OpRow]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
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
    from blockcli.config import Mamba1

    b = trace.config.block
    what = "model" if trace.config.model else "block"
    how = ("real forward pass" if trace.mode == "executed"
           else "shapes only (analytic: nothing allocated)")
    head = f"Trace of {trace.config.name} ({what}): {how}, B={trace.batch}, T={trace.seq_len}, {trace.dtype}, "
    if all(isinstance(g.block.mamba, Mamba1) and g.block.parts == "mixer" for g in trace.config.layer_groups()):
        m = b.mamba  # attention-free (Mamba, Falcon-Mamba): its heads and d_ff are placeholders, not shown
        return head + f"d={b.d_model}, Mamba-1 d_in={m.d_inner}, N={m.d_state}, R={m.dt_rank}, attention-free"
    return (head + f"d={b.d_model}, h={b.n_heads}, h_kv={b.n_kv_heads}, d_h={b.head_dim}, d_ff={b.d_ff}, "
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
    """The rows as a table fitted to the width it is drawn at (see Fitted), the footer below it."""
    from rich.console import Group
    from rich.text import Text

    title = trace_header(trace)
    cells = _trace_rows(rows)
    ends = [r.key.endswith(".y") or r.key == "y" for r in rows]

    def dim_under(first: str, second: str, mark: str = "") -> Text:
        text = Text(first)
        if second:
            text.append(f"\n{mark}{second}", style="dim")
        return text

    def grid(symbolic_under: bool, inputs_under: bool, bytes_under: bool) -> Grid:
        columns = [Column("#", "right", False), Column("operation", comfort=18)]
        columns += [] if inputs_under else [Column("inputs", comfort=16)]
        columns.append(Column("output\nsymbolic" if symbolic_under else "output", comfort=16))
        columns += [] if symbolic_under else [Column("symbolic", comfort=12)]
        columns += [Column("params", "right", False), Column("FLOPs\nbytes" if bytes_under else "FLOPs", "right",
                                                             comfort=14)]
        columns += [] if bytes_under else [Column("bytes", "right", False)]
        g = Grid(title, columns)
        for (step, name, inputs, output, symbolic, params, flops, size), end in zip(cells, ends):
            row: list[Any] = [step, dim_under(name, inputs, "in ") if inputs_under else name]
            row += [] if inputs_under else [inputs]
            row += [dim_under(output, symbolic)] if symbolic_under else [output, symbolic]
            row += [params, dim_under(flops, size)] if bytes_under else [params, flops, size]
            g.add(*row, end_section=end)
        return g

    def fallback(width: int) -> Any:
        return records(title, [(f"{step} {name}", [f"in {inputs}" if inputs else "", f"out {output} {symbolic}",
                                                   f"params {params or 0} · FLOPs {flops} · {size}"])
                               for step, name, inputs, output, symbolic, params, flops, size in cells], width)

    grids = [grid(False, False, False), grid(True, False, False), grid(True, True, False), grid(True, True, True)]
    return Group(Fitted(grids, fallback), Text("\n".join(trace_footer_lines(trace, rows))))


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


class Heatmap:
    """One head's (T, T) attention weights as shaded cells, drawn as wide as the width allows: two
    characters a cell and a space, else one and a space, else one; key positions are labelled at a
    step where their numbers fit whole."""

    SHADES = " ░▒▓█"

    def __init__(self, weights: Any) -> None:
        self.weights = weights

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        T = self.weights.shape[0]
        label = len(str(T - 1))
        tail = "   key →"
        for cell_width, gap in ((2, 1), (1, 1), (1, 0)):
            pitch = cell_width + gap
            if label + 1 + T * pitch + len(tail) <= options.max_width:
                break
        else:
            yield Text(f"(a {T} × {T} map needs {label + 1 + T + len(tail)} columns; this output has "
                       f"{options.max_width}: widen the terminal, or set COLUMNS)", style="dim")
            return
        step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10**9) if s * pitch >= label + 1 or s >= T)
        header = [" "] * (T * pitch)
        for s in range(0, T, step):  # each label ends at its cell's last character
            end = s * pitch + cell_width
            text = str(s)
            if end - len(text) >= 0:
                header[end - len(text):end] = list(text)
        out = Text(" " * (label + 1) + "".join(header).rstrip() + tail + "\n", style="dim")
        for t in range(T):
            out.append(str(t).rjust(label) + " ", style="dim")
            for s in range(T):
                w = float(self.weights[t, s])
                cell = self.SHADES[min(4, int(w * 4.999))] * cell_width if w > 0 else "·".rjust(cell_width)
                level = int(90 + 165 * w)
                out.append(cell, style=f"rgb({level},{level},{level})" if w > 0 else "dim")
                out.append(" " * gap)
            out.append("\n")
        out.append("query ↓   (denser blocks = larger weight; · = masked, exactly 0)", style="dim")
        yield out


def attention_heatmap(weights: Any, title: str) -> Group:
    """One head's (T, T) attention weights as shaded cells; the masked triangle shows as `·`."""
    from rich.console import Group
    from rich.text import Text

    return Group(Text(title, style="bold"), Heatmap(weights))


# ----------------------------------------------------------------------------- verify

STATUS_STYLE = {"PASS": "green", "FAIL": "bold red", "SKIP": "yellow", "ERROR": "bold magenta"}


def verify_json(grouped: Sequence[Sequence[Report]]) -> dict[str, Any]:
    """verify's JSON: per config, its reports (one per kind of layer verified) as one object; several
    configs as {"passed", "configs": [those objects]}."""
    objects = [_config_json(reports) for reports in grouped]
    if len(objects) == 1:
        return versioned(objects[0])
    return versioned({"passed": all(o["passed"] for o in objects), "configs": objects})


def _config_json(reports: Sequence[Report]) -> dict[str, Any]:
    """One config's checks, every row naming the layer it was run on (null: the config's only block)."""
    return {
        "config": reports[0].config.name, "passed": all(r.passed for r in reports),
        "layers": [{"layer": r.layer, "kind": r.kind, "passed": r.passed} for r in reports],
        "notes": list(dict.fromkeys(n for r in reports for n in r.notes)),
        "errors": [e for r in reports for e in r.errors],
        "checks": [{"id": c.id, "name": c.name, "layer": r.layer, "status": c.status, "passed": c.passed,
                    "measured": c.measured, "tolerance": c.tolerance, "hint": c.hint,
                    "figures": [{"quantity": f.quantity, "value": number(f.value), "tolerance": f.tolerance}
                                for f in c.figures]}
                   for r in reports for c in r.checks],
    }


def verify_summary(report: Report) -> str:
    counts = {s: sum(c.status == s for c in report.checks) for s in ("PASS", "FAIL", "SKIP", "ERROR")}
    failed = [str(c.id) for c in report.checks if c.passed is False]
    verdict = "PASS" if report.passed else "FAIL"
    where = f" layer {report.layer}" if report.layer is not None else ""
    text = f"{verdict} {report.config.name}{where}: {counts['PASS']} passed, {counts['FAIL']} failed"
    if counts["ERROR"]:
        text += f", {counts['ERROR']} not run (error)"
    if counts["SKIP"]:
        text += f", {counts['SKIP']} skipped"
    named = {m[1] for c in report.checks if c.error and (m := re.match(r"not run: error (\d+)", c.measured))}
    outside = len(report.errors) - len(named)  # errors no row points at (a thread left running after the checks)
    if outside > 0:
        text += f", {outside} error{'s' if outside > 1 else ''} outside the checks"
    return text + (f" (items {', '.join(failed)})" if failed else "")


def _verify_fitted(report: Report, title: str) -> Fitted:
    from rich.text import Text

    def status(c: Any) -> Text:
        return Text(c.status, style=STATUS_STYLE[c.status])

    def grid(tolerance_under: bool, measured_under: bool) -> Grid:
        columns = [Column("#", "right", False), Column("check" + ("\nmeasured; tolerance" if measured_under else ""),
                                                       comfort=22), Column("result", wrap=False)]
        if not measured_under:
            columns.append(Column("measured" + ("\ntolerance" if tolerance_under else ""), comfort=26))
            columns += [] if tolerance_under else [Column("tolerance", comfort=14)]
        g = Grid(title, columns)
        for c in report.checks:
            if measured_under:
                text = Text(c.name)
                text.append(f"\n{c.measured}" + (f"; tolerance {c.tolerance}" if c.tolerance else ""), style="dim")
                g.add(str(c.id), text, status(c), end_section=c.id == 10)
            elif tolerance_under:
                text = Text(c.measured)
                if c.tolerance:
                    text.append(f"\ntolerance {c.tolerance}", style="dim")
                g.add(str(c.id), c.name, status(c), text, end_section=c.id == 10)
            else:
                g.add(str(c.id), c.name, status(c), c.measured, c.tolerance, end_section=c.id == 10)
        return g

    def fallback(width: int) -> Any:
        return records(title, [(Text(f"{c.id}. ").append_text(status(c)).append(f" {c.name}"),
                                [c.measured, f"tolerance {c.tolerance}" if c.tolerance else ""])
                               for c in report.checks], width)

    return Fitted([grid(False, False), grid(True, False), grid(True, True)], fallback)


def verify_table(report: Report, title: str = "") -> Group:
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = [_verify_fitted(report, title or f"Checklist for {report.config.name}")]
    for c in report.checks:
        if c.passed is False and c.hint:
            parts.append(Indented(f"{c.id}. hint: {c.hint}", "red"))
    parts += [Text(f"error {n}: {e}", style="bold magenta") for n, e in enumerate(report.errors, 1)]
    parts += [Text(f"note: {n}", style="dim") for n in report.notes]
    parts.append(Text(verify_summary(report), style="bold green" if report.passed else "bold red"))
    return Group(*parts)


def verify_tables(reports: Sequence[Report], what: str = "") -> Group:
    """One config's checklist: a table per kind of layer verified, each titled with its layer, and when
    there are several a closing line for them all."""
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = []
    for r in reports:
        where = f", layer {r.layer} ({r.kind})" if r.layer is not None and r.kind else ""
        parts.append(verify_table(r, f"Checklist for {r.config.name}{where}{what}"))
    if len(reports) > 1:
        passed = all(r.passed for r in reports)
        layers = ", ".join(str(r.layer) for r in reports)
        parts.append(Text(f"{'PASS' if passed else 'FAIL'} {reports[0].config.name}: one layer of each of its "
                          f"{len(reports)} kinds verified (layers {layers})", style="bold green" if passed else "bold red"))
    return Group(*parts)


def verify_summaries(reports: Sequence[Report]) -> Group:
    """One summary line per config, then its failures and notes."""
    from rich.console import Group
    from rich.text import Text

    lines = []
    for r in reports:
        lines.append(Text(verify_summary(r), style="green" if r.passed else "bold red"))
        lines += [Indented(f"{c.id}. {c.name}: {c.measured}" + (f" — hint: {c.hint}" if c.hint else ""))
                  for c in r.checks if c.passed is False]
        lines += [Indented(f"error {n}: {e}", "bold magenta") for n, e in enumerate(r.errors, 1)]
        lines += [Indented(f"note: {note}", "dim") for note in r.notes]
    return Group(*lines)


Matrix = tuple[Any, Sequence[tuple["Mutant", "Report"]], dict[str, str]]  # (layer, rows, not applicable)


def mutants_json(matrices: Sequence[Matrix], config: Any) -> dict[str, Any]:
    """--mutants: every seeded bug run on each kind of layer verified, each row naming its layer."""
    return versioned({
        "config": config.name,
        "passed": all(not r.passed for _, rows, _ in matrices for _, r in rows),
        "layers": [{"layer": layer, "kind": _kind(config, layer)} for layer, _, _ in matrices],
        "not_applicable": [{"name": name, "layer": layer, "reason": why}
                           for layer, _, skipped in matrices for name, why in skipped.items()],
        "mutants": [{"name": m.name, "layer": layer, "description": m.description, "expected": list(m.expected),
                     "caught_by": [c.id for c in r.checks if c.passed is False]}
                    for layer, rows, _ in matrices for m, r in rows],
    })


def list_mutants_json(mutants: Sequence[Mutant]) -> dict[str, Any]:
    return versioned({"mutants": [{"name": m.name, "description": m.description, "expected": list(m.expected),
                                   "backward": m.backward} for m in mutants]})


def _kind(config: Any, layer: Any) -> str:
    return config.group_of(layer).describe() if layer is not None and config.layers_differ else ""


def mutants_matrices(matrices: Sequence[Matrix], config: Any) -> Group:
    """One matrix per kind of layer, titled with its layer when the layers differ."""
    from rich.console import Group

    return Group(*[mutants_matrix(rows, skipped, f"layer {layer} ({_kind(config, layer)})" if _kind(config, layer)
                                  else "") for layer, rows, skipped in matrices])


def mutants_matrix(rows: Sequence[tuple[Mutant, Report]], skipped: dict[str, str], where: str = "") -> Group:
    from rich.console import Group
    from rich.text import Text

    from blockcli.verify import SHORT_NAMES

    ids = [c.id for c in rows[0][1].checks] if rows else []
    title = ("Seeded bugs × checks" + (f" on {where}" if where else "")
             + " (✗ = the check failed, i.e. caught the bug; the checks are named below)")

    def cells(mutant: Mutant, report: Report) -> list[Any]:
        status = {c.id: c.passed for c in report.checks}
        return [Text("✗", style="bold red" if i in mutant.expected else "red") if status[i] is False
                else Text("·", style="dim") for i in ids]

    def caught(report: Report) -> Text:
        return Text("yes" if not report.passed else "NO", style="green" if not report.passed else "bold red")

    def grid(compact: bool, stacked: bool) -> Grid:
        heads = [f"{i // 10 or ''}\n{i % 10}" if stacked else str(i) for i in ids]
        g = Grid(title, [Column("seeded bug", wrap=False)] + [Column(h, "center", False) for h in heads]
                 + [Column("caught", wrap=False)], compact=compact)
        for mutant, report in rows:
            g.add(mutant.name, *cells(mutant, report), caught(report))
        return g

    def fallback(width: int) -> Any:
        return records(title, [(Text(f"{m.name}: ").append_text(caught(r)),
                                ["caught by " + (", ".join(str(c.id) for c in r.checks if c.passed is False) or
                                                 "no check")]) for m, r in rows], width)

    legend = Flow([Text(f"{i} {SHORT_NAMES[i]}") for i in ids], prefix="checks: ", separator=" · ")
    missed = [m.name for m, r in rows if r.passed]
    verdict = (Text(f"every seeded bug is caught ({len(rows)} bugs)", style="bold green") if not missed
               else Text(f"NOT caught: {', '.join(missed)}", style="bold red"))
    notes = [Text(f"not applicable to this config: {name} ({why})", style="dim") for name, why in skipped.items()]
    matrix = Fitted([grid(False, False), grid(True, False), grid(True, True)], fallback)
    return Group(matrix, legend, *notes, verdict)



# ----------------------------------------------------------------------------- train


def train_json(name: str, steps: Sequence[Any], vocab_size: int, expect_loss: float | None,
               saved: Sequence[str]) -> dict[str, Any]:
    final = steps[-1].loss
    return versioned({
        "config": name, "steps": [{"step": s.step, "loss": s.loss, "grad_norm": s.grad_norm} for s in steps],
        "initial_loss": steps[0].loss, "final_loss": final, "ln_vocab": math.log(vocab_size),
        "expect_loss": expect_loss, "passed": expect_loss is None or final < expect_loss, "saved": list(saved)})


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
                     + (f"; the {len(rep.indexer)} of the sparse-attention indexer got none: it runs without gradients"
                        if rep.indexer else "")
                     + (f"; the {len(rep.skipped)} of the skipped cross-attention layers got none" if rep.skipped
                        else "")
                     + ("" if rep.gradients + len(rep.unrouted) + len(rep.indexer) + len(rep.skipped) == rep.parameters
                        else "; some others got none"))
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
            "unrouted": rep.unrouted, "indexer": rep.indexer, "skipped": rep.skipped,
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


# ----------------------------------------------------------------------------- roofline (count --gpu, trace --gpu)

ROOFLINE_HEADERS = ("roofline", "FLOPs", "bytes moved", "FLOP/byte", "bound", "time ≥", "tokens/s ≤")


def seconds_text(s: float) -> str:
    """3.14e-6 → '3.14 µs'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns" if s else "0 s"


def _rate(x: float) -> str:
    return human(x) if x >= 1000 else f"{x:.3g}"


def _intensity(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def _phase_json(p: Any) -> dict[str, Any]:
    return {"flops": p.flops, "bytes": dict(p.bytes), "bytes_moved": p.bytes_moved,
            "arithmetic_intensity": number(p.intensity), "ridge_intensity": p.ridge, "bound": p.bound,
            "compute_seconds": p.compute_seconds, "memory_seconds": p.memory_seconds, "seconds": p.seconds,
            "tokens": p.tokens, "tokens_per_second": p.tokens_per_second}


def gpu_json(gpu: Any) -> dict[str, Any]:
    return {"name": gpu.name, "vendor": gpu.vendor, "catalogue": gpu.catalogue, "peak_flops": dict(gpu.peak_flops),
            "memory_bytes": gpu.memory_bytes, "bandwidth_bytes_per_second": gpu.bandwidth,
            "sources": list(gpu.sources)}


def roofline_json(r: Any) -> dict[str, Any]:
    from blockcli.roofline import LEAVES_OUT

    data = {"gpu": gpu_json(r.gpu), "dtype": r.dtype, "peak_flops": r.prefill.peak,
            "prefill": _phase_json(r.prefill), "decode_step": _phase_json(r.decode),
            "gpus_needed": {"budget_bytes": r.budget, "inference": r.inference_gpus,
                            **({"training": r.training_gpus} if r.training is not None else {})},
            "estimate": "roofline bounds: time is a lower bound, tokens/s an upper bound",
            "leaves_out": LEAVES_OUT, "notes": list(r.notes)}
    if r.training is not None:
        t = r.training
        data["training"] = {"mfu": t.mfu, "devices": t.devices, "dtype": r.training_dtype, "peak_flops": t.peak,
                            "model_flops": t.model_flops, "tokens": t.tokens, "seconds_per_step": t.seconds,
                            "tokens_per_second": t.tokens_per_second}
    return data


def _roofline_rows(r: Any) -> list[list[str]]:
    inf = r.prefill
    rows = [[f"prefill {inf.tokens:,} tokens (time to first token)", human(inf.flops), human_bytes(inf.bytes_moved),
             _intensity(inf.intensity), inf.bound, seconds_text(inf.seconds), _rate(inf.tokens_per_second)],
            [f"decode step, {r.decode.tokens} token{'s' if r.decode.tokens > 1 else ''}", human(r.decode.flops),
             human_bytes(r.decode.bytes_moved), _intensity(r.decode.intensity), r.decode.bound,
             seconds_text(r.decode.seconds), _rate(r.decode.tokens_per_second)]]
    if r.training is not None:
        t = r.training
        rows.append([f"training step at MFU {t.mfu:g}, {t.devices} device{'s' if t.devices > 1 else ''}",
                     human(t.model_flops), "", "", "MFU", seconds_text(t.seconds), _rate(t.tokens_per_second)])
    return rows


def roofline_lines(r: Any) -> list[str]:
    from blockcli.roofline import LEAVES_OUT

    g = r.gpu
    src = "; ".join(s.get("document", "") for s in g.sources) or "given in the file"
    peaks = ", ".join(f"{k} {v / 1e12:g}" for k, v in g.peak_flops.items())
    parts = lambda p: ", ".join(f"{k.replace('_', ' ')} {human_bytes(v)}" for k, v in p.bytes.items() if v)  # noqa: E731
    lines = [
        f"device: {g.name}" + (f" ({g.vendor})" if g.vendor else "") + f": dense peak TFLOP/s {peaks}; "
        f"{g.memory_bytes / 1e9:g} GB at {g.bandwidth / 1e12:g} TB/s; source: {src}",
        f"roofline at {r.dtype} ({r.prefill.peak / 1e12:g} TFLOP/s): time = max(FLOPs / peak, bytes / bandwidth), "
        f"the ridge at {r.prefill.ridge:.3g} FLOP/byte; prefill FLOPs causal",
        f"prefill bytes: {parts(r.prefill)}; decode step bytes: {parts(r.decode)}",
        f"GPUs needed for {human_bytes(r.budget)} ({r.budget:,} bytes) each: {r.inference_gpus} to serve (memory pooled evenly)"
        + ("" if r.training is None else
           f"; {r.training_gpus} to train under ZeRO-3 (states split, one micro-batch's activations and the "
           f"gathered module on each)" if r.training_gpus is not None else
           "; training fits on no number of them: one micro-batch's activations and the gathered module exceed it"),
        *([f"training at MFU {r.training.mfu:g} of {r.training_dtype}'s {r.training.peak / 1e12:g} TFLOP/s: the step's "
           f"model FLOPs (forward + backward, full score table, no recomputation) / (devices × peak × MFU)"]
          if r.training is not None else []),
        f"estimates: time a lower bound, tokens/s an upper bound; {LEAVES_OUT}",
        *r.notes,
    ]
    return lines


def roofline_table(r: Any) -> Group:
    from rich.console import Group
    from rich.text import Text

    title = f"Roofline on {r.gpu.name} (bounds, not measurements)"
    rows = _roofline_rows(r)
    grid = Grid(title, [Column(ROOFLINE_HEADERS[0], comfort=20)]
                + [Column(h, "right", False) for h in ROOFLINE_HEADERS[1:]])
    for row in rows:
        grid.add(*row)
    fitted = Fitted([grid], lambda width: records(title, [(row[0], [f"{h} {c}" for h, c in
                                                                    zip(ROOFLINE_HEADERS[1:], row[1:]) if c])
                                                          for row in rows], width))
    return Group(fitted, Text("\n".join(roofline_lines(r))))


def roofline_markdown(r: Any) -> str:
    return (f"\n**Roofline on {r.gpu.name} (bounds, not measurements)**\n\n"
            + markdown_table(ROOFLINE_HEADERS, _roofline_rows(r), "lrrrlrr")
            + "\n" + "\n".join(f"- {line}" for line in roofline_lines(r)) + "\n")


def trace_roofline_rows(rows: Sequence[OpRow], gpu: Any, dtype: str, itemsize: int) -> list[Any]:
    from blockcli.roofline import op_time

    return [(r, op_time(r.kind, r.input_shapes, r.sources, r.output_shape, r.params, r.flops, itemsize, gpu, dtype))
            for r in rows]


def trace_roofline_json(timed: list[Any], gpu: Any, dtype: str) -> dict[str, Any]:
    from blockcli.roofline import LEAVES_OUT

    return {"gpu": gpu_json(gpu), "dtype": dtype,
            "ops": [{"step": r.step, "key": r.key, "read_bytes": t.read, "written_bytes": t.written,
                     "arithmetic_intensity": t.intensity, "bound": t.bound, "seconds": t.seconds} for r, t in timed],
            "seconds": sum(t.seconds * r.repeat for r, t in timed),
            "estimate": "roofline bounds per operation: each time a lower bound", "leaves_out": LEAVES_OUT}


def trace_roofline_table(timed: list[Any], gpu: Any, dtype: str) -> Group:
    from rich.console import Group
    from rich.text import Text

    from blockcli.roofline import LEAVES_OUT

    headers = ("#", "operation", "read", "written", "FLOP/byte", "bound", "time ≥")
    title = f"Roofline per operation on {gpu.name}, {dtype} (bounds, not measurements)"
    grid = Grid(title, [Column(headers[0], "right", False), Column(headers[1], comfort=18)]
                + [Column(h, "right", False) for h in headers[2:]])
    cells = [[str(r.step), r.op + (f" ×{r.repeat}, per layer" if r.repeat > 1 else ""), human_bytes(t.read),
              human_bytes(t.written), _intensity(t.intensity), t.bound, seconds_text(t.seconds)] for r, t in timed]
    for row in cells:
        grid.add(*row)
    total = sum(t.seconds * r.repeat for r, t in timed)
    fitted = Fitted([grid], lambda width: records(title, [(f"{c[0]} {c[1]}", [" · ".join(c[2:])]) for c in cells],
                                                  width))
    return Group(fitted, Text(f"sum of the operations' times: {seconds_text(total)} (a lower bound: every operation "
                              f"its own kernel, inputs read whole and the output written; reshapes are views); "
                              f"{LEAVES_OUT}"))


def solve_line(option: str, solved: Any, budget_text: str) -> str:
    """One line for `count --solve`: the answer, its memory, and the memory one past it (or the cap)."""
    fits = f"--{option} {solved.answer:,} fits --max-memory {budget_text}: {human_bytes(solved.memory_bytes)} " \
           f"({solved.memory_bytes:,} bytes)"
    if solved.next_memory_bytes is None:
        return fits + f"; --{option} {solved.answer + 1:,} is past " + (
            f"the model's learned positions ({solved.cap:,})" if solved.cap is not None else "the search's limit")
    return fits + f"; --{option} {solved.answer + 1:,} needs {human_bytes(solved.next_memory_bytes)} " \
                  f"({solved.next_memory_bytes:,} bytes)"


@dataclass(frozen=True)
class SweepRow:
    value: Any  # a T, a B or a dtype
    memory_bytes: int  # what --max-memory checks at this value
    roof: Any = None  # the roofline on --gpu


def _sweep_rows(axis: str, rows: Sequence[SweepRow], budget: int | None, ranked: bool, training: bool):
    what = ("most loaded device " if ranked else "") + ("training memory" if training else "inference memory")
    headers = [axis, what, "bytes"] + (["fits"] if budget is not None else [])
    timed = any(r.roof is not None for r in rows)
    if timed:
        headers += (["step (s)", "tokens/s"] if training else ["prefill (s)", "decode (s/token)", "tokens/s"])
    body = []
    for r in rows:
        row = [r.value, human_bytes(r.memory_bytes), r.memory_bytes]
        if budget is not None:
            row.append("yes" if r.memory_bytes <= budget else "no")
        if timed:
            t = r.roof.training if training else None
            row += ([f"{t.seconds:.4g}", f"{t.tokens_per_second:.4g}"] if t is not None else
                    [f"{r.roof.prefill.seconds:.4g}", f"{r.roof.decode.seconds:.4g}",
                     f"{r.roof.decode.tokens_per_second:.4g}"])
        body.append(row)
    return headers, body


def sweep_markdown(axis: str, rows: Sequence[SweepRow], budget: int | None, ranked: bool, training: bool) -> str:
    headers, body = _sweep_rows(axis, rows, budget, ranked, training)
    return markdown_table(headers, [[f"{c:,}" if isinstance(c, int) else c for c in row] for row in body],
                          "r" * len(headers))


def sweep_csv(axis: str, rows: Sequence[SweepRow], budget: int | None, ranked: bool, training: bool) -> str:
    return csv_text(*_sweep_rows(axis, rows, budget, ranked, training))


def sweep_json(axis: str, rows: Sequence[SweepRow], budget: int | None, ranked: bool, training: bool) -> str:
    return to_json({"schema_version": SCHEMA_VERSION, "sweep": axis, "max_memory_bytes": budget, "rows": [
        {axis: r.value, "memory_bytes": r.memory_bytes,
         **({"fits": r.memory_bytes <= budget} if budget is not None else {}),
         **({"roofline": roofline_json(r.roof)} if r.roof is not None else {})} for r in rows]})
