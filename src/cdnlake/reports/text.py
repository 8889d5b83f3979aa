"""How the report writes figures and column names for people (HTML and Markdown).

One style everywhere: counts as integers with thousands separators, bytes in decimal
units (``7.8 GB``), shares as ``37.50 %``, rate changes in percentage points (``+0.17 pp``),
hours as ``00:00``. CSV and JSON keep the raw values.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from cdnlake.warehouse.output import plain

HEADERS = {
    "hour": "Hour (UTC)",
    "date": "Day",
    "bucket": "Bucket",
    "requests": "Requests",
    "bytes": "Bytes",
    "hit_bytes": "Bytes from cache",
    "avg_mbps": "Average Mbit/s",
    "hit_requests": "Hits",
    "request_hit_ratio_pct": "Request hit ratio",
    "byte_hit_ratio_pct": "Byte hit ratio",
    "hits_counted": "Counted as hits",
    "rate_4xx_pct": "4xx rate",
    "rate_5xx_pct": "5xx rate",
    "errors_4xx": "4xx",
    "errors_5xx": "5xx",
    "cache_status": "Cache status",
    "request_pct": "Share of requests",
    "byte_pct": "Share of bytes",
    "counted_as_hit": "Counted as hit",
    "status_code": "Status",
    "class": "Class",
    "pct": "Share",
    "share_pct": "Share",
    "host": "Host",
    "path": "Path",
    "misses": "Misses",
    "miss_requests": "Misses",
    "miss_bytes": "Miss bytes",
    "errors": "Errors",
    "commonest_status": "Commonest status",
    "referer_host": "Referring host",
    "country_code": "Country",
    "asn": "ASN",
    "asn_organization": "Network",
    "browser": "Browser",
    "os": "Operating system",
    "crawler": "Bot",
    "ai_crawler": "AI crawler",
    "tool": "Tool",
    "pull_zone_id": "Zone",
    "metric": "Figure",
    "today": "This day",
    "previous_day": "Day before",
    "change_pct": "Change",
    "change_pp": "Change (pp)",
    "p50_bytes": "Median",
    "p95_bytes": "95th percentile",
    "p99_bytes": "99th percentile",
    "max_bytes": "Largest",
    "distinct_paths": "Distinct paths",
    "distinct_clients": "Distinct clients",
    "partial": "Partial day",
}

METRICS = {
    "requests": "Requests",
    "bytes": "Bandwidth",
    "request_hit_ratio_pct": "Request hit ratio",
    "byte_hit_ratio_pct": "Byte hit ratio",
    "rate_4xx_pct": "4xx rate",
    "rate_5xx_pct": "5xx rate",
}

# Plain numbers, never with thousands separators.
CODES = {"status_code", "commonest_status", "asn", "pull_zone_id"}


def header(column: str) -> str:
    return HEADERS.get(column, column.replace("_", " ").capitalize())


def scaled_bytes(value: float) -> tuple[float, str]:
    """``value`` bytes in the largest decimal unit that keeps it under 1000 (up to TB)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(value) < 1000:
            return value, unit
        value /= 1000
    return value, "TB"


def human_bytes(value: Any) -> str:
    if value is None:
        return "–"
    size, unit = scaled_bytes(float(value))
    return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"


def count(value: Any) -> str:
    return "–" if value is None else f"{round(float(value)):,}"


def percent(value: Any) -> str:
    return "–" if value is None else f"{float(value):.2f} %"


def points(value: Any) -> str:
    return "–" if value is None else f"{float(value):+.2f} pp"


def change(value: Any) -> str:
    return "–" if value is None else f"{float(value):+.1f} %"


def cell(value: Any, column: str) -> str:
    """One table cell, by what its column holds."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if column == "hour" and isinstance(value, int):
        return f"{value:02d}:00"
    if isinstance(value, date):
        return value.isoformat()
    if not isinstance(value, (int, float)):
        return str(plain(value))
    if column in CODES:
        return str(value)
    if column.endswith("_change_pct"):  # --compare: a count's change
        return change(value)
    if column.endswith("_change_pp"):  # a share's, ratio's or rate's
        return points(value)
    if column == "ratio":
        return f"{value:.6f}"
    if "bytes" in column:
        return human_bytes(value)
    if column.endswith("pct"):
        return change(value) if column == "change_pct" else percent(value)
    if column == "change_pp":
        return points(value)
    if column == "avg_mbps":
        return f"{value:,.2f}"
    if isinstance(value, int) or float(value).is_integer():
        return count(value)
    return f"{value:,.2f}"


def metric_value(metric: str, value: Any) -> str:
    """A day-over-day figure, by its metric: a count, bytes or a rate."""
    if metric == "bytes":
        return human_bytes(value)
    if metric == "requests":
        return count(value)
    return percent(value)
