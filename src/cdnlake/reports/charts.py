"""Charts for the HTML report, drawn by matplotlib as inline SVG (no scripts, no files)."""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False})

CACHE_COLORS = {
    "HIT": "#2e7d32",
    "REVALIDATED": "#66bb6a",
    "STALE": "#9ccc65",
    "UPDATING": "#c5e1a5",
    "MISS": "#ef6c00",
    "EXPIRED": "#ffb300",
    "BYPASS": "#78909c",
    "-": "#cfd8dc",
}
ORDER = list(CACHE_COLORS)
HOURS = list(range(24))


def _svg(fig: Any) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _label(status: str) -> str:
    return status if len(status) <= 16 else status[:15] + "…"


def stacked_by_cache_status(
    rows: list[dict[str, Any]], value: str, ylabel: str, scale: float
) -> str:
    series: dict[str, list[float]] = defaultdict(lambda: [0.0] * 24)
    for row in rows:
        series[row["cache_status"]][int(row["hour"])] += row[value] / scale
    statuses = sorted(series, key=lambda s: (ORDER.index(s) if s in ORDER else 99, s))
    fig, ax = plt.subplots(figsize=(8, 2.8))
    bottom = [0.0] * 24
    for status in statuses:
        ax.bar(
            HOURS,
            series[status],
            bottom=bottom,
            label=_label(status),
            color=CACHE_COLORS.get(status, "#9e9e9e"),
            width=0.85,
        )
        bottom = [b + v for b, v in zip(bottom, series[status], strict=True)]
    ax.set_xticks(HOURS[::2])
    ax.set_xlabel("hour (UTC)")
    ax.set_ylabel(ylabel)
    ax.legend(ncol=4, fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _svg(fig)


def lines_by_hour(
    rows: list[dict[str, Any]], series: list[tuple[str, str, str]], ylabel: str
) -> str:
    fig, ax = plt.subplots(figsize=(8, 2.4))
    for key, label, color in series:
        values: list[float | None] = [None] * 24
        for row in rows:
            hour = row["hour"] if "hour" in row else int(str(row["bucket"])[:2])
            values[int(hour)] = row[key]
        ax.plot(
            HOURS,
            [v if v is not None else float("nan") for v in values],
            label=label,
            color=color,
            marker="o",
            markersize=2.5,
            linewidth=1.5,
        )
    ax.set_xticks(HOURS[::2])
    ax.set_xlabel("hour (UTC)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _svg(fig)
