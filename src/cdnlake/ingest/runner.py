"""One ingestion pass per zone (extract → normalise → lake), exactly once.

Exactly once rests on three facts: a request's timestamp names the one lake file it can
live in; merging into that file keeps each ``request_id`` once; and the watermark moves
only after the rows it covers were renamed into place. So windows may overlap, pages may
repeat, records may arrive late and runs may be killed at any instant: re-reading is
always safe and never duplicates.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from cdnlake.client.core import RequestStats
from cdnlake.client.logging_api import LoggingClient, V2Query, iso_utc
from cdnlake.config import RETENTION_SECONDS, Config, ZoneConfig
from cdnlake.errors import (
    CdnlakeError,
    DamagedInputError,
    DataError,
    RejectedInputError,
    StopRequested,
    TransportError,
    ZoneBusyError,
)
from cdnlake.ingest.normalize import REJECT_SCHEMA, normalize_v2
from cdnlake.ingest.state import LastRun, StateStore, V1Day, ZoneState
from cdnlake.ingest.v1_parser import iter_parsed
from cdnlake.lake.check import DamagedFile, scan_zone
from cdnlake.lake.layout import zone_dir
from cdnlake.lake.writer import MergeResult, StagedMerge, clean_leftovers, read_lake_file
from cdnlake.warehouse.db import Warehouse

log = logging.getLogger("cdnlake.ingest")

RETENTION = timedelta(seconds=RETENTION_SECONDS)
# Never ask for the very edge of retention: our clock and the provider's differ a little.
RETENTION_MARGIN = timedelta(minutes=2)
Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


def floor_ms(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


@dataclass
class Gap:
    gap_from: datetime
    gap_to: datetime
    reason: str


@dataclass
class ZoneResult:
    zone_id: int
    source: str
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    started: datetime = field(default_factory=utcnow)
    finished: datetime | None = None
    window_from: datetime | None = None
    window_to: datetime | None = None
    reached: datetime | None = None
    pages: int = 0
    rows: int = 0
    duplicates: int = 0
    rejected: int = 0
    parsed: int = 0  # rows that parsed, new or duplicate
    reasons: Counter[str] = field(default_factory=Counter)  # rejects by kind
    outcome: str = "ok"
    error: str | None = None
    gaps: list[Gap] = field(default_factory=list)
    stats: RequestStats = field(default_factory=RequestStats)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    damaged: list[DamagedFile] = field(default_factory=list)

    def absorb(self, merged: MergeResult) -> None:
        self.rows += merged.rows_new
        self.duplicates += merged.duplicates
        self.damaged.extend(merged.damaged)

    def add_rejects(self, frame: pl.DataFrame) -> None:
        self.rejected += frame.height
        self.reasons.update(frame["kind"].to_list())

    def rejected_text(self) -> str:
        """``3 rejected (2 bad timestamp, 1 wrong field count)``."""
        return f"{self.rejected} rejected" + (
            f" ({breakdown(self.reasons)})" if self.reasons else ""
        )

    def check_input(self, noun: str) -> None:
        """Fail a pass that was given input but could take nothing from it."""
        if self.rejected and not self.parsed:
            raise RejectedInputError(
                f"all {self.rejected} {noun} rejected: {breakdown(self.reasons)}"
            )

    def summary(self) -> str:
        reached = self.reached.strftime("%Y-%m-%d %H:%M:%SZ") if self.reached else "-"
        seconds = ((self.finished or utcnow()) - self.started).total_seconds()
        kind = "shield zone" if self.source == "shield" else "zone"
        text = (
            f"{kind} {self.zone_id} [{self.source}] {self.outcome}: reached {reached}, "
            f"{self.pages} pages, {self.rows} rows, {self.duplicates} duplicates dropped, "
            f"{self.rejected_text()}, {self.stats.rate_limited} 429s, {seconds:.1f}s"
        )
        if self.gaps:
            text += f", {len(self.gaps)} gap(s)"
        if self.error:
            text += f" - {self.error}"
        return text

    def run_row(self) -> dict[str, Any]:
        s = self.stats
        return {
            "run_id": self.run_id,
            "zone": self.zone_id,
            "source": self.source,
            "started": self.started,
            "finished": self.finished,
            "window_from": self.window_from,
            "window_to": self.window_to,
            "pages": self.pages,
            "rows": self.rows,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "rate_limited": s.rate_limited,
            "retries": s.retries,
            "server_errors": s.server_errors,
            "transport_errors": s.transport_errors,
            "outcome": self.outcome,
            "error": self.error,
        }

    def gap_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "zone": self.zone_id,
                "gap_from": g.gap_from,
                "gap_to": g.gap_to,
                "reason": g.reason,
                "detected_at": self.started,
                "run_id": self.run_id,
            }
            for g in self.gaps
        ]


def breakdown(reasons: Counter[str]) -> str:
    """``149 bad timestamp, 1 wrong field count``: most common first."""
    return ", ".join(f"{n} {kind}" for kind, n in reasons.most_common())


def classify(exc: BaseException | None) -> tuple[str, str | None]:
    """The outcome and error text of a pass that ended with ``exc`` (None: it did not)."""
    if exc is None:
        return "ok", None
    if isinstance(exc, ZoneBusyError):
        return "busy", str(exc)
    if isinstance(exc, StopRequested):
        return "stopped", "stopped before the pass completed"
    if isinstance(exc, DataError):  # its message names the file and the fault
        return "failed", str(exc)
    if isinstance(exc, CdnlakeError):
        return "failed", f"{type(exc).__name__}: {exc}"
    return "failed", f"internal error: {type(exc).__name__}: {exc}"


@contextmanager
def pass_outcome(result: ZoneResult, label: str) -> Iterator[None]:
    """Turn whatever ends a zone pass into its outcome; a failing zone stops no other."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, CdnlakeError):  # a bug must not take the other zones down
            log.exception("%s: unexpected failure", label)
        result.outcome, result.error = classify(exc)
    result.finished = result.finished or utcnow()


class Progress(Protocol):
    def update(self, result: ZoneResult) -> None: ...

    def finished(self, result: ZoneResult) -> None: ...


class LogProgress:
    """Where no one watches (the daemon): each zone's summary goes to the log."""

    def update(self, result: ZoneResult) -> None:
        pass

    def finished(self, result: ZoneResult) -> None:
        log.log(logging.INFO if result.ok else logging.WARNING, result.summary())
        for gap in result.gaps:
            log.warning(
                "zone %s: DATA LOST from %s to %s: %s",
                result.zone_id,
                gap.gap_from.isoformat(),
                gap.gap_to.isoformat(),
                gap.reason,
            )


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


def lake_max_ts(lake: Path, zone_id: int) -> datetime | None:
    """The newest timestamp in the lake for a zone (to rebuild a lost watermark)."""
    root = zone_dir(lake, zone_id)
    files = sorted(root.glob("date=*/part-*.parquet"))
    if not files:
        return None
    newest = read_lake_file(files[-1], ["ts"])["ts"].max()
    return newest if isinstance(newest, datetime) else None


class Ingestor:
    """Runs ingestion passes; shared by ``cdnlake ingest`` and the daemon."""

    def __init__(
        self,
        config: Config,
        logging_client: LoggingClient,
        *,
        warehouse: Warehouse | None = None,
        clock: Clock = utcnow,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.config = config
        self.client = logging_client
        self.warehouse = warehouse or Warehouse(config.storage)
        self.state = StateStore(config.storage.state)
        self.clock = clock
        self.stop = stop or threading.Event()
        self.progress: Progress = progress or LogProgress()
        self.lake = config.storage.lake

    # -- many zones --------------------------------------------------------------------
    def run(self, zones: Iterable[ZoneConfig]) -> list[ZoneResult]:
        zones = list(zones)
        if not zones:
            return []
        workers = max(1, min(self.config.ingest.concurrency, len(zones)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zone") as pool:
            return list(pool.map(self.run_zone, zones))

    # -- one zone ----------------------------------------------------------------------
    def run_zone(self, zone: ZoneConfig) -> ZoneResult:
        result = ZoneResult(zone.id, zone.source)
        with pass_outcome(result, f"zone {zone.id}"), self.state.zone_lock(zone.id):
            clean_leftovers(self.lake, self.state.staging, zone.id)
            found = scan_zone(self.lake, zone.id)
            state = self.state.load(zone.id, rebuild_watermark=lake_max_ts(self.lake, zone.id))
            if state.recovered:
                result.notes.append(state.recovered)
            self._rewind(state, found, result)
            try:
                if zone.source == "v1":
                    self._pass_v1(zone, state, result)
                else:
                    self._pass_v2(zone, state, result)
            finally:
                # Damage met while merging: read those hours again on the next pass.
                self._rewind(state, result.damaged, result)
                result.finished = utcnow()
                outcome, error = classify(sys.exc_info()[1])
                state.last_run = LastRun(
                    started=result.started.isoformat(),
                    finished=result.finished.isoformat(),
                    outcome=outcome,
                    rows=result.rows,
                    error=error,
                )
                self.state.save(state)
        self._record(result)
        self.progress.finished(result)
        return result

    def _rewind(self, state: ZoneState, damaged: list[DamagedFile], result: ZoneResult) -> None:
        """Re-read damaged hours the provider still keeps; record the others as lost."""
        oldest = self.clock() - RETENTION + RETENTION_MARGIN
        for d in damaged:
            note = (
                f"lake file {d.path.name} of {d.day} was damaged ({d.reason}); kept as {d.moved_to}"
            )
            if d.end > oldest:
                start = max(d.start, oldest)
                if state.watermark is None or start < state.watermark:
                    state.watermark = start
                state.v1_days.pop(d.day.isoformat(), None)
                result.notes.append(f"{note}; its hour will be read again")
            else:
                result.gaps.append(Gap(d.start, d.end, f"{note}; past retention, not re-readable"))
                result.notes.append(f"{note}; past retention, recorded as a gap")
        if damaged:
            self.state.save(state)
            result.damaged = []

    def _record(self, result: ZoneResult) -> None:
        try:
            self.warehouse.record_run(result.run_row(), result.gap_rows())
        except Exception as exc:  # bookkeeping must not undo a pass whose rows are durable
            note = f"run not recorded in the warehouse: {exc}"
            result.notes.append(note)
            log.error("zone %s: %s", result.zone_id, note)

    def _start(self, state: ZoneState, now: datetime, result: ZoneResult) -> datetime:
        """The instant to read from, recording a gap when the watermark is past retention."""
        oldest = floor_ms(now - RETENTION + RETENTION_MARGIN)
        wm = state.watermark
        if wm is None:
            return oldest
        if wm < oldest:
            result.gaps.append(
                Gap(
                    wm,
                    oldest,
                    "past retention: the provider keeps logs for 3 days and the last "
                    f"ingested instant was {wm.isoformat()}",
                )
            )
            return oldest
        overlap = timedelta(seconds=self.config.ingest.overlap_seconds)
        return max(wm - overlap, oldest)

    def _rejects(self, frame: pl.DataFrame, source: str, file: str, result: ZoneResult) -> None:
        store_rejects(self.warehouse, frame, source, file, result)

    def _merge(self, zone_id: int) -> StagedMerge:
        return StagedMerge(self.lake, zone_id, self.state.staging)

    # -- v2 ----------------------------------------------------------------------------
    def _pass_v2(self, zone: ZoneConfig, state: ZoneState, result: ZoneResult) -> None:
        cfg = self.config.ingest
        now = self.clock()
        end = floor_ms(now - timedelta(seconds=cfg.lag_seconds))
        start = self._start(state, now, result)
        result.window_from = start
        result.window_to = end
        result.reached = state.watermark
        windows = split_windows(start, end, timedelta(seconds=cfg.max_window_seconds))
        for window_from, window_to in windows:
            if self.stop.is_set():
                raise StopRequested()
            merge = self._merge(zone.id)
            query = V2Query(from_=window_from, to=window_to, limit=cfg.page_size, order="asc")
            try:
                for batch in self.client.iter_v2_batches(zone.id, query, result.stats):
                    result.pages += 1
                    good, rejects = normalize_v2(batch.frame, zone.id, batch.pagination.offset)
                    result.parsed += good.height
                    merge.add(good)
                    self._rejects(rejects, "v2", v2_query_name(window_from, window_to), result)
                    if merge.rows_in >= cfg.flush_rows:
                        result.absorb(merge.commit())
                    self.progress.update(result)
                result.absorb(merge.commit())
            finally:
                result.absorb(merge.discard())  # rows sealed hours wrote before a failure
            if state.watermark is None or window_to > state.watermark:
                state.watermark = window_to
            self.state.save(state)
            result.reached = state.watermark
            self.progress.update(result)
        result.check_input("records")

    # -- v1 ----------------------------------------------------------------------------
    def _pass_v1(self, zone: ZoneConfig, state: ZoneState, result: ZoneResult) -> None:
        cfg = self.config.ingest
        now = self.clock()
        end = floor_ms(now - timedelta(seconds=cfg.lag_seconds))
        self._start(state, now, result)  # records a gap past retention
        first_day = (now - RETENTION).date()
        result.window_from = datetime(first_day.year, first_day.month, first_day.day, tzinfo=UTC)
        result.window_to = end
        result.reached = state.watermark
        # Forget days the provider no longer keeps.
        for key in [k for k in state.v1_days if date.fromisoformat(k) < first_day]:
            del state.v1_days[key]
        day = first_day
        while day <= now.date():
            if self.stop.is_set():
                raise StopRequested()
            progress = state.v1_days.setdefault(day.isoformat(), V1Day())
            if not progress.complete:
                self._read_v1_day(zone, day, end, progress, result)
                self.state.save(state)
                self.progress.update(result)
            day += timedelta(days=1)
        if state.watermark is None or end > state.watermark:
            state.watermark = end
        result.reached = state.watermark
        result.check_input("lines")

    def _read_v1_day(
        self, zone: ZoneConfig, day: date, end: datetime, progress: V1Day, result: ZoneResult
    ) -> None:
        day_end = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
        closed = day_end <= end  # every record of the day has arrived
        # A closed day is read whole once more: belt and braces against a file that was
        # not strictly append-only. An open day is read from the first line not yet taken.
        start = 0 if closed else progress.lines
        name = f"api:v1:{day:%m-%d-%y}/{zone.id}.log"
        dest = self.state.downloads / str(zone.id) / f"{day.isoformat()}-{start}.log"
        taken = 0
        attempts = self.client.api.retry.max_attempts
        for attempt in range(1, attempts + 1):
            try:
                taken = self._take_v1_file(zone.id, day, dest, start, closed, result)
                break
            except DamagedInputError as exc:
                # The body arrived whole by HTTP's count but is not a whole file: its lines
                # are in (duplicates are dropped), and the file is fetched again.
                result.stats.add("transport_errors")
                if attempt == attempts:
                    raise TransportError(
                        f"v1 file {name} arrived damaged {attempts} times: {exc}"
                    ) from None
                log.warning("zone %s: %s; fetching it again", zone.id, exc)
                result.stats.add("retries")
            finally:
                dest.unlink(missing_ok=True)
        progress.lines = max(progress.lines, start + taken)
        progress.complete = closed

    def _take_v1_file(
        self, zone_id: int, day: date, dest: Path, start: int, closed: bool, result: ZoneResult
    ) -> int:
        """Download one v1 day file from line ``start`` and merge it; the lines taken."""
        self.client.download_v1(
            zone_id, day, dest, start=start or None, order="asc", stats=result.stats
        )
        result.pages += 1
        name = f"api:v1:{day:%m-%d-%y}/{zone_id}.log"
        merge = self._merge(zone_id)
        taken = 0
        try:
            for good, rejects, counts in iter_parsed(
                dest, zone_id, first_line=start + 1, keep_unterminated=closed
            ):
                result.parsed += good.height
                merge.add(good)
                taken += counts.lines
                self._rejects(rejects, "v1", name, result)
            result.absorb(merge.commit())
        finally:
            result.absorb(merge.discard())  # rows sealed hours wrote before a failure
        return taken


# -- local v1 files --------------------------------------------------------------------
@dataclass
class ImportResult:
    files: int = 0
    lines: int = 0
    rows: int = 0
    duplicates: int = 0
    rejected: int = 0
    blank: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    results: list[ZoneResult] = field(default_factory=list)

    def add(self, result: ZoneResult, lines: int, blank: int) -> None:
        self.files += 1
        self.lines += lines
        self.blank += blank
        self.rows += result.rows
        self.duplicates += result.duplicates
        self.rejected += result.rejected
        self.reasons.update(result.reasons)
        self.results.append(result)


def store_rejects(
    warehouse: Warehouse, frame: pl.DataFrame, source: str, file: str, result: ZoneResult
) -> None:
    """Count rejected lines or records on the result and keep them in ``rejected_lines``."""
    if frame.height:
        result.add_rejects(frame)
        warehouse.add_rejects(
            frame,
            zone=result.zone_id,
            source=source,
            file=file,
            rejected_at=utcnow(),
            run_id=result.run_id,
        )


def v2_query_name(window_from: datetime, window_to: datetime) -> str:
    """How a v2 reject's query is named in ``rejected_lines.file``: it finds it again."""
    return f"api:v2?from={iso_utc(window_from)}&to={iso_utc(window_to)}"


def _record_damage(
    warehouse: Warehouse, path: Path, exc: DamagedInputError, result: ZoneResult
) -> None:
    """A damaged file's loss where ``rejected_lines``, ``ingest_gaps`` and status show it."""
    store_rejects(
        warehouse,
        pl.DataFrame(
            {
                "line_number": [exc.last_line + 1],
                "reason": [str(exc)],
                "raw_line": [""],
                "kind": ["damaged file"],
                "request_id": [None],
            },
            schema=REJECT_SCHEMA,
        ),
        "v1",
        str(path),
        result,
    )
    if result.window_to is not None:  # a day file is in time order: the rest of its day
        day = result.window_to.date()
        day_end = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
        result.gaps.append(
            Gap(result.window_to, day_end, f"{path.name} is damaged after line {exc.last_line}")
        )


def import_v1_files(
    config: Config,
    paths: list[Path],
    zone_id: int,
    *,
    warehouse: Warehouse | None = None,
    on_file: Callable[[Path, ZoneResult, int], None] | None = None,
) -> ImportResult:
    """Parse local v1 day files into the lake; bad lines go to ``rejected_lines``.

    A damaged gzip file gives every whole line it still holds; its loss is recorded and
    the file fails. So does a file whose every line was rejected.
    """
    warehouse = warehouse or Warehouse(config.storage)
    state = StateStore(config.storage.state)
    lake = config.storage.lake
    total = ImportResult()
    with state.zone_lock(zone_id):
        clean_leftovers(lake, state.staging, zone_id)
        for path in paths:
            result = ZoneResult(zone_id, "v1-file")
            merge = StagedMerge(lake, zone_id, state.staging)
            lines = blank = 0
            started = time.monotonic()
            damage: DamagedInputError | None = None
            try:
                try:
                    for good, rejects, counts in iter_parsed(path, zone_id):
                        lines += counts.lines
                        blank += counts.blank
                        if good.height:
                            lo, hi = good["ts"].min(), good["ts"].max()
                            assert isinstance(lo, datetime) and isinstance(hi, datetime)
                            wf, wt = result.window_from, result.window_to
                            result.window_from = lo if wf is None else min(wf, lo)
                            result.window_to = hi if wt is None else max(wt, hi)
                        result.parsed += good.height
                        merge.add(good)
                        store_rejects(warehouse, rejects, "v1", str(path), result)
                except DamagedInputError as exc:
                    damage = exc  # the whole lines before the damage are kept
                result.absorb(merge.commit())
                result.pages = 1
                if damage is not None:
                    raise damage
                result.check_input("lines")
            except DamagedInputError as exc:
                _record_damage(warehouse, path, exc, result)
                result.outcome, result.error = "failed", str(exc)
            except OSError as exc:
                result.outcome, result.error = (
                    "failed",
                    f"cannot read {path}: {exc.strerror or exc}",
                )
            except CdnlakeError as exc:
                result.outcome, result.error = "failed", str(exc)
            finally:
                result.absorb(merge.discard())  # rows sealed hours wrote before a failure
            result.finished = utcnow()
            result.reached = result.window_to
            try:
                warehouse.record_run(result.run_row(), result.gap_rows())
            except CdnlakeError as exc:
                result.notes.append(f"run not recorded in the warehouse: {exc}")
            log.info("%s: %s (%.1fs)", path, result.summary(), time.monotonic() - started)
            total.add(result, lines, blank)
            if on_file is not None:
                on_file(path, result, lines)
    return total
