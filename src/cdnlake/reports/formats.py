"""JSON, Markdown and CSV renderings of a report. Strangers' text stays inert in each."""

from __future__ import annotations

import io
import json
import re
from typing import Any

from cdnlake.reports.agents import KINDS
from cdnlake.reports.data import ReportData
from cdnlake.reports.text import cell, header, metric_value
from cdnlake.warehouse.output import plain, write_csv

# What Markdown (and the HTML it may carry) reads as markup inside a table cell or a
# heading, where every value of a report goes: emphasis, code, links and images (their
# brackets: the parentheses and ``!`` are inert without them), HTML tags and entities,
# strikethrough, the cell separator, and the backslash itself. Never at the start of a line
# (a cell follows "| ", a heading's text "# "), so a dot, ``#``, ``-`` or ``+`` stays plain:
# ``www.example.com``, not ``www\.example\.com``.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


def to_json(data: ReportData) -> str:
    def rows(name: str) -> list[Any]:
        table = data.sections.get(name)
        return [] if table is None else [plain(r) for r in table.records()]

    payload: dict[str, Any] = {
        "report": "cdnlake report" if data.is_range else "cdnlake daily report",
        "date": data.day.isoformat(),
        "zone": data.zone,
        "hit_statuses": data.hit_statuses,
        "generated_at": plain(data.generated_at),
        "empty": data.empty,
        "slice": data.slice.params(),
    }
    if data.previous is not None:  # each table's change columns are against this period
        payload["compare"] = {
            "with": data.compare,
            "date": data.previous.day.isoformat(),
            "to_date": (data.previous.end or data.previous.day).isoformat(),
        }
    payload["partial_days"] = {day.isoformat(): why for day, why in sorted(data.partial.items())}
    if data.is_range:
        assert data.end is not None
        payload["to_date"] = data.end.isoformat()
    else:  # the panels, by the names people look for them under
        payload["top_paths"] = {
            "by_requests": rows("top_paths_by_requests"),
            "by_bytes": rows("top_paths_by_bytes"),
            "by_misses": rows("top_paths_by_misses"),
            "by_miss_bytes": rows("top_miss_paths_by_bytes"),
        }
        payload["top_referers"] = rows("top_referers")
        payload["user_agents"] = {kind: rows(kind) for kind in KINDS}
        payload["status_codes"] = _status_groups(data)
        payload["countries"] = rows("countries")
        payload["asns"] = rows("asns")
        payload["completeness"] = rows("completeness")
    payload["sections"] = {
        name: {"title": t.title, "rows": [plain(r) for r in t.records()]}
        for name, t in data.sections.items()
    }
    return json.dumps(payload, ensure_ascii=False, indent=1) + "\n"


def _status_groups(data: ReportData) -> list[Any]:
    """The status classes, each with its codes."""
    from cdnlake.reports.statuses import grouped

    table = data.sections.get("status_codes")
    return [] if table is None else [plain(g) for g in grouped(table)]


def md_escape(value: Any) -> str:
    """Backslash-escape what Markdown (and HTML) would read as markup where a value goes
    (a table cell, a heading's text); fold line breaks."""
    text = "NULL" if value is None else str(plain(value))
    text = text.replace("\r", " ").replace("\n", " ")
    return _MD_SPECIAL.sub(r"\\\1", text)


def to_markdown(data: ReportData) -> str:
    scope = f"pull zone {data.zone}" if data.zone is not None else "all pull zones"
    period = (
        f"{data.day.isoformat()} to {data.end.isoformat()}" if data.end else data.day.isoformat()
    )
    kind = "report" if data.is_range else "daily report"
    sliced = f", {md_escape(data.slice.describe())}" if data.slice else ""
    lines = [
        f"# CDN {kind}, {period} (UTC), {md_escape(scope)}{sliced}",
        "",
        f"Hits counted: {', '.join(data.hit_statuses)}. Generated {plain(data.generated_at)}.",
        "",
    ]
    if data.previous is not None:
        lines += [
            f"Compared with {data.compared_with} ({data.compare}): counts change in %, "
            "shares and rates in percentage points (pp).",
            "",
        ]
    for note in data.partial_notes():
        lines += [f"_{md_escape(note)}_", ""]
    if data.empty:
        lines += [f"**No traffic was recorded for this {data.noun}.**", ""]
    for table in data.sections.values():
        lines += [f"## {table.title}", ""]
        if not table.rows:
            lines += ["_No rows._", ""]
            continue
        lines.append("| " + " | ".join(md_escape(table.heading(c)) for c in table.columns) + " |")
        lines.append("|" + "|".join("---" for _ in table.columns) + "|")
        for row in table.rows:
            if table.columns[:1] == ["metric"]:  # day over day: each figure in its own unit
                metric = str(row[0])
                shown = [header(metric), metric_value(metric, row[1]), metric_value(metric, row[2])]
                shown += [cell(v, c) for v, c in zip(row[3:], table.columns[3:], strict=True)]
            else:
                shown = [cell(v, c) for v, c in zip(row, table.columns, strict=True)]
            lines.append("| " + " | ".join(md_escape(v) for v in shown) + " |")
        lines.append("")
    return "\n".join(lines)


def to_csv(data: ReportData) -> dict[str, str]:
    out = {}
    for name, table in data.sections.items():
        buffer = io.StringIO()
        write_csv(buffer, table.columns, table.rows)
        out[name] = buffer.getvalue()
    return out
