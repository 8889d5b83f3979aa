"""Queries that Ctrl-C cancels: the query runs in a worker thread while the main thread,
which receives SIGINT, waits; a KeyboardInterrupt there interrupts the query (DuckDB's
``interrupt()``), waits for it to stop, and goes on as KeyboardInterrupt. Run in the main
thread, a DuckDB query does not see Ctrl-C until it finishes, or long after."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

_POLL_SECONDS = 0.1  # how often the waiting main thread lets a signal handler run


class _Outcome(Generic[T]):
    def __init__(self) -> None:
        self.value: T | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


def cancellable(call: Callable[[], T], interrupt: Callable[[], None] | None) -> T:
    """``call()``, cancelled by Ctrl-C (KeyboardInterrupt, raised here once the query
    stopped) through ``interrupt``. Without ``interrupt`` (an engine that cannot be
    interrupted), ``call()`` runs in this thread as it is."""
    if interrupt is None:
        return call()
    outcome: _Outcome[T] = _Outcome()

    def work() -> None:
        try:
            outcome.value = call()
        except BaseException as exc:  # handed to the waiting thread
            outcome.error = exc
        finally:
            outcome.done.set()

    worker = threading.Thread(target=work, name="cdnlake-query", daemon=True)
    worker.start()
    try:
        while not outcome.done.wait(_POLL_SECONDS):
            pass
    except KeyboardInterrupt:
        # Until the query stops: the connection is not usable before, and a second
        # Ctrl-C only asks again.
        while True:
            try:
                interrupt()
                if outcome.done.wait(1.0):
                    break
            except KeyboardInterrupt:
                continue
        raise
    if outcome.error is not None:
        raise outcome.error
    return outcome.value  # type: ignore[return-value]
