"""One state of each lake table per process, and group commits to it.

Every writer of a table in a process (each zone's pass, each chunk of it) shares one
:class:`SharedTable`, and one commit for the commits waiting at the same time (a
leader/follower group commit, :class:`Batcher`): the first writer to wait commits for
every one queued behind it, in one Delta commit that carries all their data files and
each zone's application transactions. A process's commits to a table then follow the
commit's latency, not its number of zones.

An exactly-once table's state (its version, app transactions and each partition's data
files) is loaded from delta-rs once and then advanced by reading each new version's log
entry; a commit writes the next entry itself, put-if-absent
(:mod:`cdnlake.lake.delta_log`). Both cost what is new, not the table's size.

While a pass of the process is in flight (reading, preparing or about to commit), a
group waits for it until ``GROUP_SPACING`` after the group before began: a daemon's
commits to a table are then about one a second however many zones it polls, while a
lone pass (``ingest`` of one zone, ``import-v1``) never waits, and neither does a commit
from outside a pass (the forwarding receiver, a rewind), which takes the waiting parts
with it.

Each zone's part of a group is prepared by its own writer (fence check, deduplication,
files written) on a snapshot of the table; it may join a commit made on a later one
only if no commit in between touched the zone, i.e. carried the zone's app id (every
commit of a zone does, see :mod:`cdnlake.lake.commit`). A part whose zone was touched
goes back to its writer, which prepares it again (and may find itself fenced); the
others commit. A version whose commit is not known (a metadata or protocol change, an
entry unread) sends every waiting part back.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from deltalake import Transaction
from deltalake.transaction import AddAction, RemoveAction

from cdnlake.errors import StorageError
from cdnlake.lake.delta_log import File, Learned, TableLog
from cdnlake.lake.progress import DAYS, FENCE, FRESH, WATERMARK
from cdnlake.lake.schema import TableSpec
from cdnlake.lake.store import COMMIT_ATTEMPTS, Lake, first_line

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

PARTS = (WATERMARK, DAYS, FRESH, FENCE)  # a zone's app-id parts (cdnlake.lake.progress)
# A commit costs a few milliseconds: without a pause, zones whose passes end a little
# apart would each commit alone (a log entry, a version, a checkpoint every 100, each:
# 866 commits a poll of 1,000 zones when only parts being prepared were waited for).
# While other passes are in flight, a group waits for them until this long after the one
# before began: at most about one commit a second to a table, whatever the zones.
GROUP_SPACING = 1.0


class InFlight:
    """How many callers are inside :meth:`held`; each change wakes ``changed``'s waiters."""

    def __init__(self, changed: threading.Condition | None = None) -> None:
        self.changed = changed or threading.Condition()
        self.count = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        with self.changed:
            self.count += 1
        try:
            yield
        finally:
            with self.changed:
                self.count -= 1
                self.changed.notify_all()


class Batcher(Generic[T, R]):
    """A leader/follower group: the first caller of :meth:`submit` with nobody leading
    runs ``run`` for every item queued by then (its own included); the others wait for
    their own outcome. Items queued while a batch runs form the next one.

    ``coming`` and ``spacing``: while ``coming()`` says more items are on their way, a
    batch waits for them until ``spacing`` after the one before began, so that batches
    gather more items when ``run`` is fast (a lone caller never waits). ``patient``: an
    item that may wait so; one that may not ends the wait of every item queued with it."""

    def __init__(
        self,
        run: Callable[[list[T]], list[R | BaseException]],
        spacing: float = 0.0,
        coming: Callable[[], bool] = lambda: False,
        patient: Callable[[T], bool] = lambda _: True,
    ) -> None:
        self._run = run
        self._spacing = spacing
        self._coming = coming
        self._patient = patient
        self._began = -spacing
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
                try:
                    while (
                        self._coming()
                        and (wait := self._began + self._spacing - time.monotonic()) > 0
                        and all(self._patient(each.item) for each in self._queue)
                    ):
                        self._ready.wait(min(wait, 0.005))
                except BaseException:  # (Ctrl-C in a main-thread commit) another leads
                    self._queue.remove(waiting)
                    self._leading = False
                    self._ready.notify_all()
                    raise
                self._began = time.monotonic()
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


class PassGroup(Generic[T, R]):
    """A :class:`Batcher` whose batches wait for the process's passes in flight (those
    inside :meth:`passing` that have not submitted yet), up to ``GROUP_SPACING`` after
    the batch before began: what a table's group commits and the rejected lines' MERGEs
    share. A lone pass waits for nobody; an item that is not ``patient`` for nobody."""

    def __init__(
        self,
        run: Callable[[list[T]], list[R | BaseException]],
        patient: Callable[[T], bool] = lambda _: True,
    ) -> None:
        self._passing = InFlight()  # passes that may still submit
        self._waiting = InFlight()  # submitters waiting for their outcome
        self._group: Batcher[T, R] = Batcher(
            run, GROUP_SPACING, lambda: self._passing.count > self._waiting.count, patient
        )

    @property
    def passes(self) -> int:
        """The passes in flight now."""
        return self._passing.count

    def passing(self) -> AbstractContextManager[None]:
        """While a pass may still submit: a batch meanwhile may wait for it."""
        return self._passing.held()

    def submit(self, item: T) -> R:
        """``item``'s outcome, or its exception raised (see :meth:`Batcher.submit`)."""
        with self._waiting.held():
            return self._group.submit(item)


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
    files: list[File] | None  # the zone's data files on the days asked, when asked for

    def part(self, name: str) -> int | None:
        return self.parts[name]


@dataclass
class Part:
    """One zone's share of a group commit, prepared on the snapshot ``prepared_at``."""

    zone_id: int
    prepared_at: int
    actions: list[AddAction | RemoveAction]
    transactions: list[Transaction]
    patient: bool = False  # a pass's: its group may wait for the other passes in flight


AGAIN = "again"  # the zone was touched since its snapshot: prepare the part again
DONE = "done"


def shared_table(lake: Lake, spec: TableSpec) -> SharedTable:
    """The lake object's one :class:`SharedTable` for ``spec`` (created at first use)."""
    return lake.held(f"table:{spec.name}", lambda: SharedTable(lake, spec))


class SharedTable:
    """One table's state, shared by the process's writers, and its group commits.

    An exactly-once table (``spec.key``) is followed and written through its log
    (:class:`cdnlake.lake.delta_log.TableLog`); a bookkeeping table is one ``DeltaTable``
    brought up to date for each MERGE (:meth:`current`), which delta-rs runs. Either is
    touched under one lock only."""

    def __init__(self, lake: Lake, spec: TableSpec) -> None:
        self.lake = lake
        self.spec = spec
        self._lock = threading.Lock()
        self._log = TableLog(lake, spec) if spec.key else None
        self._table = None if spec.key else lake.open_or_create(spec)
        self._refreshed_at = time.monotonic()  # when the last refresh began
        # The last version whose commit carried each app id (since this object's first
        # version), and the last one whose commit is not known (it may carry any).
        self._touched_at: dict[str, int] = {}
        self._unknown_at = -1
        self._group: PassGroup[Part, str] = PassGroup(self._commit_group, lambda part: part.patient)

    def uri(self) -> str:
        return self.lake.table_uri(self.spec)

    def _follow(self) -> TableLog:
        if self._log is None:
            raise ValueError(f"{self.spec.name} has no key: its writers MERGE (current())")
        return self._log

    # -- reading -------------------------------------------------------------------------
    def snapshot(
        self, zone_id: int, *, files: bool = False, days: list[str] | None = None
    ) -> Snapshot:
        """The table as it is now: its version, the zone's progress and (``files``) the
        zone's data files on ``days`` (ISO dates; every day where None)."""
        table = self._follow()
        asked = time.monotonic()
        with self._lock:
            if self._refreshed_at < asked:  # else a refresh begun since the call serves it
                self._refresh()
            parts = {part: table.app(self.spec.app_id(zone_id, part)) for part in PARTS}
            chosen = table.files(zone_id, days) if files else None
            return Snapshot(table.version, parts, chosen)

    @contextmanager
    def current(self) -> Iterator[DeltaTable]:
        """The table brought up to date, for one caller at a time (a bookkeeping MERGE,
        which delta-rs runs on the object itself)."""
        if self._table is None:
            raise ValueError(f"{self.spec.name} is written through its log, not MERGEd")
        with self._lock:
            try:
                self._table.update_incremental()
            except Exception as exc:
                why = first_line(exc)
                raise StorageError(f"lake table {self.uri()} cannot be read: {why}") from None
            yield self._table

    def _refresh(self) -> None:
        """Bring the state up to date, learning what each new version's commit carried
        (under the lock)."""
        began = time.monotonic()
        for learned in self._follow().advance():
            self._learn(learned)
        self._refreshed_at = began

    def _learn(self, learned: Learned) -> None:
        if learned.apps is None:
            self._unknown_at = learned.version
        else:
            self._touched_at.update(dict.fromkeys(learned.apps, learned.version))

    def _touched(self, part: Part) -> bool:
        """Whether a commit after the part's snapshot carried its zone's app id."""
        since = part.prepared_at
        return (
            self._unknown_at > since
            or self._touched_at.get(self.spec.app_id(part.zone_id), -1) > since
        )

    # -- committing ----------------------------------------------------------------------
    def passing(self) -> AbstractContextManager[None]:
        """While a pass reads and commits to the table: a group commit meanwhile may wait
        for its next part (see ``GROUP_SPACING``)."""
        return self._group.passing()

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
        table = self._follow()
        with self._lock:
            for attempt in range(COMMIT_ATTEMPTS):
                self._refresh()  # the versions that came first: whoever they touch goes back
                for part in [p for p in live if self._touched(p)]:
                    outcome[id(part)] = AGAIN
                    live.remove(part)
                if not live:
                    break
                try:
                    landed = table.commit(
                        [action for part in live for action in part.actions],
                        [txn for part in live for txn in part.transactions],
                    )
                except StorageError as exc:
                    outcome.update((id(p), exc) for p in live)
                    live = []
                    break
                except Exception as exc:  # the store's answer: the entry may have landed
                    error = StorageError(f"cannot write to {self.uri()}: {first_line(exc)}")
                    outcome.update((id(p), error) for p in live)
                    live = []
                    break
                if landed is not None:  # our own commit touches its zones, as any other
                    self._learn(landed)
                    outcome.update((id(p), DONE) for p in live)
                    live = []
                    break
                if attempt >= 3:  # outpaced again and again: let the others pass
                    time.sleep(random.uniform(0.01, 0.1))
            outcome.update((id(p), AGAIN) for p in live)
        if len(parts) > 1:
            log.debug("%s: %d zones in one commit", self.spec.name, len(parts))
        return [outcome[id(p)] for p in parts]
