"""Plots as inline SVG strings: a line chart over categories (levels) and
overlaid histograms. No JavaScript, no external files: hovering a point shows
its value through SVG <title>.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
DASHES = {"solid": "", "dash": "6 4", "dot": "2 3"}
W, H = 480, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 18, 52, 46


@dataclass
class Series:
    name: str
    values: Sequence[float | None]  # one per category (line) or raw samples (histogram)
    color: str
    dash: str = "solid"


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(ticks[-1] + step)
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks on a short log axis; only powers of ten on a long one."""
    out = []
    steps = (1, 2, 5) if math.log10(hi / lo) <= 3 else (1,)
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in steps:
            v = m * 10.0**e
            if lo <= v <= hi:
                out.append(v)
    return out or [lo, hi]


def fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 10000:
        return f"{v / 1000:.0f}k"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


def _frame(title: str, x_title: str, y_title: str, series: Sequence[Series]) -> list[str]:
    out = [
        f'<svg class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img">',
        f"<title>{escape(title)}</title>",
        f'<text x="{W / 2}" y="16" class="t">{escape(title)}</text>',
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 6}" class="ax">{escape(x_title)}</text>',
        f'<text transform="translate(14 {(TOP + H - BOTTOM) / 2}) rotate(-90)" class="ax">'
        f"{escape(y_title)}</text>",
    ]
    x: float = LEFT
    y: float = 30
    for s in series:  # the legend, wrapped under the title
        width = 26 + 6.2 * len(s.name)
        if x + width > W - RIGHT:
            x, y = LEFT, y + 14
        dash = f' stroke-dasharray="{DASHES[s.dash]}"' if DASHES[s.dash] else ""
        out.append(
            f'<line x1="{x}" y1="{y}" x2="{x + 18}" y2="{y}" stroke="{s.color}" '
            f'stroke-width="2.5"{dash}/><text x="{x + 22}" y="{y + 4}" class="lg">'
            f"{escape(s.name)}</text>"
        )
        x += width + 10
    return out


def _y_axis(out: list[str], ticks: list[float], ys: Callable[[float], float]) -> None:
    for t in ticks:
        y = ys(t)
        out.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="yt">{fmt(t)}</text>'
        )


def line_chart(
    title: str,
    categories: Sequence[str],
    series: Sequence[Series],
    x_title: str,
    y_title: str,
) -> str:
    """One line per series across equally spaced categories (the levels)."""
    vals = [v for s in series for v in s.values if v is not None and math.isfinite(v)]
    ticks = nice_ticks(0.0, max(vals) if vals else 1.0)
    top = ticks[-1] or 1.0
    n = len(categories)
    span = W - LEFT - RIGHT

    def xs(i: int) -> float:
        return LEFT + span * (i + 0.5) / n

    def ys(v: float) -> float:
        return H - BOTTOM - (H - BOTTOM - TOP) * v / top

    out = _frame(title, x_title, y_title, series)
    _y_axis(out, ticks, ys)
    for i, c in enumerate(categories):
        out.append(f'<text x="{xs(i):.1f}" y="{H - BOTTOM + 16}" class="xt">{escape(c)}</text>')
    for s in series:
        pts = [
            (xs(i), ys(v), v, categories[i])
            for i, v in enumerate(s.values)
            if v is not None and math.isfinite(v)
        ]
        dash = f' stroke-dasharray="{DASHES[s.dash]}"' if DASHES[s.dash] else ""
        if len(pts) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in pts)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{s.color}" '
                f'stroke-width="2.2"{dash}/>'
            )
        for x, y, v, c in pts:
            out.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{s.color}">'
                f"<title>{escape(s.name)} at {escape(c)}: {v:.4g}</title></circle>"
            )
    out.append("</svg>")
    return "".join(out)


def histogram(title: str, series: Sequence[Series], x_title: str, bins: int = 40) -> str:
    """Overlaid distributions of raw samples, as share of each series' samples
    per bin; log-spaced bins when the samples span more than 20×."""
    samples = [v for s in series for v in s.values if v is not None and math.isfinite(v)]
    out = _frame(title, x_title, "share of samples (%)", series)
    if not samples:
        out.append(f'<text x="{W / 2}" y="{H / 2}" class="t">no samples</text></svg>')
        return "".join(out)
    lo, hi = min(samples), max(samples)
    positive = [v for v in samples if v > 0]
    log = bool(positive) and lo >= 0 and hi / min(positive) > 20
    if log:  # zeros (events that arrived in one read) fall in the first bin
        lo = min(positive)
        a, b = math.log10(lo), math.log10(hi)
    else:
        a, b = lo, hi if hi > lo else lo + 1
    if b <= a:
        b = a + 1

    def pos(v: float) -> float:
        if log and v <= 0:
            return 0.0
        return ((math.log10(v) if log else v) - a) / (b - a)

    counts: list[list[float]] = []
    for s in series:
        hits = [0] * bins
        vs = [v for v in s.values if v is not None and math.isfinite(v)]
        for v in vs:
            hits[min(bins - 1, max(0, int(pos(v) * bins)))] += 1
        counts.append([100 * k / len(vs) if vs else 0 for k in hits])
    ticks = nice_ticks(0.0, max(max(c) for c in counts) or 1.0)
    top = ticks[-1] or 1.0
    span = W - LEFT - RIGHT

    def ys(v: float) -> float:
        return H - BOTTOM - (H - BOTTOM - TOP) * v / top

    _y_axis(out, ticks, ys)
    xticks = log_ticks(lo, hi) if log else nice_ticks(a, b)
    for t in xticks:
        p = pos(t)
        if 0 <= p <= 1:
            out.append(
                f'<text x="{LEFT + span * p:.1f}" y="{H - BOTTOM + 16}" class="xt">{fmt(t)}</text>'
            )
    base = ys(0)
    for s, c in zip(series, counts, strict=True):
        pts = [f"{LEFT:.1f},{base:.1f}"]
        for i, share in enumerate(c):
            x0, x1 = LEFT + span * i / bins, LEFT + span * (i + 1) / bins
            pts.append(f"{x0:.1f},{ys(share):.1f} {x1:.1f},{ys(share):.1f}")
        pts.append(f"{LEFT + span:.1f},{base:.1f}")
        dash = f' stroke-dasharray="{DASHES[s.dash]}"' if DASHES[s.dash] else ""
        out.append(
            f'<polygon points="{" ".join(pts)}" fill="{s.color}" fill-opacity="0.18" '
            f'stroke="{s.color}" stroke-width="1.6"{dash}/>'
        )
    out.append("</svg>")
    return "".join(out)
