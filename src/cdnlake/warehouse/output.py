"""Printing query results as a table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, TextIO

FORMULA_PREFIXES = ("=", "@", "\t", "\r")
SIGN_PREFIXES = ("+", "-")


def plain(value: Any) -> Any:
    """A JSON-friendly value: instants in ISO-8601 UTC, decimals as numbers."""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
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
        writer.writerow(["" if v is None else csv_safe(plain(v)) for v in row])


def write_json(out: TextIO, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    records = [{c: plain(v) for c, v in zip(columns, row, strict=True)} for row in rows]
    json.dump(records, out, ensure_ascii=False, indent=1)
    out.write("\n")


def write_table(out: TextIO, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(*columns, show_lines=False)
    for row in rows:
        table.add_row(*("NULL" if v is None else str(plain(v)) for v in row))
    console = Console(file=out, width=max(100, 20 * len(columns)) if not out.isatty() else None)
    console.print(table, markup=False, highlight=False)
    console.print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})", highlight=False)


def render(fmt: str, columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    buffer = io.StringIO()
    {"csv": write_csv, "json": write_json, "table": write_table}[fmt](buffer, columns, rows)
    return buffer.getvalue()
