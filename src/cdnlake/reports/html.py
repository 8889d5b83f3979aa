"""The HTML report: one self-contained page (inline CSS and SVG, no scripts at all).

Text from the logs is written by strangers: Jinja2 escapes every value, and the page's
Content-Security-Policy forbids scripts and remote loads even if something slipped.
"""

from __future__ import annotations

from typing import Any

import jinja2
from markupsafe import Markup

from cdnlake.reports.build import ReportData
from cdnlake.warehouse.output import plain

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("cdnlake.reports", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def human_bytes(value: Any) -> str:
    if value is None:
        return "–"
    size = float(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1000
    return str(value)  # pragma: no cover


def cell(value: Any, column: str) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if "bytes" in column and isinstance(value, (int, float)):
        return human_bytes(value)
    if isinstance(value, int):
        plain_int = column.endswith("_id") or column in ("hour", "status_code", "commonest_status")
        return str(value) if plain_int else f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(plain(value))


_ENV.filters["human_bytes"] = human_bytes
_ENV.filters["cell"] = cell


def _charts(data: ReportData) -> dict[str, Markup]:
    from cdnlake.reports import charts

    if data.empty:
        return {}
    by_hour = data.sections["traffic_by_hour"].records()
    out = {
        "requests_by_hour": charts.stacked_by_cache_status(by_hour, "requests", "requests", 1),
        "bandwidth_by_hour": charts.stacked_by_cache_status(by_hour, "bytes", "GB", 1e9),
        "hit_ratio_by_hour": charts.lines_by_hour(
            data.sections["hit_ratio_by_hour"].records(),
            [
                ("request_hit_ratio_pct", "by requests", "#1565c0"),
                ("byte_hit_ratio_pct", "by bytes", "#2e7d32"),
            ],
            "hit ratio %",
        ),
        "errors_by_hour": charts.lines_by_hour(
            data.sections["errors_by_hour"].records(),
            [("rate_4xx_pct", "4xx", "#ef6c00"), ("rate_5xx_pct", "5xx", "#c62828")],
            "error rate %",
        ),
    }
    # matplotlib writes the SVG and escapes every text it draws; the page adds no script.
    return {k: Markup(v) for k, v in out.items()}


def to_html(data: ReportData) -> str:
    changes = {r["metric"]: r for r in data.sections["day_over_day"].records()}
    errors = changes.get("rate_4xx_pct", {}), changes.get("rate_5xx_pct", {})
    return _ENV.get_template("report.html").render(
        data=data,
        overview=data.sections["overview"].first(),
        hit=data.sections["hit_ratio"].first(),
        changes=changes,
        errors=errors,
        charts=_charts(data),
        tables=[
            (name, t)
            for name, t in data.sections.items()
            if name not in ("overview", "hit_ratio", "traffic_by_hour")
        ],
    )
