"""The DuckDB warehouse: bookkeeping tables plus views over the Parquet lake.

``requests`` (and ``shield_events``) are views over the lake's files, so loading a
partition into the warehouse is the atomic rename that put it in the lake: the two can
never disagree. Bookkeeping (``ingest_runs``, ``ingest_gaps``, ``rejected_lines``) lives
in DuckDB tables written in short transactions.

DuckDB lets one process write a database file, or several read it, not both at once.
cdnlake therefore never holds the file open: every use is a short connection, and a
connection that finds the file locked waits and tries again (``busy_timeout``), so
``cdnlake sql`` and ``report`` work while the daemon ingests.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from cdnlake.config import StorageConfig
from cdnlake.errors import DataError, WarehouseBusyError
from cdnlake.lake.layout import REQUEST_SCHEMA, SHIELD_SCHEMA, data_files, glob_for
from cdnlake.sqlfiles import internal_sql

log = logging.getLogger(__name__)

DEFAULT_BUSY_TIMEOUT = 60.0
SCHEMA_VERSION = "2"
_PROCESS_LOCK = threading.RLock()  # one connection at a time per process (see docstring)

# Columns an older schema lacks, derived from the columns it has when it is migrated.
MIGRATION_DEFAULTS: dict[str, dict[str, str]] = {
    "rejected_lines": {"record_key": "file || ':' || line_number"},
}

_DUCK_TYPES = {
    pl.Datetime("ms", "UTC"): "TIMESTAMPTZ",
    pl.String(): "VARCHAR",
    pl.Int32(): "INTEGER",
    pl.Int64(): "BIGINT",
}

# (view name, lake table, partition key names, schema of the files)
LAKE_VIEWS: list[tuple[str, str, str, dict[str, pl.DataType]]] = [
    ("requests", "requests", "pull_zone_id", REQUEST_SCHEMA),
    ("shield_events", "shield_events", "shield_zone_id", SHIELD_SCHEMA),
]


def sql_literal(text: str) -> str:
    """Quote a path for DDL, where DuckDB takes no bound parameters (never user input)."""
    return "'" + text.replace("'", "''") + "'"


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc).lower()
    return "lock" in text and ("conflicting" in text or "could not set" in text)


def view_sql(
    view: str, lake: Path, table: str, key: str, schema: dict[str, Any], *, temp: bool
) -> str:
    """A view over the lake's files, or an empty view of the same shape when it has none."""
    columns = [f"{key}", *schema, "date"]
    if data_files(lake, table):
        source = (
            f"read_parquet({sql_literal(glob_for(lake, table))}, hive_partitioning = true, "
            f"hive_types = {{'{key}': BIGINT, 'date': DATE}})"
        )
        body = f"SELECT {', '.join(columns)} FROM {source}"
    else:
        typed = [f"NULL::BIGINT AS {key}"]
        typed += [f"NULL::{_DUCK_TYPES[dtype]} AS {name}" for name, dtype in schema.items()]
        typed.append("NULL::DATE AS date")
        body = f"SELECT {', '.join(typed)} WHERE false"
    return f"CREATE OR REPLACE {'TEMP ' if temp else ''}VIEW {view} AS {body}"


class Warehouse:
    def __init__(self, storage: StorageConfig, busy_timeout: float = DEFAULT_BUSY_TIMEOUT):
        self.storage = storage
        self.path = storage.warehouse
        self.lake = storage.lake
        self.busy_timeout = busy_timeout
        self._ready = False

    # -- connections -------------------------------------------------------------------
    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.02
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.Error as exc:
                if not _is_lock_error(exc):
                    if read_only:
                        raise DataError(f"warehouse {self.path} cannot be opened: {exc}") from None
                    self._set_aside("damaged", str(exc).splitlines()[0])
                    continue
                if time.monotonic() >= deadline:
                    raise WarehouseBusyError(
                        f"warehouse {self.path} stayed locked by another process for "
                        f"{self.busy_timeout:.0f}s"
                    ) from None
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)

    def _set_aside(self, why: str, detail: str) -> Path:
        """Move the warehouse file (and its WAL) aside; it is never deleted."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.{why}-{stamp}")
        self.path.replace(aside)
        wal = self.path.with_name(self.path.name + ".wal")
        if wal.exists():
            wal.replace(aside.with_name(aside.name + ".wal"))
        log.error(
            "warehouse %s is %s (%s); kept as %s, a new one is built (requests is a view "
            "over the lake, so nothing of the lake is lost)",
            self.path,
            why,
            detail,
            aside.name,
        )
        return aside

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived connection with the lake views in place."""
        with _PROCESS_LOCK:
            if read_only and not self.path.exists():
                with self.connect(read_only=False):
                    pass
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = self._open(read_only)
            try:
                con.execute("SET TimeZone = 'UTC'")
                if not read_only:
                    con = self._ensure_schema(con)
                for view, table, key, schema in LAKE_VIEWS:
                    # Temp views track the lake as it is now; persisted ones serve other tools.
                    con.execute(view_sql(view, self.lake, table, key, schema, temp=True))
                yield con
            finally:
                con.close()

    def _version(self, con: duckdb.DuckDBPyConnection) -> str | None:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        if not tables:
            return None  # a new, empty file
        if "cdnlake_meta" not in tables:
            return "0"  # bookkeeping tables from before versioning
        row = con.execute("SELECT value FROM cdnlake_meta WHERE key = 'schema_version'").fetchone()
        return str(row[0]) if row else "0"

    def _ensure_schema(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        version = self._version(con)
        if version not in (None, SCHEMA_VERSION):
            con.close()
            aside = self._set_aside(f"schema-v{version}", f"schema version {version}")
            con = duckdb.connect(str(self.path))
            con.execute("SET TimeZone = 'UTC'")
            self._create(con)
            self._migrate(con, aside)
        elif version is None:
            self._create(con)
        for view, table, key, schema in LAKE_VIEWS:
            con.execute(view_sql(view, self.lake, table, key, schema, temp=False))
        return con

    def _create(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(internal_sql("schema"))
        con.execute(
            "INSERT OR REPLACE INTO cdnlake_meta VALUES ('schema_version', $v)",
            {"v": SCHEMA_VERSION},
        )

    def _migrate(self, con: duckdb.DuckDBPyConnection, old: Path) -> None:
        """Copy the bookkeeping rows whose columns still exist, by name."""
        con.execute(f"ATTACH {sql_literal(str(old))} AS old (READ_ONLY)")
        try:
            for table in ("ingest_runs", "ingest_gaps", "rejected_lines"):
                old_cols = {
                    r[0]
                    for r in con.execute(
                        "SELECT column_name FROM duckdb_columns() "
                        "WHERE database_name = 'old' AND table_name = $t",
                        {"t": table},
                    ).fetchall()
                }
                new_cols = [
                    r[0]
                    for r in con.execute(
                        "SELECT column_name FROM duckdb_columns() "
                        "WHERE database_name = current_database() AND table_name = $t "
                        "ORDER BY column_index",
                        {"t": table},
                    ).fetchall()
                ]
                common = [c for c in new_cols if c in old_cols]
                derived = {
                    k: v for k, v in MIGRATION_DEFAULTS.get(table, {}).items() if k not in old_cols
                }
                if common:
                    names = ", ".join(f'"{c}"' for c in [*common, *derived])
                    values = ", ".join([*(f'"{c}"' for c in common), *derived.values()])
                    verb = "INSERT OR IGNORE" if table == "rejected_lines" else "INSERT"
                    con.execute(
                        f"{verb} INTO main.{table} ({names}) SELECT {values} FROM old.{table}"
                    )
                    log.info("warehouse migration: copied %s (%s)", table, names)
        finally:
            con.execute("DETACH old")

    # -- bookkeeping -------------------------------------------------------------------
    def record_run(self, run: dict[str, Any], gaps: list[dict[str, Any]]) -> None:
        with self.connect() as con:
            con.execute("BEGIN")
            con.execute(internal_sql("insert_run"), run)
            for gap in gaps:
                con.execute(internal_sql("insert_gap"), gap)
            con.execute("COMMIT")

    def add_rejects(
        self,
        rejects: pl.DataFrame,
        *,
        zone: int,
        source: str,
        file: str,
        rejected_at: Any,
        run_id: str,
    ) -> None:
        if rejects.height == 0:
            return
        with self.connect() as con:
            con.register("rejects_batch", rejects.to_arrow())
            con.execute(
                internal_sql("insert_rejects"),
                {
                    "zone": zone,
                    "source": source,
                    "file": file,
                    "rejected_at": rejected_at,
                    "run_id": run_id,
                },
            )
            con.unregister("rejects_batch")
