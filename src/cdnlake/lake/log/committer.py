"""One table's committer: a thread that drains a queue of prepared items as one group,
applied by one commit (or one MERGE); each caller waits on its own future.

A group closes when every pass of the process in flight on the table has its item queued,
when an item comes from outside a pass (``patient=False``), or when its first item has
waited ``GROUP_WAIT``: a lone pass never waits, and a daemon of a thousand zones commits
about once a second, not once a zone. Nothing polls.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from cdnlake.errors import StopRequested

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# The longest an item of a pass waits for the other passes in flight to join its group.
GROUP_WAIT = 1.0


@dataclass
class _Queued(Generic[T, R]):
    item: T
    patient: bool
    future: Future[R] = field(default_factory=Future)
    at: float = field(default_factory=time.monotonic)


class Committer(Generic[T, R]):
    """Groups of items applied by ``apply`` (its outcomes in the items' order: a value, or
    an exception for that item alone), on a thread started at the first item."""

    def __init__(self, name: str, apply: Callable[[list[T]], list[R | BaseException]]) -> None:
        self.name = name
        self._apply = apply
        self._changed = threading.Condition()
        self._queue: list[_Queued[T, R]] = []
        self._passes = 0  # passes in flight that may still submit
        self._closed = False
        self._thread: threading.Thread | None = None
        self.groups = 0  # groups applied (what tests and benchmarks count)

    @contextmanager
    def passing(self) -> Iterator[None]:
        """While a pass may still submit: a group waits for its item (see the module)."""
        with self._changed:
            self._passes += 1
        try:
            yield
        finally:
            with self._changed:
                self._passes -= 1
                self._changed.notify_all()

    def submit(self, items: list[T], *, patient: bool = True) -> list[Future[R]]:
        """Queue ``items`` together (they land in one group); their futures."""
        queued = [_Queued[T, R](item, patient) for item in items]
        with self._changed:
            if self._closed:  # the process is ending: nothing of these was sent
                raise StopRequested(f"the {self.name} committer is closed: nothing was sent")
            self._queue.extend(queued)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._drain, name=f"commit-{self.name}", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()
        return [q.future for q in queued]

    def run(self, item: T, *, patient: bool = True) -> R:
        """``item``'s outcome once its group is applied, or its exception raised."""
        return self.submit([item], patient=patient)[0].result()

    def close(self) -> None:
        """Apply what is queued, then end the thread."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _ready(self) -> bool:
        """Whether the queued items form a group now (under the condition)."""
        waiting = sum(1 for q in self._queue if q.patient)
        return (
            self._closed
            or waiting >= self._passes
            or not all(q.patient for q in self._queue)
            or time.monotonic() >= self._queue[0].at + GROUP_WAIT
        )

    def _drain(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._closed:
                    self._changed.wait()
                if not self._queue:
                    return
                while not self._ready():
                    self._changed.wait(self._queue[0].at + GROUP_WAIT - time.monotonic())
                taken, self._queue = self._queue, []
            # (a future its caller cancelled is left out: nobody waits for it)
            group = [q for q in taken if q.future.set_running_or_notify_cancel()]
            if group:
                self._settle(group)

    def _settle(self, group: list[_Queued[T, R]]) -> None:
        items = [q.item for q in group]
        try:
            outcomes = self._apply(items)
            if len(outcomes) != len(items):
                raise AssertionError(f"{self.name}: a group's outcomes do not match its items")
        except BaseException as exc:  # every caller of the group learns it
            outcomes = [exc] * len(items)
        self.groups += 1
        if len(items) > 1:
            log.debug("%s: %d items in one group", self.name, len(items))
        for queued, outcome in zip(group, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                queued.future.set_exception(outcome)
            else:
                queued.future.set_result(outcome)
