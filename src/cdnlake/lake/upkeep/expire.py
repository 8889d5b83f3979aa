"""Retention: what is older than ``[retention]`` leaves the lake, as Delta removes.

``requests`` and ``shield_events`` lose whole days older than ``requests_days``, each zone's
in one rewrite (:mod:`cdnlake.lake.upkeep.rewrite`); the bookkeeping tables lose rows older
than ``bookkeeping_days``. ``requests_days`` is at least the provider's 3 days, so expiry
never races a pass for its rows. Rows of ``erased_requests`` an earlier cdnlake wrote raw
are rewritten hashed, whatever ``[retention]`` says (``Bookkeeping.hash_erased_ids``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime

from cdnlake.config import RetentionConfig
from cdnlake.errors import StopRequested
from cdnlake.lake.log.schema import (
    AUDIT_DAYS,
    ERASED_REQUESTS,
    INGEST_GAPS,
    INGEST_RUNS,
    REJECTED_LINES,
    REQUESTS,
    SHIELD_EVENTS,
    TableSpec,
)
from cdnlake.lake.log.store import add_actions_table
from cdnlake.lake.log.table import Delete
from cdnlake.lake.upkeep.rewrite import Rewriter, rewrite
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.session import LakeSession

log = logging.getLogger(__name__)

# Each bookkeeping table's time: a row older than bookkeeping_days by it is expired.
# Not ``erasures``: the provider's archive serves old days for as long as it keeps them,
# so a backfill may read an erased request again at any time; the erasure (a keyed hash)
# keeps it out, and is the operator's record of the erasure.
BOOKKEEPING_TIMES: tuple[tuple[TableSpec, str], ...] = (
    (INGEST_RUNS, "started"),
    (INGEST_GAPS, "gap_to"),
    (REJECTED_LINES, "rejected_at"),
    (AUDIT_DAYS, "day"),
    (ERASED_REQUESTS, "ts"),  # the hour of the request
)


@dataclass
class Expired:
    """What retention removed from one table."""

    table: str
    partitions: int = 0  # (zone, day) partitions
    files: int = 0  # data files removed (they leave storage at a vacuum past vacuum_hours)
    rows: int = 0  # bookkeeping rows


def expire(
    session: LakeSession,
    retention: RetentionConfig,
    now: datetime,
    zones: list[int] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> list[Expired]:
    """Remove what ``retention`` no longer keeps (of ``zones``, all without): what went."""
    out: list[Expired] = []
    first = retention.first_kept(now)
    if first is not None:
        for spec in (REQUESTS, SHIELD_EVENTS):
            out.append(_expire_days(session, spec, first, zones, stop))
    first = retention.first_kept(now, retention.bookkeeping_days)
    if first is not None:
        for spec, column in BOOKKEEPING_TIMES:
            if stop():
                raise StopRequested()
            out.append(_expire_rows(session, spec, column, first, zones))
    Bookkeeping(session).hash_erased_ids(zones)
    return [e for e in out if e.partitions or e.rows]


def expired_days(
    session: LakeSession, spec: TableSpec, first: date, zones: list[int] | None
) -> dict[int, list[date]]:
    """The days before ``first`` that the table holds, by zone."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = session.lake.open(spec)
    if table is None:
        return {}
    actions = pa.table(add_actions_table(table))
    if actions.num_rows == 0:
        return {}
    zone, day = f"partition.{spec.zone_column}", "partition.date"
    days = pc.cast(actions[day], pa.date32())
    old = actions.filter(pc.less(days, pa.scalar(first, pa.date32())))
    found: dict[int, set[date]] = {}
    for z, d in zip(old[zone].to_pylist(), pc.cast(old[day], pa.date32()).to_pylist(), strict=True):
        if zones is None or int(z) in zones:
            found.setdefault(int(z), set()).add(d)
    return {z: sorted(d) for z, d in sorted(found.items())}


def _expire_days(
    session: LakeSession,
    spec: TableSpec,
    first: date,
    zones: list[int] | None,
    stop: Callable[[], bool],
) -> Expired:
    item = Expired(spec.name)
    for zone, days in expired_days(session, spec, first, zones).items():
        if stop():
            raise StopRequested()
        names = [d.isoformat() for d in days]

        def make(zone: int = zone, names: list[str] = names) -> Rewriter:
            return Rewriter(
                session, spec, zone, chooses=lambda day: day is not None and day < first, days=names
            )

        written = rewrite(make, {})
        item.partitions += len(days)
        item.files += written.files_removed
        log.info(
            "%s: zone %s: %d day(s) before %s expired (%d files removed)",
            spec.name,
            zone,
            len(days),
            first,
            written.files_removed,
        )
    return item


def _expire_rows(
    session: LakeSession, spec: TableSpec, column: str, first: date, zones: list[int] | None
) -> Expired:
    item = Expired(spec.name)
    if session.lake.open(spec) is None:
        return item
    moment = first.isoformat() if spec.schema[column] == "date" else f"{first}T00:00:00Z"
    where = f"{column} < '{moment}'"
    if zones:
        where += f" AND {spec.zone_column} IN ({', '.join(str(int(z)) for z in zones)})"
    deleted = session.merge_table(spec).committer.run(Delete(where), patient=False)
    if deleted is not None:
        item.rows, item.files = deleted.rows, deleted.files
    return item
