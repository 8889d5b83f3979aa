"""``cdnlake sql``: free SQL (QUERY, a file, standard input) or a named query, as a table,
CSV or JSON; with no SQL and a terminal, the interactive shell (:mod:`sql_shell`)."""

from __future__ import annotations

import argparse
import functools
import logging
import re
import sys
from typing import TYPE_CHECKING

from cdnlake.cli.common import load
from cdnlake.cli.sql_common import (
    DEFAULT_TABLE_ROWS,
    bind,
    describe_named,
    hide_internal,
    run_cancellable,
    show,
)
from cdnlake.errors import UsageError

if TYPE_CHECKING:
    from cdnlake.warehouse.named import NamedQuery, Slice

log = logging.getLogger(__name__)


_SHOW_TABLES = re.compile(r"^\s*SHOW\s+(ALL\s+)?TABLES\s*;?\s*$", re.IGNORECASE)


def read_sql(args: argparse.Namespace) -> tuple[str, str] | None:
    """The SQL to run and where it came from: QUERY, ``-`` or a standard input that is no
    terminal, or ``--file PATH``. None: the interactive shell (no SQL given, and a
    terminal to ask)."""
    if args.file is not None:
        if args.query:
            raise UsageError("sql: give either QUERY or --file PATH, not both")
        try:
            with open(args.file, encoding="utf-8") as f:
                return f.read(), args.file
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise UsageError(f"sql --file: cannot read {args.file} ({reason})") from None
    if args.query == "-" or (not args.query and not sys.stdin.isatty()):
        try:
            return sys.stdin.read(), "standard input"
        except UnicodeDecodeError:
            raise UsageError("sql: standard input is not UTF-8 text") from None
    if args.query:
        return args.query, "QUERY"
    return None


def sql(args: argparse.Namespace) -> int:
    from cdnlake.warehouse.engine import open_session
    from cdnlake.warehouse.named import get_named
    from cdnlake.warehouse.relations import relations_named
    from cdnlake.warehouse.statements import all_statements

    if args.list:
        sys.stdout.write(describe_named())
        return 0
    if args.named and (args.query or args.file is not None):
        raise UsageError("sql: give either SQL (QUERY, -, --file PATH) or --query NAME")
    if args.limit is not None and args.format != "table":
        raise UsageError("sql --limit: goes with --format table (csv and json write every row)")
    if args.param and not args.named:
        raise UsageError("sql: --param goes with --query NAME")
    from cdnlake.cli.report_cmd import parse_slice

    piece = parse_slice(args)
    if piece and not args.named:
        option = "--" + next(iter(piece.params())).replace("_", "-")
        raise UsageError(f"sql: {option} goes with --query NAME (a slice of a named query)")
    config = load(args, default_level="WARNING")
    limit = (DEFAULT_TABLE_ROWS if args.limit is None else args.limit) or None
    if args.format != "table":
        limit = None
    if args.named:
        named = get_named(args.named)
        pairs = args.param + slice_pairs(named, args.param, piece)
        params = bind(named, pairs, config)  # bad values refused before the lake is opened
        relations = relations_named(named.sql) or None
        stop_on_sigterm()
        with open_session(config, args.engine, relations, require_lake=True) as session:
            result = run_cancellable(session, lambda: session.run_named(named, params, limit=limit))
        show(args.format, result, limit, wide=args.wide)
        return 0
    given = read_sql(args)
    if given is None:
        from cdnlake.cli.sql_shell import shell

        return shell(args, config)
    text, origin = given
    stop_on_sigterm()
    statements = all_statements(text)
    if not statements:
        raise UsageError(f"sql: no SQL statement in {origin}")
    # Only the relations the SQL names are set up; SQL naming none (SHOW TABLES) gets all.
    # SQL that reads the lake needs one: a storage root without it is an error, not zeros.
    relations = relations_named(text)
    needs_lake = relations is None or bool(relations)
    with open_session(config, args.engine, relations or None, require_lake=needs_lake) as session:
        for number, statement in enumerate(statements, 1):
            last = number == len(statements)
            log.debug("sql: running statement %d of %d", number, len(statements))
            result = run_cancellable(
                session, functools.partial(session.run, statement, limit=limit if last else 1)
            )
        if _SHOW_TABLES.match(statements[-1]):
            hide_internal(result)
    show(args.format, result, limit, wide=args.wide)
    return 0


def slice_pairs(named: NamedQuery, pairs: list[str], piece: Slice) -> list[str]:
    """The slice as more KEY=VALUE pairs of ``named``: refused, in a line, where the query
    takes no such parameter or ``--param`` names it too."""
    from cdnlake.warehouse.named import parse_params, with_slice

    given = parse_params(pairs)
    added = with_slice(named, given, piece)
    return [f"{k}={v}" for k, v in added.items() if k not in given]


def stop_on_sigterm() -> None:
    """SIGTERM as Ctrl-C: the running query is cancelled, one line, exit 1."""
    import signal
    import threading

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupted)
