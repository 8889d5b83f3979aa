"""The emulator's clock: real time, optionally shifted or frozen."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime


class EmulatorClock:
    """Real time, optionally shifted or frozen, so tests can stand at any instant."""

    def __init__(self, start: datetime | None = None, frozen: bool = False) -> None:
        self._lock = threading.Lock()
        self._offset = 0.0
        self._frozen_at: float | None = None
        if start is not None:
            self.set(start, frozen=frozen)

    def now_ms(self) -> int:
        with self._lock:
            base = self._frozen_at if self._frozen_at is not None else time.time() + self._offset
        return int(base * 1000)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms() / 1000, tz=UTC)

    def set(self, moment: datetime, frozen: bool | None = None) -> None:
        with self._lock:
            target = moment.timestamp()
            keep_frozen = self._frozen_at is not None if frozen is None else frozen
            self._offset = target - time.time()
            self._frozen_at = target if keep_frozen else None

    def advance(self, seconds: float) -> None:
        with self._lock:
            if self._frozen_at is not None:
                self._frozen_at += seconds
            self._offset += seconds
