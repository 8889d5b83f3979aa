"""JSON, Markdown and CSV renderings of a report. Strangers' text stays inert in each."""

from __future__ import annotations

import io
import json
import re
from typing import Any

from cdnlake.reports.build import ReportData
from cdnlake.warehouse.output import plain, write_csv

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~&])")


def to_json(data: ReportData) -> str:
    payload = {
        "report": "cdnlake daily report",
        "date": data.day.isoformat(),
        "zone": data.zone,
        "hit_statuses": data.hit_statuses,
        "generated_at": plain(data.generated_at),
        "empty": data.empty,
        "sections": {
            name: {"title": t.title, "rows": [plain(r) for r in t.records()]}
            for name, t in data.sections.items()
        },
    }
    return json.dumps(payload, ensure_ascii=False, indent=1) + "\n"


def md_escape(value: Any) -> str:
    """Backslash-escape every Markdown (and HTML) metacharacter; fold line breaks."""
    text = "NULL" if value is None else str(plain(value))
    text = text.replace("\r", " ").replace("\n", " ")
    return _MD_SPECIAL.sub(r"\\\1", text)


def fmt_number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return md_escape(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return md_escape(value)


def to_markdown(data: ReportData) -> str:
    scope = f"pull zone {data.zone}" if data.zone is not None else "all pull zones"
    lines = [
        f"# CDN daily report, {data.day.isoformat()} (UTC), {scope}",
        "",
        f"Hits counted: {', '.join(data.hit_statuses)}. Generated {plain(data.generated_at)}.",
        "",
    ]
    if data.empty:
        lines += ["**No traffic was recorded for this day.**", ""]
    for table in data.sections.values():
        lines += [f"## {table.title}", ""]
        if not table.rows:
            lines += ["_No rows._", ""]
            continue
        lines.append("| " + " | ".join(md_escape(c) for c in table.columns) + " |")
        lines.append("|" + "|".join("---" for _ in table.columns) + "|")
        for row in table.rows:
            lines.append("| " + " | ".join(fmt_number(v) for v in row) + " |")
        lines.append("")
    return "\n".join(lines)


def to_csv(data: ReportData) -> dict[str, str]:
    out = {}
    for name, table in data.sections.items():
        buffer = io.StringIO()
        write_csv(buffer, table.columns, table.rows)
        out[name] = buffer.getvalue()
    return out
