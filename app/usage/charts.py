"""Server-drawn charts as shapes the templates turn into inline SVG: no script, no chart
library, and colours from CSS classes (so both themes apply; the page's CSP forbids
inline styles). Shapes live in a fixed viewBox stretched to the container's width, and
all text is HTML beside the SVG, so nothing shrinks to unreadable on a 390 px phone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.usage.report import Row

WIDTH = 600.0  # the viewBox of a time series; bars use 0..100
HEIGHT = 160.0
STACKED = ("answered", "declined", "withheld", "failed", "stopped")


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    kind: str  # the CSS class suffix: an outcome
    title: str  # the hover text


@dataclass(frozen=True)
class Columns:
    """Questions per bucket, stacked by outcome."""

    rects: list[Rect]
    top: int  # the value at the top of the chart
    first: str
    last: str


@dataclass(frozen=True)
class Lines:
    """Time to first token and total time (p95) per bucket, as polyline points."""

    ttft: str
    total: str
    top_s: float
    first: str
    last: str


def columns(series: Sequence[Row]) -> Columns:
    top = _nice(max((row.questions for row in series), default=0))
    step = WIDTH / max(1, len(series))
    gap = min(2.0, step * 0.2)
    rects: list[Rect] = []
    for index, row in enumerate(series):
        y = HEIGHT
        for kind in STACKED:
            value = getattr(row, kind)
            if not value:
                continue
            height = HEIGHT * value / top
            y -= height
            title = f"{row.label}: {value} {kind} of {row.questions} questions"
            rects.append(Rect(index * step + gap / 2, y, step - gap, height, kind, title))
    first, last = (series[0].label, series[-1].label) if series else ("", "")
    return Columns(rects, top, first, last)


def lines(series: Sequence[Row]) -> Lines:
    values = [v for row in series for v in (row.ttft_p95_ms, row.total_p95_ms) if v is not None]
    top_ms = _nice(int(max(values, default=0.0)) + 1)
    step = WIDTH / max(1, len(series))

    def points(attribute: str) -> str:
        found = []
        for index, row in enumerate(series):
            value = getattr(row, attribute)
            if value is not None:
                x = index * step + step / 2
                found.append(f"{x:.1f},{HEIGHT - HEIGHT * value / top_ms:.1f}")
        return " ".join(found)

    first, last = (series[0].label, series[-1].label) if series else ("", "")
    return Lines(points("ttft_p95_ms"), points("total_p95_ms"), top_ms / 1000, first, last)


def bar(row: Row, most: int) -> list[Rect]:
    """One breakdown row as a horizontal bar in a 0..100 × 0..10 viewBox, scaled so the
    largest row of its table fills it."""
    rects: list[Rect] = []
    x = 0.0
    for kind in STACKED:
        value = getattr(row, kind)
        if value:
            width = 100.0 * value / max(1, most)
            rects.append(Rect(x, 0.0, width, 10.0, kind, f"{value} {kind}"))
            x += width
    return rects


def _nice(value: int) -> int:
    """The smallest of 1, 2, 5 × 10ⁿ at or above ``value`` (an axis top)."""
    if value <= 1:
        return 1
    scale = 1
    while True:
        for factor in (1, 2, 5):
            if factor * scale >= value:
                return factor * scale
        scale *= 10
