"""Retention: what is older than ``[retention]`` leaves the lake, as Delta removes.

``requests`` and ``shield_events`` lose whole days older than ``requests_days``, each zone's
in one rewrite (:mod:`cdnlake.lake.upkeep.rewrite`); the bookkeeping tables lose rows older
than ``bookkeeping_days``. ``requests_days`` is at least the provider's 3 days, so expiry
never races a pass for its rows. Rows of ``erased_requests`` an earlier cdnlake wrote raw
are rewritten hashed, whatever ``[retention]`` says (``Bookkeeping.hash_erased_ids``).
``erasures`` rows stay, but lose the erased person's activity older than
``bookkeeping_days`` (:func:`prune_erasures`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from cdnlake.config import RetentionConfig
from cdnlake.errors import StopRequested, StorageError, first_line
from cdnlake.lake.log.schema import (
    AUDIT_DAYS,
    ERASED_REQUESTS,
    ERASURES,
    INGEST_GAPS,
    INGEST_RUNS,
    REJECTED_LINES,
    REQUESTS,
    SHIELD_EVENTS,
    TableSpec,
    frame_of,
    polars_schema,
)
from cdnlake.lake.log.store import add_actions_table
from cdnlake.lake.log.table import Delete, Merge
from cdnlake.lake.upkeep.rewrite import Rewriter, rewrite
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.session import LakeSession

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger(__name__)

# Each bookkeeping table's time: a row older than bookkeeping_days by it is expired.
# Not ``erasures``: the provider's archive serves old days for as long as it keeps them,
# so a backfill may read an erased request again at any time; the erasure (a keyed hash)
# keeps it out, and is the operator's record of the erasure. Only its activity (the hours
# and days it removed requests from) goes, by :func:`prune_erasures`.
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
        prune_erasures(session, first, zones)
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


# The columns of an erasure that are the erased person's activity, not its scope.
ACTIVITY = ("hours_removed", "days")


def prune_erasures(session: LakeSession, first: date, zones: list[int] | None) -> int:
    """Each erasure's ``hours_removed`` entries and ``days`` before ``first`` (of ``zones``,
    all without) removed from its rows, through the table's committer: they are the erased
    person's timeline, kept only for the audit of days ``audit_days`` keeps too. The rows,
    their scope (``from_day``, ``to_day``) and totals stay: they hold the rows back. How
    many rows were rewritten."""
    import polars as pl

    found = _pruned_erasures(session, first, zones)
    if found.height == 0:
        return 0
    chosen = sorted({int(z) for z in found["zone"]})

    def rows() -> pl.DataFrame:  # asked again at each attempt, on the table as it is then
        return _pruned_erasures(session, first, zones).filter(pl.col("zone").is_in(chosen))

    merge = Merge(
        rows,
        "t.erasure_id = s.erasure_id",
        chosen,
        update={column: f"s.{column}" for column in ACTIVITY},
    )
    session.merge_table(ERASURES).committer.run(merge, patient=False)
    log.info("erasures: hours and days before %s pruned from %d row(s)", first, found.height)
    return found.height


def _pruned_erasures(session: LakeSession, first: date, zones: list[int] | None) -> pl.DataFrame:
    """The erasure rows holding activity before ``first``, as they are to be without it."""
    import polars as pl

    schema = polars_schema(ERASURES.schema)
    table = session.reader(ERASURES)
    if table is None:
        return pl.DataFrame(schema=schema)
    try:
        held = frame_of(session.lake.dataset(ERASURES, table).to_table())
    except OSError as exc:
        raise StorageError(f"cannot read erasures: {first_line(exc)}") from None
    out: list[dict[str, Any]] = []
    for row in held.to_dicts():
        mine = not zones or int(row["zone"]) in zones
        pruned = {
            "hours_removed": _hours_from(row["hours_removed"], first, zones),
            "days": _days_from(row["days"], first) if mine else row["days"],
        }
        if any(pruned[c] != row[c] for c in ACTIVITY):
            out.append({**row, **pruned})
    return pl.DataFrame(out, schema=schema)


def _hours_from(text: str | None, first: date, zones: list[int] | None) -> str | None:
    """``hours_removed`` (``{"7": {"2026-11-20T10": 12}}``) without the hours before
    ``first`` of ``zones`` (all without); None where no hour is left."""
    if not text:
        return text
    held: dict[str, dict[str, int]] = json.loads(text)
    kept = {
        zone: {
            h: n
            for h, n in hours.items()
            if (zones and int(zone) not in zones) or date.fromisoformat(h[:10]) >= first
        }
        for zone, hours in held.items()
    }
    if kept == held:
        return text  # as written
    kept = {zone: hours for zone, hours in kept.items() if hours}
    return json.dumps(kept, separators=(",", ":")) if kept else None


def _days_from(text: str | None, first: date) -> str | None:
    """``days`` ("2026-11-20,2026-11-21") without those before ``first``."""
    if not text:
        return text
    kept = [d for d in text.split(",") if date.fromisoformat(d) >= first]
    return ",".join(kept) or None
