"""The SQL that ships inside the package: named queries in ``cdnlake/sql/`` and the
statements cdnlake runs itself in ``cdnlake/sql/internal/``.

They are package data, read through :mod:`importlib.resources`, so an installed wheel
has them as a checkout does. ``$CDNLAKE_SQL_DIR`` points at another folder of named
queries (with its own ``internal/``), for trying out changes without reinstalling.
"""

from __future__ import annotations

import functools
import os
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from cdnlake.errors import ConfigError


def sql_dir() -> Traversable:
    """``$CDNLAKE_SQL_DIR``, else the ``sql`` folder inside the installed package."""
    override = os.environ.get("CDNLAKE_SQL_DIR")
    if override:
        return Path(override)
    return files("cdnlake") / "sql"


@functools.cache
def internal_sql(name: str) -> str:
    path = sql_dir() / "internal" / f"{name}.sql"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"sql: {path} is missing (set CDNLAKE_SQL_DIR)") from None


@functools.cache
def postgres_sql(name: str) -> str:
    """A coordination statement (``cdnlake/sql/postgres/``); always the package's own."""
    return (files("cdnlake") / "sql" / "postgres" / f"{name}.sql").read_text(encoding="utf-8")
