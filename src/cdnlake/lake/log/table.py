"""A table of the lake as one process holds it: its state, its committer, its checkpoints.

An exactly-once table (``requests``, ``shield_events``: :class:`LogTable`) is followed and
written through its log (:class:`~cdnlake.lake.log.delta_log.TableLog`): a snapshot costs the
entries that are new since the last one, and a commit writes the next entry itself.

**Its one door.** Every change to it is a share (:class:`Prepared`) submitted to its
committer (:mod:`cdnlake.lake.log.committer`), which drains the shares waiting into one Delta
commit: passes, forwarding, backfill and rewinds (:mod:`cdnlake.lake.zone.writer`); forget and
expiry (:mod:`cdnlake.lake.upkeep.rewrite`); compaction, nightly and daytime, apply-privacy, a
damaged file's removal (:meth:`LogTable.replace`); restore (a zone's commit). delta-rs
reads the table, writes its checkpoints and vacuums it; it commits to it only what names
no data file and no progress: the table's creation (version 0 alone), the columns a newer
cdnlake adds (:meth:`~cdnlake.lake.log.store.Lake.evolve`) and the table's properties
(:meth:`~cdnlake.lake.log.store.Lake.configure`), each a metaData entry that sends every
share prepared before it back to its writer (rule 1), once per lake; and a vacuum's own
two entries (commitInfo alone, which no share conflicts with). Each is synced on local
disk before it is acknowledged (:meth:`~cdnlake.lake.log.store.Lake.sync_commits`).
A reader that must write nothing opens it with ``create=False``
(:meth:`~cdnlake.lake.zone.session.LakeSession.log_table`): neither made nor evolved.
One rule decides every share: it lands on the newest version when

1. no version since its snapshot is one whose commit is not known (a metadata or protocol
   change, an entry unread);
2. a share that carries progress (its zone's app transactions) finds no commit since its
   snapshot that carried its zone's app id;
3. every file it removes is still in the table;
4. a share adding new rows of a zone's writer was held against the lake's erasure mark
   (zone 0's ``erased`` in ``requests``: an erasure of every zone) as it is now;

and within one group, a zone's progress goes once and a file is removed once. A share
that fails goes back to its writer (``AGAIN``), which takes its files back and prepares it
again. A share without progress (a compaction, a damaged file's removal) conflicts with no
pass. A checkpoint is written by a thread of its own, off the commit path.

A bookkeeping table (:class:`MergeTable`) is one delta-rs table brought up to date for
each change its committer runs: a MERGE for a group of rows at once, a delete
(:class:`Delete`: forget's and expiry's), a replacement (:class:`Replace`: the rollups'
days), a compaction (:class:`Compact`: maintain's); each tried again when another commit
conflicts, and on local disk synced before it is acknowledged (delta-rs syncs nothing).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote

from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties
from deltalake.exceptions import CommitFailedError

from cdnlake.errors import StopRequested, StorageError, first_line
from cdnlake.lake.log.committer import Committer
from cdnlake.lake.log.delta_log import (
    DEFAULT_CHECKPOINT_INTERVAL,
    File,
    Learned,
    Removal,
    TableLog,
    write_checkpoint,
)
from cdnlake.lake.log.progress import MARKS
from cdnlake.lake.log.retry import retrying
from cdnlake.lake.log.schema import TableSpec, conform
from cdnlake.lake.log.store import Lake

if TYPE_CHECKING:
    import polars as pl
    from deltalake import Transaction
    from deltalake.transaction import AddAction

log = logging.getLogger(__name__)

# Each commit of another process moves the version a group must land on: with many
# writers at once a group is tried this many times before its shares go back (AGAIN).
COMMIT_ATTEMPTS = 200
# A MERGE that delta-rs refused (a concurrent write to the zone's rows, or its own commit
# whose answer was lost) is run again, this many times in all.
MERGE_ATTEMPTS = 10
NO_CHECKPOINT = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
_R = TypeVar("_R")
AGAIN = "again"  # the share fails the one rule (see the module): prepare it again
REPLACE_ROUNDS = 5  # plans of a replacement whose files other commits kept replacing
UNHELD = -1  # a share's lake_mark where its rows were held against no erasure (none new)


@dataclass(frozen=True)
class Snapshot:
    """What a zone's writer reads of the table, all of one version: the zone's progress
    marks (:mod:`cdnlake.lake.log.progress`) and, when asked for, its data files."""

    version: int
    marks: dict[str, int | None]
    files: list[File] | None = None

    def mark(self, name: str) -> int | None:
        return self.marks.get(name)


@dataclass
class Prepared:
    """One zone's share of a group commit, prepared on the snapshot at ``version``: the
    files it adds (``actions``), the zone's progress (``transactions``: none for a
    compaction or a damaged file's removal) and the files of the zone it removes
    (``removals``), under the module's one rule. ``lake_mark``: the lake's erasure mark
    its new rows were held against (a zone writer's; ``UNHELD``: rows already stored)."""

    zone_id: int
    version: int
    actions: list[AddAction]
    transactions: list[Transaction]
    removals: list[Removal] = field(default_factory=list)
    lake_mark: int | None = UNHELD


@dataclass(frozen=True)
class Replacement:
    """Files of one zone that go (``paths``, as the log names them) and the rows written
    in their place (rows as :func:`~cdnlake.lake.log.files.prepare` makes them; none: the
    files simply go)."""

    paths: list[str]
    rows: pl.DataFrame | None = None
    data_change: bool = True  # False: the same rows, rearranged (a compaction)


class _Outpaced(Exception):
    """Another writer's entry took the version a group aimed at."""


class LogTable:
    """An exactly-once table: its state as of the last entry read, and its committer."""

    def __init__(
        self,
        lake: Lake,
        spec: TableSpec,
        lake_mark: str | Callable[[], int | None],
        table: DeltaTable | None = None,
    ) -> None:
        """``lake_mark``: the lake's erasure mark (rule 4): its app id where this table
        holds it (``requests``), else how to read it now (``shield_events``). ``table``: a
        reader's, as opened (see :class:`TableLog`); ``made``: whether the table was made
        ready to write (created, evolved)."""
        self.lake = lake
        self.spec = spec
        self._lake_mark = lake_mark
        self.made = table is None
        self._lock = threading.Lock()  # the state: one reader or committer at a time
        self._log = TableLog(lake, spec, table)
        self._refreshed_at = time.monotonic()  # when the last refresh began
        # The last version whose commit carried each app id (since the state's load), and
        # the last one whose commit is not known (it may carry any).
        self._touched_at: dict[str, int] = {}
        self._unknown_at = -1
        self._checkpoints = Checkpoints(lake, spec)
        self.committer: Committer[Prepared, int | str] = Committer(spec.name, self._commit)

    def uri(self) -> str:
        return self.lake.table_uri(self.spec)

    # -- reading -------------------------------------------------------------------------
    def snapshot(
        self, zone_id: int, *, files: bool = False, days: list[str] | None = None
    ) -> Snapshot:
        """The table as it is now: its version, the zone's marks and (``files``) the zone's
        data files on ``days`` (ISO dates; every day where None)."""
        asked = time.monotonic()
        with self._lock:
            if self._refreshed_at < asked:  # else a refresh begun since the call serves it
                self._refresh()
            marks = {mark: self._log.app(self.spec.app_id(zone_id, mark)) for mark in MARKS}
            chosen = self._log.files(zone_id, days) if files else None
            return Snapshot(self._log.version, marks, chosen)

    def marks(self, zone_ids: list[int], mark: str) -> dict[int, int | None]:
        """One mark of each of ``zone_ids``, all of one version (one refresh for all)."""
        with self._lock:
            self._refresh()
            return {zone: self._log.app(self.spec.app_id(zone, mark)) for zone in zone_ids}

    def apps(self) -> Callable[[str], int | None]:
        """App ids' versions, the table brought up to date once: then each a lookup in
        memory, where delta-rs's ``transaction_version`` reads the log again at each call
        (``/healthz`` asks thousands)."""
        with self._lock:
            self._refresh()
        return self._app

    def _app(self, app_id: str) -> int | None:
        with self._lock:
            return self._log.app(app_id)

    def _refresh(self) -> None:
        """Bring the state up to date, learning what each new version's commit carried."""
        began = time.monotonic()
        for learned in self._log.advance():
            self._learn(learned)
        self._refreshed_at = began

    def _learn(self, learned: Learned) -> None:
        if learned.apps is None:
            self._unknown_at = learned.version
        else:
            self._touched_at.update(dict.fromkeys(learned.apps, learned.version))

    def holds(self, path: str) -> bool:
        """Whether the table, as last read, holds the data file ``path``."""
        with self._lock:
            return self._log.holds(path)

    def _touched(self, share: Prepared) -> bool:
        """Whether the share fails the one rule (the module's) on the state as it is."""
        progress = self._touched_at.get(self.spec.app_id(share.zone_id), -1)
        return (
            self._unknown_at > share.version
            or (bool(share.transactions) and progress > share.version)
            or not all(self._log.holds(r.path) for r in share.removals)
            or (bool(share.actions) and share.lake_mark != UNHELD and self._erased(share))
        )

    def _erased(self, share: Prepared) -> bool:
        """Whether the lake's erasure mark is no longer the one the share's rows were
        held against (an erasure of every zone landed since: they are held again)."""
        if callable(self._lake_mark):
            return self._lake_mark() != share.lake_mark
        return self._log.app(self._lake_mark) != share.lake_mark

    # -- replacing files -----------------------------------------------------------------
    def replace(self, zone_id: int, plan: Callable[[], Replacement | None]) -> Replacement | None:
        """Files of a zone replaced by rows written anew (or removed), in a share without
        progress: ``plan``, asked on the table as it is now, names them (None: nothing to
        do). The share goes back when one of its files left the table meanwhile: its new
        files are taken back and ``plan`` asked again, up to ``REPLACE_ROUNDS`` times.
        What landed, or None."""
        from cdnlake.lake.log.files import take_back, write_files

        for _round in range(REPLACE_ROUNDS):
            version = self.snapshot(zone_id).version
            chosen = plan()
            if chosen is None or not chosen.paths:
                return None
            try:
                added = (
                    [] if chosen.rows is None else write_files(self.lake, self.spec, chosen.rows)[0]
                )
            except OSError as exc:
                raise StorageError(f"cannot write to {self.uri()}: {first_line(exc)}") from None
            change = chosen.data_change
            added = [dataclasses.replace(a, data_change=change) for a in added]
            removals = [Removal(p, _partition_of(p), change) for p in chosen.paths]
            share = Prepared(zone_id, version, added, [], removals)
            try:
                outcome = self.committer.run(share, patient=False)
            except StopRequested:  # not sent: no entry names its files
                take_back(self.lake, self.spec, added)
                raise
            if outcome != AGAIN:
                return chosen
            take_back(self.lake, self.spec, added)
        raise StorageError(
            f"{self.spec.name}: zone {zone_id}: its files kept changing while they were "
            f"replaced ({REPLACE_ROUNDS} attempts); nothing was replaced, run it again"
        )

    # -- committing ----------------------------------------------------------------------
    def _commit(self, shares: list[Prepared]) -> list[int | str | BaseException]:
        """One group: the version it landed at for each share committed, ``AGAIN`` for a
        share that fails the one rule, or the error."""
        outcome: dict[int, int | str | BaseException] = {}
        live: list[Prepared] = []
        removed: set[str] = set()
        for share in shares:  # a zone's progress once, a file removed once: the next, after
            paths = {r.path for r in share.removals}
            twice = share.transactions and any(
                p.transactions and p.zone_id == share.zone_id for p in live
            )
            if twice or paths & removed:
                outcome[id(share)] = AGAIN
            else:
                live.append(share)
                removed |= paths
        landed: Learned | None = None
        with self._lock:
            try:
                for attempt in retrying(
                    f"committing to {self.spec.name}",
                    on=_Outpaced,
                    attempts=COMMIT_ATTEMPTS,
                    wait=0.005,
                    max_wait=0.1,
                ):
                    with attempt:
                        self._refresh()  # the versions that came first: who they touch goes back
                        for share in [p for p in live if self._touched(p)]:
                            outcome[id(share)] = AGAIN
                            live.remove(share)
                        if live:
                            landed = self._write(live)
            except _Outpaced:  # outpaced again and again: prepared again, later
                outcome.update((id(p), AGAIN) for p in live)
            except StorageError as exc:
                outcome.update((id(p), exc) for p in live)
            else:
                if landed is not None:
                    self._learn(landed)  # our own commit touches its zones, as any other
                    outcome.update((id(p), landed.version) for p in live)
        if landed is not None and self._log.checkpoint_due(landed.version):
            self._checkpoints.want(landed.version)
        return [outcome[id(p)] for p in shares]

    def _write(self, live: list[Prepared]) -> Learned:
        try:
            landed = self._log.commit(
                [action for share in live for action in share.actions],
                [txn for share in live for txn in share.transactions],
                [removal for share in live for removal in share.removals],
            )
        except StorageError:
            raise
        except Exception as exc:  # the store's answer: the entry may have landed
            raise StorageError(f"cannot write to {self.uri()}: {first_line(exc)}") from None
        if landed is None:
            raise _Outpaced
        return landed

    def close(self) -> None:
        """Commit what is queued, then finish the checkpoint under way."""
        self.committer.close()
        self._checkpoints.close()


class Checkpoints:
    """A table's checkpoints, written on a thread of their own after the commit that lands
    on a ``delta.checkpointInterval`` version is acknowledged: a slow store delays the
    readers' next checkpoint, never a commit (on S3 under faults one took 38 s). A newer
    version wanted by the time one is written takes its place."""

    def __init__(self, lake: Lake, spec: TableSpec) -> None:
        self.lake = lake
        self.spec = spec
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"checkpoint-{spec.name}")
        self._wanted = -1

    def want(self, version: int) -> None:
        if version > self._wanted:
            self._wanted = version
            self._pool.submit(self._write, version)

    def _write(self, version: int) -> None:
        """A checkpoint at ``version`` (unless a newer one is there) and the expired log
        entries removed, as delta-rs's post-commit hook does; a failure is logged (readers
        only read more entries)."""
        if version < self._wanted:
            return
        try:
            table = write_checkpoint(self.lake, self.spec, version)
            if table is None:
                return  # another process's is as new
            cleanup = table.metadata().configuration.get("delta.enableExpiredLogCleanup")
            if (cleanup or "true").lower() == "true":
                table.cleanup_metadata()  # only entries past delta.logRetentionDuration
        except Exception as exc:
            log.warning(
                "%s: no checkpoint at version %s (%s)", self.spec.name, version, first_line(exc)
            )

    def close(self) -> None:
        """Finish the checkpoint under way (one not begun is left: the next comes)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True)
class Merge:
    """Rows for a bookkeeping table: those that ``match`` (``t``: the table, ``s``: the rows)
    finds no row of their zone for are inserted; those it finds are updated by ``update``
    (where ``update_if`` holds). ``rows`` is asked again at every attempt: what to write
    may depend on what the table holds by then. ``key``: the columns that make a row one
    (the rows of a group's merges with the same ``match`` go in one MERGE, each key once);
    none: this merge goes alone. ``key_literals``: the MERGE also names the rows' keys as
    literals, so that delta-rs skips the files whose statistics rule them out, instead of
    reading every file of the zones (a few keys at a time only: a pass's run)."""

    rows: Callable[[], pl.DataFrame]
    match: str
    zones: list[int]
    update: dict[str, str] | None = None
    update_if: str | None = None
    key: tuple[str, ...] = ()
    key_literals: bool = False


@dataclass(frozen=True)
class Delete:
    """Rows of a bookkeeping table deleted: those ``where`` (a delta-rs predicate over the
    table's columns) selects; alone in its group, retried as a MERGE is."""

    where: str


@dataclass(frozen=True)
class Replace:
    """Rows of a bookkeeping table replaced in one commit (Delta's replaceWhere): those
    ``where`` (a delta-rs predicate over the table's columns) selects go, ``rows`` (asked
    again at every attempt, each a row ``where`` selects) come; alone in its group."""

    where: str
    rows: Callable[[], pl.DataFrame]


@dataclass(frozen=True)
class Compact:
    """A bookkeeping table's small files of a zone (every zone's where None) rewritten as
    files of up to ``target_size`` bytes (delta-rs's optimize); alone in its group. What
    it removed comes back as :class:`Deleted` (files, no rows)."""

    zone: int | None
    target_size: int


@dataclass(frozen=True)
class Deleted:
    rows: int  # rows deleted
    files: int  # files removed (rewritten without them)


Change = Merge | Delete | Replace | Compact  # what a bookkeeping table's committer takes


class MergeTable:
    """A bookkeeping table: one delta-rs table brought up to date for each change (a
    MERGE, a delete, a replacement, a compaction), every one through its committer, and
    on local disk synced before it is acknowledged (:meth:`Lake.sync_commits`)."""

    def __init__(self, lake: Lake, spec: TableSpec) -> None:
        self.lake = lake
        self.spec = spec
        self._lock = threading.Lock()
        self._table = lake.open_or_create(spec)
        self._checkpoints = Checkpoints(lake, spec)
        interval = self._table.metadata().configuration.get("delta.checkpointInterval")
        self._interval = int(interval or DEFAULT_CHECKPOINT_INTERVAL)
        self.committer: Committer[Change, Deleted | None] = Committer(spec.name, self._merge_group)

    @contextmanager
    def current(self) -> Iterator[DeltaTable]:
        """The table brought up to date, for one caller at a time."""
        with self._lock:
            try:
                self._table.update_incremental()
            except Exception as exc:
                why = first_line(exc)
                raise StorageError(
                    f"lake table {self.lake.table_uri(self.spec)} cannot be read: {why}"
                ) from None
            yield self._table

    def _merge_group(self, merges: list[Change]) -> list[BaseException | Deleted | None]:
        """The group's changes: merges that share a ``match`` and a ``key`` in one MERGE;
        any other change alone."""
        batches: dict[tuple[str, tuple[str, ...]], list[Merge]] = {}
        alone: list[list[Merge]] = []
        outcome: dict[int, BaseException | Deleted | None] = {}
        for merge in merges:
            if not isinstance(merge, Merge):
                try:
                    outcome[id(merge)] = self._alone(merge)
                except StorageError as exc:
                    outcome[id(merge)] = exc
            elif merge.key and merge.update is None:
                batches.setdefault((merge.match, merge.key), []).append(merge)
            else:
                alone.append([merge])
        for batch in [*batches.values(), *alone]:
            try:
                self._merge(batch)
                outcome.update((id(m), None) for m in batch)
            except StorageError as exc:
                outcome.update((id(m), exc) for m in batch)
        return [outcome[id(m)] for m in merges]

    def _merge(self, batch: list[Merge]) -> None:
        import polars as pl

        first = batch[0]
        column = self.spec.zone_column
        zones = sorted({int(zone) for m in batch for zone in m.zones})
        within = ", ".join(str(zone) for zone in zones)
        predicate = f"t.{column} = s.{column} AND t.{column} IN ({within}) AND {first.match}"

        def rows() -> pl.DataFrame:
            frame = pl.concat([m.rows() for m in batch]) if len(batch) > 1 else first.rows()
            if len(batch) > 1:
                frame = frame.unique(subset=[column, *first.key], keep="first", maintain_order=True)
            return conform(frame, self.spec.schema)

        def attempt() -> None:
            frame = rows()
            if frame.height == 0:
                return
            where = predicate
            if first.key_literals:
                (key,) = first.key
                named = ", ".join(literal(v) for v in frame[key].unique().sort())
                where += f" AND t.{key} IN ({named})"
            with self.current() as table:
                before = table.version()
                merger = table.merge(
                    frame,
                    predicate=where,
                    source_alias="s",
                    target_alias="t",
                    commit_properties=CommitProperties(max_commit_retries=COMMIT_ATTEMPTS),
                    post_commithook_properties=NO_CHECKPOINT,  # on its own thread
                )
                if first.update:
                    merger = merger.when_matched_update(first.update, predicate=first.update_if)
                merger.when_not_matched_insert_all().execute()
                self._landed(table, before)

        self._retried("merging into", attempt)

    def _alone(self, change: Delete | Replace | Compact) -> Deleted | None:
        """A change that goes alone: one delta-rs commit (a compaction: one or more), on
        the table brought up to date, acknowledged once synced (:meth:`_landed`)."""
        from deltalake import write_deltalake

        commit = CommitProperties(max_commit_retries=COMMIT_ATTEMPTS)
        hooks = NO_CHECKPOINT  # checkpoints on their own thread

        def attempt() -> Deleted | None:
            # (rows asked before the table is: they may read it, as a MERGE's do)
            rows = conform(change.rows(), self.spec.schema) if isinstance(change, Replace) else None
            done: Deleted | None = None
            with self.current() as table:
                before = table.version()
                if isinstance(change, Delete):
                    metrics = table.delete(
                        change.where, commit_properties=commit, post_commithook_properties=hooks
                    )
                    done = Deleted(
                        rows=int(metrics.get("num_deleted_rows", 0) or 0),
                        files=int(metrics.get("num_removed_files", 0) or 0),
                    )
                elif isinstance(change, Replace):
                    assert rows is not None
                    write_deltalake(
                        table,
                        rows.to_arrow(),
                        mode="overwrite",
                        predicate=change.where,
                        partition_by=self.spec.partition_by,
                        commit_properties=commit,
                        post_commithook_properties=hooks,
                    )
                else:
                    zone = (
                        []
                        if change.zone is None
                        else [(self.spec.zone_column, "=", str(change.zone))]
                    )
                    metrics = table.optimize.compact(
                        partition_filters=zone or None,
                        target_size=change.target_size,
                        min_commit_interval=timedelta(minutes=1),
                        commit_properties=commit,
                        post_commithook_properties=hooks,
                    )
                    done = Deleted(rows=0, files=int(metrics.get("numFilesRemoved", 0)))
                self._landed(table, before)
            return done

        what = {Delete: "deleting from", Replace: "replacing rows of", Compact: "compacting"}
        return self._retried(what[type(change)], attempt)

    def _landed(self, table: DeltaTable, before: int) -> None:
        """The commits since ``before`` (one's own, and any another writer made meanwhile)
        on the disk before they are acknowledged; a checkpoint, when one is due, on the
        checkpoints' thread."""
        now = table.version()  # (delta-rs's state is at its commit once it returns)
        self.lake.sync_commits(self.spec, before + 1, now)
        due = now - now % self._interval
        if due > before:
            self._checkpoints.want(due)

    def _retried(self, what: str, attempt: Callable[[], _R]) -> _R:
        """``attempt`` (one commit), again while another writer's commit made it fail."""
        try:
            for each in retrying(
                f"{what} {self.spec.name}", on=CommitFailedError, attempts=MERGE_ATTEMPTS
            ):
                with each:
                    return attempt()
            raise AssertionError("retrying ended without an outcome")  # (never reached)
        except CommitFailedError as exc:
            raise StorageError(
                f"cannot write {self.spec.name}: {first_line(exc)} ({MERGE_ATTEMPTS} attempts)"
            ) from None
        except StorageError:
            raise
        except Exception as exc:
            raise StorageError(f"cannot write {self.spec.name}: {first_line(exc)}") from None

    def close(self) -> None:
        self.committer.close()
        self._checkpoints.close()


def _partition_of(path: str) -> dict[str, str | None]:
    """A data file's partition values, from its folders (``column=value/...``)."""
    folders = [part.split("=", 1) for part in unquote(path).split("/")[:-1] if "=" in part]
    return {column: value for column, value in folders}


def literal(value: object) -> str:
    """A string literal of a merge predicate (delta-rs binds no parameters there)."""
    return "'" + str(value).replace("'", "''") + "'"
