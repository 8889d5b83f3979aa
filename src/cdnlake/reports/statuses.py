"""Status codes grouped by class (2xx, 3xx, 4xx, 5xx), each class with its codes."""

from __future__ import annotations

from typing import Any

from cdnlake.reports.data import Table

TITLE = "Status codes by class"
# What each class means, in RFC 9110's words.
MEANINGS = {
    "1xx": "informational",
    "2xx": "success",
    "3xx": "redirection",
    "4xx": "client error",
    "5xx": "server error",
}


def status_classes(codes: Table) -> Table:
    """One row per class of the ``status_codes`` table: (class, requests, pct, codes),
    ``codes`` the class's status codes, most requests first."""
    by_class: dict[str, list[dict[str, Any]]] = {}
    total = 0
    for row in codes.records():
        by_class.setdefault(str(row["class"]), []).append(row)
        total += int(row["requests"])
    rows: list[tuple[Any, ...]] = []
    for name in sorted(by_class):
        members = by_class[name]
        requests = sum(int(r["requests"]) for r in members)
        ranked = sorted(members, key=lambda r: (-int(r["requests"]), int(r["status_code"])))
        rows.append(
            (
                name,
                requests,
                round(100.0 * requests / total, 2) if total else None,
                " ".join(str(r["status_code"]) for r in ranked),
            )
        )
    return Table(TITLE, ["class", "requests", "pct", "codes"], rows)


def grouped(codes: Table) -> list[dict[str, Any]]:
    """The classes with their codes nested, for JSON and the HTML panel."""
    out = []
    for row in status_classes(codes).records():
        members = [r for r in codes.records() if str(r["class"]) == row["class"]]
        members.sort(key=lambda r: (-int(r["requests"]), int(r["status_code"])))
        out.append(
            {
                "class": row["class"],
                "meaning": MEANINGS.get(row["class"], ""),
                "requests": row["requests"],
                "pct": row["pct"],
                "codes": [
                    {"status_code": r["status_code"], "requests": r["requests"], "pct": r["pct"]}
                    for r in members
                ],
            }
        )
    return out
