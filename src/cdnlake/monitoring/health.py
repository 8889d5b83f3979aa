"""The daemon's health, computed in the background and served from memory.

A whole ``status`` reads every zone's watermark, runs and gaps from the lake: far too
much for every probe (a load balancer or Kubernetes asks every few seconds, and with
thousands of zones a status takes seconds). One thread computes it after passes end (at
most once per ``after_pass`` seconds, however many zones finish) and on a timer (every
``every`` seconds even when no pass ends, so a zone whose passes stopped turns
unhealthy); ``/healthz`` answers with the last result. A result older than
``stale_after`` is not trusted: the probe answers 503, naming how old it is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("cdnlake.metrics")

Health = Callable[[], tuple[list[dict[str, Any]], bool]]

AFTER_PASS_SECONDS = 10.0
EVERY_SECONDS = 30.0
STALE_AFTER_SECONDS = 300.0


@dataclass(frozen=True)
class HealthTiming:
    after_pass: float = AFTER_PASS_SECONDS  # the least time between two computations
    every: float = EVERY_SECONDS  # computed again at least this often
    stale_after: float = STALE_AFTER_SECONDS  # a result this old is not served as healthy


@dataclass(frozen=True)
class Answer:
    """What ``/healthz`` serves: the status body, whether healthy, and how old it is."""

    zones: list[dict[str, Any]]
    healthy: bool
    age: float


class HealthCache:
    def __init__(self, compute: Health, timing: HealthTiming | None = None) -> None:
        self.compute = compute
        self.timing = timing or HealthTiming()
        self.computations = 0  # how many times ``compute`` ran (probes never run it)
        self._last: tuple[list[dict[str, Any]], bool, float] | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="healthz", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def pass_done(self) -> None:
        """A zone pass ended: its outcome changes the health; compute it soon."""
        self._wake.set()

    def answer(self) -> Answer:
        """The last health computed (never computed here: a probe only reads)."""
        with self._lock:
            last = self._last
        if last is None:
            return Answer(
                [{"problem": "status not computed yet: the daemon is starting"}], False, 0
            )
        zones, healthy, at = last
        age = time.monotonic() - at
        if age > self.timing.stale_after:
            problem = f"status last computed {age:.0f} s ago: the daemon's health check is stuck"
            return Answer([{"problem": problem}], False, age)
        return Answer(zones, healthy, age)

    def refresh(self) -> None:
        """Compute the health now (the background thread's work)."""
        try:
            zones, healthy = self.compute()
        except Exception as exc:  # an unreadable lake is not healthy
            zones, healthy = [{"problem": f"status failed: {exc}"}], False
        with self._lock:
            self._last = (zones, healthy, time.monotonic())
            self.computations += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # a pass ending from here on asks for the next computation
            began = time.monotonic()
            self.refresh()
            self._wake.wait(self.timing.every)
            self._stop.wait(max(0.0, self.timing.after_pass - (time.monotonic() - began)))
