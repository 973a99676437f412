"""Small inline-SVG charts for the HTML report: line charts on log or linear axes, heatmaps, and the
boxes-and-arrows primitives the block diagram is drawn with. Returns strings.

No plotting library: the report's charts are a few dozen shapes each, and drawing them here keeps the
page byte-for-byte deterministic and free of scripts and fonts (a plotting package embeds its own
metadata, ids and, for SVG text, often paths per glyph). Every chart scales with its container
(`viewBox`, width 100 %), carries a `<title>` for its accessible name, and one `<title>` per mark,
which a browser shows on hover without JavaScript.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

# A palette readable in print and by the common colour-vision deficiencies (Okabe and Ito 2008).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def n(x: float) -> str:
    """A coordinate with at most one decimal, no trailing zeros: stable text for stable bytes."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


@dataclass
class Canvas:
    """An SVG drawing: elements in order, then `render` wraps them in a scalable <svg>."""

    width: float
    height: float
    parts: list[str] = field(default_factory=list)

    def rect(self, x: float, y: float, w: float, h: float, fill: str, title: str = "", cls: str = "",
             stroke: str = "", rx: float = 0) -> None:
        attrs = f'x="{n(x)}" y="{n(y)}" width="{n(w)}" height="{n(h)}" fill="{fill}"'
        if stroke:
            attrs += f' stroke="{stroke}"'
        if rx:
            attrs += f' rx="{n(rx)}"'
        if cls:
            attrs += f' class="{cls}"'
        self.parts.append(f"<rect {attrs}><title>{esc(title)}</title></rect>" if title else f"<rect {attrs}/>")

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = "#555", width: float = 1,
             dash: str = "") -> None:
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<line x1="{n(x1)}" y1="{n(y1)}" x2="{n(x2)}" y2="{n(y2)}" stroke="{stroke}" '
                          f'stroke-width="{n(width)}"{extra}/>')

    def text(self, x: float, y: float, content: object, size: float = 12, anchor: str = "start",
             weight: str = "", fill: str = "#222", cls: str = "", rotate: bool = False) -> None:
        attrs = f'x="{n(x)}" y="{n(y)}" font-size="{n(size)}"'
        if rotate:  # read bottom to top, turned about its anchor
            attrs += f' transform="rotate(-90 {n(x)} {n(y)})"'
        if anchor != "start":
            attrs += f' text-anchor="{anchor}"'
        if weight:
            attrs += f' font-weight="{weight}"'
        if fill != "#222":
            attrs += f' fill="{fill}"'
        if cls:
            attrs += f' class="{cls}"'
        self.parts.append(f"<text {attrs}>{esc(content)}</text>")

    def path(self, d: str, stroke: str = "none", fill: str = "none", width: float = 1, title: str = "",
             dash: str = "") -> None:
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        body = f'<path d="{d}" stroke="{stroke}" fill="{fill}" stroke-width="{n(width)}"{extra}'
        self.parts.append(f"{body}><title>{esc(title)}</title></path>" if title else body + "/>")

    def circle(self, x: float, y: float, r: float, fill: str, title: str = "", stroke: str = "none") -> None:
        body = f'<circle cx="{n(x)}" cy="{n(y)}" r="{n(r)}" fill="{fill}" stroke="{stroke}"'
        self.parts.append(f"{body}><title>{esc(title)}</title></circle>" if title else body + "/>")

    def arrow(self, x1: float, y1: float, x2: float, y2: float, stroke: str = "#444") -> None:
        """A line with a filled head at (x2, y2), drawn without <marker> (ids would clash on a page
        that holds two diagrams)."""
        self.line(x1, y1, x2, y2, stroke, 1.5)
        angle = math.atan2(y2 - y1, x2 - x1)
        left = (x2 - 7 * math.cos(angle - 0.45), y2 - 7 * math.sin(angle - 0.45))
        right = (x2 - 7 * math.cos(angle + 0.45), y2 - 7 * math.sin(angle + 0.45))
        self.path(f"M{n(x2)} {n(y2)}L{n(left[0])} {n(left[1])}L{n(right[0])} {n(right[1])}Z", fill=stroke)

    def render(self, label: str, cls: str = "chart") -> str:
        return (f'<svg class="{cls}" viewBox="0 0 {n(self.width)} {n(self.height)}" role="img"><title>{esc(label)}</title>' + "".join(self.parts) + "</svg>")


def mix(colour: str, toward: str, t: float) -> str:
    """`colour` moved a fraction t ∈ [0, 1] toward `toward`, both #rrggbb."""
    a = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(toward[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))


# ----------------------------------------------------------------------------- lines


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[tuple[float, float], ...]
    colour: str
    dash: str = ""


def _log_ticks(lo: float, hi: float, base: int = 10) -> list[float]:
    """Powers of `base` within [lo, hi], every k-th so that at most 8 show (base 10 falls back to powers
    of two when the range spans less than two decades)."""
    if base == 10 and hi / lo < 100:
        base = 2
    first, last = math.floor(math.log(lo, base) + 1e-9), math.ceil(math.log(hi, base) - 1e-9)
    ticks = [float(base) ** k for k in range(first, last + 1) if lo * (1 - 1e-9) <= float(base) ** k <= hi * (1 + 1e-9)]
    step = max(1, math.ceil(len(ticks) / 8))
    return ticks[::step]


def _linear_ticks(lo: float, hi: float) -> list[float]:
    span = hi - lo or 1.0
    raw = span / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]


def line_chart(series: Sequence[Series], label: str, x_text: Callable[[float], str], y_text: Callable[[float], str],
               x_name: str, y_name: str, log_x: bool = True, log_y: bool = True, width: float = 480,
               height: float = 280, x_base: int = 10, y_base: int = 10) -> str:
    """Lines through each series' points, with axes, ticks (on a log axis at powers of x_base / y_base:
    2 for bytes and token counts), a legend, and each point's exact values on hover."""
    left, right, top, bottom = 70, 24, 12, 46 + 18 * math.ceil(len(series) / 2)
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points if not log_y or y > 0]
    canvas = Canvas(width, height)
    if not xs or not ys:
        canvas.text(width / 2, height / 2, "no data", anchor="middle")
        return canvas.render(label)
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = (min(ys), max(ys)) if log_y else (min(0.0, min(ys)), max(ys))
    if log_y and y_hi / y_lo < 10:  # a flat line: a decade around it, so it does not fill the plot
        y_lo, y_hi = y_lo / math.sqrt(10), y_hi * math.sqrt(10)
    if y_hi == y_lo:
        y_hi = y_lo + 1
    if log_y:  # a little room above and below, so the extreme points show whole
        y_lo, y_hi = y_lo / (y_hi / y_lo) ** 0.03, y_hi * (y_hi / y_lo) ** 0.03
    else:
        y_hi += 0.04 * (y_hi - y_lo)
    if x_hi == x_lo:
        x_hi = x_lo * 2 if log_x else x_lo + 1
    plot_w, plot_h = width - left - right, height - top - bottom

    def fx(x: float) -> float:
        t = (math.log(x) - math.log(x_lo)) / (math.log(x_hi) - math.log(x_lo)) if log_x else (x - x_lo) / (x_hi - x_lo)
        return left + t * plot_w

    def fy(y: float) -> float:
        t = (math.log(y) - math.log(y_lo)) / (math.log(y_hi) - math.log(y_lo)) if log_y else (y - y_lo) / (y_hi - y_lo)
        return top + (1 - t) * plot_h

    canvas.rect(left, top, plot_w, plot_h, "#fbfbfb", stroke="#ccc")
    for tick in (_log_ticks(y_lo, y_hi, y_base) if log_y else _linear_ticks(y_lo, y_hi)):
        canvas.line(left, fy(tick), left + plot_w, fy(tick), "#e4e4e4")
        canvas.text(left - 6, fy(tick) + 4, y_text(tick), size=11, anchor="end", fill="#444")
    for tick in (_log_ticks(x_lo, x_hi, x_base) if log_x else _linear_ticks(x_lo, x_hi)):
        canvas.line(fx(tick), top, fx(tick), top + plot_h, "#e4e4e4")
        canvas.text(fx(tick), top + plot_h + 16, x_text(tick), size=11, anchor="middle", fill="#444")
    canvas.text(left + plot_w / 2, top + plot_h + 32, x_name, size=12, anchor="middle")
    canvas.text(14, top + plot_h / 2, y_name, size=12, anchor="middle", rotate=True)
    for s in series:
        shown = [(x, y) for x, y in s.points if not log_y or y > 0]
        if not shown:
            continue
        d = "M" + "L".join(f"{n(fx(x))} {n(fy(y))}" for x, y in shown)
        canvas.path(d, stroke=s.colour, width=2, dash=s.dash)
        for x, y in shown:
            canvas.circle(fx(x), fy(y), 3, s.colour, f"{s.name}: {y_text(y)} at {x_name} {x_text(x)}")
    for i, s in enumerate(series):  # the legend, two to a row, under the axis name
        lx, ly = 20 + (i % 2) * (width / 2), top + plot_h + 50 + 18 * (i // 2)
        canvas.line(lx, ly - 4, lx + 22, ly - 4, s.colour, 2.5, s.dash)
        canvas.text(lx + 28, ly, s.name, size=12)
    return canvas.render(label)


# ----------------------------------------------------------------------------- heatmaps


MASKED = "#e9e9e9"  # a pair the mask removes (weight exactly 0)
HEAT_LOW, HEAT_HIGH = "#ffffff", "#08306b"


def heat_colour(weight: float) -> str:
    """White (0) to dark blue (1) on a square-root scale, so small weights still show."""
    return mix(HEAT_LOW, HEAT_HIGH, math.sqrt(max(0.0, min(1.0, weight))))


def heatmap(weights: Sequence[Sequence[float]], label: str, cell: float = 10) -> str:
    """A (T, T) attention map: row t = query, column s = key. Exact zeros (masked pairs, and keys
    outside a window) are one grey path; every other cell a rect whose hover text is its weight."""
    T = len(weights)
    margin = 26
    canvas = Canvas(margin + T * cell + 4, margin + T * cell + 4)
    masked = []
    for t, row in enumerate(weights):
        for s, w in enumerate(row):
            x, y = margin + s * cell, margin + t * cell
            if w == 0.0:
                masked.append(f"M{n(x)} {n(y)}h{n(cell)}v{n(cell)}h-{n(cell)}Z")
            else:
                canvas.rect(x, y, cell, cell, heat_colour(float(w)), f"query {t}, key {s}: {float(w):.4f}")
    if masked:
        canvas.path("".join(masked), fill=MASKED, title="masked: weight exactly 0")
    canvas.rect(margin, margin, T * cell, T * cell, "none", stroke="#999")
    step = max(1, T // 6)
    for i in range(0, T, step):
        canvas.text(margin + i * cell + cell / 2, margin - 6, i, size=9, anchor="middle", fill="#555")
        canvas.text(margin - 4, margin + i * cell + cell * 0.8, i, size=9, anchor="end", fill="#555")
    canvas.text(margin + T * cell, 10, "key →", size=9, anchor="end", fill="#555")
    canvas.text(9, margin + T * cell / 2, "query ↓", size=9, anchor="middle", fill="#555", rotate=True)
    return canvas.render(label, "heatmap")
