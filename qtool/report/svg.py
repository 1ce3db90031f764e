"""Hand-written inline SVG charts for the HTML page: bars, a line along the graph, histograms and
a strip of operators. Pure functions from numbers and labels to SVG text; colours come from CSS
classes the page defines, every label is escaped and every mark carries a tooltip (`<title>`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from qtool.display import printable

WIDTH = 760
LABEL_CHARS = 38  # longer labels are shortened on the chart (whole in the tooltip and tables)
CHAR_WIDTH = 7.0  # px per character of the 12 px sans-serif labels, generously


def text(value: object) -> str:
    """Any value as HTML/SVG text: on one line (control characters and lone surrogates shown as
    escapes, so the page is valid UTF-8 and two names never look the same), then escaped."""
    return html.escape(printable(str(value)), quote=True)


def short(label: str, limit: int = LABEL_CHARS) -> str:
    """`label` cut to `limit` characters, the last one an ellipsis when it is cut."""
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _n(value: float) -> str:
    """A coordinate: one decimal is finer than a pixel."""
    return f"{value:.1f}"


def number(value: float, scale: float = 0.0) -> str:
    """A value on an axis or in a caption: 4 significant digits, and 0 for a value too small to
    tell from 0 next to `scale` (a range end of 1e-44 beside one of 2.5)."""
    return "0" if abs(value) < abs(scale) * 1e-6 else f"{value:.4g}"


@dataclass(frozen=True)
class Line:
    """A reference value drawn across a chart (a target, the worst output)."""

    value: float
    label: str  # a word or two, shown beside the line; the value goes in its tooltip
    css: str = "reference"

    @property
    def tooltip(self) -> str:
        """The hover text: the label and the value in dB."""
        return f"{self.label}: {self.value:.1f} dB"


@dataclass(frozen=True)
class Mark:
    """A second value on a bar (a remedy's result), drawn as a diamond."""

    value: float | None  # None: exact
    label: str


@dataclass(frozen=True)
class Bar:
    """One bar of a bar chart: an SQNR (None: exact), its hover text, CSS class and marks."""

    label: str
    value: float | None  # None: exact (infinite SQNR)
    tooltip: str
    css: str
    marks: Sequence[Mark] = field(default_factory=tuple)


@dataclass(frozen=True)
class Point:
    """One point of a line along the graph: an SQNR (None: exact), its hover text and CSS class."""

    value: float | None  # None: exact
    tooltip: str
    css: str


def _step(span: float, count: int = 6) -> float:
    """A 1, 2 or 5 times a power of ten step giving about `count` ticks over `span`."""
    raw = span / count if span > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _domain(values: Sequence[float]) -> tuple[float, float, float]:
    """(low, high, tick step) covering `values` and 0, on tick boundaries."""
    low, high = min([0.0, *values]), max([10.0, *values])
    step = _step(high - low)
    return math.floor(low / step) * step, math.ceil(high / step) * step, step


def _ticks(low: float, high: float, step: float) -> list[float]:
    count = round((high - low) / step)
    return [low + i * step for i in range(count + 1)]


class _Axis:
    """A linear map from values to pixels."""

    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        self.low, self.high, self.start, self.end = low, high, start, end

    def __call__(self, value: float) -> float:
        span = self.high - self.low
        fraction = (value - self.low) / span if span else 0.5
        return self.start + fraction * (self.end - self.start)


def _svg(width: float, height: float, body: list[str], label: str, css: str = "chart") -> str:
    return (
        f'<svg class="{css}" viewBox="0 0 {_n(width)} {_n(height)}" role="img" '
        f'aria-label="{text(label)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{text(label)}</title>{''.join(body)}</svg>"
    )


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def bar_chart(bars: Sequence[Bar], label: str, lines: Sequence[Line] = (), unit: str = "dB") -> str:
    """Horizontal bars, one per row, with their value at the end; an exact value (None) fills
    the row and reads "exact"."""
    longest = max((len(short(b.label)) for b in bars), default=8)
    left = min(12 + CHAR_WIDTH * longest, 290)
    right = WIDTH - 70
    row, top = 22, 6
    values = _finite([b.value for b in bars] + [m.value for b in bars for m in b.marks])
    low, high, step = _domain(values + [line.value for line in lines])
    x = _Axis(low, high, left, right)
    bottom = top + row * len(bars)
    body = []
    for tick in _ticks(low, high, step):
        body.append(
            f'<line class="tick" x1="{_n(x(tick))}" x2="{_n(x(tick))}" y1="{top}" '
            f'y2="{_n(bottom)}"/><text class="axis" x="{_n(x(tick))}" y="{_n(bottom + 14)}" '
            f'text-anchor="middle">{number(tick)}</text>'
        )
    for i, bar in enumerate(bars):
        y = top + i * row
        end = x(bar.value) if bar.value is not None else right
        shown = f"{bar.value:.1f} {unit}" if bar.value is not None else "exact"
        body.append(
            f'<g><title>{text(bar.tooltip)}</title><text class="label" x="{_n(left - 8)}" '
            f'y="{_n(y + 15)}" text-anchor="end">{text(short(bar.label))}</text>'
            f'<rect class="bar {bar.css}" x="{_n(min(x(0), end))}" y="{_n(y + 4)}" '
            f'width="{_n(abs(end - x(0)))}" height="14"/>'
            f'<text class="value" x="{WIDTH - 2}" y="{_n(y + 15)}" text-anchor="end">{shown}'
            "</text></g>"
        )
        for mark in bar.marks:
            at = x(mark.value) if mark.value is not None else right
            body.append(
                f'<path class="mark" d="M{_n(at)} {_n(y + 4)}l5 7l-5 7l-5-7z">'
                f"<title>{text(mark.label)}</title></path>"
            )
    body += _vertical_lines(lines, x, top, bottom)
    return _svg(WIDTH, bottom + 22, body, label)


def _vertical_lines(lines: Sequence[Line], x: _Axis, top: float, bottom: float) -> list[str]:
    return [
        f'<g><title>{text(line.tooltip)}</title><line class="{line.css}" x1="{_n(x(line.value))}" '
        f'x2="{_n(x(line.value))}" y1="{_n(top - 4)}" y2="{_n(bottom)}"/></g>'
        for line in lines
    ]


def line_chart(points: Sequence[Point], label: str, lines: Sequence[Line] = ()) -> str:
    """Values in order (left to right) joined by a line; exact values (None) sit on the top
    edge as hollow dots."""
    height, left, right, top, bottom = 250, 44, WIDTH - 96, 14, 222
    low, high, step = _domain(_finite([p.value for p in points]) + [ln.value for ln in lines])
    y = _Axis(low, high, bottom, top)
    width = (right - left) / max(len(points), 1)
    body = []
    for tick in _ticks(low, high, step):
        body.append(
            f'<line class="tick" x1="{left}" x2="{right}" y1="{_n(y(tick))}" y2="{_n(y(tick))}"/>'
            f'<text class="axis" x="{left - 6}" y="{_n(y(tick) + 4)}" text-anchor="end">'
            f"{number(tick)}</text>"
        )
    centers = [left + (i + 0.5) * width for i in range(len(points))]
    trace = [
        f"{_n(cx)},{_n(y(p.value))}"
        for cx, p in zip(centers, points, strict=True)
        if p.value is not None
    ]
    if trace:
        body.append(f'<polyline class="trace" points="{" ".join(trace)}"/>')
    radius = 3 if width >= 4 else 2
    for cx, point in zip(centers, points, strict=True):
        cy = y(point.value) if point.value is not None else top
        body.append(
            f'<circle class="dot {point.css}" cx="{_n(cx)}" cy="{_n(cy)}" r="{radius}">'
            f"<title>{text(point.tooltip)}</title></circle>"
        )
    label_y = -math.inf
    for line in sorted(lines, key=lambda ln: -ln.value):  # top down, labels kept apart
        label_y = max(y(line.value) + 4, label_y + 13)
        body.append(
            f'<g><title>{text(line.tooltip)}</title><line class="{line.css}" x1="{left}" '
            f'x2="{right}" y1="{_n(y(line.value))}" y2="{_n(y(line.value))}"/>'
            f'<text class="axis" x="{right + 4}" y="{_n(label_y)}">'
            f"{text(short(line.label, 14))}</text></g>"
        )
    body.append(
        f'<text class="axis" x="{_n((left + right) / 2)}" y="{height - 8}" text-anchor="middle">'
        f"{len(points)} activations in graph order (input to output)</text>"
    )
    return _svg(WIDTH, height, body, label)


def histogram_chart(view: dict, label: str) -> str:
    """A tensor's histogram (bar heights on a log scale of counts) over its [min, max], the
    integer grid's span shaded and the calibrated range's ends as lines."""
    width, height, left, right, top, base = 300, 92, 6, 294, 6, 70
    data_low, data_high = view["data"]
    grid_low, grid_high = view["grid"]
    low, high = min(data_low, grid_low), max(data_high, grid_high)
    if high <= low:
        low, high = low - 0.5, high + 0.5
    x = _Axis(low, high, left, right)
    counts = view["counts"]
    peak = math.log1p(max(counts, default=0)) or 1.0
    bin_width = (x(data_high) - x(data_low)) / len(counts) if counts else 0.0
    bin_width = bin_width or 2.0  # one value everywhere: a thin bar
    columns = []
    for i, count in enumerate(counts):
        if count:
            start = x(data_low) + i * bin_width - (1.0 if len(counts) == 1 else 0.0)
            tall = (base - top) * math.log1p(count) / peak
            columns.append(
                f"M{_n(start)} {base}V{_n(base - tall)}h{_n(max(bin_width, 0.6))}V{base}z"
            )
    body = [
        f'<rect class="grid" x="{_n(x(grid_low))}" y="{top}" '
        f'width="{_n(x(grid_high) - x(grid_low))}" height="{base - top}"/>',
        f'<path class="counts" d="{"".join(columns)}"/>',
        f'<line class="baseline" x1="{left}" x2="{right}" y1="{base}" y2="{base}"/>',
    ]
    if low < 0 < high:
        body.append(f'<line class="zero" x1="{_n(x(0))}" x2="{_n(x(0))}" y1="{top}" y2="{base}"/>')
    for end in view["range"]:
        body.append(
            f'<line class="range" x1="{_n(x(end))}" x2="{_n(x(end))}" y1="{top}" y2="{base}"/>'
        )
    body.append(
        f'<text class="axis" x="{left}" y="{height - 6}">{number(low)}</text>'
        f'<text class="axis" x="{right}" y="{height - 6}" text-anchor="end">{number(high)}</text>'
    )
    return _svg(width, height, body, label, css="histogram")


def strip(cells: Sequence[tuple[str, str]], label: str) -> str:
    """One cell per item (an operator) in order, coloured by its class, with a tooltip each."""
    height = 28
    width = WIDTH / max(len(cells), 1)
    body = [
        f'<rect class="cell {css}" x="{_n(i * width)}" y="2" width="{_n(max(width - 0.5, 0.5))}" '
        f'height="{height - 4}"><title>{text(tooltip)}</title></rect>'
        for i, (css, tooltip) in enumerate(cells)
    ]
    return _svg(WIDTH, height, body, label, css="strip")
