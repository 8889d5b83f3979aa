"""Printing query results as a table, CSV or JSON."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import uuid
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TextIO

FORMULA_PREFIXES = ("=", "@", "\t", "\r")
SIGN_PREFIXES = ("+", "-")


def iso_duration(delta: timedelta) -> str:
    """An INTERVAL as an ISO-8601 duration: ``P1DT2H3M4.5S``, ``-PT30S``."""
    sign = "-" if delta < timedelta(0) else ""
    delta = abs(delta)
    hours, rest = divmod(delta.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    secs = f"{seconds}.{delta.microseconds:06d}".rstrip("0").rstrip(".")
    day_part = f"{delta.days}D" if delta.days else ""
    time_part = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M")) if n) + (
        f"{secs}S" if secs != "0" else ""
    )
    if not day_part and not time_part:
        return "PT0S"
    return f"{sign}P{day_part}" + (f"T{time_part}" if time_part else "")


def plain(value: Any) -> Any:
    """A JSON-friendly value for every DuckDB type: instants in ISO-8601 UTC, intervals as
    ISO-8601 durations, blobs in base64, UUIDs as text, NaN and infinities as null."""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return iso_duration(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else None
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def csv_safe(value: Any) -> Any:
    """Defuse spreadsheet formulas in text cells written by strangers (OWASP advice)."""
    if isinstance(value, str) and (
        value.startswith(FORMULA_PREFIXES) or (len(value) > 1 and value.startswith(SIGN_PREFIXES))
    ):
        return "'" + value
    return value


def write_csv(out: TextIO, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(v) for v in row])


def csv_cell(value: Any) -> Any:
    """A CSV cell: nested values (lists, structs, maps) as JSON, formulas defused."""
    value = plain(value)
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)
    return csv_safe(value)


def write_json(out: TextIO, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    records = [{c: plain(v) for c, v in zip(columns, row, strict=True)} for row in rows]
    json.dump(records, out, ensure_ascii=False, indent=1, allow_nan=False, default=str)
    out.write("\n")


def table_cell(value: Any) -> str:
    """A terminal table's cell: SQL's NULL written one way, top level or nested."""
    if value is None:
        return "NULL"
    if isinstance(value, list):
        return "[" + ", ".join(table_cell(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {table_cell(v)}" for k, v in value.items()) + "}"
    return str(value)


# A column kept on a narrow terminal is at least this wide (a date; or its header's, or its
# widest cell's when that is less): narrower, a folded cell is a letter a line.
MIN_COLUMN = 10
WIDE_HINT = "--wide shows them all"


def terminal_width(out: TextIO) -> int | None:
    """The columns of the terminal ``out`` writes to; None when it is no terminal (a pipe,
    a file: a table is then written at its full width, for the program that reads it)."""
    import shutil

    try:
        return shutil.get_terminal_size().columns if out.isatty() else None
    except (AttributeError, ValueError, OSError):
        return None


def _cell_width(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.splitlines()), default=0)


def _least(name: str, cells: list[str]) -> int:
    """A column's least width: its header's (up to 20), at least ``MIN_COLUMN``, never
    more than its widest cell."""
    natural = max([_cell_width(name)] + [_cell_width(cell) for cell in cells])
    return min(natural, max(MIN_COLUMN, min(_cell_width(name), 20)))


def fit_columns(columns: list[str], cells: list[list[str]], width: int) -> list[int]:
    """The indexes of the columns shown in ``width``: from the left, while each fits at
    its least width (the rest fold to fit); at least the first."""
    kept: list[int] = []
    used = 1  # the table's left border
    for i, name in enumerate(columns):
        least = _least(name, [row[i] for row in cells])
        if kept and used + least + 3 > width:
            break
        kept.append(i)
        used += least + 3  # a space each side and a border
    return kept


def _widths(
    columns: list[str], cells: list[list[str]], kept: list[int], width: int
) -> dict[int, int]:
    """Each kept column's width in ``width``: the widest columns give way first, each
    down to its least at most, so that the narrow ones (ids, names, dates) stay whole."""
    least = {i: _least(columns[i], [row[i] for row in cells]) for i in kept}
    given = {
        i: max([_cell_width(columns[i])] + [_cell_width(row[i]) for row in cells]) for i in kept
    }
    room = width - 1 - 3 * len(kept)
    if sum(least.values()) > room:  # one column wider than the terminal: it folds to fit
        return {i: max(1, width - 4) for i in kept[:1]}
    while sum(given.values()) > room:
        widest = max((i for i in kept if given[i] > least[i]), key=lambda i: given[i])
        others = [given[i] for i in kept if i != widest and given[i] > least[i]]
        floor = max([least[widest], *(w for w in others if w < given[widest])], default=0)
        excess = sum(given.values()) - room
        given[widest] = max(floor, given[widest] - excess)  # floor >= its least
    return given


def write_table(
    out: TextIO,
    columns: list[str],
    rows: list[tuple[Any, ...]],
    width: int | None = None,
    *,
    wide: bool = False,
    hint: str = WIDE_HINT,
    total: int | None = None,
    more_hint: str = "",
) -> None:
    """A table for people. ``width``: the terminal's columns: the columns that do not fit
    are left out, said in a note ending with ``hint``, and the cells of the others fold
    (``wide``: every column all the same); None (no terminal): every column, each as wide
    as its widest cell. ``total``: the rows the query had, when ``rows`` are fewer (-1:
    more, not counted), and ``more_hint`` how to see them all."""
    from rich.console import Console
    from rich.table import Table

    cells = [[table_cell(plain(v)) for v in row] for row in rows]
    terminal = width
    kept = list(range(len(columns)))
    if width is not None and not wide:
        kept = fit_columns(columns, cells, width)
    table = Table(show_lines=False)
    widths = _widths(columns, cells, kept, terminal) if terminal is not None and not wide else {}
    for i in kept:
        table.add_column(columns[i], overflow="fold", width=widths.get(i))
    for row in cells:
        table.add_row(*(row[i] for i in kept))
    if width is None or wide:  # every column whole: as wide as the table needs
        width = 1 + sum(
            3 + max([_cell_width(columns[i])] + [_cell_width(r[i]) for r in cells]) for i in kept
        )
    console = Console(file=out, width=width, soft_wrap=False)
    console.print(table, markup=False, highlight=False)
    count = f"{len(rows)} row{'s' if len(rows) != 1 else ''}"
    if total is not None and total < 0:
        count = f"more than {len(rows)} rows, {len(rows)} shown"
    elif total is not None and total > len(rows):
        count = f"{total:,} rows, {len(rows)} shown"
    if more_hint and total is not None and total != len(rows):
        count += f": {more_hint}"
    out.write(wrap(f"({count})", terminal) + "\n")
    left = [columns[i] for i in range(len(columns)) if i not in kept]
    if left:
        out.write(
            wrap(
                f"({len(left)} column(s) not shown, the terminal is too narrow: "
                f"{', '.join(left)}; {hint})",
                terminal,
            )
            + "\n"
        )


def wrap(text: str, width: int | None, indent: str = "  ") -> str:
    """A line of prose at the terminal's width (``width``; None: no terminal, one line),
    its continuation lines indented."""
    if width is None or len(text) <= width:
        return text
    import textwrap

    return textwrap.fill(
        text,
        width,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def render(
    fmt: str,
    columns: list[str],
    rows: list[tuple[Any, ...]],
    *,
    width: int | None = None,
    wide: bool = False,
    hint: str = WIDE_HINT,
    total: int | None = None,
    more_hint: str = "",
) -> str:
    """Rows as ``fmt`` (table, csv, json); the rest: a table's (see write_table)."""
    buffer = io.StringIO()
    if fmt == "table":
        write_table(
            buffer, columns, rows, width, wide=wide, hint=hint, total=total, more_hint=more_hint
        )
    else:
        {"csv": write_csv, "json": write_json}[fmt](buffer, columns, rows)
    return buffer.getvalue()
