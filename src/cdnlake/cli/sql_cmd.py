"""``cdnlake sql``: free SQL or a named query, as a table, CSV or JSON."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING, Any

from cdnlake.cli.common import load
from cdnlake.errors import UsageError

if TYPE_CHECKING:
    from cdnlake.config import Config
    from cdnlake.warehouse.named import NamedQuery
    from cdnlake.warehouse.relations import Result


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


_SHOW_TABLES = re.compile(r"^\s*SHOW\s+(ALL\s+)?TABLES\s*;?\s*$", re.IGNORECASE)


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


def sql(args: argparse.Namespace) -> int:
    from cdnlake.cli.main import DEFAULT_TABLE_ROWS
    from cdnlake.warehouse.engine import open_session
    from cdnlake.warehouse.named import get_named
    from cdnlake.warehouse.output import render
    from cdnlake.warehouse.relations import relations_named

    if args.list:
        sys.stdout.write(describe_named())
        return 0
    if bool(args.query) == bool(args.named):
        raise UsageError("sql: give either a QUERY or --query NAME (see --list)")
    if args.limit is not None and args.format != "table":
        raise UsageError("sql --limit: goes with --format table (csv and json write every row)")
    config = load(args, default_level="WARNING")
    limit = (DEFAULT_TABLE_ROWS if args.limit is None else args.limit) or None
    if args.format != "table":
        limit = None
    named = get_named(args.named) if args.named else None
    if named is not None:
        bind(named, args.param, config)  # bad values refused before the lake is opened
    # Only the relations the SQL names are set up; SQL naming none (SHOW TABLES) gets all.
    relations = relations_named(named.sql if named is not None else args.query) or None
    with open_session(config, args.engine, relations) as session:
        if named is not None:
            result = session.run_named(named, bind(named, args.param, config), limit=limit)
        else:
            if args.param:
                raise UsageError("sql: --param goes with --query NAME")
            result = session.run(args.query, limit=limit)
            if _SHOW_TABLES.match(args.query):
                hide_internal(result)
    sys.stdout.write(render(args.format, result.columns, result.rows))
    if result.more:
        sys.stdout.write(
            f"(only the first {limit:,} rows are shown: --limit 0 shows every row, "
            "--format csv or json writes them all)\n"
        )
    return 0
