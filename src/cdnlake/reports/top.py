"""``cdnlake top`` for people: the live screen, and one snapshot as tables or JSON.

The screen is laid out line by line for the terminal's size (80x24 over SSH at least):
a title, the newest row's age and source, the five figures with a sparkline each, the
focused dimension's first keys as a table, one line for each other dimension, and the
keys. Every line is cut to the width, never wrapped, so the screen never scrolls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdnlake.warehouse.live import DIMENSIONS, SORTS, WINDOWS, Key, Snapshot
from cdnlake.warehouse.output import render

if TYPE_CHECKING:
    from rich.console import RenderableType

BARS = "▁▂▃▄▅▆▇█"
ASCII_BARS = "_.-=+*#@"  # a terminal that cannot show the blocks (LANG=C over SSH)
KEYS_LINE = "q quit  w window  s sort  z zone  d table"


@dataclass
class ViewState:
    """What the keys chose: the window, the sort, the zone (None: all), the focused table."""

    window: str
    sort: str
    zone: int | None
    zones: list[int]
    focus: str = "path"

    def press(self, key: str) -> bool:
        """Apply one key; False when it quits."""
        if key in ("q", "Q"):
            return False
        if key == "w":
            self.window = _next(list(WINDOWS), self.window)
        elif key in ("1", "5", "h"):
            self.window = {"1": "1m", "5": "5m", "h": "1h"}[key]
        elif key == "s":
            self.sort = _next(list(SORTS), self.sort)
        elif key in ("r", "b", "m", "e"):
            self.sort = {"r": "requests", "b": "bytes", "m": "misses", "e": "errors"}[key]
        elif key == "z":
            choices: list[int | None] = [None, *self.zones]
            self.zone = _next(choices, self.zone)
        elif key in ("d", "\t"):
            self.focus = _next(list(DIMENSIONS), self.focus)
        return True


def _next(items: list[Any], current: Any) -> Any:
    return items[(items.index(current) + 1) % len(items)] if current in items else items[0]


# -- numbers --------------------------------------------------------------------------
def count(value: float) -> str:
    """1,234 / 12.3k / 4.56M: at most six characters or so."""
    if value < 10_000:
        return f"{value:,.0f}"
    if value < 999_500:
        return f"{value / 1e3:.3g}k"
    return f"{value / 1e6:.3g}M" if value < 999_500_000 else f"{value / 1e6:,.0f}M"


def size(value: float) -> str:
    """Bytes: 512 B, 12.3 kB, 4.56 MB, 1.2 GB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale * 0.9995:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def rate(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0:
        return f"{-seconds:.0f}s in the future"
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def sparkline(
    values: list[float | None], width: int, *, top: float | None = None, bars: str = BARS
) -> str:
    """The last ``width`` values as bars from 0 to ``top`` (default: their greatest); a
    span without a value (no request) is a space."""
    shown = values[-width:] if width > 0 else []
    known = [v for v in shown if v is not None]
    ceiling = top if top is not None else max(known, default=0.0)
    if ceiling <= 0:
        return "".join(" " if v is None else bars[0] for v in shown)
    last = len(bars) - 1
    return "".join(
        " " if v is None else bars[min(last, max(0, round(last * v / ceiling)))] for v in shown
    )


FIGURES = (
    ("requests/s", "requests_per_second"),
    ("bytes/s", "bytes_per_second"),
    ("hit ratio", "hit_ratio"),
    ("4xx", "ratio_4xx"),
    ("5xx", "ratio_5xx"),
)


def figure_text(name: str, value: float | None) -> str:
    if name == "requests_per_second":
        return rate(value or 0.0)
    if name == "bytes_per_second":
        return size(value or 0.0) if value else "0 B"
    return percent(value)


def figure_line(snap: Snapshot, name: str, width: int, bars: str) -> tuple[str, str]:
    """The figure's value and its sparkline (hit ratio on 0..100 %, the others from 0 to
    their greatest, the error ratios to at least 1 %)."""
    series = snap.series()[name]
    top: float | None = None
    if name == "hit_ratio":
        top = 1.0
    elif name.startswith("ratio_"):
        top = max([0.01, *(v for v in series if v is not None)])
    return figure_text(name, snap.rates()[name]), sparkline(series, width, top=top, bars=bars)


def zone_label(snap: Snapshot) -> str:
    if len(snap.zones) == 1:
        return f"zone {snap.zones[0]}"
    return f"zones all ({len(snap.zones)})"


def freshness(snap: Snapshot, now: datetime | None = None) -> str:
    if snap.newest is None:
        return "newest row: none in the lake's recent days"
    return (
        f"newest row {snap.newest:%H:%M:%S}Z ({age(snap.age_seconds(now))}, "
        f"{snap.newest_source}, zone {snap.newest_zone})"
    )


# -- the live screen --------------------------------------------------------------------
def screen_lines(
    snap: Snapshot | None,
    state: ViewState,
    width: int,
    height: int,
    *,
    ascii_only: bool = False,
    note: str = "",
) -> list[tuple[str, str]]:
    """The screen as (text, style) lines, each at most ``width`` characters, at most
    ``height`` of them (the keys' line last)."""
    width, height = max(20, width), max(3, height)
    bars = ASCII_BARS if ascii_only else BARS
    now = datetime.now(UTC)
    zone = "zones all" if state.zone is None else f"zone {state.zone}"
    lines: list[tuple[str, str]] = [
        (
            f"cdnlake top · {zone} · window {state.window} · sort {state.sort} · {now:%H:%M:%S}Z",
            "bold",
        )
    ]
    if snap is None:
        lines.append((note or "reading the lake...", ""))
    else:
        took = f" · {snap.took_seconds * 1000:.0f} ms"
        lines.append(
            (
                f"{freshness(snap, now)} · {snap.files_read} of {snap.files_listed} files"
                f"{took}{' · ' + note if note else ''}",
                "dim",
            )
        )
        spark = max(0, min(len(snap.spans), width - 24))
        for label, name in FIGURES:
            value, line = figure_line(snap, name, spark, bars)
            lines.append((f"{label:<11}{value:>11}  {line}", ""))
        lines += _tables(snap, state, width, height - len(lines) - 1)
    lines = lines[: height - 1]
    lines += [("", "")] * (height - 1 - len(lines))
    lines.append((KEYS_LINE, "reverse"))
    return [(_cut(text, width), style) for text, style in lines]


def _tables(snap: Snapshot, state: ViewState, width: int, room: int) -> list[tuple[str, str]]:
    """The focused dimension's table, then a line for each other dimension, in ``room``
    lines."""
    others = [name for name in DIMENSIONS if name != state.focus]
    if room < 3:
        return []
    keep = max(0, min(len(others), room - 3))  # other dimensions' lines that fit
    rows = max(1, min(len(snap.top[state.focus]), room - 2 - keep))
    numbers = 4 * 8
    key_width = max(8, width - numbers - 1)
    title = f"{DIMENSIONS[state.focus]} by {state.sort}"
    out: list[tuple[str, str]] = [("", "")]
    out.append(
        (
            f"{title:<{key_width}} "
            + "".join(f"{c:>8}" for c in ("reqs", "bytes", "misses", "errors")),
            "bold",
        )
    )
    for key in snap.top[state.focus][:rows]:
        name = _cut(key.key if key.key is not None else "-", key_width)
        out.append(
            (
                f"{name:<{key_width}} {count(key.requests):>8}{size(key.bytes):>8}"
                f"{count(key.misses):>8}{count(key.errors):>8}",
                "",
            )
        )
    if not snap.top[state.focus]:
        out.append(("(no request in the window)", "dim"))
    for name in others[:keep]:
        shown = " · ".join(
            f"{k.key if k.key is not None else '-'} {_measure(k, state.sort)}"
            for k in snap.top[name][:6]
        )
        out.append((f"{DIMENSIONS[name]:<15}{shown or '-'}", ""))
    return out


def _measure(key: Key, sort: str) -> str:
    """A key's value of the sort's measure, short."""
    value = int(getattr(key, sort))
    return size(value) if sort == "bytes" else count(value)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def screen(
    snap: Snapshot | None, state: ViewState, width: int, height: int, *, ascii_only: bool, note: str
) -> RenderableType:
    """:func:`screen_lines` as one rich renderable (no markup read from the data)."""
    from rich.text import Text

    text = Text(no_wrap=True, overflow="crop")
    lines = screen_lines(snap, state, width, height, ascii_only=ascii_only, note=note)
    for i, (line, style) in enumerate(lines):
        text.append(line, style=style or None)
        if i < len(lines) - 1:
            text.append("\n")
    return text


# -- one snapshot on a pipe -------------------------------------------------------------
def snapshot_json(snap: Snapshot) -> str:
    return json.dumps(snap.as_dict(), indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def snapshot_table(snap: Snapshot) -> str:
    """The snapshot as text: a head line, the figures with their sparklines, then a table
    for each dimension."""
    zones = ", ".join(str(z) for z in snap.zones)
    out = [
        f"zones {zones} · window {snap.window} ({snap.start:%Y-%m-%d %H:%M:%S}Z to "
        f"{snap.end:%H:%M:%S}Z) · sort {snap.sort} · {snap.requests:,} requests\n",
        freshness(snap, snap.end) + f" · {snap.files_read} of {snap.files_listed} files read\n",
    ]
    rows: list[tuple[object, ...]] = []
    for label, name in FIGURES:
        value, line = figure_line(snap, name, len(snap.spans), BARS)
        rows.append((label, value, line))
    out.append(render("table", ["figure", "value", "spans"], rows, width=80))
    for name, title in DIMENSIONS.items():
        out.append(f"\n{title} by {snap.sort}\n")
        keyed = [
            (k.key if k.key is not None else "-", k.requests, k.bytes, k.misses, k.errors)
            for k in snap.top[name]
        ]
        out.append(
            render("table", [name, "requests", "bytes", "misses", "errors"], keyed, width=100)
        )
    return "".join(out)
