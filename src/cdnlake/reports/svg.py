"""Charts as inline SVG, written here: stacked bars and lines over hours or days.

Each chart is drawn in a fixed coordinate box (``viewBox``) and scales to its panel; the
page gives it a minimum width, so its 13-unit text never renders below 10.5 px (on a
phone the panel scrolls sideways instead). Every text comes from the logs or the config
and is escaped; a ``<title>`` on each bar and point names its value (a tooltip, no script).

The period a report is compared with (``--compare``) is drawn dashed over this one's: a
line over the bars, a dashed line beside each line, its points hollow.

A partial day (today, a first day cut by retention) is drawn apart: a hatched band behind
its place, its bars pale, its points hollow, so that a short day is not read as a drop.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 62, 10, 14, 34
FONT = 13  # user units; the page keeps a chart at least 460 px wide: 10.7 px or more
HATCH, PALE = "#f0a500", "#fff4d6"  # a partial day's hatching (the HTML legend's too)
PARTIAL_OPACITY = 0.45  # a partial day's bars

Format = Callable[[float], str]


def nice_ceiling(value: float) -> float:
    """1, 2, 2.5 or 5 times a power of ten, at least ``value`` (the top of the y axis)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * power:
            return step * power
    return 10.0 * power  # pragma: no cover


def nice_range(
    low: float, high: float, *, ceiling: float | None = None, min_span: float = 1.0
) -> tuple[float, float]:
    """A y axis fitted to values from ``low`` to ``high``: four steps of 1, 2, 2.5 or 5
    times a power of ten, spanning at least ``min_span`` (so that noise is not drawn as
    a swing), never below 0 for values that are not and never above ``ceiling`` (100 %),
    so that a line near 76 % is drawn as the change it is, not flat at the top."""
    floor = 0.0 if low >= 0 else None
    if high - low < min_span:
        middle = (high + low) / 2
        low, high = middle - min_span / 2, middle + min_span / 2
        if ceiling is not None and high > ceiling:
            low, high = low - (high - ceiling), ceiling
        if floor is not None and low < floor:
            low, high = floor, high + (floor - low)
    step = nice_ceiling((high - low) / 4)
    while True:
        bottom = math.floor(low / step) * step
        if floor is not None:
            bottom = max(floor, bottom)
        top = bottom + 4 * step
        if ceiling is not None and top > ceiling >= high:
            top, bottom = ceiling, ceiling - 4 * step
        if bottom <= low and top >= high:
            return bottom, top
        step = nice_ceiling(step * 1.001)


def _frame(
    labels: Sequence[str], top: float, fmt: Format, every: int, bottom: float = 0.0
) -> list[str]:
    """Axes, four horizontal grid lines with their values, and every ``every``-th x label."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = []
    for i in range(5):
        y = TOP + plot_h - plot_h * i / 4
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" '
            f'stroke="{"#9aa5b1" if i == 0 else "#e4e7eb"}" stroke-width="1"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="{FONT}" '
            f'fill="#52606d">{escape(fmt(bottom + (top - bottom) * i / 4))}</text>'
        )
    step = plot_w / max(1, len(labels))
    for i, label in enumerate(labels):
        if i % every:
            continue
        x = LEFT + step * (i + 0.5)
        parts.append(
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle" '
            f'font-size="{FONT}" fill="#52606d">{escape(label)}</text>'
        )
    return parts


def _partial_band(labels: Sequence[str], partial: Mapping[int, str], title: str) -> list[str]:
    """A hatched band behind each partial day's place, with a tooltip saying why."""
    if not partial:
        return []
    pattern = "hatch-" + re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(1, len(labels))
    parts = [
        f'<defs><pattern id="{pattern}" width="6" height="6" patternUnits="userSpaceOnUse" '
        f'patternTransform="rotate(45)"><rect width="6" height="6" fill="{PALE}"/>'
        f'<line x1="0" y1="0" x2="0" y2="6" stroke="{HATCH}" stroke-width="2"/></pattern></defs>'
    ]
    for i, why in sorted(partial.items()):
        parts.append(
            f'<rect class="partial-band" x="{LEFT + step * i:.1f}" y="{TOP}" '
            f'width="{step:.1f}" height="{plot_h}" fill="url(#{pattern})" fill-opacity="0.6">'
            f"<title>{escape(labels[i])}: a partial day ({escape(why)})</title></rect>"
        )
    return parts


def _svg(parts: list[str], title: str) -> Markup:
    body = "".join(parts)
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg" '
        f'font-family="system-ui, sans-serif">{body}</svg>'
    )


def stacked_bars(
    labels: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[float]]],
    fmt: Format,
    title: str,
    partial: Mapping[int, str] | None = None,
    outline: tuple[str, Sequence[float | None]] | None = None,
) -> Markup:
    """Bars at ``labels``; ``series`` = (name, colour, one value per label), stacked;
    ``partial``: the places of partial days -> why (hatched behind, their bars pale);
    ``outline``: (name, one total per label) of the period compared with, a dashed line."""
    partial = partial or {}
    totals = [sum(values[i] for _, _, values in series) for i in range(len(labels))]
    before = [v for v in (outline[1] if outline else []) if v is not None]
    top = nice_ceiling(max([*totals, *before], default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(1, len(labels))
    parts = _partial_band(labels, partial, title)
    parts += _frame(labels, top, fmt, every=max(1, math.ceil(len(labels) / 12)))
    base = [0.0] * len(labels)
    for name, colour, values in series:
        for i, value in enumerate(values):
            if value <= 0:
                continue
            h = plot_h * value / top
            y = TOP + plot_h - plot_h * base[i] / top - h
            pale, note = "", ""
            if i in partial:
                pale = f' class="partial" fill-opacity="{PARTIAL_OPACITY}"'
                pale += f' stroke="{escape(colour)}" stroke-dasharray="3 2"'
                note = " (a partial day)"
            parts.append(
                f'<rect x="{LEFT + step * i + step * 0.1:.1f}" y="{y:.1f}" '
                f'width="{step * 0.8:.1f}" height="{h:.1f}" fill="{escape(colour)}"{pale}>'
                f"<title>{escape(labels[i])} {escape(name)}: {escape(fmt(value))}{note}</title>"
                "</rect>"
            )
            base[i] += value
    if outline is not None:
        parts += _line(labels, outline[0], COMPARED, outline[1], fmt, 0.0, top, {}, dashed=True)
    return _svg(parts, title)


def lines(
    labels: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    fmt: Format,
    title: str,
    fit: bool = False,
    ceiling: float | None = None,
    partial: Mapping[int, str] | None = None,
    dashed: Collection[str] = (),
) -> Markup:
    """One line per series over ``labels``; a None value breaks the line. The y axis
    starts at 0, or with ``fit`` spans only the values' range (:func:`nice_range`).
    ``partial``: the places of partial days -> why (hatched behind, their points hollow);
    the series named in ``dashed`` (the period compared with) are drawn dashed."""
    partial = partial or {}
    values = [v for _, _, vs in series for v in vs if v is not None]
    if fit and values:
        bottom, top = nice_range(min(values), max(values), ceiling=ceiling, min_span=5.0)
    else:
        bottom, top = 0.0, nice_ceiling(max(values, default=0.0))
    parts = _partial_band(labels, partial, title)
    parts += _frame(labels, top, fmt, every=max(1, math.ceil(len(labels) / 12)), bottom=bottom)
    for name, colour, points in series:
        parts += _line(labels, name, colour, points, fmt, bottom, top, partial, name in dashed)
    return _svg(parts, title)


COMPARED = "#3e4c59"  # the period compared with, over the bars


def _line(
    labels: Sequence[str],
    name: str,
    colour: str,
    points: Sequence[float | None],
    fmt: Format,
    bottom: float,
    top: float,
    partial: Mapping[int, str],
    dashed: bool = False,
) -> list[str]:
    """One series as a line with a point (and its tooltip) per value."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(1, len(labels))
    dash = ' stroke-dasharray="6 4" class="compared"' if dashed else ""
    parts: list[str] = []
    run: list[str] = []
    for i, value in enumerate([*points, None]):
        if value is None:
            if len(run) > 1:
                parts.append(
                    f'<polyline points="{" ".join(run)}" fill="none" '
                    f'stroke="{escape(colour)}" stroke-width="2"{dash}/>'
                )
            run = []
            continue
        x = LEFT + step * (i + 0.5)
        y = TOP + plot_h - plot_h * (min(value, top) - bottom) / (top - bottom)
        run.append(f"{x:.1f},{y:.1f}")
        paint, note = f'r="2.5" fill="{escape(colour)}"', ""
        if dashed:
            paint = f'r="2.5" fill="#fff" stroke="{escape(colour)}" stroke-width="1.5"'
        elif i in partial:  # hollow and larger: a partial day's figure
            paint = f'r="3.5" class="partial" fill="#fff" stroke="{escape(colour)}" '
            paint += 'stroke-width="1.5"'
            note = " (a partial day)"
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" {paint}>'
            f"<title>{escape(labels[i])} {escape(name)}: {escape(fmt(value))}{note}</title>"
            "</circle>"
        )
    return parts
