"""The one retry policy for transient failures: exponential backoff with full jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass

DEFAULT_MAX_ATTEMPTS = 8
DEFAULT_BASE_DELAY = 0.5
DEFAULT_MAX_DELAY = 30.0
DEFAULT_MAX_TOTAL_SECONDS = 120.0


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    base_delay: float = DEFAULT_BASE_DELAY
    max_delay: float = DEFAULT_MAX_DELAY
    max_total_seconds: float = DEFAULT_MAX_TOTAL_SECONDS

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay before attempt ``attempt + 1`` (``attempt`` counts from 1).

        Full jitter, but never below a quarter of the exponential step, so that a
        ``Retry-After: 0`` or a burst of 5xx cannot turn into an instant retry loop.
        """
        step = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        r = rng.random() if rng is not None else random.random()
        return step * (0.25 + 0.75 * r)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """A positive ``Retry-After`` wins (capped); otherwise our own backoff."""
        if retry_after is not None and retry_after > 0:
            return min(retry_after, self.max_delay)
        return self.backoff(attempt)


NO_RETRY = RetryPolicy(max_attempts=1)
