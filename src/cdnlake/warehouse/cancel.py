"""Queries that Ctrl-C cancels: the query runs in a worker thread while the main thread,
which receives SIGINT, waits; a KeyboardInterrupt there interrupts the query (DuckDB's
``interrupt()``), waits for it to stop, and goes on as KeyboardInterrupt. Run in the main
thread, a DuckDB query does not see Ctrl-C until it finishes, or long after.

Ctrl-C may land at any moment, also while the worker thread is being started (on a busy
machine, ``Thread.start()`` waits milliseconds for the new thread to run): the query is
then stopped all the same, or never started, so the connection is free again once
KeyboardInterrupt leaves here (a query left running keeps it busy)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

_POLL_SECONDS = 0.1  # how often the waiting main thread lets a signal handler run
_ASK_AGAIN_SECONDS = 1.0  # an interrupt sent before the query began is not kept: resent


class _Outcome(Generic[T]):
    """What the worker thread hands to the waiting one, and the cancel it is handed back:
    under ``lock``, exactly one of the two happens first, the query starting or the
    cancel, so a cancel never misses a query that is starting."""

    def __init__(self) -> None:
        self.value: T | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.started = False
        self.cancelled = False

    def start(self) -> bool:
        """In the worker: whether to run the query (not when cancelled already)."""
        with self.lock:
            self.started = not self.cancelled
            return self.started

    def cancel(self) -> bool:
        """In the waiting thread: no query starts from now; whether one has started."""
        with self.lock:
            self.cancelled = True
            return self.started


def _work(call: Callable[[], T], outcome: _Outcome[T]) -> None:
    try:
        if outcome.start():
            outcome.value = call()
    except BaseException as exc:  # handed to the waiting thread
        outcome.error = exc
    finally:
        outcome.done.set()


def cancellable(call: Callable[[], T], interrupt: Callable[[], None] | None) -> T:
    """``call()``, cancelled by Ctrl-C (KeyboardInterrupt, raised here once the query
    stopped, or before it started) through ``interrupt``. Without ``interrupt`` (an engine
    that cannot be interrupted), ``call()`` runs in this thread as it is."""
    if interrupt is None:
        return call()
    outcome: _Outcome[T] = _Outcome()
    try:
        # Started inside the try: a Ctrl-C while start() waits for the thread is a cancel.
        threading.Thread(
            target=_work, args=(call, outcome), name="cdnlake-query", daemon=True
        ).start()
        while not outcome.done.wait(_POLL_SECONDS):
            pass
    except KeyboardInterrupt:
        _stop(outcome, interrupt)
        raise
    if outcome.error is not None:
        raise outcome.error
    return outcome.value  # type: ignore[return-value]


def _stop(outcome: _Outcome[T], interrupt: Callable[[], None]) -> None:
    """Until the query stopped, or is sure never to start (the thread may not even exist):
    the connection is not usable before, and a second Ctrl-C only asks again."""
    while True:
        try:
            if not outcome.cancel():
                return
            break
        except KeyboardInterrupt:
            continue
    while True:
        try:
            interrupt()
            if outcome.done.wait(_ASK_AGAIN_SECONDS):
                return
        except KeyboardInterrupt:
            continue
