"""The lake's one retry helper (tenacity): storage reads, outpaced commits, MERGEs refused as
concurrent, compactions planned again::

    for attempt in retrying("reading lake file x", on=OSError, attempts=4, wait=0.25):
        with attempt:
            ...

The block runs again while it raises one of ``on`` (jittered, doubling wait), up to
``attempts`` times; then the last error is raised as it was. (The HTTP client keeps its
own retry, which spends the provider's budget.)
"""

from __future__ import annotations

import logging

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_none,
    wait_random_exponential,
)

from cdnlake.errors import first_line

log = logging.getLogger(__name__)


def retrying(
    what: str,
    *,
    on: type[BaseException] | tuple[type[BaseException], ...],
    attempts: int,
    wait: float = 0.0,
    max_wait: float = 5.0,
) -> Retrying:
    """Attempts of ``what`` (see the module docstring)."""

    def before_sleep(state: RetryCallState) -> None:
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        text = first_line(error) if error is not None else ""
        log.info("%s: %s; attempt %d of %d", what, text, state.attempt_number + 1, attempts)

    return Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=wait, max=max_wait) if wait > 0 else wait_none(),
        retry=retry_if_exception_type(on),
        before_sleep=before_sleep,
        reraise=True,
    )
