"""``cdnlake sql`` with no SQL on a terminal: an interactive shell over the lake.

A statement ends at ``;`` and may span lines; a line starting with ``.`` is a command of
the shell (``.help``). Ctrl-C cancels the running query (or the statement being typed),
not the shell; Ctrl-D or ``.quit`` leaves it. The lines typed are kept by readline in
``$XDG_STATE_HOME/cdnlake/sql_history`` (``~/.local/state/cdnlake/sql_history``), in the
user's home rather than the storage root's shared work folder, readable by the user alone:
the SQL typed may hold addresses or URLs.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from cdnlake.errors import CdnlakeError, FileGoneError, UsageError

if TYPE_CHECKING:
    from cdnlake.config import Config
    from cdnlake.warehouse.engine import Session
    from cdnlake.warehouse.relations import Result

log = logging.getLogger(__name__)

PROMPT = "cdnlake> "
MORE = "    ...> "
HISTORY_LENGTH = 1000
FORMATS = ("table", "csv", "json")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

HELP = """\
SQL statements end with ; and may span lines. Commands:
  .tables                    the relations and their columns
  .schema NAME               the columns of a relation, with their types
  .queries                   the named queries and their parameters
  .run NAME [KEY=VALUE ...]  run a named query, e.g. .run hit_ratio day=2026-11-23
  .format table|csv|json     how results are printed (now: {format})
  .limit N                   rows a table shows (0: all; now: {limit})
  .wide                      a table shows every column, however wide (again: fit the
                             terminal, leaving out the columns that do not fit; now: {wide})
  .refresh                   read the lake's newest commits (the shell reads the lake
                             as it was when it opened, or at the last .refresh)
  .help                      this text
  .quit                      leave (or Ctrl-D)
Ctrl-C cancels the running query, or the statement being typed."""


def history_path() -> Path:
    """Where readline keeps the lines typed: ``$XDG_STATE_HOME/cdnlake/sql_history``, by
    default ``~/.local/state/cdnlake/sql_history``."""
    state = os.environ.get("XDG_STATE_HOME", "").strip()
    base = Path(state) if state else Path.home() / ".local" / "state"
    return base / "cdnlake" / "sql_history"


class History:
    """readline's history, read at start and written back at the end (mode 0600)."""

    def __init__(self) -> None:
        try:
            import readline
        except ImportError:  # no readline on this platform: no history, still a shell
            self.readline = None
            return
        self.readline = readline
        self.path = history_path()
        readline.set_history_length(HISTORY_LENGTH)
        try:
            readline.read_history_file(self.path)
        except OSError:
            pass  # none yet, or unreadable: start afresh

    def save(self) -> None:
        if self.readline is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.readline.write_history_file(self.path)
            self.path.chmod(0o600)
        except OSError as exc:
            print(f"cdnlake: history not kept: {exc.strerror or exc}", file=sys.stderr)


class Shell:
    """Reads statements and commands, prints results; errors are one line, and the shell
    goes on."""

    def __init__(
        self,
        config: Config,
        connect: Callable[[], AbstractContextManager[Session]],
        fmt: str = "table",
        limit: int | None = None,
    ) -> None:
        from cdnlake.cli.sql_common import DEFAULT_TABLE_ROWS

        self.config = config
        self.connect = connect
        self.format = fmt
        self.limit = DEFAULT_TABLE_ROWS if limit is None else limit
        self.wide = False
        self.stack = ExitStack()
        self.session = self.stack.enter_context(connect())

    def close(self) -> None:
        self.stack.close()

    pending = False  # a statement is being typed: the prompt says so

    def lines(self) -> Iterator[str | None]:
        """The lines typed; None for a Ctrl-C at the prompt. Ends with Ctrl-D."""
        while True:
            try:
                yield input(MORE if self.pending else PROMPT)
            except EOFError:
                print()
                return
            except KeyboardInterrupt:
                print()
                yield None

    def loop(self) -> int:
        from cdnlake.warehouse.statements import has_code, split_statements

        print(
            f"cdnlake sql on the lake at {self.config.storage.lake_location}: "
            ".help for help, .quit or Ctrl-D to leave"
        )
        text = ""
        typed = 0  # the lines of the statement being typed, each in readline's history
        for line in self.lines():
            if line is None:  # Ctrl-C while typing: the statement is dropped
                text = ""
                typed = 0
                self.pending = False
                continue
            # A Ctrl-C outside a running query (guarded() cancels that one), e.g. just
            # before it starts or as it ends, stops what was asked, not the shell.
            if not text and line.strip().startswith("."):
                try:
                    if not self.command(line.strip()):
                        return 0
                except KeyboardInterrupt:
                    print("\ncancelled", file=sys.stderr)
                continue
            typed += 1
            statements, rest = split_statements(text + line + "\n")
            if statements and typed > 1:  # Up recalls the statement, not its last line
                fold_history(typed, "".join(statements).strip())
            typed = 0 if statements else typed
            text = rest if has_code(rest) else ""
            self.pending = bool(text)
            try:
                for statement in statements:
                    self.execute(statement)
            except KeyboardInterrupt:
                print("\nquery cancelled", file=sys.stderr)
        return 0

    def execute(self, statement: str) -> None:
        from cdnlake.cli.sql_common import hide_internal, run_cancellable

        limit = self.limit or None if self.format == "table" else None

        def run(session: Session) -> Result:
            log.debug("sql: running a statement")  # never its text: it may hold personal data
            return run_cancellable(session, lambda: session.run(statement, limit=limit))

        result = self.guarded(run)
        if result is not None:
            if re.match(r"^\s*SHOW\s+(ALL\s+)?TABLES\s*$", statement, re.IGNORECASE):
                hide_internal(result)
            self.show(result, limit)

    def guarded(self, call: Callable[[Session], Result]) -> Result | None:
        """``call(session)``; an error or a cancel said in one line, and None. A data file
        the session's snapshot names that has left storage since (a vacuum): the session
        reads the lake as it is now and ``call`` runs once more (a shell never fails query
        after query for it)."""
        try:
            try:
                return call(self.session)
            except FileGoneError as exc:
                log.info("sql: %s", exc)
                self.refresh(said="a file of the lake left storage since the shell read it")
                return call(self.session)
        except KeyboardInterrupt:
            print("\nquery cancelled", file=sys.stderr)
        except CdnlakeError as exc:
            print(f"error: {exc}", file=sys.stderr)
        return None

    def show(self, result: Result, limit: int | None) -> None:
        from cdnlake.cli.sql_common import say_time
        from cdnlake.warehouse.output import render, terminal_width

        if not result.columns:
            print("ok")
            return
        total = (result.total if result.total is not None else -1) if result.more else None
        sys.stdout.write(
            render(
                self.format,
                result.columns,
                result.rows,
                width=terminal_width(sys.stdout),
                wide=self.wide,
                hint=".wide shows them all",
                total=total,
                more_hint=".limit 0 shows every row",
            )
        )
        say_time(result)
        sys.stdout.flush()

    def command(self, line: str) -> bool:
        """Run one ``.`` command; False to leave the shell."""
        name, _, rest = line.partition(" ")
        words = rest.split()
        try:
            if name in (".quit", ".exit", ".q"):
                return False
            if name == ".help":
                print(
                    HELP.format(
                        format=self.format,
                        limit=self.limit or "all",
                        wide="every column" if self.wide else "fit the terminal",
                    )
                )
            elif name == ".format":
                if len(words) != 1 or words[0] not in FORMATS:
                    raise UsageError(f".format: expected one of {'|'.join(FORMATS)}")
                self.format = words[0]
            elif name == ".limit":
                if len(words) != 1 or not words[0].isdigit():
                    raise UsageError(".limit: expected a whole number of rows (0: all)")
                self.limit = int(words[0])
            elif name == ".wide":
                if words:
                    raise UsageError(".wide: takes nothing (it switches between the two)")
                self.wide = not self.wide
                print("every column" if self.wide else "tables fit the terminal")
            elif name == ".tables":
                self.tables()
            elif name == ".schema":
                if len(words) != 1 or not _NAME.match(words[0]):
                    raise UsageError(".schema: expected one relation name, e.g. .schema requests")
                self.schema(words[0])
            elif name == ".queries":
                from cdnlake.cli.sql_common import describe_named

                sys.stdout.write(describe_named())
            elif name == ".run":
                self.run_named(words)
            elif name == ".refresh":
                self.refresh()
            else:
                raise UsageError(f"{name}: no such command (.help lists them)")
        except CdnlakeError as exc:
            print(f"error: {exc}", file=sys.stderr)
        return True

    def describe(self, name: str) -> Result | None:
        # An identifier cannot be a bound parameter: the name is checked (_NAME) and quoted.
        return self.guarded(lambda session: session.run(f'DESCRIBE "{name}"'))

    def tables(self) -> None:
        from cdnlake.warehouse.output import render
        from cdnlake.warehouse.relations import RELATIONS

        rows = []
        for name in RELATIONS:
            described = self.describe(name)
            if described is not None:
                rows.append((name, ", ".join(str(r[0]) for r in described.rows)))
        if self.format == "table":
            width = shutil.get_terminal_size().columns
            for name, columns in rows:
                print(textwrap.fill(f"{name}: {columns}", width, subsequent_indent="    "))
        else:
            sys.stdout.write(render(self.format, ["relation", "columns"], rows))

    def schema(self, name: str) -> None:
        from cdnlake.warehouse.relations import Result

        described = self.describe(name)
        if described is not None:
            self.show(Result(["column", "type"], [r[:2] for r in described.rows]), None)

    def run_named(self, words: list[str]) -> None:
        from cdnlake.cli.sql_common import bind, run_cancellable
        from cdnlake.warehouse.named import get_named

        if not words:
            raise UsageError(".run: expected a query name and its KEY=VALUE parameters")
        try:
            named = get_named(words[0])
            params = bind(named, words[1:], self.config)
        except UsageError as exc:  # said as the command line's options: in the shell's words
            raise UsageError(shell_words(str(exc))) from None
        limit = self.limit or None if self.format == "table" else None
        result = self.guarded(
            lambda session: run_cancellable(
                session, lambda: session.run_named(named, params, limit=limit)
            )
        )
        if result is not None:
            self.show(result, limit)

    def refresh(self, said: str | None = None) -> None:
        """The session anew, over the lake as it is now (``.refresh``; ``said``: why, on
        stderr, when the shell does it by itself)."""
        fresh = ExitStack()
        self.session = fresh.enter_context(self.connect())
        self.stack.close()
        self.stack = fresh
        if said is None:
            print("the lake as it is now")
        else:
            print(f"{said}: it reads the lake as it is now", file=sys.stderr)


def shell_words(text: str) -> str:
    """An error of the named queries, which speaks of ``--query`` and ``--param``, as the
    shell's ``.run NAME KEY=VALUE`` puts it."""
    text = re.sub(r"^--query:", ".run:", text)
    text = re.sub(r"^--param (\w+)", r".run: parameter \1", text)
    return re.sub(r"^--param:", ".run:", text)


def fold_history(lines: int, statement: str) -> None:
    """The last ``lines`` entries of readline's history (the lines of one statement, each
    added as it was typed) made one entry, the whole statement, as psql and sqlite3 do.
    On one line, unless a ``--`` comment would swallow what follows it."""
    try:
        import readline
    except ImportError:
        return
    count = readline.get_current_history_length()
    if count < lines:
        return
    typed = [readline.get_history_item(count - i) for i in range(lines - 1, -1, -1)]
    for _ in range(lines):
        readline.remove_history_item(readline.get_current_history_length() - 1)
    joined = [line.strip() for line in typed if line and line.strip()]
    one = "\n".join(joined) if any("--" in line for line in joined) else " ".join(joined)
    readline.add_history(one or statement)


def shell(args: argparse.Namespace, config: Config) -> int:
    """The interactive shell, until .quit or Ctrl-D (exit 0)."""
    from cdnlake.warehouse.engine import open_session

    def connect() -> AbstractContextManager[Session]:
        return open_session(config, args.engine, None, require_lake=True)

    session = Shell(config, connect, args.format, args.limit)
    history = History()
    try:
        return session.loop()
    finally:
        history.save()
        session.close()
