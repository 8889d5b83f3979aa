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


def run_cancellable(session: Session, call: Callable[[], Result]) -> Result:
    """``call()`` on ``session``, which Ctrl-C cancels: the query stops within a second
    and KeyboardInterrupt goes on (one line and exit 1 from main; the shell carries on)."""
    from cdnlake.warehouse.cancel import cancellable

    return cancellable(call, getattr(session, "interrupt", None))


def show(fmt: str, result: Result, limit: int | None, *, width: int | None = None) -> None:
    """A result on standard output, and how to see the rows a table left out."""
    from cdnlake.warehouse.output import render

    sys.stdout.write(render(fmt, result.columns, result.rows, width=width))
    if result.more:
        sys.stdout.write(
            f"(only the first {limit:,} rows are shown: --limit 0 shows every row, "
            "--format csv or json writes them all)\n"
        )
