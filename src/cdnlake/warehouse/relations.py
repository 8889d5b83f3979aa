"""What every engine's session shares: the result of a query, and the relations' names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Relations keep the names users already query by: the bookkeeping tables are
# partitioned by ``zone``, which the relations also show as ``pull_zone_id``.
ALIASES = {"ingest_runs", "ingest_gaps", "rejected_lines"}


@dataclass
class Result:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    more: bool = False  # rows beyond the limit were left out
