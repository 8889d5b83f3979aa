"""One ingestion pass per zone, for every source: extract → normalise → commit.

A *source* (v2 windows, v1 day files, a local v1 file, shield days) extracts and
normalises; it yields :class:`Chunk` s: rows plus the progress they reach. The runner owns
everything else, once: the zone lock, each chunk's exactly-once commit (rows and progress
in one Delta commit, see :mod:`cdnlake.lake.zone.writer`), rejected lines, damaged lake files,
the outcome, and the ``ingest_runs`` row. It writes through the process's
:class:`~cdnlake.lake.zone.session.LakeSession`, given to it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

import polars as pl

from cdnlake.config import Config
from cdnlake.errors import CdnlakeError, FencedError, StopRequested, StorageError
from cdnlake.ingest.result import (
    Gap,
    LogReporter,
    Reporter,
    ZoneResult,
    pass_outcome,
    utcnow,
)
from cdnlake.lake.log.progress import WATERMARK, from_ms
from cdnlake.lake.log.schema import TableSpec, polars_schema
from cdnlake.lake.zone.bookkeeping import Bookkeeping, rejects_frame
from cdnlake.lake.zone.lock import zone_lock
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import Written, ZoneWriter
from cdnlake.retention import oldest_served

log = logging.getLogger("cdnlake.ingest")

HOUR_SECONDS = 3600
# Passes of one process in flight at once: ``ingest.concurrency`` of them read the
# provider; the rest have read and wait for their last commit, which the process's group
# commit lands for all of them at once, about one a second while passes are in flight
# (see :mod:`cdnlake.lake.log.committer`). So commits per poll do not follow the number of zones.
PASSES_IN_FLIGHT = 128
# A last commit this small waits outside the readers' slots (a quiet zone's pass: a few
# minutes of records); a larger one keeps its slot, so the rows held in memory by waiting
# passes stay bounded (PASSES_IN_FLIGHT x QUIET_ROWS at most).
QUIET_ROWS = 5_000
Clock = Callable[[], datetime]


def floor_ms(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


@dataclass
class Chunk:
    """Rows (possibly none) and the progress they reach, committed as one.

    ``progress`` maps app-id parts ("" is the watermark) to versions.
    """

    rows: pl.DataFrame
    progress: dict[str, int] = field(default_factory=dict)
    # The zone's watermark as the pass found it, when the pass read again behind it (the
    # safety margin): its new rows from before it reached the provider later than
    # ``lag_seconds`` (``Written.late``, ``ZoneResult.late``).
    behind: datetime | None = None


class StopSignal(Protocol):
    def is_set(self) -> bool: ...


class AnyStop:
    """Set when any of its signals is: the process stopping, or a zone's hold lost."""

    def __init__(self, *signals: StopSignal) -> None:
        self.signals = signals

    def is_set(self) -> bool:
        return any(signal.is_set() for signal in self.signals)


@dataclass
class PassContext:
    """What a source may know and touch of the pass it runs in."""

    zone_id: int
    writer: ZoneWriter
    result: ZoneResult
    now: datetime
    config: Config
    stop: StopSignal
    bookkeeping: Bookkeeping
    rejects: list[pl.DataFrame] = field(default_factory=list)  # not yet in rejected_lines

    def progress(self, mark: str = "") -> int | None:
        """The zone's progress mark as the pass starts from it (:attr:`ZoneWriter.start`,
        taken with the fence the pass commits under): a source reads it before its first
        chunk, and the zone's progress moves only by this pass's commits meanwhile (held
        by its lock or lease; a rewind since fences the pass's commits)."""
        return self.writer.start.mark(mark)

    def watermark(self) -> datetime | None:
        return from_ms(self.progress(WATERMARK))

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise StopRequested()

    def store_rejects(self, frame: pl.DataFrame, source: str, file: str) -> None:
        """Rejected lines need no exactly-once commit: they are merged on a record key,
        just before the commit of the chunk that moves the zone's progress past them (or
        as the pass ends), with the rejects of other passes (see :meth:`take_rejects`)."""
        if frame.height:
            self.result.add_rejects(frame)
            self.rejects.append(
                rejects_frame(
                    self.zone_id,
                    frame,
                    source=source,
                    file=file,
                    rejected_at=utcnow(),
                    run_id=self.result.run_id,
                )
            )

    def take_rejects(self) -> list[pl.DataFrame]:
        """The rejects stored since the last call: those of the pages read so far."""
        taken, self.rejects = self.rejects, []
        return taken

    def oldest(self) -> datetime:
        """The first instant the provider still serves (less a margin: our clock and the
        provider's differ a little)."""
        return floor_ms(oldest_served(self.now))

    def read_start(self) -> datetime:
        """Where a pass's read of the zone's span starts: the watermark, never past
        retention.

        A watermark older than retention is a loss: claimed as a gap, said loudly. While
        the zone stays behind (an outage), each pass claims it again up to its own
        ``oldest``: the zone's one gap grows (see ``Bookkeeping.record_gaps``).
        """
        oldest = self.oldest()
        wm = self.watermark()
        if wm is None:
            return oldest
        if wm < oldest:
            self.claim_gap(
                wm,
                oldest,
                "past retention: the provider keeps logs for 3 days and the last "
                f"ingested instant was {wm.isoformat()}",
            )
            return oldest
        return wm

    def margin(self, until: datetime) -> tuple[datetime, datetime] | None:
        """The slice before the watermark that a pass reading the stable span up to
        ``until`` reads again, for records later than ``lag_seconds`` (see
        :func:`margin_slice`); None when there is none."""
        wm = self.watermark()
        if wm is None or wm < self.oldest():
            return None
        cfg = self.config.ingest
        return margin_slice(wm, until, cfg.lag_seconds, cfg.overlap_seconds, self.oldest())

    def claim_gap(self, start: datetime, end: datetime, reason: str) -> bool:
        """Claim ``[start, end)`` lost, for the part the provider no longer serves (the
        caller knows that the lake does not hold it). Whether it is claimed."""
        end = min(end, self.oldest())
        if end <= start:
            return False
        gap = Gap(start, end, reason)
        if gap not in self.result.gaps:
            self.result.gaps.append(gap)
            # Recorded now, before a commit moves the zone's progress past the loss: no
            # later pass would claim it again, so a pass killed after that commit must not
            # take the claim with it. Not recorded: the pass fails, its progress unmoved.
            try:
                rows = [self.result.gap_row(gap)]
                self.result.lost_seconds += self.bookkeeping.record_gaps(self.zone_id, rows)
            except CdnlakeError as exc:
                raise StorageError(f"a loss could not be recorded in ingest_gaps: {exc}") from None
        return True

    def lake_holds(self, start: datetime, end: datetime) -> bool:
        """Whether the lake holds the zone's rows of ``(start, end)``: the zone's watermark
        reaches ``end`` (a pass read the span), or the zone has rows inside it (another
        read of the span stored them). Read from the table as it is now (the session's
        state of it, brought up to date)."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        lake, spec = self.writer.session.lake, self.writer.spec
        mark = from_ms(self.writer.table.snapshot(self.zone_id).mark(WATERMARK))
        if mark is not None and mark >= end:
            return True
        table = self.writer.session.reader(spec)
        if table is None:
            return False
        days = [start.date()]
        while days[-1] < end.date():
            days.append(days[-1] + timedelta(days=1))
        partitions: list[tuple[str, str, str | list[str]]] = [
            (spec.zone_column, "=", str(self.zone_id))
        ]
        if spec.by_date:
            partitions.append(("date", "in", [day.isoformat() for day in days]))
        stamp = pa.timestamp("us", "UTC")
        inside = (ds.field("ts") > pa.scalar(start, stamp)) & (
            ds.field("ts") < pa.scalar(end, stamp)
        )
        try:
            found = lake.dataset(spec, table, partitions).head(1, columns=["ts"], filter=inside)
        except OSError as exc:
            raise StorageError(f"cannot read {spec.name}: {exc}") from None
        return bool(found.num_rows)


class Source(Protocol):
    kind: str  # ingest_runs.source: v2, v1, v1-file, shield
    spec: TableSpec  # the table its rows go to
    noun: str  # "records" or "lines", for "all 150 lines rejected"

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]: ...


class Runner:
    """Runs zone passes; shared by ``ingest``, ``import-v1``, the daemon and the demo."""

    def __init__(
        self,
        config: Config,
        session: LakeSession,
        *,
        clock: Clock = utcnow,
        stop: threading.Event | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        """``session``: the process's lake (its traffic sink, if any, counts what the
        passes store)."""
        self.config = config
        self.session = session
        self.clock = clock
        self.stop = stop or threading.Event()
        self.reporter: Reporter = reporter or LogReporter()
        self.bookkeeping = Bookkeeping(session)
        # Held while a pass reads its source: at most ``ingest.concurrency`` zones read
        # the provider at once, however many passes are in flight.
        self.reading = threading.BoundedSemaphore(config.ingest.concurrency)

    def run_many(self, passes: Iterable[tuple[int, Source]]) -> list[ZoneResult]:
        jobs = list(passes)
        if not jobs:
            return []
        workers = max(1, min(PASSES_IN_FLIGHT, len(jobs)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zone") as pool:
            return list(pool.map(lambda job: self.run(*job), jobs))

    def run(
        self,
        zone_id: int,
        source: Source,
        stop: StopSignal | None = None,
        *,
        holder: int | None = None,
        locked: bool | None = None,
    ) -> ZoneResult:
        """One pass; ``stop`` ends it early as the runner's own stop does. ``holder``: the
        generation of the fleet lease it runs under, its fence token (see
        :mod:`cdnlake.lake.log.progress`); a pass whose zone was rewound or taken over since
        it began commits nothing more and fails. ``locked``: under the zone's lock on this
        machine (busy at once while another local process holds it); by default (None)
        only without a fleet lease; False for a source whose chunks move no progress (a
        re-read), whose commits the fence and Delta's conflict check keep apart from the
        zone's passes, as the forwarding receiver's are."""
        result = ZoneResult(zone_id, source.kind)
        # Under a fleet lease (holder not None) the lease and the zone's fence already
        # exclude other holders, and a lock left by a stalled holder on a shared root
        # would keep the lease's owner busy.
        locked = holder is None if locked is None else locked
        signal: StopSignal = self.stop if stop is None else AnyStop(self.stop, stop)
        # its rejects and run join those beside them; bookkeeping out of reach (a burst of
        # S3 errors as its tables load) fails this pass, not the others
        with pass_outcome(result, f"zone {zone_id}"), self.bookkeeping.passing():
            self._pass(result, source, signal, holder=holder, locked=locked)
            self._record(result)
        self.reporter.finished(result)
        return result

    def _pass(
        self,
        result: ZoneResult,
        source: Source,
        signal: StopSignal,
        *,
        holder: int | None,
        locked: bool,
    ) -> None:
        """The pass itself: under the zone's lock, every chunk committed; its outcome."""
        zone_id = result.zone_id
        locks = self.config.storage.work / "locks"
        with (
            pass_outcome(result, f"zone {zone_id}"),
            zone_lock(locks, source.spec.name, zone_id) if locked else contextlib.nullcontext(),
        ):
            writer = ZoneWriter(
                self.session,
                source.spec,
                zone_id,
                holder=holder,
                clock=self.clock,
                counted_as=getattr(source, "counted_as", None),
            )
            ctx = PassContext(
                zone_id, writer, result, self.clock(), self.config, signal, self.bookkeeping
            )
            with writer.passing():  # the table's group commits may wait for this pass's
                self._commit_all(ctx, source)
            result.check_input(source.noun)

    def _commit_all(self, ctx: PassContext, source: Source) -> None:
        """Commit each chunk in order, on one thread beside the source: while a chunk is
        written, the source parses the next (at most one waits, so memory stays bounded).

        The source is read inside one of the runner's ``reading`` slots; a small last
        commit is waited for outside it, so that the quiet zones of a poll commit
        together while other zones read."""
        result = ctx.result

        def done(future: Future[Written], chunk: Chunk) -> None:
            result.absorb(future.result())
            if WATERMARK in chunk.progress:
                result.reached = from_ms(chunk.progress[WATERMARK])
            self.reporter.update(result)

        def commit(chunk: Chunk, rejects: list[pl.DataFrame]) -> Written:
            """The chunk's rejects first: its progress moves past the pages they are from."""
            if rejects:
                self.bookkeeping.record_rejects(rejects)
            return ctx.writer.commit(chunk.rows, chunk.progress, behind=chunk.behind)

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="commit") as committer:
            pending: tuple[Future[Written], Chunk] | None = None
            self.reading.acquire()
            reading = True
            try:
                for chunk in source.chunks(ctx):
                    if pending is not None:
                        done(*pending)
                    pending = committer.submit(commit, chunk, ctx.take_rejects()), chunk
                if pending is None or pending[1].rows.height <= QUIET_ROWS:
                    reading = False
                    self.reading.release()
            except BaseException:
                # The pass failed while reading: what its last commit wrote still counts,
                # unless that commit failed too (the reading's error is the pass's), or
                # was refused (a rewind or a new holder since it began: said above all).
                if reading:
                    self.reading.release()
                self._record_rejects_left(ctx, failing=True)
                if pending is not None:
                    failure = pending[0].exception()
                    if failure is None or isinstance(failure, FencedError):
                        done(*pending)
                raise
            if reading:
                self.reading.release()
            try:
                if pending is not None:
                    done(*pending)  # its failure is the pass's
            except BaseException:
                self._record_rejects_left(ctx, failing=True)
                raise
            self._record_rejects_left(ctx, failing=False)

    def _record_rejects_left(self, ctx: PassContext, *, failing: bool) -> None:
        """The rejects stored after the pass's last commit (a damaged file's marker, a
        pass that failed after reading): recorded too, so ``rejected_lines`` shows them.
        Failing to, when the pass fails already (``failing``), its own error is said."""
        left = ctx.take_rejects()
        if not left:
            return
        try:
            self.bookkeeping.record_rejects(left)
        except CdnlakeError as exc:
            if not failing:
                raise
            note = f"{sum(f.height for f in left)} rejected lines not stored: {exc}"
            ctx.result.notes.append(note)
            log.error("zone %s: %s", ctx.zone_id, note)

    def _record(self, result: ZoneResult) -> None:
        """The pass's row in ``ingest_runs`` (its gaps were recorded as it claimed them)."""
        try:
            self.bookkeeping.record_run(result.zone_id, result.run_row())
        except CdnlakeError as exc:  # bookkeeping must not undo a pass whose rows are durable
            note = f"run not recorded in ingest_runs: {exc}"
            result.notes.append(note)
            log.error("zone %s: %s", result.zone_id, note)


def margin_slice(
    watermark: datetime, until: datetime, lag_seconds: int, overlap_seconds: int, oldest: datetime
) -> tuple[datetime, datetime] | None:
    """The safety margin a pass reads again: ``overlap_seconds`` before the watermark, a
    slice ``overlap_seconds / 3600`` as wide as the stable span ``(watermark, until]`` it
    reads. Pass after pass the slices sample the timeline evenly at ``lag_seconds +
    overlap_seconds`` of age, ``overlap_seconds`` of every hour: no pass pays for the whole
    margin at once (at 10,000 requests/s, 600 s of margin is 200 s of the provider's
    pages), and the slice follows the span alone (a pass that dies and its rerun read the
    same). With ``lag_seconds = 0`` the margin is all the lateness the zone allows: read
    whole at every pass."""
    start = max(watermark - timedelta(seconds=overlap_seconds), oldest)
    if lag_seconds == 0:
        end = watermark
    else:
        end = min(start + (until - watermark) * overlap_seconds / HOUR_SECONDS, watermark)
    end = floor_ms(end)
    return (start, end) if end > start else None


def split_windows(
    start: datetime, end: datetime, span: timedelta
) -> list[tuple[datetime, datetime]]:
    windows = []
    cursor = start
    while cursor < end:
        nxt = min(cursor + span, end)
        windows.append((cursor, nxt))
        cursor = nxt
    return windows


class RowBuffer:
    """Rows gathered until they are worth a commit (``ingest.flush_rows``), with the
    progress that every row read so far reaches (``progress``: it goes with the next
    commit)."""

    def __init__(self, spec: TableSpec, flush_rows: int, behind: datetime | None = None) -> None:
        """``behind``: each chunk's (see ``Chunk.behind``)."""
        self.spec = spec
        self.flush_rows = flush_rows
        self.behind = behind
        self.frames: list[pl.DataFrame] = []
        self.rows = 0
        self.progress: dict[str, int] = {}

    def add(self, frame: pl.DataFrame) -> Chunk | None:
        """A chunk to commit when enough rows have gathered, else None."""
        if frame.height:
            self.frames.append(frame)
            self.rows += frame.height
        return self.take() if self.rows >= self.flush_rows else None

    def take(self, progress: dict[str, int] | None = None) -> Chunk:
        frames, self.frames, self.rows = self.frames, [], 0
        rows = (
            pl.concat(frames) if frames else pl.DataFrame(schema=polars_schema(self.spec.columns))
        )
        self.progress.update(progress or {})
        return Chunk(rows, dict(self.progress), self.behind)
