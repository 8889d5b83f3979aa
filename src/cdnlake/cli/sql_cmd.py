"""``cdnlake sql``: free SQL or a named query, as a table, CSV or JSON."""

from __future__ import annotations

import argparse
import sys

from cdnlake.cli.common import load
from cdnlake.errors import UsageError


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


def sql(args: argparse.Namespace) -> int:
    from cdnlake.cli.main import DEFAULT_TABLE_ROWS
    from cdnlake.warehouse.engine import open_session
    from cdnlake.warehouse.named import get_named, parse_params
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
    # Only the relations the SQL names are set up; SQL naming none (SHOW TABLES) gets all.
    relations = relations_named(named.sql if named is not None else args.query) or None
    with open_session(config, args.engine, relations) as session:
        if named is not None:
            result = session.run_named(named, named.bind(parse_params(args.param)), limit=limit)
        else:
            if args.param:
                raise UsageError("sql: --param goes with --query NAME")
            result = session.run(args.query, limit=limit)
    sys.stdout.write(render(args.format, result.columns, result.rows))
    if result.more:
        sys.stdout.write(
            f"(only the first {limit:,} rows are shown: --limit 0 shows every row, "
            "--format csv or json writes them all)\n"
        )
    return 0
