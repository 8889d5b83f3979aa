"""``cdnlake sql``: free SQL or a named query, as a table, CSV or JSON."""

from __future__ import annotations

import argparse
import sys

from cdnlake.cli.common import load
from cdnlake.errors import UsageError


def sql(args: argparse.Namespace) -> int:
    import duckdb

    from cdnlake.warehouse.db import Warehouse
    from cdnlake.warehouse.named import get_named, list_named, parse_params
    from cdnlake.warehouse.output import render

    if args.list:
        for q in list_named():
            print(f"{q.name}  {q.signature()}")
            if q.answers:
                print(f"    {q.answers}")
            for p in q.params:
                default = "required" if p.required else f"default {p.default}"
                choices = f" one of {'|'.join(p.choices)};" if p.choices else ""
                print(f"    --param {p.name}=<{p.type}>  ({default};{choices}) {p.doc}")
        return 0
    if bool(args.query) == bool(args.named):
        raise UsageError("sql: give either a QUERY or --query NAME (see --list)")
    config = load(args, default_level="WARNING")
    params: dict[str, object] | None = None
    if args.named:
        named = get_named(args.named)
        text = named.sql
        params = named.bind(parse_params(args.param))
    else:
        if args.param:
            raise UsageError("sql: --param goes with --query NAME")
        text = args.query
    with Warehouse(config.storage).connect(read_only=True) as con:
        try:
            cursor = con.execute(text, params) if params is not None else con.execute(text)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchall() if columns else []
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0]
            raise UsageError(f"sql: {first}") from None
    sys.stdout.write(render(args.format, columns, rows))
    return 0
