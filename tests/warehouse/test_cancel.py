"""Ctrl-C cancels a query at whatever moment it lands, and leaves the connection usable
with its session state (a shell's SET and temp views) for the next statement: a query
left running would keep the connection busy ("connection is busy with another call")."""

from __future__ import annotations

import random
import signal
import threading

import duckdb
import pytest

from cdnlake.warehouse.cancel import cancellable
from cdnlake.warehouse.db import DuckDBSession

LONG = "SELECT sum(hash(range)) AS s FROM range(1000000000000)"  # hours, if not cancelled


@pytest.fixture
def session():
    con = duckdb.connect(":memory:")
    con.execute("SET VARIABLE answer = 42")
    con.execute("CREATE TEMP VIEW forty AS SELECT 40 AS n")
    try:
        yield DuckDBSession(con)
    finally:
        con.interrupt()  # a query a failed test left running must not outlive it
        for thread in threading.enumerate():
            if thread.name == "cdnlake-query" and thread.is_alive():
                thread.join(10)
        con.close()


def still_usable(session: DuckDBSession) -> None:
    """The connection answers at once, with what the session set before the cancel."""
    result = session.run("SELECT getvariable('answer') AS a, n + 2 AS b FROM forty")
    assert result.rows == [(42, 42)]


def test_ctrl_c_while_the_query_thread_starts_stops_the_query(session, monkeypatch):
    """On a busy machine ``Thread.start()`` waits milliseconds for the new thread; a
    Ctrl-C then used to leave the query running, the connection busy for hours."""
    start = threading.Thread.start

    def start_then_ctrl_c(thread: threading.Thread) -> None:
        start(thread)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        cancellable(lambda: session.run(LONG), session.interrupt)
    monkeypatch.undo()
    still_usable(session)


def test_ctrl_c_before_the_query_thread_exists_runs_nothing(session, monkeypatch):
    ran = threading.Event()

    def ctrl_c(thread: threading.Thread) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        cancellable(ran.set, session.interrupt)
    assert not ran.is_set()
    monkeypatch.undo()
    still_usable(session)


def test_ctrl_c_at_any_moment_leaves_the_connection_usable(session):
    """Ctrl-C (Python's own SIGINT handler, on a timer signal) at random moments from
    just before the query's thread starts to well into the query."""
    previous = signal.signal(signal.SIGALRM, signal.default_int_handler)
    chance = random.Random(20261128)
    try:
        for _ in range(40):
            try:
                signal.setitimer(signal.ITIMER_REAL, chance.uniform(0.00001, 0.003))
                cancellable(lambda: session.run(LONG), session.interrupt)
            except KeyboardInterrupt:
                pass
            still_usable(session)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
