"""A zone's writer: exactly-once commits of one zone's rows, its progress in the same commit.

Each commit carries the zone's marks as app transactions beside the rows they cover, so a
commit prepared on a snapshot another commit of the zone has passed goes back (``AGAIN``)
and is prepared again, and one whose fence token was moved past is refused
(:class:`FencedError`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TypeAlias

import polars as pl
from deltalake import Transaction
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction

from cdnlake.errors import (
    CdnlakeError,
    DataError,
    FencedError,
    StopRequested,
    StorageError,
    ZoneBusyError,
    first_line,
)
from cdnlake.lake.log.files import prepare, take_back, write_files
from cdnlake.lake.log.progress import (
    ERASED,
    FENCE,
    PRIVACY,
    WATERMARK,
    Versions,
    holder_of,
    privacy_marks,
    rewind,
    taken_by,
)
from cdnlake.lake.log.schema import REQUESTS, SHIELD_EVENTS, TableSpec, polars_schema
from cdnlake.lake.log.table import AGAIN, UNHELD, Prepared, Snapshot
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.dedup import Dedup, Reads
from cdnlake.lake.zone.session import LakeSession
from cdnlake.retention import oldest_served

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 5  # preparations again after another commit of the zone came first
# A commit's progress: marks ("" the watermark) to versions, or (a rewind) a function of
# the table's current versions, computed again at every preparation.
Plan: TypeAlias = dict[str, int] | Callable[[Versions], dict[str, int]]


@dataclass
class Written:
    """What one commit did."""

    new: int = 0
    duplicates: int = 0
    erased: int = 0  # rows a recorded erasure covers, not stored (lake.erasures), no duplicate
    removed: int = 0  # rows removed (a rewrite: retention, an erasure)
    files_removed: int = 0
    days_removed: set[date] = field(default_factory=set)  # of the files removed
    reads: Reads = field(default_factory=Reads)  # what finding the repeats read
    late: int = 0  # new rows from before the commit's ``behind`` instant
    # The zone's marks as the commit left them, at the version it landed at.
    after: Snapshot | None = None


@dataclass
class _Attempt:
    """One preparation of a commit: its share, and what to learn once it lands."""

    share: Prepared
    snapshot: Snapshot
    versions: dict[str, int]
    new: pl.DataFrame
    kept: dict[str, pl.DataFrame]
    written: Written


class ZoneWriter:
    """Commits rows of one zone into one exactly-once table (``requests``/``shield_events``)."""

    def __init__(
        self,
        session: LakeSession,
        spec: TableSpec,
        zone_id: int,
        *,
        holder: int | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        counted_as: str | None = None,
    ) -> None:
        """Take the zone as the table has it now: :attr:`start`, and its fence token.
        ``counted_as``: the traffic counters' source (``archive``); ``clock``: the pass's
        own (retention is counted from it). ``holder``: the fleet lease's generation: a
        newer one than the table's takes the zone by a commit of progress alone; an older
        one is refused (FencedError)."""
        if spec.key is None:
            raise ValueError(f"{spec.name} has no key")
        self.session = session
        self.spec = spec
        self.zone_id = zone_id
        self.clock = clock
        self.counted_as = counted_as
        self.table = session.log_table(spec)
        self.dedup = Dedup(self.table, self._read_again_first)
        self._in_pass = False  # inside passing(): its commits may wait for others
        # Where the zone's pass starts reading, and the fence it commits under.
        self.start: Snapshot = self.table.snapshot(zone_id)
        self.token = self.start.mark(FENCE) or 0
        if holder is not None and holder != holder_of(self.token):
            if holder < holder_of(self.token):
                raise self._fenced()
            self.token = taken_by(holder)
            taken = self.commit(self.empty(), {})  # the earlier holder's commits now fail
            assert taken.after is not None
            self.start = taken.after

    @contextmanager
    def passing(self) -> Iterator[None]:
        """While this writer's pass reads and commits: a group commit may wait for its
        next share, to land it with the others (:mod:`cdnlake.lake.log.committer`)."""
        with self.table.committer.passing():
            self._in_pass = True
            try:
                yield
            finally:
                self._in_pass = False

    def empty(self) -> pl.DataFrame:
        """No rows: a commit of progress alone."""
        return pl.DataFrame(schema=polars_schema(self.spec.columns))

    # -- rewinds -------------------------------------------------------------------------
    def rewind(self, plan: Callable[[Versions], dict[str, int]]) -> None:
        """Commit the progress ``plan`` makes of the table's current versions (earlier
        ones), and advance the fence: allowed whatever this writer's token."""
        self.commit(self.empty(), plan, rewinding=True)

    def read_again(self, start: datetime | None, end: datetime | None, why: str) -> None:
        """Make the zone read ``[start, end]`` again while the provider still serves it (a
        rewind, which fences every pass in flight), else claim the span lost in
        ``ingest_gaps``. Done before a damaged file is moved, never after."""
        now = self.clock()
        oldest = oldest_served(now)
        start, end = start or oldest, end or now
        if end > oldest:
            rewind(self, max(start, oldest))
            log.error("zone %s: %s; its span is read again from %s", self.zone_id, why, start)
            return
        gap = {
            "gap_from": start,
            "gap_to": end,
            "reason": f"{why}; past retention",
            "detected_at": now,
            "run_id": f"damage-{uuid.uuid4().hex[:8]}",
            "source": "shield" if self.spec.name == "shield_events" else "maintain",
        }
        Bookkeeping(self.session).record_gaps(self.zone_id, [gap])

    def _read_again_first(
        self, zone_id: int, start: datetime | None, end: datetime | None, why: str
    ) -> None:
        """Before a file this writer's deduplication found damaged is moved: another writer
        rewinds, so this one's token is older than the fence and it commits nothing more."""
        writer = ZoneWriter(self.session, self.spec, zone_id, clock=self.clock)
        writer.read_again(start, end, why)

    # -- the commit ----------------------------------------------------------------------
    def commit(
        self,
        rows: pl.DataFrame,
        progress: Plan,
        *,
        rewinding: bool = False,
        behind: datetime | None = None,
    ) -> Written:
        """Add the rows not yet in the table and set the zone's progress (marks, "" the
        watermark, to versions) in one commit, which carries the zone's watermark and fence
        so that any two commits of the zone conflict. FencedError, nothing written, where
        the table's fence token is newer than this writer's. The watermark moves back only
        in a rewind (``rewinding``); new rows from before ``behind`` count as ``late``."""
        (outcome,) = _commit_each(
            [(self, rows)], progress, rewinding=rewinding, behind=behind, patient=self._in_pass
        )
        if isinstance(outcome, CdnlakeError):
            raise outcome
        return outcome

    def _prepare(
        self,
        frame: pl.DataFrame,
        progress: Plan,
        rewinding: bool,
        reads: Reads,
        received: pl.DataFrame | None = None,
    ) -> _Attempt:
        """The share of a commit, prepared on the table as it is now: fence checked, the
        rows the table lacks written as data files. ``received``: each row's key and
        address as received, where the privacy policy stores it otherwise (an erasure
        made under another setting matches it so)."""
        days = (
            [d.isoformat() for d in frame["date"].unique()]
            if self.spec.by_date and frame.height
            else None
        )
        snapshot = self.table.snapshot(self.zone_id, files=frame.height > 0, days=days)
        if not rewinding and (snapshot.mark(FENCE) or 0) > self.token:
            raise self._fenced()
        offered = frame.height
        lake_mark = self.session.erasures.lake_mark() if frame.height else UNHELD
        allowed = self.session.erasures.kept(
            self.spec, self.zone_id, frame, snapshot.mark(ERASED), received, lake_mark=lake_mark
        )
        new, damaged = self.dedup.new_rows(frame, snapshot.files or [], reads)
        if damaged:  # set aside, the zone rewound first: this pass stops here
            raise DataError(
                f"zone {self.zone_id}: lake file(s) "
                + ", ".join(f"{d.table}/{d.path} ({d.reason})" for d in damaged)
                + " did not decode: set aside in _quarantine, the zone's progress "
                "rewound to read the span again; nothing of this commit was written"
            )
        # Dedup decides first: a covered row the table holds (an erasure that did not
        # remove it) is a duplicate, not held back, or the audit would count it twice.
        held = new.clear()
        if allowed.height < offered and (key := self.spec.key):
            stays = pl.col(key).is_in(allowed[key].implode())
            held, new = new.filter(~stays), new.filter(stays)
        if held.height and self.spec.name == REQUESTS.name:  # for the audit
            Bookkeeping(self.session).record_erased(self.zone_id, held, "held")
        versions = self._versions(progress, rewinding, snapshot)
        if new.height and PRIVACY not in versions:  # what the rows were stored under
            setting = self.session.privacy.setting.code()
            versions.update(privacy_marks(snapshot.mark, setting, int(time.time() * 1000)))
        actions, kept = self._write(new)
        share = Prepared(
            self.zone_id,
            snapshot.version,
            actions,
            self._transactions(versions),
            lake_mark=lake_mark,
        )
        written = Written(new.height, offered - new.height - held.height, held.height, reads=reads)
        return _Attempt(share, snapshot, versions, new, kept, written)

    def _write(self, rows: pl.DataFrame) -> tuple[list[AddAction], dict[str, pl.DataFrame]]:
        """``rows`` as the share's data files (:func:`write_files`), a failure a StorageError."""
        try:
            return write_files(self.session.lake, self.spec, rows)
        except (OSError, DeltaError) as exc:
            raise StorageError(
                f"cannot write to {self.session.lake.table_uri(self.spec)}: {first_line(exc)}"
            ) from None

    def _landed(self, attempt: _Attempt, version: int, behind: datetime | None) -> Written:
        """What a share that landed at ``version`` did; the writer follows it. Its new rows
        are told to the session's traffic sink here, the one place every path's commits
        pass once they have landed."""
        self.dedup.remembered = attempt.kept
        self.token = attempt.versions[FENCE]
        written = attempt.written
        written.after = Snapshot(version, {**attempt.snapshot.marks, **attempt.versions})
        if behind is not None and attempt.new.height:
            written.late = attempt.new.filter(pl.col("ts") < behind).height
        self.session.stored(self.spec, self.zone_id, attempt.new, self.counted_as)
        return written

    def _submit(self, attempts: list[_Attempt], *, patient: bool) -> list[Future[int | str]]:
        """The shares queued together for the table's committer; refused (the session is
        closing), their files are taken back: no entry will name them."""
        try:
            return self.table.committer.submit([a.share for a in attempts], patient=patient)
        except StopRequested:
            for attempt in attempts:
                take_back(self.session.lake, self.spec, attempt.share.actions)
            raise

    def _again(self, attempt: _Attempt) -> None:
        """A share that did not land (its zone was committed to meanwhile): its files are
        named by no log entry, so they go; it is prepared again."""
        take_back(self.session.lake, self.spec, attempt.share.actions)
        log.info(
            "zone %s: another commit to %s came first; preparing again",
            self.zone_id,
            self.spec.name,
        )

    def _busy(self) -> ZoneBusyError:
        return ZoneBusyError(
            f"zone {self.zone_id}: other processes kept committing to {self.spec.name}; "
            "nothing was written, the next pass tries again"
        )

    def _fenced(self) -> FencedError:
        return FencedError(
            f"zone {self.zone_id}: its {self.spec.name} progress was rewound or the zone "
            "taken by another holder since this pass began; this commit was refused and "
            "wrote nothing (the next pass reads from the zone's progress as it is now)"
        )

    def _versions(self, progress: Plan, rewinding: bool, snapshot: Snapshot) -> dict[str, int]:
        """The commit's marks, from the table as last read: the progress given, the
        watermark (0 where the zone has none yet; never earlier than the table's but in
        a rewind) and the fence token (one more in a rewind)."""
        versions = progress(snapshot.mark) if callable(progress) else dict(progress)
        current = snapshot.mark(WATERMARK) or 0
        if rewinding:
            versions.setdefault(WATERMARK, current)
            versions[FENCE] = (snapshot.mark(FENCE) or 0) + 1
        else:
            versions[WATERMARK] = max(versions.get(WATERMARK, current), current)
            versions[FENCE] = self.token
        return versions

    def _transactions(self, versions: dict[str, int]) -> list[Transaction]:
        now_ms = int(time.time() * 1000)
        return [
            Transaction(self.spec.app_id(self.zone_id, mark), int(version), now_ms)
            for mark, version in sorted(versions.items())
        ]


def commit_together(writes: list[tuple[ZoneWriter, pl.DataFrame]]) -> list[Written | CdnlakeError]:
    """Rows of several zones of one table, without progress, submitted at once so that
    they land in one group commit (the forwarding receiver's flush): each zone's outcome,
    its error alone where it failed."""
    return _commit_each(writes, {}, patient=False)


def _commit_each(
    writes: list[tuple[ZoneWriter, pl.DataFrame]],
    progress: Plan,
    *,
    rewinding: bool = False,
    behind: datetime | None = None,
    patient: bool,
) -> list[Written | CdnlakeError]:
    """The one commit loop of :meth:`ZoneWriter.commit` and :func:`commit_together`: the
    zones' shares submitted together, those sent back (their zone committed to meanwhile)
    prepared again up to ``CONFLICT_RETRIES`` times, the rows treated by the session's
    privacy policy first; each zone's outcome, its error alone where it failed."""
    outcomes: dict[int, Written | CdnlakeError] = {}
    frames = {id(w): prepare(w.spec, w.zone_id, w.session.privacy.rows(rows)) for w, rows in writes}
    received = {id(w): _as_received(w, rows) for w, rows in writes}
    reads = {id(w): Reads() for w, _ in writes}
    pending = {id(w): w for w, _ in writes}
    for _preparation in range(CONFLICT_RETRIES + 1):
        attempts: list[tuple[ZoneWriter, _Attempt]] = []
        for key, writer in pending.items():
            try:
                attempt = writer._prepare(
                    frames[key], progress, rewinding, reads[key], received[key]
                )
            except CdnlakeError as exc:
                outcomes[key] = exc
                continue
            attempts.append((writer, attempt))
        pending = {}  # from here on, those sent back again
        if not attempts:
            break
        try:
            futures = attempts[0][0]._submit([a for _, a in attempts], patient=patient)
        except StopRequested as exc:
            outcomes.update((id(writer), exc) for writer, _ in attempts)
            break
        for (writer, attempt), future in zip(attempts, futures, strict=True):
            try:
                outcome = future.result()
            except CdnlakeError as exc:
                outcomes[id(writer)] = exc
                continue
            if outcome == AGAIN:
                writer._again(attempt)
                pending[id(writer)] = writer
            else:
                assert isinstance(outcome, int)
                outcomes[id(writer)] = writer._landed(attempt, outcome, behind)
        if not pending:
            break
    for key, writer in pending.items():
        outcomes[key] = writer._busy()
    return [outcomes[id(w)] for w, _ in writes]


def _as_received(writer: ZoneWriter, rows: pl.DataFrame) -> pl.DataFrame | None:
    """Each request's key and address as received, where ``[privacy] ip`` stores the
    address otherwise: an erasure recorded under an earlier setting (``keep``) names the
    address as received, which the stored form (truncated, hashed) no longer matches."""
    key = writer.spec.key
    if writer.session.privacy.ip == "keep" or key is None or key not in rows.columns:
        return None
    if writer.spec is SHIELD_EVENTS:  # the free text, before its addresses are treated
        texts = [pl.col(c) for c in ("log", "labels_json") if c in rows.columns]
        if not texts:
            return None
        return rows.select(
            key, pl.concat_str(texts, separator=" ", ignore_nulls=True).alias("text")
        )
    if writer.spec is not REQUESTS or "remote_ip" not in rows.columns:
        return None
    return rows.select(key, "remote_ip")
