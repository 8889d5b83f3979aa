"""What a unit of work counts about its HTTP calls.

Its own module, free of the HTTP stack, so that ingestion's records can carry it
without a command that never calls the provider importing httpx.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class RequestStats:
    """Counters one unit of work (a zone pass) keeps about its HTTP calls."""

    requests: int = 0
    retries: int = 0
    rate_limited: int = 0
    server_errors: int = 0
    transport_errors: int = 0
    budget_wait_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, amount: float = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + amount)
