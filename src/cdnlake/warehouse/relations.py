"""What every engine's session shares: the result of a query, and the relations' names.

Cheap to import (``cdnlake --help`` names the relations): DuckDB is imported by the
function that parses SQL."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Relations keep the names users already query by: the bookkeeping tables are
# partitioned by ``zone``, which the relations also show as ``pull_zone_id``.
ALIASES = {
    "ingest_runs",
    "ingest_gaps",
    "rejected_lines",
    "audit_days",
    "archive_parts",
    "erasures",
}
HOURLY = "requests_hourly"
RELATIONS = (
    "requests",
    HOURLY,
    "shield_events",
    "ingest_runs",
    "ingest_gaps",
    "rejected_lines",
    "audit_days",
    "archive_parts",
    "erasures",
)
_PARAMETER = re.compile(r"\$\w+")


def relations_named(sql: str) -> set[str] | None:
    """The lake's relations a query reads, as DuckDB's own parser finds them (not a
    column or a CTE of the same name): those a session needs to define. None when the
    parser cannot tell (a syntax error, several statements): then every relation is."""
    import duckdb

    try:
        names = duckdb.get_table_names(_PARAMETER.sub("NULL", sql))
    except duckdb.Error:
        return None
    return {name.lower() for name in names} & set(RELATIONS)


@dataclass
class Result:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    more: bool = False  # rows beyond the limit were left out
    total: int | None = None  # the rows the query had, where known (more than ``rows``)
    seconds: float | None = None  # how long the query ran, where timed
