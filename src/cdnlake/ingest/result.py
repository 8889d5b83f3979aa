"""What one zone pass did, how it ended, and who hears about it."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import polars as pl

from cdnlake.client.stats import RequestStats
from cdnlake.errors import (
    CdnlakeError,
    DataError,
    HttpError,
    RejectedInputError,
    StopRequested,
    StorageError,
    ZoneBusyError,
)
from cdnlake.lake.zone.writer import Written

log = logging.getLogger("cdnlake.ingest")


def utcnow() -> datetime:
    return datetime.now(UTC)


def this_daemon() -> str:
    """``host:pid``: which process ran a pass (``ingest_runs.daemon``)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def breakdown(reasons: Counter[str]) -> str:
    """``149 bad timestamp, 1 wrong field count``: most common first."""
    return ", ".join(f"{n} {kind}" for kind, n in reasons.most_common())


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
    erased: int = 0  # rows an erasure covers, held back (cdnlake forget)
    rejected: int = 0
    parsed: int = 0  # rows that parsed, new or duplicate
    lines: int = 0  # lines read (files), blank ones included
    blank: int = 0
    reasons: Counter[str] = field(default_factory=Counter)  # rejects by kind
    outcome: str = "ok"
    error: str | None = None
    # Spans the pass claimed lost, each recorded in ingest_gaps as it was claimed (only
    # through PassContext.claim_gap: a gap appended elsewhere would be recorded nowhere).
    gaps: list[Gap] = field(default_factory=list)
    lost_seconds: float = 0.0  # of those, the seconds that no earlier gap claimed
    # New rows only the safety margin's re-read found: they reached the provider later
    # than lag_seconds, and those as late between the margin's slices are not read again.
    late: int = 0
    stats: RequestStats = field(default_factory=RequestStats)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def skipped(self) -> bool:
        """Another cdnlake process was ingesting the zone (``busy``): nothing failed, it
        reads what this pass would have (an ``ingest`` beside a cron job's last one)."""
        return self.outcome == "busy"

    @property
    def rows_read(self) -> int:
        """Records (v2, shield) or lines (v1) the provider served in this pass, new or not:
        each one either parsed or rejected."""
        return self.parsed + self.rejected

    def absorb(self, written: Written) -> None:
        self.rows += written.new
        self.duplicates += written.duplicates
        self.erased += written.erased
        self.late += written.late

    def add_rejects(self, frame: pl.DataFrame) -> None:
        self.rejected += frame.height
        self.reasons.update(frame["kind"].to_list())

    def rejected_text(self) -> str:
        """``3 rejected (2 bad timestamp, 1 wrong field count)``, and the rows an erasure
        held back where there were any (``, 2 held back (erased)``)."""
        detail = f" ({breakdown(self.reasons)})" if self.reasons else ""
        held = f", {self.erased} held back (erased)" if self.erased else ""
        return f"{self.rejected} rejected{detail}{held}"

    def check_input(self, noun: str) -> None:
        """Fail a pass that was given input but could take nothing from it."""
        if self.rejected and not self.parsed:
            raise RejectedInputError(
                f"all {self.rejected} {noun} rejected: {breakdown(self.reasons)}"
            )

    def summary(self) -> str:
        seconds = ((self.finished or utcnow()) - self.started).total_seconds()
        counts = (
            f"{self.pages} pages, {self.rows} rows, {self.duplicates} duplicates dropped, "
            f"{self.rejected_text()}, {self.stats.rate_limited} 429s, {seconds:.1f}s"
        )
        if self.source.endswith("-reread") and self.window_from and self.window_to:
            return self._reread_summary(counts)
        reached = self.reached.strftime("%Y-%m-%d %H:%M:%SZ") if self.reached else "-"
        kind = "shield zone" if self.source == "shield" else "zone"
        if self.outcome == "busy":  # not a failure: the other process reads it
            return f"{kind} {self.zone_id} [{self.source}] skipped: {self.error or 'busy'}"
        text = f"{kind} {self.zone_id} [{self.source}] {self.outcome}: reached {reached}, {counts}"
        if self.gaps:
            text += f", {len(self.gaps)} gap(s)"
        if self.late:
            text += f", {self.late} records later than lag_seconds (raise it)"
        if self.error:
            text += f" - {self.error}"
        return text

    def record(self) -> dict[str, Any]:
        """The summary as fields (``--log-format json``): one JSON object per pass."""
        seconds = ((self.finished or utcnow()) - self.started).total_seconds()
        return {
            "zone": self.zone_id,
            "source": self.source,
            "run_id": self.run_id,
            "outcome": self.outcome,
            "reached": self.reached.isoformat() if self.reached else None,
            "pages": self.pages,
            "rows": self.rows,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "rejected_by_kind": dict(self.reasons),
            "rate_limited": self.stats.rate_limited,
            "seconds": round(seconds, 3),
            "gaps": len(self.gaps),
            "late": self.late,
            "error": self.error,
            "message": self.summary(),
        }

    def _reread_summary(self, counts: str) -> str:
        """A span read again: the watermark is not its to move, nor the next pass's
        progress its to speak of; a re-read that did not finish is to be run again."""
        span = f"{self.window_from:%Y-%m-%d %H:%M:%SZ}..{self.window_to:%Y-%m-%d %H:%M:%SZ}"
        head = f"zone {self.zone_id} [{self.source}] re-read of {span}"
        if self.outcome == "ok":
            return f"{head} ok (watermark unchanged): {counts}"
        # A refused commit's text speaks to a pass ("the next pass reads from ..."): cut.
        cause = (self.error or self.outcome).split(" (the next pass reads from")[0]
        stored = "what was stored before it stays" if self.rows else "nothing was stored"
        return (
            f"{head} {self.outcome}: {cause}; {stored} (watermark unchanged): run it again "
            f"to read the span whole; {counts}"
        )

    def run_row(self) -> dict[str, Any]:
        s = self.stats
        return {
            "run_id": self.run_id,
            "source": self.source,
            "started": self.started,
            "finished": self.finished,
            "window_from": self.window_from,
            "window_to": self.window_to,
            "pages": self.pages,
            "rows": self.rows,
            "duplicates_dropped": self.duplicates,
            "rejected": self.rejected,
            "rate_limited": s.rate_limited,
            "retries": s.retries,
            "server_errors": s.server_errors,
            "transport_errors": s.transport_errors,
            "outcome": self.outcome,
            "error": self.error,
            "daemon": this_daemon(),
            "rows_read": self.rows_read,
        }

    def gap_row(self, gap: Gap) -> dict[str, Any]:
        """``gap``'s row for ``ingest_gaps``."""
        return {
            "gap_from": gap.gap_from,
            "gap_to": gap.gap_to,
            "reason": gap.reason,
            "detected_at": self.started,
            "run_id": self.run_id,
            "source": self.source,
        }


def classify(exc: BaseException | None) -> tuple[str, str | None]:
    """The outcome and error text of a pass that ended with ``exc`` (None: it did not)."""
    if exc is None:
        return "ok", None
    if isinstance(exc, ZoneBusyError):
        return "busy", str(exc)
    if isinstance(exc, StopRequested):
        return "stopped", "stopped before the pass completed"
    if isinstance(exc, (DataError, StorageError)):  # the message names the file and fault
        return "failed", str(exc)
    if isinstance(exc, HttpError) and exc.transient:  # the message says what went wrong
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


class Reporter(Protocol):
    """Who hears how a pass goes (a terminal's live rows, a pipe's lines, the log)."""

    def update(self, result: ZoneResult) -> None: ...

    def finished(self, result: ZoneResult) -> None: ...


class LogReporter:
    """Where no one watches (the daemon): each zone's summary goes to the log."""

    def update(self, result: ZoneResult) -> None:
        pass

    def finished(self, result: ZoneResult) -> None:
        fields = {
            "zone": result.zone_id,
            "source": result.source,
            "run_id": result.run_id,
            "outcome": result.outcome,
            "rows": result.rows,
        }
        log.log(logging.INFO if result.ok else logging.WARNING, result.summary(), extra=fields)
        for gap in result.gaps:
            log.warning(
                "zone %s: DATA LOST from %s to %s: %s",
                result.zone_id,
                gap.gap_from.isoformat(),
                gap.gap_to.isoformat(),
                gap.reason,
                extra=fields,
            )
