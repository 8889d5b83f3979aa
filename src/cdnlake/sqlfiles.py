"""Locating and reading the SQL in ``sql/`` (named queries) and ``sql/internal/``."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from cdnlake.errors import ConfigError


def sql_dir() -> Path:
    """``$CDNLAKE_SQL_DIR``, else the ``sql/`` folder of the checkout cdnlake runs from."""
    override = os.environ.get("CDNLAKE_SQL_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "sql"


@functools.cache
def internal_sql(name: str) -> str:
    path = sql_dir() / "internal" / f"{name}.sql"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"sql: {path} is missing (set CDNLAKE_SQL_DIR)") from None
