"""The HTML report: one self-contained page (inline CSS and SVG, no scripts at all).

Text from the logs is written by strangers: Jinja2 escapes every value, the charts
escape theirs, and the page's Content-Security-Policy forbids scripts and remote loads
even if something slipped.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import jinja2
from markupsafe import Markup

from cdnlake.reports import svg
from cdnlake.reports.data import ReportData, Table
from cdnlake.reports.partial import as_date
from cdnlake.reports.text import (
    METRICS,
    cell,
    change,
    count,
    header,
    human_bytes,
    metric_value,
    percent,
    points,
    scaled_bytes,
)

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("cdnlake.reports", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_ENV.filters.update(cell=cell, header=header, human_bytes=human_bytes, count=count)
_ENV.filters.update(percent=percent, metric_value=metric_value)

CACHE_STATUSES = {
    "HIT": ("#2e7d32", "served from the edge cache"),
    "REVALIDATED": ("#66bb6a", "cached copy confirmed fresh by the origin (304), then served"),
    "STALE": ("#9ccc65", "an expired copy served while the origin was slow or failing"),
    "UPDATING": ("#c5e1a5", "an expired copy served while a fresh one was being fetched"),
    "MISS": ("#ef6c00", "not in cache: fetched from the origin"),
    "EXPIRED": ("#ffb300", "in cache but expired: fetched again from the origin"),
    "BYPASS": ("#78909c", "not cacheable (rules, cookies, headers): passed to the origin"),
    "-": ("#cfd8dc", "no cache status logged (errors before the cache, redirects)"),
}
OTHER = "#9e9e9e"
ONE_DAY = timedelta(days=1)

# Panels with inline bars: section -> (label column, the column the bar shows).
BAR_PANELS = {
    "top_paths_by_requests": ("path", "requests"),
    "top_paths_by_bytes": ("path", "bytes"),
    "top_paths_by_misses": ("path", "misses"),
    "top_referers": ("referer_host", "requests"),
    "browser": ("browser", "requests"),
    "os": ("os", "requests"),
    "tool": ("tool", "requests"),
    "crawler": ("crawler", "requests"),
    "ai_crawler": ("ai_crawler", "requests"),
    "top_miss_paths_by_bytes": ("path", "miss_bytes"),
    "countries": ("country", "requests"),
    "asns": ("asn_organization", "requests"),
    "status_codes": ("status_code", "requests"),
    "cache_status_mix": ("cache_status", "requests"),
    "zones": ("pull_zone_id", "requests"),
}
# A bar panel's columns shown before the one its bars show: panel -> columns.
BAR_EXTRAS = {"top_miss_paths_by_bytes": ("miss_requests",)}
# Long tables folded under <details>; everything else that is neither a card, a chart
# nor a bar panel is folded too. The status classes are the status codes panel's groups.
SHOWN = {"overview", "hit_ratio", "period_overview", "status_classes"}
SHORT_WORD = 12  # characters: a word longer may be wider than a table cell on a phone
# A partial day's bars and the band behind it in a range report's charts, and its legend.
PARTIAL_SWATCH = f"repeating-linear-gradient(45deg, {svg.HATCH} 0 2px, {svg.PALE} 2px 5px)"


def _hours(rows: list[dict[str, Any]], key: str) -> list[float | None]:
    values: list[float | None] = [None] * 24
    for row in rows:
        hour = row["hour"] if "hour" in row else int(str(row["bucket"])[:2])
        values[int(hour)] = row[key]
    return values


def _stacked_hours(rows: list[dict[str, Any]], value: str) -> list[tuple[str, str, list[float]]]:
    series: dict[str, list[float]] = {}
    for row in rows:
        status = str(row["cache_status"])
        series.setdefault(status, [0.0] * 24)[int(row["hour"])] += float(row[value] or 0)
    order = list(CACHE_STATUSES)
    statuses = sorted(series, key=lambda s: (order.index(s) if s in order else 99, s))
    return [(s, CACHE_STATUSES.get(s, (OTHER, ""))[0], series[s]) for s in statuses]


def legend(
    items: list[tuple[str, str]], partial: str = "", dashed: list[str] | None = None
) -> Markup:
    """The chart's key in HTML (it wraps and stays readable at any width); ``partial``
    names the partial days its hatched bars and bands stand for; the items ``dashed``
    names (the period compared with) have a dashed line for a swatch."""
    swatch = Markup('<span><i style="background:{}"></i>{}</span>')
    line = Markup('<span><i class="dash" style="border-top-color:{}"></i>{}</span>')
    spans = Markup("").join(
        (line if label in (dashed or []) else swatch).format(colour, label)
        for label, colour in items
    )
    if partial:
        spans += Markup(
            '<span class="partial-key"><i style="background:{}"></i>partial day: {}</span>'
        ).format(PARTIAL_SWATCH, partial)
    if not spans:
        return Markup("")
    return Markup('<div class="legend">{}</div>').format(spans)


Series = list[tuple[str, str, list[float | None]]]
Chart = tuple[str, str, Markup, Markup]
# The period compared with: its label, requests and bytes (totals per place), hit ratios
# and error rates.
Compared = tuple[str, list[float | None], list[float | None], Series, Series]


def _four_charts(
    labels: list[str],
    per: str,
    requests: list[tuple[str, str, list[float]]],
    bandwidth: list[tuple[str, str, list[float]]],
    hit_ratio: Series,
    errors: Series,
    partial: dict[int, str] | None = None,
    before: Compared | None = None,
) -> list[Chart]:
    """(id, title, svg, legend): requests, bandwidth, hit ratios and error rates ``per``
    hour or day; ``partial``: the places of partial days -> why, hatched in every chart
    and named in its legend. Stacks of one series need no legend but the partial days.
    ``before``: the same four of the period compared with, drawn dashed over them."""
    partial = partial or {}
    named = ", ".join(labels[i] for i in sorted(partial))
    split = " by cache status" if len(requests) > 1 else ""
    keys = [(n, c) for n, c, _ in requests] if len(requests) > 1 else []
    outline: dict[str, tuple[str, list[float | None]] | None] = {"requests": None, "bytes": None}
    dashed: list[str] = []
    if before is not None:
        label, b_requests, b_bytes, b_hit, b_errors = before
        outline = {"requests": (label, b_requests), "bytes": (label, b_bytes)}
        keys.append((f"{label} (total)", svg.COMPARED))
        hit_ratio = [*hit_ratio, *((f"{n} {label}", c, v) for n, c, v in b_hit)]
        errors = [*errors, *((f"{n} {label}", c, v) for n, c, v in b_errors)]
        dashed = [n for n, _, _ in hit_ratio + errors if n.endswith(label)]
    stacked = legend(keys, named, dashed=[f"{before[0]} (total)"] if before else [])
    return [
        ("chart-requests", f"Requests {per}{split}",
         svg.stacked_bars(labels, requests, count_short, f"requests {per}", partial,
                          outline=outline["requests"]), stacked),
        ("chart-bandwidth", f"Bandwidth {per}{split}",
         svg.stacked_bars(labels, bandwidth, bytes_short, f"bandwidth {per}", partial,
                          outline=outline["bytes"]), stacked),
        ("chart-hit-ratio", f"Hit ratio {per}",
         svg.lines(labels, hit_ratio, whole_percent, f"hit ratio {per}", fit=True,
                   ceiling=100.0, partial=partial, dashed=dashed),
         legend([(n, c) for n, c, _ in hit_ratio], named, dashed=dashed)),
        ("chart-errors", f"Error rates {per}",
         svg.lines(labels, errors, whole_percent, f"error rates {per}", partial=partial,
                   dashed=dashed),
         legend([(n, c) for n, c, _ in errors], named, dashed=dashed)),
    ]  # fmt: skip


def _daily_series(data: ReportData) -> tuple[Series, Series]:
    """A day's hit ratios and error rates by hour."""
    hit = data.sections["hit_ratio_by_hour"].records()
    errors = data.sections["errors_by_hour"].records()
    return (
        [
            ("by requests", "#1565c0", _hours(hit, "request_hit_ratio_pct")),
            ("by bytes", "#2e7d32", _hours(hit, "byte_hit_ratio_pct")),
        ],
        [
            ("4xx", "#ef6c00", _hours(errors, "rate_4xx_pct")),
            ("5xx", "#c62828", _hours(errors, "rate_5xx_pct")),
        ],
    )


def _totals(stacks: list[tuple[str, str, list[float]]], n: int) -> list[float | None]:
    return [sum(values[i] for _, _, values in stacks) for i in range(n)]


def _compared_label(data: ReportData) -> str:
    """How the charts' legends name the period compared with."""
    return "a week before" if data.compare == "week" else f"previous {data.noun}"


def _daily_charts(data: ReportData) -> list[Chart]:
    by_hour = data.sections["traffic_by_hour"].records()
    hit, errors = _daily_series(data)
    before: Compared | None = None
    if data.previous is not None:
        rows = data.previous.sections["traffic_by_hour"].records()
        b_hit, b_errors = _daily_series(data.previous)
        before = (
            _compared_label(data),
            _totals(_stacked_hours(rows, "requests"), 24),
            _totals(_stacked_hours(rows, "bytes"), 24),
            b_hit,
            b_errors,
        )
    return _four_charts(
        [f"{h:02d}" for h in range(24)],
        "by hour (UTC)",
        _stacked_hours(by_hour, "requests"),
        _stacked_hours(by_hour, "bytes"),
        hit,
        errors,
        before=before,
    )


def _range_charts(data: ReportData) -> list[Chart]:
    rows = data.sections["daily_trend"].records()

    def column(name: str, rows: list[dict[str, Any]] = rows) -> list[float | None]:
        return [None if r[name] is None else float(r[name]) for r in rows]

    before: Compared | None = None
    if data.previous is not None:  # day by day, by place: its first day beside this one's
        old = data.previous.sections["daily_trend"].records()
        label = _compared_label(data)
        before = (
            label,
            column("requests", old),
            column("bytes", old),
            [
                ("by requests", "#1565c0", column("request_hit_ratio_pct", old)),
                ("by bytes", "#2e7d32", column("byte_hit_ratio_pct", old)),
            ],
            [
                ("4xx", "#ef6c00", column("rate_4xx_pct", old)),
                ("5xx", "#c62828", column("rate_5xx_pct", old)),
            ],
        )
    return _four_charts(
        [str(r["date"])[5:] for r in rows],  # MM-DD
        "per day",
        [("requests", "#1565c0", [float(r["requests"]) for r in rows])],
        [("bytes", "#2e7d32", [float(r["bytes"]) for r in rows])],
        [
            ("by requests", "#1565c0", column("request_hit_ratio_pct")),
            ("by bytes", "#2e7d32", column("byte_hit_ratio_pct")),
        ],
        [("4xx", "#ef6c00", column("rate_4xx_pct")), ("5xx", "#c62828", column("rate_5xx_pct"))],
        {i: data.partial[as_date(r["date"])] for i, r in enumerate(rows) if r.get("partial")},
        before,
    )


def count_short(value: float) -> str:
    """An axis value: 1.2k, 3.4M."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def bytes_short(value: float) -> str:
    """An axis value: 750 MB, 1.2 GB."""
    size, unit = scaled_bytes(value)
    return f"{size:.3g} {unit}"


def whole_percent(value: float) -> str:
    return f"{value:.3g} %"


def _headline(data: ReportData) -> dict[str, Any]:
    """The headline figures of a report, by metric."""
    if data.is_range:
        return data.sections["period_overview"].first()
    totals = {
        **data.sections["overview"].first(),
        **data.sections["hit_ratio"].first(),
    }
    for row in data.sections["day_over_day"].records():
        totals.setdefault(row["metric"], row["today"])
    return totals


def _cards(data: ReportData) -> list[dict[str, str]]:
    """The headline figures, each with its change since the day before (or against the
    period compared with)."""
    totals = _headline(data)
    changes: dict[str, dict[str, Any]] = {}
    if data.previous is not None:
        from cdnlake.reports.compare import change as changed

        before = _headline(data.previous)
        for metric in METRICS:
            unit = "change_pp" if metric.endswith("pct") else "change_pct"
            changes[metric] = {unit: changed(totals.get(metric), before.get(metric), metric)}
    elif not data.is_range:
        changes = {r["metric"]: r for r in data.sections["day_over_day"].records()}
    versus = f"vs {_compared_label(data)}" if data.previous is not None else "vs day before"
    cards = []
    for metric, label in METRICS.items():
        value = totals.get(metric)
        row = changes.get(metric, {})
        if data.previous is not None and all(v is None for v in row.values()):
            delta = f"– {versus}"
        elif row.get("change_pp") is not None:
            delta = f"{points(row['change_pp'])} {versus}"
        elif row.get("change_pct") is not None:
            delta = f"{change(row['change_pct'])} {versus}"
        else:
            delta = ""
        touched = data.days() | (data.previous.days() if data.previous else {data.day - ONE_DAY})
        if delta and touched & set(data.partial):
            delta += " (a partial day)"
        cards.append({"label": label, "value": metric_value(metric, value), "delta": delta})
    table = data.sections.get("completeness")
    if table is not None:
        from cdnlake.reports.completeness import headline

        value, note = headline(table)
        cards.append({"label": "Completeness", "value": value, "delta": note})
    return cards


def path_segments(path: str) -> list[str]:
    """A path cut after each ``/``, where it may wrap."""
    parts = path.split("/")
    return [f"{p}/" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _needs_box(word: str) -> bool:
    """A word a browser could break inside (at a hyphen, a dash, a slash...: anything but
    letters, digits and . , : % + ' ( ) _), or one long enough to be wider than its cell."""
    return len(word) > SHORT_WORD or any(
        not (c.isascii() and (c.isalnum() or c in ".,:%+'()_")) for c in word
    )


def breakable(text: str, path: bool = False) -> Markup:
    """Text that wraps between its words only (a path: after its slashes), never inside
    one, not even at a hyphen (2026-11-20, Go-http-client): such a word is an unbreakable
    box that ends in an ellipsis when wider than its cell, the whole text in the tooltip."""
    box = Markup("<span>{}</span>")
    if path:
        inner = Markup("").join(box.format(p) for p in path_segments(text))
    else:
        inner = Markup(" ").join(box.format(w) if _needs_box(w) else w for w in text.split())
    title = Markup(' title="{}"').format(text) if path or len(text) > 24 else Markup("")
    return Markup('<span class="pieces"{}>{}</span>').format(title, inner)


_ENV.filters["breakable"] = breakable


def _bars(name: str, table: Table, data: ReportData) -> dict[str, Any]:
    from cdnlake.reports.compare import change_column

    label_col, value_col = BAR_PANELS[name]
    extras = BAR_EXTRAS.get(name, ())
    records = table.records()
    delta = change_column(value_col) if data.previous is not None else None
    top = max((float(r[value_col] or 0) for r in records), default=0.0) or 1.0
    total = sum(float(r[value_col] or 0) for r in records) or 1.0
    rows = []
    for r in records:
        label = r[label_col]
        if name == "zones":
            label = data.zone_label(int(label))
        elif label_col == "path":
            label = f"{r['host']}{r['path']}"
        elif label_col == "asn_organization":
            label = f"AS{r['asn']} {label or ''}".strip()
        elif label_col == "country" and label != r["country_code"]:
            label = f"{label} ({r['country_code']})"
        share = r.get("pct", r.get("share_pct", r.get("request_pct")))
        if share is None and name == "zones":  # every zone is listed: shares of their sum
            share = 100.0 * float(r[value_col] or 0) / total
        text = cell(label, label_col)
        rows.append(
            {
                "label": text,
                "kind": "",
                "path": label_col == "path",
                "extras": [cell(r[c], c) for c in extras],
                "value": cell(r[value_col], value_col),
                "share": percent(share) if share is not None else "",
                "change": cell(r.get(delta), delta) if delta else "",
                "width": round(100.0 * float(r[value_col] or 0) / top, 1),
            }
        )
    return {
        "name": name,
        "title": table.title,
        "extras": [table.heading(c) for c in extras],
        "column": table.heading(value_col),
        "share": table.labels.get("share_pct", "Share"),
        "change": "change" if delta else "",
        "rows": rows,
    }


def _status_bars(table: Table, data: ReportData) -> dict[str, Any]:
    """The status codes panel: each class (2xx...) with its codes under it."""
    from cdnlake.reports.statuses import TITLE, grouped

    classes = grouped(table)
    compared = data.previous is not None
    changes: dict[str, Any] = {}  # "2xx" or "200" -> the requests' change
    if compared:
        for kind, key in (("status_classes", "class"), ("status_codes", "status_code")):
            for r in data.sections[kind].records():
                changes[str(r[key])] = r.get("requests_change_pct")
    top = max((float(c["requests"]) for c in classes), default=0.0) or 1.0
    rows: list[dict[str, Any]] = []
    for c in classes:
        for label, r, kind, key in [
            (f"{c['class']} {c['meaning']}".strip(), c, "class", str(c["class"])),
            *((str(code["status_code"]), code, "code", str(code["status_code"]))
              for code in c["codes"]),
        ]:  # fmt: skip
            rows.append(
                {
                    "label": label,
                    "kind": kind,
                    "path": False,
                    "extras": [],
                    "value": count(r["requests"]),
                    "share": percent(r["pct"]),
                    "change": change(changes.get(key)) if compared else "",
                    "width": round(100.0 * float(r["requests"]) / top, 1),
                }
            )
    return {
        "name": "status_codes",
        "title": TITLE,
        "extras": [],
        "column": header("requests"),
        "share": "Share",
        "change": "change" if compared else "",
        "rows": rows,
    }


def to_html(data: ReportData) -> str:
    charts = [] if data.empty else (_range_charts(data) if data.is_range else _daily_charts(data))
    panels = [
        _status_bars(t, data) if n == "status_codes" else _bars(n, t, data)
        for n, t in data.sections.items()
        if n in BAR_PANELS
    ]
    folded = [
        (name, t)
        for name, t in data.sections.items()
        if name not in BAR_PANELS and name not in SHOWN
    ]
    statuses = [(s, colour, meaning) for s, (colour, meaning) in CACHE_STATUSES.items()]
    versus = ""
    if data.previous is not None:
        versus = (
            f"the same {'days' if data.is_range else 'day'} a week before"
            if data.compare == "week"
            else f"the previous {data.noun}"
        ) + f" ({data.compared_with})"
    return _ENV.get_template("report.html").render(
        versus=versus,
        data=data,
        cards=_cards(data),
        charts=charts,
        panels=panels,
        folded=folded,
        statuses=statuses,
        zone_title=(
            f"Pull zone {data.zone_label(data.zone)}" if data.zone is not None else "All pull zones"
        ),
    )
