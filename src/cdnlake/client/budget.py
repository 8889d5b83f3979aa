"""Per-pull-zone request budget: never let our own pace draw a 429.

The provider counts requests per zone over any rolling window (30 per 10 s, v1 and v2
together). The server sees a request somewhere between our send and our receipt of the
answer, so a slot is held from send until ``completion + window``: then the 31st send is
always at least one window after the server saw the 1st, whatever the latency.
Waiting sleeps on a condition variable; there is no busy loop.

The provider goes on counting a process's requests after it dies, so a process restarted
at once (after a crash, a SIGKILL, a deploy) would start with an empty budget and draw
429s for its predecessor's requests. Given a folder (``<root>/work/budget``), each zone's
budget therefore keeps a :class:`SendLog` of its recent sends there, which the next
process's budget for that zone starts from.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path

DEFAULT_LIMIT = 30
DEFAULT_WINDOW_SECONDS = 10.0
SAFETY_SECONDS = 0.01  # clock granularity between processes
MAX_LOG_BYTES = 1 << 20  # a send log larger than this was not written by us: ignored

log = logging.getLogger(__name__)


class SendLog:
    """The wall-clock times of one zone's recent sends, in a file shared by processes.

    One line per event, appended in one ``write`` of a few bytes: ``TOKEN s TIME`` when a
    request is sent, ``TOKEN d TIME`` when its answer (or failure) came back; TOKEN names
    the request (process and sequence), TIME is Unix seconds (monotonic clocks differ
    between processes). A line cut short by a crash, a line that does not parse, a file
    that cannot be read or a file of only old times is ignored: the log can only make a
    budget wait, never fail. Every ``4 x limit`` appends the file is rewritten (a new file
    renamed over the old one) with only the lines still within the window, so it stays a
    few kilobytes. Losing it costs at most one window of 429s: safe to delete.
    """

    def __init__(
        self,
        path: Path,
        window_seconds: float,
        limit: int,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.window = window_seconds
        self._wall = wall
        self._compact_every = 4 * limit
        self._appends = 0
        self._prefix = uuid.uuid4().hex[:12]
        self._seq = 0
        self._broken = False

    def _read(self) -> dict[str, tuple[float | None, float | None]]:
        """token -> (sent, done), from whatever of the file can be read."""
        try:
            if self.path.stat().st_size > MAX_LOG_BYTES:
                return {}
            text = self.path.read_text(encoding="ascii", errors="replace")
        except (OSError, ValueError):
            return {}
        events: dict[str, tuple[float | None, float | None]] = {}
        for line in text.split("\n")[:-1]:  # the last piece: "" or a line cut short
            parts = line.split(" ")
            if len(parts) != 3 or parts[1] not in ("s", "d"):
                continue
            try:
                at = float(parts[2])
            except ValueError:
                continue
            if at != at:  # NaN
                continue
            sent, done = events.get(parts[0], (None, None))
            if parts[1] == "s":
                sent = at
            else:
                done = at
            events[parts[0]] = (sent, done)
        return events

    def held(self) -> list[float]:
        """How many seconds ago the slots of earlier sends began to count down, for those
        still within the window, oldest first. An answered request counts from its answer;
        one without an answer (its process died, or is still waiting) from one window after
        its send at the latest (the provider saw it by then), and never from later than
        now."""
        now = self._wall()
        ages = []
        for sent, done in self._read().values():
            if sent is None:
                continue
            if done is None or done < sent:
                done = sent + self.window
            done = min(done, now)  # a clock set back, or a request still in flight
            if done + self.window > now:
                ages.append(now - done)
        return sorted(ages, reverse=True)

    def sent(self) -> str:
        self._seq += 1
        token = f"{self._prefix}.{self._seq}"
        self._append(f"{token} s {self._wall():.3f}\n")
        return token

    def done(self, token: str) -> None:
        self._append(f"{token} d {self._wall():.3f}\n")

    def _append(self, line: str) -> None:
        if self._broken:
            return
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        try:
            try:
                fd = os.open(self.path, flags, 0o644)
            except FileNotFoundError:  # the first send, or the folder was deleted
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, flags, 0o644)
            try:
                os.write(fd, line.encode("ascii"))
            finally:
                os.close(fd)
            self._appends += 1
            if self._appends % self._compact_every == 0:
                self._compact()
        except OSError as exc:
            # Only the memory of this process's sends is lost; the budget itself holds.
            log.debug("request budget: cannot write %s (%s); kept in memory", self.path, exc)
            self._broken = True

    def _compact(self) -> None:
        """Rewrite the file with only its lines of the last window (the newest of another
        process, appended between the read and the rename, may be lost: it only ever
        shortens a later process's wait by that one request)."""
        cutoff = self._wall() - 2 * self.window
        lines = []
        for token, (sent, done) in self._read().items():
            for kind, at in (("s", sent), ("d", done)):
                if at is not None and at > cutoff:
                    lines.append(f"{token} {kind} {at:.3f}\n")
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="ascii") as out:
                out.writelines(lines)
            os.replace(tmp, self.path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            raise


class RequestBudget:
    """A rolling-window limiter shared by every thread that talks to one zone."""

    def __init__(
        self,
        limit: int = DEFAULT_LIMIT,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        send_log: SendLog | None = None,
    ) -> None:
        """``send_log``: start from the sends it holds (of earlier processes), and record
        this budget's sends in it."""
        if limit < 1 or window_seconds <= 0:
            raise ValueError("budget needs limit >= 1 and a positive window")
        self.limit = limit
        self.window = window_seconds + SAFETY_SECONDS
        self._clock = clock
        self._cond = threading.Condition()
        self._in_flight = 0
        self._completed: deque[float] = deque()
        self.requests = 0
        self._log = send_log
        self._tokens = threading.local()  # a thread's requests in flight (acquire..release)
        if send_log is not None:
            now = clock()
            self._completed.extend(now - age for age in send_log.held())

    def _expire(self, now: float) -> None:
        while self._completed and self._completed[0] + self.window <= now:
            self._completed.popleft()

    def acquire(self, abort: threading.Event | None = None) -> bool:
        """Block until a slot is free; return False if ``abort`` was set while waiting."""
        with self._cond:
            while True:
                if abort is not None and abort.is_set():
                    return False
                now = self._clock()
                self._expire(now)
                if self._in_flight + len(self._completed) < self.limit:
                    self._in_flight += 1
                    self.requests += 1
                    if self._log is not None:
                        self._thread_tokens().append(self._log.sent())
                    return True
                if self._completed:
                    timeout: float | None = self._completed[0] + self.window - now
                else:
                    timeout = None  # every slot is in flight: a release will notify
                if abort is not None:
                    timeout = 0.1 if timeout is None else min(timeout, 0.1)
                self._cond.wait(timeout)

    def release(self) -> None:
        """The request of this thread's last :meth:`acquire` has its answer (or failed)."""
        with self._cond:
            self._in_flight -= 1
            self._completed.append(self._clock())
            if self._log is not None:
                tokens = self._thread_tokens()
                if tokens:
                    self._log.done(tokens.pop())
            self._cond.notify()

    def _thread_tokens(self) -> list[str]:
        tokens: list[str] | None = getattr(self._tokens, "stack", None)
        if tokens is None:
            tokens = self._tokens.stack = []
        return tokens


class BudgetRegistry:
    """One budget per zone for the whole process, shared by v1, v2 and every thread.

    ``folder`` (``<root>/work/budget``): each zone's budget keeps its recent sends in the
    file ``folder/<zone>`` and starts from those of the processes before it (see
    :class:`SendLog`). Without it, budgets start empty.
    """

    def __init__(
        self,
        limit: int = DEFAULT_LIMIT,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        folder: Path | None = None,
    ) -> None:
        self.limit = limit
        self.window_seconds = window_seconds
        self.folder = folder
        self._budgets: dict[int, RequestBudget] = {}
        self._lock = threading.Lock()

    def for_zone(self, zone_id: int) -> RequestBudget:
        with self._lock:
            budget = self._budgets.get(zone_id)
            if budget is None:
                send_log = None
                if self.folder is not None:
                    path = self.folder / str(zone_id)
                    send_log = SendLog(path, self.window_seconds + SAFETY_SECONDS, self.limit)
                budget = RequestBudget(self.limit, self.window_seconds, send_log=send_log)
                self._budgets[zone_id] = budget
            return budget
