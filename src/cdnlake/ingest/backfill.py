"""``backfill``: a zone's archived parts (the provider's permanent log storage) into the lake.

Each closed part is downloaded into the run's own folder under ``<root>/work/archive/<zone>/``
(:mod:`~cdnlake.ingest.archive_scratch`: a backfill beside the daemon's archive job keeps
out of its downloads), read by the one v1 parser and committed through the one runner,
like a file of ``import-v1``: its rows go through the zone's writer, so each request is
stored once, whichever of archive, API, forwarding or ``import-v1`` brought it first.

Which parts are done is recorded beside the rows, in ``archive_parts`` (one row per part,
by path: the copy listed, its state, what its import counted), after the part's last
commit: never in the ``requests`` log, whose application transactions stay a fixed few per
zone however many parts the archive holds. A crash between a part's last commit and its
row costs a download: the part is read again and its rows, all in the lake already, are
dropped as repeats. A part that proved damaged (cut gzip) keeps what its whole lines gave,
its row saying so, and is reported on every later run of its days until the archive holds
another copy (another checksum, or where the listing gives none, another size or last
change). The rows are written after the listing and after the run's parts (every
``LEDGER_SECONDS`` in a long run).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from cdnlake.config import Config, ZoneConfig
from cdnlake.errors import (
    CdnlakeError,
    ConfigError,
    DamagedInputError,
    StopRequested,
    StorageError,
)
from cdnlake.ingest.archive_parts import (
    RECORDED,
    ROOT,
    Part,
    Recorded,
    closed_parts,
    months,
    parse_name,
)
from cdnlake.ingest.archive_scratch import run_folder
from cdnlake.ingest.archive_store import ArchiveStore, Entry
from cdnlake.ingest.result import ZoneResult, utcnow
from cdnlake.ingest.runner import Chunk, PassContext, Runner, StopSignal
from cdnlake.ingest.v1_source import V1FileSource
from cdnlake.lake.log.progress import day_start
from cdnlake.lake.log.schema import ARCHIVE_PARTS
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.session import LakeSession

log = logging.getLogger("cdnlake.backfill")
LEDGER_SECONDS = 10.0  # how often a long run brings archive_parts up to date
COUNTED_AS = "archive"  # the traffic counters' source of imports: catch-up, not live traffic


class ArchivePartSource(V1FileSource):
    """One downloaded part: a v1 file that remembers where it proved damaged."""

    kind = "archive"
    counted_as = COUNTED_AS

    def __init__(self, path: Path, part: Part, label: str) -> None:
        super().__init__(path, label)
        self.part = part
        self.damaged_at: int | None = None  # the last whole line of a damaged part

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        if self.path.stat().st_size == 0:  # an empty gzip file still holds 20 bytes
            exc = DamagedInputError(
                f"{self.label} is empty (0 bytes): a gzip file cut short before its header",
                last_line=0,
            )
            self._record_damage(ctx, exc)
            self.damaged_at = 0
            raise exc
        try:
            yield from super().chunks(ctx)
        except DamagedInputError as exc:  # its whole lines are committed
            self.damaged_at = exc.last_line
            self._window(ctx)
            raise
        self._window(ctx)

    def _record_damage(self, ctx: PassContext, exc: DamagedInputError) -> None:
        """The marker in ``rejected_lines`` only, no gap: a part holds some of its day
        (its writer's requests until it closed), not "the rest of the day", which later
        parts and other writers hold. ``archive_parts`` says it is damaged, ``status``
        names its day, the audit finds the hours it left short."""
        self._damage_marker(ctx, exc)

    def _window(self, ctx: PassContext) -> None:
        """A writer's first part of a day reads the day from midnight: its run's window
        says so (``ingest_runs``: where the report's coverage and the audit see the lake
        begin), not from the day's first request."""
        first = 1 if not self.part.writer else 0
        result = ctx.result
        if self.part.index == first and result.window_from is not None:
            result.window_from = min(result.window_from, day_start(self.part.day))


@dataclass
class Listing:
    """What a listing of a zone's archive found for the days asked."""

    closed: list[Part] = field(default_factory=list)  # every closed part
    todo: list[Part] = field(default_factory=list)  # closed, not imported yet
    done: list[Part] = field(default_factory=list)  # imported whole before
    damaged: list[tuple[Part, int]] = field(default_factory=list)  # damaged before: last line
    open: list[Part] = field(default_factory=list)  # may still grow: left for later
    days: set[date] = field(default_factory=set)  # the days the parts hold

    @property
    def todo_bytes(self) -> int:
        return sum(p.size for p in self.todo)


@dataclass
class PartDone:
    part: Part
    result: ZoneResult


@dataclass
class BackfillResult:
    zone_id: int
    listing: Listing
    parts: list[PartDone] = field(default_factory=list)
    skipped: list[Part] = field(default_factory=list)  # imported by another run meanwhile
    stopped: bool = False
    seconds: float = 0.0

    @property
    def failed(self) -> list[PartDone]:
        return [p for p in self.parts if not p.result.ok]

    @property
    def rows(self) -> int:
        return sum(p.result.rows for p in self.parts)

    @property
    def lines(self) -> int:
        return sum(p.result.lines for p in self.parts)

    @property
    def ok(self) -> bool:
        """Every closed part of the days imported whole: none failed, none damaged."""
        return not self.stopped and not self.failed and not self.listing.damaged


class Progress(Protocol):
    """Who hears how a backfill goes (a terminal's bar, a pipe's lines, the log)."""

    def listed(self, listing: Listing) -> None: ...

    def reading(self, part: Part, result: ZoneResult) -> None: ...

    def part_done(self, done: PartDone, index: int) -> None: ...

    def skipped(self, part: Part) -> None:
        """A part of the listing another run imported meanwhile: not read here."""
        ...


class QuietProgress:
    def listed(self, listing: Listing) -> None:
        pass

    def reading(self, part: Part, result: ZoneResult) -> None:
        pass

    def part_done(self, done: PartDone, index: int) -> None:
        level = logging.INFO if done.result.ok else logging.ERROR
        log.log(level, "archive part %s: %s", done.part.path, done.result.summary())

    def skipped(self, part: Part) -> None:
        pass


class _PartReporter:
    """The runner's reporter for one part: its chunks' progress goes to ``progress``."""

    def __init__(self, progress: Progress, part: Part) -> None:
        self.progress = progress
        self.part = part

    def update(self, result: ZoneResult) -> None:
        self.progress.reading(self.part, result)

    def finished(self, result: ZoneResult) -> None:
        pass


def folder_of(zone: ZoneConfig) -> str:
    """The zone's folder in the storage zone, ending in ``/``."""
    assert zone.archive is not None
    return f"{ROOT}/{zone.archive.folder}/"


class Backfill:
    """One zone's archive, for the days asked: listed, then each closed part imported once."""

    def __init__(
        self,
        config: Config,
        session: LakeSession,
        store: ArchiveStore,
        zone: ZoneConfig,
        *,
        progress: Progress | None = None,
        stop: threading.Event | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        if zone.archive is None:
            raise ValueError(f"zone {zone.id} names no archive")
        self.config = config
        self.session = session
        self.store = store
        self.zone = zone
        self.progress = progress or QuietProgress()
        self.stop = stop or threading.Event()
        self.clock = clock
        self.bookkeeping = Bookkeeping(session)
        self.work = config.storage.work / "archive" / str(zone.id)  # a folder a run
        self._ledger: list[dict[str, Any]] = []  # imports not yet in archive_parts
        self._ledger_at = time.monotonic()

    # -- listing -------------------------------------------------------------------------
    def listing(self, first: date | None = None, last: date | None = None) -> Listing:
        """The zone's parts of ``first``..``last`` (every day the archive holds where
        None), sorted by day and name; which are closed, imported, damaged, open. The
        listing is recorded in ``archive_parts``."""
        now = self.clock()
        parts = [p for p in self._parts(first, last) if _inside(p.day, first, last)]
        parts.sort(key=lambda p: (p.day, p.writer, p.index, p.path))
        closed, still_open = closed_parts(parts, now)
        recorded = self.recorded()
        listing = Listing(closed=closed, open=still_open, days={p.day for p in parts})
        for part in closed:
            found = recorded.get(part.path)
            if found is None or not part.done(found):
                listing.todo.append(part)
            elif found.state == "damaged":
                listing.damaged.append((part, found.lines or 0))
            else:
                listing.done.append(part)
        self._record_listing(listing, now)
        return listing

    def recorded(self, path: str | None = None) -> dict[str, Recorded]:
        """What ``archive_parts`` holds of the zone's parts (of the one at ``path`` only,
        where given), by path: the session's state of the table, brought up to date."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        zone = [(ARCHIVE_PARTS.zone_column, "=", str(self.zone.id))]
        text = pa.large_string()
        only = None if path is None else ds.field("path").cast(text) == pa.scalar(path, text)
        with self.session.merge_table(ARCHIVE_PARTS).current() as table:
            rows = self.session.lake.dataset(ARCHIVE_PARTS, table, zone)
            try:
                found = rows.to_table(columns=["path", *RECORDED], filter=only).to_pylist()
            except OSError as exc:
                raise StorageError(f"cannot read archive_parts: {exc}") from None
        return {row["path"]: Recorded.of(row) for row in found}

    def _parts(self, first: date | None, last: date | None) -> list[Part]:
        root = folder_of(self.zone)
        years = self._folders(root)
        if not years:  # a mistyped folder lists as empty: no "0 days" and success
            assert self.zone.archive is not None
            index = self.config.zones.index(self.zone)
            raise ConfigError(
                f"zones[{index}].archive.folder: storage zone "
                f"{self.zone.archive.storage_zone} holds nothing under {root}: the folder "
                "must be the pull zone's name as the provider writes it (`cdnlake api "
                f"pullzone show-archive --zone {self.zone.id}` shows it), or the provider "
                "has archived nothing of the zone yet"
            )
        if first is not None and last is not None:
            folders = months(first, last)
        else:
            found = []
            for year_name in years:
                for month_name in self._folders(f"{root}{year_name}/"):
                    if year_name.isdigit() and month_name.isdigit():
                        found.append((int(year_name), int(month_name)))
            folders = [
                ym
                for ym in found
                if (first is None or ym >= (first.year, first.month))
                and (last is None or ym <= (last.year, last.month))
            ]
        parts = []
        for year, month in folders:
            self._check_stop()
            for entry in self.store.list_folder(f"{root}{year:04d}/{month:02d}/"):
                if entry.is_directory:
                    continue
                parsed = parse_name(year, month, entry.name)
                if parsed is None:
                    log.warning(
                        "zone %s: archive file %04d/%02d/%s is no part (by neither naming "
                        "scheme): left alone",
                        self.zone.id,
                        year,
                        month,
                        entry.name,
                    )
                    continue
                day, writer, index = parsed
                parts.append(
                    _part(f"{year:04d}/{month:02d}/{entry.name}", day, writer, index, entry)
                )
        return parts

    def _folders(self, path: str) -> list[str]:
        return sorted(e.name for e in self.store.list_folder(path) if e.is_directory)

    def _record_listing(self, listing: Listing, now: datetime) -> None:
        states: list[tuple[Part, str]] = [(p, "open") for p in listing.open]
        states += [(p, "closed") for p in listing.todo]
        states += [(p, "imported") for p in listing.done]
        states += [(p, "damaged") for p, _ in listing.damaged]
        rows = [_row(part, state, listed_at=now) for part, state in states]
        try:
            self.bookkeeping.record_archive_parts(self.zone.id, rows, listing=True)
        except CdnlakeError as exc:  # the listing only: the imports' rows are apart
            log.error("zone %s: archive_parts not updated: %s", self.zone.id, exc)

    # -- importing -----------------------------------------------------------------------
    def run(
        self, listing: Listing, *, holder: int | None = None, stop: StopSignal | None = None
    ) -> BackfillResult:
        """Import each part of ``listing.todo`` in turn (each once: ``archive_parts`` is
        looked up again just before, for another process may have imported it meanwhile;
        one that did so seconds ago and has not recorded it yet costs a download, and
        the zone's writer drops its rows as repeats)."""
        started = time.monotonic()
        outcome = BackfillResult(self.zone.id, listing)
        runner = Runner(self.config, self.session, stop=self.stop)
        signal: StopSignal = stop or self.stop
        self.progress.listed(listing)
        try:
            with run_folder(self.work) as scratch:
                for number, part in enumerate(listing.todo, 1):
                    if signal.is_set():
                        outcome.stopped = True
                        break
                    if part.done(self.recorded(part.path).get(part.path)):
                        outcome.skipped.append(part)
                        self.progress.skipped(part)
                        continue
                    done = self._import(runner, part, holder, signal, scratch)
                    outcome.parts.append(done)
                    self.progress.part_done(done, number)
                    if done.result.outcome == "stopped":
                        outcome.stopped = True
                        break
                    self._flush_ledger(force=False)
        finally:
            outcome.seconds = time.monotonic() - started
            self._flush_ledger(force=True)
        return outcome

    def _import(
        self, runner: Runner, part: Part, holder: int | None, signal: StopSignal, scratch: Path
    ) -> PartDone:
        assert self.zone.archive is not None
        label = f"archive:{self.zone.archive.storage_zone}/{folder_of(self.zone)}{part.path}"
        dest = scratch / part.name
        result: ZoneResult | None = None
        source: ArchivePartSource | None = None
        try:
            try:
                self.store.fetch(
                    folder_of(self.zone) + part.path, dest, size=part.size, checksum=part.checksum
                )
            except StopRequested:
                result = ZoneResult(self.zone.id, ArchivePartSource.kind)
                result.outcome, result.error = "stopped", "stopped before the part was read"
                result.finished = utcnow()
                return PartDone(part, result)
            except CdnlakeError as exc:
                result = ZoneResult(self.zone.id, ArchivePartSource.kind)
                result.outcome, result.error = "failed", f"{part.path}: {exc}"
                result.finished = utcnow()
                return PartDone(part, result)
            source = ArchivePartSource(dest, part, label)
            runner.reporter = _PartReporter(self.progress, part)
            result = runner.run(self.zone.id, source, signal, holder=holder, locked=False)
            return PartDone(part, result)
        finally:
            dest.unlink(missing_ok=True)
            if result is not None and source is not None and result.outcome in ("ok", "failed"):
                self._record_import(part, result, damaged_at=source.damaged_at)

    def _record_import(self, part: Part, result: ZoneResult, *, damaged_at: int | None) -> None:
        """The part done (all its rows committed: whole, or its whole lines where it is
        damaged), or not (it failed), as the row ``archive_parts`` gets at the next
        flush."""
        state = "closed" if damaged_at is None and not result.ok else "imported"
        row = _row(part, "damaged" if damaged_at is not None else state, listed_at=None)
        row.update(
            lines=result.lines if damaged_at is None else damaged_at,
            rows=result.rows,
            duplicates=result.duplicates,
            rejected=result.rejected,
            run_id=result.run_id,
            imported_at=result.finished,
        )
        self._ledger.append(row)

    def _flush_ledger(self, *, force: bool) -> None:
        """The imports' rows into ``archive_parts``, what says a part is done: at the end
        of a run, and every ``LEDGER_SECONDS`` during a long one (one MERGE, not one a
        part). What a crash loses of it costs those parts a download again: their rows
        are in the lake, and the zone's writer drops them as repeats."""
        due = time.monotonic() - self._ledger_at >= LEDGER_SECONDS
        if not self._ledger or not (force or due):
            return
        rows, self._ledger = self._ledger, []
        self._ledger_at = time.monotonic()
        try:
            self.bookkeeping.record_archive_parts(self.zone.id, rows, listing=False)
        except CdnlakeError as exc:
            log.error("zone %s: archive_parts not updated: %s", self.zone.id, exc)

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise StopRequested()


def _inside(day: date, first: date | None, last: date | None) -> bool:
    return (first is None or day >= first) and (last is None or day <= last)


def _part(path: str, day: date, writer: str, index: int, entry: Entry) -> Part:
    return Part(
        path=path,
        day=day,
        size=entry.length,
        checksum=entry.checksum.lower(),
        last_changed=entry.last_changed,
        writer=writer,
        index=index,
    )


def _row(part: Part, state: str, *, listed_at: datetime | None) -> dict[str, Any]:
    return {
        "path": part.path,
        "day": part.day,
        "size": part.size,
        "checksum": part.checksum,
        "last_changed": part.last_changed,
        "state": state,
        "listed_at": listed_at,
    }


def default_span(now: datetime, days: int) -> tuple[date, date]:
    """The daemon's span: the last ``days`` UTC days up to today."""
    today = now.astimezone(UTC).date()
    return today - timedelta(days=days - 1), today
