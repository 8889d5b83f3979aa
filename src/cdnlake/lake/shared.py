"""One snapshot of each lake table per process, and group commits to it.

Every writer of a table in a process (each zone's pass, each chunk of it) shares one
:class:`SharedTable`: one ``DeltaTable`` brought up to date (``update_incremental``)
instead of opened again per pass, and one commit for the commits waiting at the same
time (a leader/follower group commit, :class:`Batcher`): the first writer to wait
commits for every one queued behind it, in one Delta commit that carries all their data
files and each zone's application transactions. A process's commits to a table then
follow the commit's latency, not its number of zones.

Each zone's part of a group is prepared by its own writer (fence check, deduplication,
files written) on a snapshot of the table; it may join a commit made on a later one
only if no commit in between touched the zone, i.e. carried the zone's app id (every
commit of a zone does, see :mod:`cdnlake.lake.commit`). Which app ids each new version
carries is read from its log entry (one small file per version) as the snapshot moves
on; it also keeps the zones' progress known without asking delta-rs to replay the log.
A part whose zone was touched goes back to its writer, which prepares it again (and may
find itself fenced); the others commit. Delta's own conflict check covers the commits
that land while the group commits.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from deltalake import CommitProperties, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, RemoveAction

from cdnlake.errors import StorageError
from cdnlake.lake.progress import DAYS, FENCE, FRESH, WATERMARK
from cdnlake.lake.schema import TableSpec
from cdnlake.lake.store import COMMIT_ATTEMPTS, Lake, add_actions_table, commit_refusal, first_line

if TYPE_CHECKING:
    from arro3.core import Table as ArrowTable
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

PARTS = (WATERMARK, DAYS, FRESH, FENCE)  # a zone's app-id parts (cdnlake.lake.progress)
GROUP_ATTEMPTS = 5  # commits of one group after refusals, before its parts go back


class Batcher(Generic[T, R]):
    """A leader/follower group: the first caller of :meth:`submit` with nobody leading
    runs ``run`` for every item queued by then (its own included); the others wait for
    their own outcome. Items queued while a batch runs form the next one."""

    def __init__(self, run: Callable[[list[T]], list[R | BaseException]]) -> None:
        self._run = run
        self._queue: list[_Waiting[T, R]] = []
        self._leading = False
        self._ready = threading.Condition()

    def submit(self, item: T) -> R:
        """``item``'s outcome, or its exception raised."""
        waiting: _Waiting[T, R] = _Waiting(item)
        with self._ready:
            self._queue.append(waiting)
            while not waiting.done:
                if self._leading:
                    self._ready.wait()
                    continue
                self._leading = True
                batch, self._queue = self._queue, []
                self._ready.release()
                try:
                    outcomes = self._lead(batch)
                finally:
                    self._ready.acquire()
                for each, outcome in zip(batch, outcomes, strict=True):
                    each.outcome, each.done = outcome, True
                self._leading = False
                self._ready.notify_all()
        if isinstance(waiting.outcome, BaseException):
            raise waiting.outcome
        return waiting.outcome  # type: ignore[return-value]

    def _lead(self, batch: list[_Waiting[T, R]]) -> list[R | BaseException]:
        try:
            outcomes = self._run([w.item for w in batch])
            if len(outcomes) != len(batch):
                raise AssertionError("a batch's outcomes do not match its items")
        except BaseException as exc:  # each waiting caller learns it, not only the leader
            return [exc] * len(batch)
        return outcomes


@dataclass
class _Waiting(Generic[T, R]):
    item: T
    outcome: R | BaseException | None = None
    done: bool = False


@dataclass(frozen=True)
class Snapshot:
    """What a zone's writer reads of the table, all of one version."""

    version: int
    parts: dict[str, int | None]  # the zone's app-id parts to their versions
    actions: ArrowTable | None  # the table's add actions (flattened), when asked for

    def part(self, name: str) -> int | None:
        return self.parts[name]


@dataclass
class Part:
    """One zone's share of a group commit, prepared on the snapshot ``prepared_at``."""

    zone_id: int
    prepared_at: int
    actions: list[AddAction | RemoveAction]
    transactions: list[Transaction]


AGAIN = "again"  # the zone was touched since its snapshot: prepare the part again
DONE = "done"


def shared_table(lake: Lake, spec: TableSpec) -> SharedTable:
    """The lake object's one :class:`SharedTable` for ``spec`` (created at first use)."""
    return lake.held(f"table:{spec.name}", lambda: SharedTable(lake, spec))


class SharedTable:
    """One table's snapshot, shared by the process's writers, and its group commits.

    The ``DeltaTable`` object is touched under one lock only: reading a snapshot,
    bringing it up to date, committing."""

    def __init__(self, lake: Lake, spec: TableSpec) -> None:
        self.lake = lake
        self.spec = spec
        self._lock = threading.Lock()
        self._table = lake.open_or_create(spec)
        self._version = self._table.version()
        self._refreshed_at = time.monotonic()  # when the last refresh began
        self._apps: dict[str, int | None] = {}  # app ids' versions as of ``_version``
        # The last version whose commit carried each app id (since this object's first
        # version), and the last one whose log entry could not be read (it may carry any).
        self._touched_at: dict[str, int] = {}
        self._unknown_at = -1
        self._actions: tuple[int, ArrowTable] | None = None
        self._group: Batcher[Part, str] = Batcher(self._commit_group)

    @property
    def table(self) -> DeltaTable:
        """The shared object itself, for a single-threaded caller (tests, benchmarks)."""
        return self._table

    def uri(self) -> str:
        return self.lake.table_uri(self.spec)

    # -- reading -------------------------------------------------------------------------
    def snapshot(self, zone_id: int, *, actions: bool = False) -> Snapshot:
        """The table as it is now: its version, the zone's progress and (``actions``) the
        add actions of its files."""
        asked = time.monotonic()
        with self._lock:
            if self._refreshed_at < asked:  # else a refresh begun since the call serves it
                self._refresh()
            parts = {part: self._app(self.spec.app_id(zone_id, part)) for part in PARTS}
            files = None
            if actions:
                if self._actions is None or self._actions[0] != self._version:
                    self._actions = (self._version, add_actions_table(self._table))
                files = self._actions[1]
            return Snapshot(self._version, parts, files)

    @contextmanager
    def current(self) -> Iterator[DeltaTable]:
        """The table brought up to date, for one caller at a time (a bookkeeping MERGE,
        which delta-rs runs on the object itself)."""
        with self._lock:
            self._refresh()
            yield self._table

    def _app(self, app_id: str) -> int | None:
        if app_id not in self._apps:
            self._apps[app_id] = self._table.transaction_version(app_id)
        return self._apps[app_id]

    def _refresh(self) -> None:
        """Bring the snapshot up to date, and learn what each new version's commit
        carries (under the lock)."""
        began = time.monotonic()
        try:
            self._table.update_incremental()
            now = self._table.version()
        except Exception as exc:
            why = first_line(exc)
            raise StorageError(f"lake table {self.uri()} cannot be read: {why}") from None
        # (the bookkeeping tables carry no app transactions: nothing to learn there)
        for version in range(self._version + 1, now + 1) if self.spec.key else ():
            carried = self._carried(version)
            if carried is None:
                self._apps.clear()  # asked of delta-rs again
                self._unknown_at = version
                continue
            self._apps.update(carried)
            self._touched_at.update(dict.fromkeys(carried, version))
        self._version = max(self._version, now)
        self._refreshed_at = began

    def _carried(self, version: int) -> dict[str, int] | None:
        """The app transactions of one version's commit, from its log entry; None where
        it cannot be read (every zone then counts as touched)."""
        name = f"{self.spec.name}/_delta_log/{version:020d}.json"
        try:
            if self.lake.local is not None:
                text = (self.lake.local / name).read_text()
            else:
                with self.lake.filesystem().open_input_stream(name) as stream:
                    text = stream.read().decode()
            apps: dict[str, int] = {}
            for line in text.splitlines():
                if '"txn"' in line:
                    txn = json.loads(line).get("txn")
                    if txn:
                        apps[str(txn["appId"])] = int(txn["version"])
            return apps
        except Exception as exc:
            log.info("%s: log entry %s unread (%s)", self.spec.name, version, first_line(exc))
            return None

    def _touched(self, part: Part) -> bool:
        """Whether a commit after the part's snapshot carried its zone's app id."""
        since = part.prepared_at
        return (
            self._unknown_at > since
            or self._touched_at.get(self.spec.app_id(part.zone_id), -1) > since
        )

    # -- committing ----------------------------------------------------------------------
    def commit(self, part: Part) -> str:
        """Commit ``part`` with whatever other parts wait: ``DONE``, or ``AGAIN`` when its
        zone was touched since its snapshot (nothing of it was committed)."""
        return self._group.submit(part)

    def _commit_group(self, parts: list[Part]) -> list[str | BaseException]:
        outcome: dict[int, str | BaseException] = {}
        live: list[Part] = []
        for part in parts:  # one part per zone and commit: a zone's next, after
            if any(p.zone_id == part.zone_id for p in live):
                outcome[id(part)] = AGAIN
            else:
                live.append(part)
        with self._lock:
            for _attempt in range(GROUP_ATTEMPTS):
                self._refresh()
                for part in [p for p in live if self._touched(p)]:
                    outcome[id(part)] = AGAIN
                    live.remove(part)
                if not live:
                    break
                refused = self._commit(live)
                if refused is None:
                    outcome.update((id(p), DONE) for p in live)
                    live = []
                    break
                if isinstance(refused, BaseException):
                    outcome.update((id(p), StorageError(str(refused))) for p in live)
                    live = []
                    break
                if refused == "conflict":  # whoever is touched goes back; the rest again
                    self._refresh()
                    touched = [p for p in live if self._touched(p)]
                    if not touched:  # a metadata or protocol change: all go back
                        touched = list(live)
                    for part in touched:
                        outcome[id(part)] = AGAIN
                        live.remove(part)
                else:  # outpaced: try again a little later
                    time.sleep(random.uniform(0.05, 0.5))
            outcome.update((id(p), AGAIN) for p in live)
        if len(parts) > 1:
            log.debug("%s: %d zones in one commit", self.spec.name, len(parts))
        return [outcome[id(p)] for p in parts]

    def _commit(self, parts: list[Part]) -> str | StorageError | None:
        """One Delta commit of ``parts`` on the current snapshot: None when it landed,
        "conflict" or "outpaced" when refused so, else the error."""
        try:
            self._table.create_write_transaction(
                [action for part in parts for action in part.actions],
                mode="append",
                schema=self._table.schema(),
                partition_by=self.spec.partition_by,
                commit_properties=CommitProperties(
                    app_transactions=[txn for part in parts for txn in part.transactions],
                    max_commit_retries=COMMIT_ATTEMPTS,
                ),
            )
        except CommitFailedError as exc:
            refusal = commit_refusal(exc)
            if refusal == "conflict":
                log.info("another process committed to %s; re-reading", self.spec.name)
            if refusal in ("conflict", "outpaced"):
                return refusal
            return StorageError(f"lake commit failed: {first_line(exc)}")
        except (OSError, DeltaError) as exc:
            return StorageError(f"cannot write to {self.uri()}: {first_line(exc)}")
        return None
