"""Hourly rollups of ``requests`` (``requests_hourly``): what reports over weeks read.

Each rolled-up day of a zone carries the fingerprint of the ``requests`` files it was
computed from; one whose files changed since no longer matches, and readers compute it
from ``requests`` instead: rollups can be late, never wrong. ``maintain`` refreshes them.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any

import duckdb
from deltalake import DeltaTable

from cdnlake.lake.log.schema import DATE, INTEGER, LONG, REQUESTS, STRING, TableSpec, frame_of
from cdnlake.lake.log.store import Lake, add_actions_table
from cdnlake.sqlfiles import internal_sql

if TYPE_CHECKING:  # loaded by the refresh alone: status reads this module's bookkeeping
    import polars as pl
    import pyarrow as pa

    from cdnlake.lake.zone.session import LakeSession

log = logging.getLogger(__name__)

ROLLUP = TableSpec(
    "requests_hourly",
    "pull_zone_id",
    {
        "date": DATE,
        "hour": INTEGER,
        "cache_status": STRING,
        "status_code": INTEGER,
        "requests": LONG,
        "bytes": LONG,
        "files_hash": STRING,  # the requests files this partition was computed from
    },
    by_date=False,
)

Key = tuple[int, date]


@dataclass
class Partitions:
    """The ``requests`` snapshot by partition: its files and their fingerprint."""

    files: dict[Key, list[str]] = field(default_factory=dict)  # paths, relative to the table

    def fingerprint(self, key: Key) -> str:
        joined = "\n".join(sorted(self.files[key]))
        return hashlib.sha1(joined.encode(), usedforsecurity=False).hexdigest()

    def fingerprints(self) -> dict[Key, str]:
        return {key: self.fingerprint(key) for key in self.files}


def partitions(
    table: DeltaTable, zones: Collection[int] | None = None, days: Collection[date] | None = None
) -> Partitions:
    """The ``requests`` snapshot's partitions of ``zones`` and ``days`` (None: all).

    Asked for some, only their files become Python values (:meth:`Lake.add_actions`): a
    report's day pays for its own partitions. Asked for all, the columns are read whole
    (no dict per file)."""
    columns = ["path", "partition.pull_zone_id", "partition.date"]
    if zones is None and days is None:
        actions = add_actions_table(table)
        rows = zip(*(actions.column(c).to_pylist() for c in columns), strict=True)
    else:
        wanted: list[Any] = []
        if zones is not None:
            wanted.append(("pull_zone_id", "in", sorted(zones)))
        if days is not None:
            wanted.append(("date", "in", sorted(days)))
        chosen = Lake.add_actions(REQUESTS, table, wanted)
        rows = zip(*([a[c] for a in chosen] for c in columns), strict=True)
    out: dict[Key, list[str]] = defaultdict(list)
    for path, zone, day in rows:
        out[(int(zone), day)].append(path)
    return Partitions(dict(out))


def rolled_up(lake: Lake, zones: Collection[int] | None = None) -> dict[Key, str]:
    """The fingerprint each rolled-up partition (of ``zones``; all with None) was
    computed from."""
    table = lake.open(ROLLUP)
    if table is None:
        return {}
    columns = ["pull_zone_id", "date", "files_hash"]
    wanted: list[Any] | None = None if zones is None else [("pull_zone_id", "in", list(zones))]
    rows = lake.dataset(ROLLUP, table, wanted).to_table(columns=columns)
    rows = rows.group_by(columns).aggregate([])
    return {(int(r["pull_zone_id"]), r["date"]): r["files_hash"] for r in rows.to_pylist()}


def fresh(current: dict[Key, str], done: dict[Key, str]) -> list[Key]:
    """The partitions whose rollup was computed from the files they hold now."""
    return sorted(key for key, fingerprint in current.items() if done.get(key) == fingerprint)


def stale(current: dict[Key, str], done: dict[Key, str]) -> list[Key]:
    """The others: never rolled up, or changed since."""
    return sorted(key for key, fingerprint in current.items() if done.get(key) != fingerprint)


def refresh(
    session: LakeSession, zones: list[int] | None = None, skip: Collection[tuple[int, str]] = ()
) -> int:
    """Roll up every partition of ``requests`` (of ``zones``) that is missing or stale;
    how many were. Idempotent: a second run finds nothing to do. The (zone, ISO day)
    partitions in ``skip`` (a damaged file left there by ``maintain``) wait for a later run."""
    lake = session.lake
    table = lake.open(REQUESTS)
    if table is None:
        return 0
    current = partitions(table, zones or None).fingerprints()
    if skip:
        current = {k: v for k, v in current.items() if (k[0], str(k[1])) not in skip}
    todo = stale(current, rolled_up(lake, zones or None))
    by_zone: dict[int, list[date]] = defaultdict(list)
    for zone, day in todo:
        by_zone[zone].append(day)
    frames = [
        _aggregate(lake, table, zone, days, {d: current[(zone, d)] for d in days})
        for zone, days in sorted(by_zone.items())
    ]
    if frames:
        import pyarrow as pa

        _replace(session, by_zone, frame_of(pa.concat_tables(frames)))
    if todo:
        log.info("rollups: %d partition(s) of requests rolled up", len(todo))
    return len(todo)


def _aggregate(
    lake: Lake, table: DeltaTable, zone: int, days: list[date], hashes: dict[date, str]
) -> pa.Table:
    import pyarrow as pa

    partitions_wanted: list[Any] = [
        ("pull_zone_id", "=", str(zone)),
        ("date", "in", [d.isoformat() for d in days]),
    ]
    dataset = lake.dataset(REQUESTS, table, partitions_wanted)
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("_requests", dataset)
        con.register(
            "_hashes",
            pa.table(
                {"date": pa.array(list(hashes), pa.date32()), "files_hash": list(hashes.values())}
            ),
        )
        result = con.sql(internal_sql("rollup_partitions")).to_arrow_table()
    finally:
        con.close()
    assert result is not None
    return result.select(list(ROLLUP.schema)).cast(ROLLUP.arrow_schema())


def _replace(session: LakeSession, days: dict[int, list[date]], rows: pl.DataFrame) -> None:
    """The zones' rolled-up days, replaced in one commit (Delta's replaceWhere), through
    the table's committer."""
    from cdnlake.lake.log.table import Replace

    # Zone ids and dates from the Delta log, not from input: no value is a stranger's.
    predicate = " OR ".join(
        f"(pull_zone_id = {int(zone)} AND date IN ("
        + ", ".join(f"'{d.isoformat()}'" for d in listed)
        + "))"
        for zone, listed in sorted(days.items())
    )
    session.merge_table(ROLLUP).committer.run(Replace(predicate, lambda: rows), patient=False)
