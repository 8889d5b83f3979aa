"""Where cdnlake's SQL is: the named queries in ``sql/``, the statements cdnlake runs
itself in ``sql/internal/`` and the fleet's PostgreSQL statements in ``sql/postgres/``.

``sql/`` sits at the top of the repository, the one copy. A checkout (or an editable
install) reads it there; a wheel ships it inside the package as ``cdnlake/sql/`` (see
setup.py), read through :mod:`importlib.resources`.

``$CDNLAKE_SQL_DIR`` names a folder of the user's own named queries, added to the shipped
ones (a file of the same name takes the shipped query's place). The internal and PostgreSQL
statements are always the shipped ones.
"""

from __future__ import annotations

import functools
import os
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from cdnlake.errors import ConfigError

USER_SQL_VARIABLE = "CDNLAKE_SQL_DIR"


@functools.cache
def shipped_dir() -> Traversable:
    """``sql/`` at the top of a checkout, else ``cdnlake/sql`` inside the installed wheel."""
    package = Path(__file__).resolve().parent
    checkout = package.parent.parent / "sql"
    if package.parent.name == "src" and (checkout / "internal").is_dir():
        return checkout
    return files("cdnlake") / "sql"


def user_dir() -> Path | None:
    """The folder ``$CDNLAKE_SQL_DIR`` names, or None when it is unset or empty."""
    value = os.environ.get(USER_SQL_VARIABLE, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise ConfigError(
            f"{USER_SQL_VARIABLE}: {value} {what} (it names a folder of your own named "
            "queries, *.sql, added to the shipped ones)"
        )
    return path


@functools.cache
def internal_sql(name: str) -> str:
    """A statement cdnlake runs itself (``sql/internal/``); always the shipped one."""
    return (shipped_dir() / "internal" / f"{name}.sql").read_text(encoding="utf-8")


@functools.cache
def postgres_sql(name: str) -> str:
    """A coordination statement (``sql/postgres/``); always the shipped one."""
    return (shipped_dir() / "postgres" / f"{name}.sql").read_text(encoding="utf-8")
