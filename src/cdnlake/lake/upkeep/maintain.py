"""Keeping the lake small and fast to open: expire, check, compact, checkpoint, vacuum.

Each (zone, day) of ``requests`` and ``shield_events`` is rewritten as one file sorted by
``ts`` (deduplication and time-range queries then read only their minutes), each key once,
through the table's door (:meth:`~cdnlake.lake.log.table.LogTable.replace`); a bookkeeping
table's files by delta-rs, through its committer (:class:`~cdnlake.lake.log.table.Compact`).
Then a checkpoint, and a vacuum of the files no version within the retention needs and of
files no entry ever named. The log and its app transactions are kept.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import polars as pl
from deltalake import DeltaTable

from cdnlake.config import RetentionConfig
from cdnlake.errors import (
    CdnlakeError,
    DataError,
    StopRequested,
    StorageError,
    StorageUnavailableError,
    ZoneBusyError,
    first_line,
)
from cdnlake.lake.log.delta_log import write_checkpoint
from cdnlake.lake.log.files import prepare
from cdnlake.lake.log.progress import ZoneHold
from cdnlake.lake.log.schema import REQUESTS, TABLES, TableSpec, frame_of
from cdnlake.lake.log.store import Lake, add_actions_table
from cdnlake.lake.log.table import Compact, Replacement
from cdnlake.lake.upkeep import rollups
from cdnlake.lake.upkeep.expire import expire
from cdnlake.lake.upkeep.rollups import ROLLUP
from cdnlake.lake.zone.damage import BeforeMove, DamagedFile, unreadable_files
from cdnlake.lake.zone.lock import zone_lock
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.retention import RETENTION

log = logging.getLogger(__name__)

EVERY_TABLE = (*TABLES, ROLLUP)  # what maintain checks, compacts and vacuums
DEFAULT_RETENTION_HOURS = 168  # Delta's default: readers of week-old snapshots still work
# A data file no log entry names is removed once this old: a commit is never on its way so
# long (whatever --retention-hours says: 0 must not delete a commit's files in flight).
UNNAMED_FILE_HOURS = 24
TARGET_FILE_BYTES = 256 << 20
HOLD_WAIT_SECONDS = 120.0  # how long a rewind waits for a local pass of its zone to end
OPEN_DAY_FILES = 32  # a zone's open day with more small files than this is compacted (OpenDays)
SMALL_FILE_BYTES = 32 << 20  # files under this are small; larger ones are left as they are


@dataclass
class TableReport:
    table: str
    files_before: int = 0
    files_after: int = 0
    compacted: int = 0  # small files rewritten
    vacuumed: int = 0  # data files removed from storage (``unnamed`` among them)
    unnamed: int = 0  # of those, files no log entry ever named (a commit that never came)
    damaged: list[DamagedFile] = field(default_factory=list)
    rolled_up: int = 0  # partitions of requests rolled up (requests_hourly)
    # Rows removed because another row of their partition has the same key (one of each
    # kept), and where: deduplication assumes a repeat has its first one's ``ts``, +/-1 s.
    repeats: int = 0
    repeated: list[str] = field(default_factory=list)
    # What [retention] removed: (zone, day) partitions, or rows of a bookkeeping table.
    expired_days: int = 0
    expired_rows: int = 0

    def line(self) -> str:
        text = (
            f"{self.table}: {self.files_before} -> {self.files_after} files, "
            f"{self.compacted} compacted, {self.vacuumed} vacuumed"
        )
        if self.unnamed:
            text += f" ({self.unnamed} never committed)"
        if self.table == ROLLUP.name:
            text += f", {self.rolled_up} partition(s) rolled up"
        if self.expired_days:
            text += f", {self.expired_days} day partition(s) expired"
        if self.expired_rows:
            text += f", {self.expired_rows} row(s) expired"
        if self.repeats:
            text += f", {self.repeats} repeated row(s) removed"
        for where in self.repeated:
            text += f"; REPEATED KEYS {where}"
        for d in self.damaged:
            fate = f"NOT set aside: {d.left}" if d.left else f"kept as {d.moved_to}"
            text += f"; DAMAGED {d.path} ({d.reason}), {fate}"
        return text


@dataclass
class MaintainReport:
    tables: list[TableReport] = field(default_factory=list)

    @property
    def left(self) -> list[DamagedFile]:
        """Damaged files left in place (their zone not held in time): maintain is to run
        again."""
        return [d for t in self.tables for d in t.damaged if d.left]


def maintain(
    session: LakeSession,
    zones: list[int] | None = None,
    *,
    retention_hours: int = DEFAULT_RETENTION_HOURS,
    check_all: bool = False,
    now: datetime | None = None,
    locks: Path | None = None,
    hold: ZoneHold | None = None,
    stop: Callable[[], bool] = lambda: False,
    retention: RetentionConfig | None = None,
) -> MaintainReport:
    """Expire (``retention``), check, compact the zones' partitions (all without
    ``zones``), checkpoint, vacuum.

    The check reads every data file the provider could still serve again (all with
    ``check_all``): one that does not decode is set aside and its span read again, or
    recorded as a gap past retention. ``locks`` (this machine's zone locks) and ``hold``
    (a fleet's leases) hold a zone while it is rewound; a zone not had in time keeps its
    damaged file, reported (``MaintainReport.left``), and its partitions are neither
    compacted nor rolled up. ``stop``: checked between files and partitions.
    """
    lake = session.lake
    configure(session)
    now = now or datetime.now(UTC)
    report = MaintainReport()
    # (table, zone, day) of damaged files left in place: not compacted, not rolled up.
    damaged_days: set[tuple[str, int, str]] = set()
    expired = {
        e.table: e for e in (expire(session, retention, now, zones, stop) if retention else [])
    }
    for spec in EVERY_TABLE:
        if stop():
            raise StopRequested()
        rolled_up = 0
        if spec is ROLLUP:  # after requests' compaction, whose new files it records
            rolled_up = rollups.refresh(
                session, zones, skip={(z, d) for t, z, d in damaged_days if t == REQUESTS.name}
            )
        table = lake.open(spec)
        if table is None:
            continue
        item = TableReport(spec.name, files_before=len(table.file_uris()), rolled_up=rolled_up)
        if spec.name in expired:
            item.expired_days = expired[spec.name].partitions
            item.expired_rows = expired[spec.name].rows
        if spec.key is not None:
            since = None if check_all else now - RETENTION
            before = _read_again_first(session, spec, locks, now, hold)
            door = session.log_table(spec)
            item.damaged = unreadable_files(door, table, since, before, stop)
            table.update_incremental()
            damaged_days |= {(spec.name, *d.partition) for d in item.damaged if d.left}
        skip = {(z, d) for t, z, d in damaged_days if t == spec.name}
        try:
            if spec.key is not None:  # through its door
                item.compacted += _sort_days(session, spec, table, zones, item, stop, skip)
            else:  # a bookkeeping table: delta-rs's optimize, through its committer
                committer = session.merge_table(spec).committer
                chosen: list[int | None] = [*zones] if zones else [None]
                for zone in chosen:
                    done = committer.run(Compact(zone, TARGET_FILE_BYTES), patient=False)
                    item.compacted += done.files if done is not None else 0
            table.update_incremental()
            write_checkpoint(lake, spec, table.version())  # (never moves the pointer back)
            item.vacuumed, item.unnamed = _vacuum(lake, spec, table, retention_hours)
            table.cleanup_metadata()
        except StopRequested:
            raise
        except Exception as exc:
            raise StorageError(
                f"maintain {spec.name}: {first_line(exc)} (a damaged file older than the "
                "provider's retention? `cdnlake maintain --check-all` sets those aside)"
            ) from None
        table.update_incremental()
        item.files_after = len(table.file_uris())
        if any(d.left for d in item.damaged):
            log.error("maintain %s (not compacted where it lies)", item.line())
        else:
            log.info("maintain %s", item.line())
        report.tables.append(item)
    return report


def configure(session: LakeSession) -> None:
    """Tables of an older cdnlake gain their properties, so that no log entry names a
    value of a personal column (``delta.dataSkippingStatsColumns``)."""
    for spec in EVERY_TABLE:
        session.lake.configure(spec)


def _vacuum(
    lake: Lake, spec: TableSpec, table: DeltaTable, retention_hours: int
) -> tuple[int, int]:
    """Remove the data files no version within ``retention_hours`` needs, then those no
    log entry ever named (a commit that never came) once ``UNNAMED_FILE_HOURS`` old: a
    younger one may be a commit still on its way. The files removed, and the unnamed.
    delta-rs records each vacuum in two entries of its own (commitInfo alone): synced on
    local disk before the next commit, as every one of delta-rs's."""
    enforce = retention_hours >= DEFAULT_RETENTION_HOURS
    before = table.version()

    def named(paths: list[str]) -> set[str]:  # relative to the table, as some come whole
        return {path.split(f"/{spec.name}/", 1)[-1] for path in paths}

    expired = named(
        table.vacuum(retention_hours, dry_run=False, enforce_retention_duration=enforce)
    )
    # Never younger than retention_hours: no removed file a reader may need goes either.
    floor = max(retention_hours, UNNAMED_FILE_HOURS)
    full = table.vacuum(
        floor, dry_run=False, enforce_retention_duration=floor >= DEFAULT_RETENTION_HOURS, full=True
    )
    unnamed = named(full) - expired  # (it names again the removed files deleted just now)
    table.update_incremental()
    lake.sync_commits(spec, before + 1, table.version())
    data = {path for path in expired | unnamed if path.endswith(".parquet")}  # no folder markers
    if unnamed & data:
        log.warning(
            "%s: %d data file(s) that no commit named removed (older than %d h)",
            spec.name,
            len(unnamed & data),
            floor,
        )
    return len(data), len(unnamed & data)


def vacuum_removed(session: LakeSession, specs: list[TableSpec]) -> int:
    """``--vacuum-now``: delete at once every data file these tables have removed; the
    count. Only while the caller holds every other writer off
    (:func:`cdnlake.lake.zone.lock.writers_held`). The log is kept whole."""
    deleted = 0
    for spec in specs:
        table = session.lake.open(spec)
        if table is None:
            continue
        try:
            deleted += _vacuum(session.lake, spec, table, 0)[0]
        except Exception as exc:
            raise StorageError(f"cannot vacuum {spec.name}: {first_line(exc)}") from None
    return deleted


def partitions_of_many_files(
    spec: TableSpec, table: DeltaTable, zones: list[int] | None
) -> list[tuple[int, date, int]]:
    """The (zone, day) partitions of ``zones`` (all without) that hold more than one data
    file, with their file counts: counted in Arrow, no Python value per file."""
    import pyarrow as pa
    import pyarrow.compute as pc

    log = pa.table(add_actions_table(table))
    if log.num_rows == 0:
        return []
    zone, day = f"partition.{spec.zone_column}", "partition.date"
    if zones:
        log = log.filter(pc.is_in(log[zone], pa.array(zones, log[zone].type)))
    counts = log.group_by([zone, day]).aggregate([("path", "count")])
    many = counts.filter(pc.greater_equal(counts["path_count"], 2))
    found = zip(*(many[c].to_pylist() for c in (zone, day, "path_count")), strict=True)
    return sorted((int(z), d, int(n)) for z, d, n in found)


def _sort_days(
    session: LakeSession,
    spec: TableSpec,
    table: DeltaTable,
    zones: list[int] | None,
    item: TableReport,
    stop: Callable[[], bool],
    skip: Collection[tuple[int, str]] = (),
) -> int:
    """Rewrite each (zone, day) partition of more than one file as one sorted by ``ts``,
    each key once (a key found twice is reported in ``item``); return the files
    rewritten. The (zone, day) partitions in ``skip`` (a damaged file left there) are
    left as they are."""
    rewritten = 0
    for zone, day, _count in partitions_of_many_files(spec, table, zones):
        if (zone, str(day)) in skip:
            continue
        if stop():
            raise StopRequested()
        done = compact(session, spec, table, zone, str(day), lambda files: files)
        if done is not None:
            files, repeats = done
            rewritten += files
            if repeats:
                item.repeats += repeats
                item.repeated.append(f"zone {zone} {day}: {repeats} row(s)")
    return rewritten


def compact(
    session: LakeSession,
    spec: TableSpec,
    table: DeltaTable,
    zone: int,
    day: str,
    choose: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    treat: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
) -> tuple[int, int] | None:
    """One (zone, day)'s files that ``choose`` picks (two at least; one with ``treat``,
    apply-privacy's policy, applied to the rows first) rewritten as one sorted by ``ts``,
    each key once, through the door (:meth:`~cdnlake.lake.log.table.LogTable.replace`:
    exactly the files read, no progress). The files replaced and the repeats removed, or
    None."""
    partition = [(spec.zone_column, "=", str(zone)), ("date", "=", day)]
    read: list[int] = []

    def plan() -> Replacement | None:
        table.update_incremental()  # the files as they are now
        actions = choose(session.lake.add_actions(spec, table, partition, stats=("size_bytes",)))
        if len(actions) < (1 if treat else 2):
            return None
        rows = frame_of(session.lake.dataset(spec, table, actions=actions).to_table())
        if treat is not None:
            rows = treat(rows)
        read[:] = [rows.height]
        once = prepare(spec, zone, rows.sort("ts"))  # each key once, the earliest kept
        return Replacement([str(a["path"]) for a in actions], once, treat is not None)

    done = session.log_table(spec).replace(zone, plan)
    if done is None:
        return None
    assert done.rows is not None
    repeats = read[0] - done.rows.height
    if repeats:
        log.error(
            "%s: zone %s %s held %d row(s) whose key (%s) another row has; removed, one of "
            "each kept (its earliest; deduplication assumes a repeat has the first one's ts)",
            spec.name,
            zone,
            day,
            repeats,
            spec.key,
        )
    return len(done.paths), repeats


class OpenDays:
    """A daemon's compaction of its zones' open day, during the day: a zone-day with more
    than ``OPEN_DAY_FILES`` files under ``SMALL_FILE_BYTES`` has them rewritten as one, as
    :func:`compact` does (a pass committing meanwhile keeps its files and its progress).
    Each table's snapshot is kept between runs and brought up to date."""

    def __init__(self, session: LakeSession) -> None:
        self.session = session
        self.lake = session.lake
        self._tables: dict[str, DeltaTable] = {}
        self.rewritten = 0  # files rewritten since this process began
        # The zones the last run could not compact (table, zone, why); tried again next run.
        self.failures: list[tuple[str, int, CdnlakeError]] = []

    def compact(
        self,
        spec: TableSpec,
        zones: list[int],
        day: date,
        stop: Callable[[], bool] = lambda: False,
    ) -> int:
        """Compact ``day`` of each of ``zones`` that holds too many small files; return
        the files rewritten. A zone whose files do not read (the store failing, or a file
        that does not decode, left for ``maintain``) is logged as an error and recorded in
        ``failures``; the other zones are compacted all the same."""
        if not zones:
            return 0
        table = self._tables.get(spec.name)
        if table is None:
            table = self.lake.open(spec)
            if table is None:
                return 0
            self._tables[spec.name] = table
        else:
            table.update_incremental()
        rewritten = 0
        self.failures = []
        for zone in zones:
            if stop():
                raise StopRequested()
            try:
                done = compact(self.session, spec, table, zone, day.isoformat(), _small)
            except StopRequested:
                raise
            except Exception as exc:  # one zone's trouble stops no other zone's compaction
                failure = _compaction_error(exc)
                self.failures.append((spec.name, zone, failure))
                log.error("compaction of %s zone %s %s: %s", spec.name, zone, day, failure)
                table.update_incremental()
                continue
            if done is not None:
                log.info(
                    "%s: zone %s %s: %d small files compacted into one",
                    spec.name,
                    zone,
                    day,
                    done[0],
                )
                rewritten += done[0]
        self.rewritten += rewritten
        return rewritten


def _small(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A zone-day's small files, when there are too many of them."""
    chosen = [a for a in actions if (a["size_bytes"] or 0) < SMALL_FILE_BYTES]
    return chosen if len(chosen) > OPEN_DAY_FILES else []


def _compaction_error(exc: Exception) -> CdnlakeError:
    """What stopped the daytime compaction of one zone's day, as one of ours.

    A file that does not decode is left where it is, for ``maintain``: its check sets
    it aside under the zone's lock or lease and has the zone read its span again (here
    the zone's pass may be running, and no rewind is done). A failed read or write of the
    store is transient: the next run tries again."""
    import pyarrow as pa

    if isinstance(exc, CdnlakeError):
        return exc
    if isinstance(exc, pa.ArrowInvalid | pa.ArrowNotImplementedError | pa.ArrowTypeError):
        return DataError(
            f"a file does not decode ({first_line(exc)}); left in place for `cdnlake "
            "maintain`, which sets it aside and has the zone read its span again"
        )
    if isinstance(exc, OSError):
        return StorageUnavailableError(
            f"the store failed ({first_line(exc)}); tried again at the next run"
        )
    return StorageError(f"{first_line(exc)}; tried again at the next run")


def _read_again_first(
    session: LakeSession,
    spec: TableSpec,
    locks: Path | None,
    now: datetime,
    hold: ZoneHold | None = None,
) -> BeforeMove:
    """Before a damaged file is moved: its zone reads the span again while the provider has
    it (a rewind), or claims it lost (a gap), holding the zone meanwhile (:func:`_holding`).

    The rewind advances the zone's fence, so no pass in flight (here, on another machine,
    or a stale daemon's) can commit a watermark over the span even were the zone not held.
    """

    def before(zone_id: int, start: datetime | None, end: datetime | None, why: str) -> None:
        with _holding(locks, hold, spec, zone_id) as generation:
            writer = ZoneWriter(session, spec, zone_id, holder=generation, clock=lambda: now)
            writer.read_again(start, end, why)

    return before


@contextlib.contextmanager
def _holding(
    locks: Path | None, hold: ZoneHold | None, spec: TableSpec, zone_id: int
) -> Iterator[int | None]:
    """Hold the zone: in a fleet (``hold``) its lease, which the owner lets go once its pass
    in flight ends, or :class:`~cdnlake.errors.ZoneBusyError` (nothing rewound or moved);
    then its lock on this machine, if it comes within ``HOLD_WAIT_SECONDS`` (without it
    the rewind still holds: the fence refuses the local pass in flight). Yields the
    lease's generation, the fence token the rewind commits under (None alone)."""
    with contextlib.ExitStack() as held:
        generation = None if hold is None else held.enter_context(hold(spec.name, zone_id))
        if locks is not None:
            try:
                held.enter_context(zone_lock(locks, spec.name, zone_id, wait=HOLD_WAIT_SECONDS))
            except ZoneBusyError as exc:
                log.warning("%s; rewinding it anyway: its pass in flight will be refused", exc)
        yield generation
