"""What ``cdnlake sql`` and its interactive shell share: the named queries' listing and
parameters, cancellable runs, and how a result is shown."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cdnlake.errors import UsageError

if TYPE_CHECKING:
    from cdnlake.config import Config
    from cdnlake.warehouse.engine import Session
    from cdnlake.warehouse.named import NamedQuery
    from cdnlake.warehouse.relations import Result

DEFAULT_TABLE_ROWS = 1000  # a terminal table is for reading; csv and json write every row


def describe_named() -> str:
    """Every named query with its parameters, as ``sql --list`` prints them."""
    from cdnlake.warehouse.named import list_named

    lines = []
    for q in list_named():
        lines.append(f"{q.name}  {q.signature()}")
        if q.answers:
            lines.append(f"    {q.answers}")
        for p in q.params:
            notes = ["required" if p.required else f"default {p.default}"]
            if p.choices:
                notes.append(f"one of {'|'.join(p.choices)}")
            doc = f" {p.doc}" if p.doc else ""
            lines.append(f"    --param {p.name}=<{p.type}>  ({'; '.join(notes)}){doc}")
    return "\n".join(lines) + "\n"


def hide_internal(result: Result) -> None:
    """SHOW TABLES lists the lake's relations, not the ``_`` views they are built on."""
    if "name" in result.columns:
        at = result.columns.index("name")
        result.rows = [r for r in result.rows if not str(r[at]).startswith("_")]


def bind(named: NamedQuery, pairs: list[str], config: Config) -> dict[str, Any]:
    """The named query's parameters from ``--param``; a zone must be a configured one
    (any other reads as a day without traffic: zeros, never an error)."""
    from cdnlake.warehouse.named import parse_params

    params = named.bind(parse_params(pairs))
    zone = params.get("zone")
    if zone is not None and zone not in {z.id for z in config.zones}:
        known = ", ".join(str(z.id) for z in config.zones) or "none"
        raise UsageError(f"--param zone: pull zone {zone} is not configured (configured: {known})")
    return params


SHOW_TIME_SECONDS = 1.0  # a query running longer says so on a terminal, and its time


def run_cancellable(session: Session, call: Callable[[], Result]) -> Result:
    """``call()`` on ``session``, which Ctrl-C cancels: the query stops within a second
    and KeyboardInterrupt goes on (one line and exit 1 from main; the shell carries on).
    On a terminal, a query running over a second says how long it has run, as it runs."""
    import time

    from cdnlake.warehouse.cancel import cancellable

    started = time.monotonic()
    with _RunningClock(sys.stdout.isatty() and sys.stderr.isatty()):
        result = cancellable(call, getattr(session, "interrupt", None))
    result.seconds = time.monotonic() - started
    return result


class _RunningClock:
    """``(running 3 s; Ctrl-C cancels)`` on stderr, rewritten each second once a query
    has run a second, and wiped when it ends (however it ends)."""

    def __init__(self, enabled: bool) -> None:
        import threading

        self.enabled = enabled
        self.done = threading.Event()
        self.shown = 0
        self.thread = threading.Thread(target=self._tick, name="sql-clock", daemon=True)

    def __enter__(self) -> _RunningClock:
        if self.enabled:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.enabled:
            return
        self.done.set()
        self.thread.join()
        if self.shown:
            sys.stderr.write("\r" + " " * self.shown + "\r")
            sys.stderr.flush()

    def _tick(self) -> None:
        seconds = SHOW_TIME_SECONDS
        while not self.done.wait(seconds if not self.shown else 1.0):
            if self.shown:
                seconds += 1.0
            text = f"(running {seconds:.0f} s; Ctrl-C cancels)"
            sys.stderr.write("\r" + text)
            sys.stderr.flush()
            self.shown = max(self.shown, len(text))


def show(fmt: str, result: Result, limit: int | None, *, wide: bool = False) -> None:
    """A result on standard output: a table fits the terminal (``wide``: every column),
    and says how many rows the limit left out and how to see them."""
    from cdnlake.warehouse.output import render, terminal_width

    total = (result.total if result.total is not None else -1) if result.more else None
    sys.stdout.write(
        render(
            fmt,
            result.columns,
            result.rows,
            width=terminal_width(sys.stdout),
            wide=wide,
            total=total,
            more_hint="--limit 0 shows every row, --format csv or json writes them all",
        )
    )
    say_time(result)


def say_time(result: Result) -> None:
    """A query that ran over a second, on a terminal: how long it took (as psql's
    ``\\timing``), after its rows."""
    seconds = result.seconds
    if seconds is not None and seconds >= SHOW_TIME_SECONDS and sys.stdout.isatty():
        print(f"(time: {seconds:.1f} s)")
