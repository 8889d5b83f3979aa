"""``--compare previous|week``: every table of a report beside the same table of the
period compared with (the previous period of the same length, or the same days a week
before), as change columns.

A row is paired with the row of the other period that has the same keys (the hour, the
path, the country...; a range's days by their place: its first day with the other's
first); a count changes in % (``requests_change_pct``), a share, ratio or rate in
percentage points (``request_hit_ratio_pct_change_pp``). A row the other period's table
does not hold (a path outside its top rows) has no change: "–", not a made-up +100 %.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from cdnlake.errors import UsageError
from cdnlake.reports.data import ReportData, Table

COMPARES = ("previous", "week")
# What a row is, where it has it: its keys (a day is paired by its place in the range).
KEYS = {
    "hour",
    "bucket",
    "cache_status",
    "status_code",
    "class",
    "host",
    "path",
    "referer_host",
    "country_code",
    "asn",
    "browser",
    "os",
    "tool",
    "crawler",
    "ai_crawler",
    "pull_zone_id",
    "metric",
}
# Numbers that are no figure to compare: codes, flags.
NOT_FIGURES = KEYS | {"date", "commonest_status", "partial", "counted_as_hit"}
# Tables not compared: day over day is a comparison already; completeness and clients say
# how the lake holds the day, not its traffic.
NOT_COMPARED = {"day_over_day", "completeness", "clients"}


def compared_period(day: date, end: date | None, how: str) -> tuple[date, date | None]:
    """The period ``day``..``end`` is compared with: the one just before it, of the same
    length (``previous``), or the same days a week before (``week``)."""
    if how not in COMPARES:
        raise UsageError(f"report --compare: expected one of {', '.join(COMPARES)}, got {how!r}")
    length = ((end or day) - day).days + 1
    shift = timedelta(days=7 if how == "week" else length)
    return day - shift, (end - shift if end is not None else None)


def change_column(column: str) -> str:
    """The column that holds ``column``'s change: in % for a count, in points for a %."""
    return f"{column}_change_pp" if column.endswith("pct") else f"{column}_change_pct"


def figures(table: Table) -> list[str]:
    """The columns of ``table`` that hold figures to compare."""
    out = []
    for at, column in enumerate(table.columns):
        if column in NOT_FIGURES:
            continue
        values = [r[at] for r in table.rows if r[at] is not None]
        if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out.append(column)
    return out


def change(now: Any, before: Any, column: str) -> float | None:
    """``now`` against ``before``: points for a %, else % (None where undefined)."""
    if now is None or before is None:
        return None
    if column.endswith("pct"):
        return round(float(now) - float(before), 2)
    if float(before) == 0:
        return None
    return round(100.0 * (float(now) - float(before)) / float(before), 2)


def add_changes(table: Table, before: Table) -> None:
    """Append to ``table`` a change column per figure, against ``before`` (in place)."""
    columns = figures(table)
    if not columns:
        return
    keys = [c for c in table.columns if c in KEYS]
    positional = "date" in table.columns

    def key(row: tuple[Any, ...], t: Table) -> tuple[Any, ...]:
        return tuple(str(row[t.columns.index(c)]) for c in keys)

    paired: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    if not positional:
        for row in before.rows:
            paired.setdefault(key(row, before), row)
    rows = []
    for i, row in enumerate(table.rows):
        if positional:
            other = before.rows[i] if i < len(before.rows) else None
        elif not keys:
            other = before.rows[0] if before.rows else None
        else:
            other = paired.get(key(row, table))
        added = []
        for column in columns:
            then = None
            if other is not None and column in before.columns:
                then = other[before.columns.index(column)]
            added.append(change(row[table.columns.index(column)], then, column))
        rows.append((*row, *added))
    table.rows = rows
    for column in columns:
        name = change_column(column)
        table.columns.append(name)
        unit = " (pp)" if name.endswith("_pp") else ""
        table.labels[name] = f"{table.heading(column)}: change{unit}"


def compare(data: ReportData) -> None:
    """Every table of ``data`` that ``data.previous`` has too gets its change columns."""
    if data.previous is None:
        return
    for name, table in data.sections.items():
        before = data.previous.sections.get(name)
        if before is None or name in NOT_COMPARED:
            continue
        add_changes(table, before)
