"""Per-pull-zone request budget: never let our own pace draw a 429.

The provider counts requests per zone over any rolling window (30 per 10 s, v1 and v2
together). The server sees a request somewhere between our send and our receipt of the
answer, so a slot is held from send until ``completion + window``: then the 31st send is
always at least one window after the server saw the 1st, whatever the latency.
Waiting sleeps on a condition variable; there is no busy loop.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DEFAULT_LIMIT = 30
DEFAULT_WINDOW_SECONDS = 10.0
SAFETY_SECONDS = 0.01  # clock granularity between processes


class RequestBudget:
    """A rolling-window limiter shared by every thread that talks to one zone."""

    def __init__(
        self,
        limit: int = DEFAULT_LIMIT,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1 or window_seconds <= 0:
            raise ValueError("budget needs limit >= 1 and a positive window")
        self.limit = limit
        self.window = window_seconds + SAFETY_SECONDS
        self._clock = clock
        self._cond = threading.Condition()
        self._in_flight = 0
        self._completed: deque[float] = deque()
        self.waited_seconds = 0.0
        self.requests = 0

    def _expire(self, now: float) -> None:
        while self._completed and self._completed[0] + self.window <= now:
            self._completed.popleft()

    def acquire(self, abort: threading.Event | None = None) -> bool:
        """Block until a slot is free; return False if ``abort`` was set while waiting."""
        start = self._clock()
        with self._cond:
            while True:
                if abort is not None and abort.is_set():
                    return False
                now = self._clock()
                self._expire(now)
                if self._in_flight + len(self._completed) < self.limit:
                    self._in_flight += 1
                    self.requests += 1
                    self.waited_seconds += now - start
                    return True
                if self._completed:
                    timeout: float | None = self._completed[0] + self.window - now
                else:
                    timeout = None  # every slot is in flight: a release will notify
                if abort is not None:
                    timeout = 0.1 if timeout is None else min(timeout, 0.1)
                self._cond.wait(timeout)

    def release(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._completed.append(self._clock())
            self._cond.notify()

    @contextmanager
    def slot(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()


class BudgetRegistry:
    """One budget per zone for the whole process, shared by v1, v2 and every thread."""

    def __init__(
        self, limit: int = DEFAULT_LIMIT, window_seconds: float = DEFAULT_WINDOW_SECONDS
    ) -> None:
        self.limit = limit
        self.window_seconds = window_seconds
        self._budgets: dict[int, RequestBudget] = {}
        self._lock = threading.Lock()

    def for_zone(self, zone_id: int) -> RequestBudget:
        with self._lock:
            budget = self._budgets.get(zone_id)
            if budget is None:
                budget = RequestBudget(self.limit, self.window_seconds)
                self._budgets[zone_id] = budget
            return budget
