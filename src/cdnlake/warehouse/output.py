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


def write_table(
    out: TextIO, columns: list[str], rows: list[tuple[Any, ...]], width: int | None = None
) -> None:
    """A table for people; ``width``: the columns it may take (default: the terminal's,
    or at least 100 when the output is no terminal)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(*columns, show_lines=False)
    for row in rows:
        table.add_row(*(table_cell(plain(v)) for v in row))
    if width is None and not out.isatty():
        width = max(100, 20 * len(columns))
    console = Console(file=out, width=width)
    console.print(table, markup=False, highlight=False)
    console.print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})", highlight=False)


def render(
    fmt: str, columns: list[str], rows: list[tuple[Any, ...]], *, width: int | None = None
) -> str:
    """Rows as ``fmt`` (table, csv, json); ``width``: a table's columns (see write_table)."""
    buffer = io.StringIO()
    if fmt == "table":
        write_table(buffer, columns, rows, width)
    else:
        {"csv": write_csv, "json": write_json}[fmt](buffer, columns, rows)
    return buffer.getvalue()
