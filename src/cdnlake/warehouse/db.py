"""DuckDB over the lake's Delta tables: every relation of ``cdnlake sql``, nothing stored.

Each connection is an in-memory DuckDB database with one view per Delta table, over the
files of the table's current snapshot as the Delta log lists them, so queries see whole
commits only, however the daemon writes meanwhile. On local disk DuckDB's own Parquet
reader reads that file list (hive partition values from the paths: a filter on
``pull_zone_id`` or ``date`` reads only those partitions), with the table's schema where
the log's statistics show a file has every column (no footer read to define the view:
:func:`files_sql`); on S3 the snapshot is
registered as an Arrow dataset whose files the log's statistics prune. No data lives in
a DuckDB file and nothing stored holds a path, so the lake can move.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from typing import Any

import duckdb
from deltalake import DeltaTable

from cdnlake.config import StorageConfig
from cdnlake.errors import (
    DataError,
    FileGoneError,
    NoLakeError,
    QueryError,
    StorageError,
    first_line,
)
from cdnlake.lake.log.schema import (
    REQUESTS,
    STATS_COLUMNS_PROPERTY,
    TABLES,
    ColumnType,
    TableSpec,
)
from cdnlake.lake.log.store import Lake, add_actions_table
from cdnlake.lake.upkeep.rollups import ROLLUP, Partitions, fresh, partitions, stale
from cdnlake.sqlfiles import internal_sql
from cdnlake.warehouse.named import NamedQuery
from cdnlake.warehouse.relations import ALIASES, HOURLY, RELATIONS, Result

log = logging.getLogger(__name__)

# DuckDB names the data file it could not read: "... at end of file '/lake/x.parquet'".
_DAMAGED_FILE = re.compile(r"""\s*['"](?P<path>[^'"]+\.parquet)['"]""")


# What DuckDB says of a file whose bytes are not (or no longer) Parquet.
_DAMAGE = re.compile(
    r"magic bytes|too small|footer|thrift|deseriali|decompress|corrupt", re.IGNORECASE
)
_GONE = re.compile(r"no files found|no such file", re.IGNORECASE)


def damaged_file(exc: duckdb.Error) -> DataError | None:
    """A query that failed on one lake data file: one line naming the file, and what to
    do: damaged bytes (truncated, not Parquet) are what ``maintain --check-all`` finds and
    sets aside; a file gone was removed while the session read the table (a compaction,
    ``maintain``), so running again reads the table as it is now."""
    text = first_line(exc)
    found = _DAMAGED_FILE.search(text)
    if found is None or not isinstance(exc, duckdb.InvalidInputException | duckdb.IOException):
        return None
    reason = _DAMAGED_FILE.sub("", text.split(" Error: ", 1)[-1]).rstrip(".")
    kind: type[DataError] = DataError
    if _DAMAGE.search(reason):
        advice = "`cdnlake maintain --check-all` checks every file and sets damaged ones aside"
    elif _GONE.search(reason):
        kind = FileGoneError  # the table as it is now does not name it
        advice = "it was removed while the table was read (a compaction); run it again"
    else:
        advice = "check the lake's permissions and storage"
    return kind(f"lake file {found['path']} cannot be read ({reason}); {advice}")


# The schema of the views the relations are built on (``_requests``, ``_rollup``...).
INTERNAL = "cdnlake_internal"


def _internal(source: str) -> str:
    """``source`` (``_requests``) as a relation reads it: in :data:`INTERNAL`."""
    return f"{INTERNAL}.{source}"


def _register_dataset(con: duckdb.DuckDBPyConnection, source: str, dataset: Any) -> None:
    """An object store's table (an Arrow dataset) as the internal view ``source``. DuckDB
    keeps a registered object in the connection's main schema: SHOW TABLES lists it, as
    ``<source>_arrow``."""
    con.register(f"{source}_arrow", dataset)
    con.execute(f"CREATE OR REPLACE VIEW {INTERNAL}.{source} AS SELECT * FROM {source}_arrow")


def relation_sql(spec: TableSpec, source: str) -> str:
    alias = "zone AS pull_zone_id, " if spec.name in ALIASES else ""
    return f"CREATE VIEW {spec.name} AS SELECT {alias}* FROM {_internal(source)}"


_HIVE_TYPES = {"date": "DATE"}
_DUCKDB_TYPES: dict[ColumnType, str] = {
    "string": "VARCHAR",
    "long": "BIGINT",
    "integer": "INTEGER",
    "date": "DATE",
    "timestamp": "TIMESTAMPTZ",  # every instant in the lake is UTC
}


def empty_sql(spec: TableSpec) -> str:
    """The table's columns and no rows, in SQL: registering an empty Arrow table instead
    makes DuckDB import pandas when it is installed (a fifth of a second)."""
    columns = ", ".join(
        f'NULL::{_DUCKDB_TYPES[dtype]} AS "{name}"' for name, dtype in spec.schema.items()
    )
    return f"SELECT {columns} WHERE false"


def files_sql(spec: TableSpec, source: str, *, complete: bool, partial: bool) -> str:
    """The snapshot's data files read by DuckDB, partition values from their paths; their
    paths are in the session's variables ``<source>_complete`` and ``<source>_partial``
    (:func:`data_files`), so each query binds a list, not a statement holding every path.

    A file whose log statistics name every column is read with the table's own schema
    (``bound_schema``): binding the view opens only the first of them (DuckDB reads one
    footer to bind). The other files, which may
    lack a column the table gained after they were written (a lake of an older cdnlake),
    are united by name with the table's empty relation, which has every column, so the
    column reads as NULL in them; binding reads their footers. Filters and projections still
    reach the files (a filter on a partition column reads only its partitions).
    """
    types = ", ".join(f"'{c}': {_HIVE_TYPES.get(c, 'BIGINT')}" for c in spec.partition_by)
    hive = f"hive_partitioning = true, hive_types = {{{types}}}, hive_types_autocast = false"
    parts = [empty_sql(spec)]
    if complete:
        schema = ", ".join(f"'{c}': '{_DUCKDB_TYPES[t]}'" for c, t in spec.schema.items())
        parts.append(
            f"SELECT * FROM read_parquet(getvariable('{source}_complete'), {hive}, "
            f"bound_schema = {{{schema}}})"
        )
    if partial:
        parts.append(
            f"SELECT * FROM read_parquet(getvariable('{source}_partial'), {hive}, "
            "union_by_name = true)"
        )
    columns = ", ".join(f'"{c}"' for c in spec.schema)
    return f"SELECT {columns} FROM ({' UNION ALL BY NAME '.join(parts)})"


def data_files(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    table: DeltaTable,
    base: str,
    paths: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """The snapshot's data files (or only those at ``paths``, as the log names them) under
    ``base``: those whose log statistics name every column of ``spec`` (delta-rs records
    them all, so every compacted file), and the others. Chosen on the log in Arrow, not by
    a Python value per file."""
    log = add_actions_table(table)
    if log.num_rows == 0:
        return [], []
    # A table with ``delta.dataSkippingStatsColumns`` shows the null counts of those columns
    # only: a file is whole when it names each of them (no personal column was ever added
    # to a table after its first file: they are all in every file).
    configured = (table.metadata().configuration or {}).get(STATS_COLUMNS_PROPERTY)
    required = [c for c in spec.columns if configured is None or c in spec.stats_columns]
    counts = [f"null_count.{c}" for c in required if f"null_count.{c}" in log.column_names]
    con.register("actions", log.select(["path", "num_records", *counts]))
    try:
        ((complete, partial),) = con.execute(
            internal_sql("data_files"),
            {"base": base, "columns": len(required), "paths": paths},
        ).fetchall()
    finally:
        con.unregister("actions")
    return complete, partial


class Warehouse:
    """The relations of the lake, queried with DuckDB."""

    def __init__(
        self,
        storage: StorageConfig,
        lake: Lake | None = None,
        *,
        tables: Callable[[TableSpec], DeltaTable | None] | None = None,
    ) -> None:
        """``tables``: how a table is had (a process's session: its kept state,
        :meth:`~cdnlake.lake.zone.session.LakeSession.reader`); opened anew by default."""
        self.storage = storage
        self.lake = lake or Lake.from_config(storage)
        self.table = tables or self.lake.open

    @contextmanager
    def connect(
        self,
        relations: Collection[str] | None = None,
        *,
        days: tuple[date, date] | None = None,
        require_lake: bool = False,
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """A session over the lake with a view per relation of ``relations`` (all of
        :data:`RELATIONS` by default), closed at the end (see :meth:`open_connection`).
        A query of the session that meets a damaged data file raises :func:`damaged_file`.
        """
        con = self.open_connection(relations, days=days, require_lake=require_lake)
        try:
            try:
                yield con
            except duckdb.Error as exc:  # a query met a file no footer read had opened
                raise damaged_file(exc) or exc from None
        finally:
            con.close()

    def open_connection(
        self,
        relations: Collection[str] | None = None,
        *,
        days: tuple[date, date] | None = None,
        require_lake: bool = False,
    ) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection over the lake with a view per relation of ``relations``
        (all of :data:`RELATIONS` by default); the caller closes it.

        ``require_lake``: a lake that holds no table at all (nothing was ever written
        there, or the configuration points elsewhere) raises :class:`NoLakeError` naming
        its location, rather than answering every question with zero rows.

        Defining a view over a month of files, or ``requests_hourly`` (it reads the
        rollups' fingerprints), costs more than many questions: commands ask only for
        the relations their SQL names (:func:`relations_named`). ``days`` (first, last):
        the only days the session asks about. ``requests`` then holds only their
        partitions (chosen on the log, so a day's report on a lake of 100,000 files reads
        the footers of that day's files alone), and ``requests_hourly`` only those days,
        computed once for the session (a report's sections then aggregate no row twice).
        """
        wanted = set(RELATIONS if relations is None else relations)
        hourly = HOURLY in wanted
        if hourly and self.lake.local is None:
            wanted.add(REQUESTS.name)  # the stale partitions come from it by a join
        con = duckdb.connect(":memory:")
        try:
            try:
                found = self._set_up(con, wanted, hourly, days)
            except duckdb.Error as exc:  # a set-up query (the hourly rollups) met a file
                raise damaged_file(exc) or StorageError(
                    f"the lake at {self.lake.uri} cannot be read: {first_line(exc)}"
                ) from None
            if require_lake and not found and not self.holds_a_table():
                raise NoLakeError(
                    f"no lake at {self.lake.uri}: none of its tables was ever written there "
                    "(run `cdnlake ingest` or the daemon first, or check storage.root and "
                    "storage.lake_uri in the config)"
                )
        except BaseException:
            con.close()
            raise
        return con

    def _set_up(
        self,
        con: duckdb.DuckDBPyConnection,
        wanted: set[str],
        hourly: bool,
        days: tuple[date, date] | None,
    ) -> bool:
        """The session's views (see :meth:`connect`); whether one of the tables they read
        exists."""
        con.execute("SET TimeZone = 'UTC'")
        # The views the relations are built on live in a schema of their own, not
        # listed by SHOW TABLES (a notebook's, through cdnlake.connect()).
        con.execute(f"CREATE SCHEMA {INTERNAL}")
        opened = {}
        for spec in TABLES:
            if spec.name not in wanted:
                continue
            table = opened[spec.name] = self.table(spec)
            if spec is REQUESTS and table is not None and days is not None:
                self.read_only(con, spec, table, Lake.add_actions(spec, table, _on(days)))
                continue
            self._register(con, spec, table, f"_{spec.name}")
            con.execute(relation_sql(spec, f"_{spec.name}"))
        if hourly:
            requests = opened[REQUESTS.name] if REQUESTS.name in opened else self.table(REQUESTS)
            self._requests_hourly(con, requests, days)
            if days is not None:
                _materialize_hourly(con, *days)
            opened.setdefault(REQUESTS.name, requests)
        return any(table is not None for table in opened.values())

    def holds_a_table(self) -> bool:
        """Whether any table of the lake was ever written."""
        return any(self.table(spec) is not None for spec in TABLES)

    def read_only(
        self,
        con: duckdb.DuckDBPyConnection,
        spec: TableSpec,
        table: DeltaTable | None,
        actions: list[dict[str, Any]],
    ) -> None:
        """(Re)define the session's view of ``spec`` over only the files of these add
        actions (:meth:`Lake.add_actions`)."""
        source = f"_{spec.name}"
        con.execute(f"DROP VIEW IF EXISTS main.{spec.name}")
        con.execute(f"DROP VIEW IF EXISTS {INTERNAL}.{source}")
        if table is not None and self.lake.local is None:
            _register_dataset(con, source, self.lake.dataset(spec, table, actions=actions))
        else:
            self._register(con, spec, table, source, paths=[a["path"] for a in actions])
        con.execute(relation_sql(spec, source))

    def _register(
        self,
        con: duckdb.DuckDBPyConnection,
        spec: TableSpec,
        table: DeltaTable | None,
        source: str,
        paths: list[str] | None = None,
    ) -> None:
        """``source``: the table's snapshot (or only the files at ``paths``, as the log
        names them, on local disk)."""
        if table is None:
            con.execute(f"CREATE VIEW {INTERNAL}.{source} AS {empty_sql(spec)}")
        elif self.lake.local is not None:
            base = self.lake.table_uri(spec)
            complete, partial = data_files(con, spec, table, base, paths)
            for part, files in (("complete", complete), ("partial", partial)):
                con.execute(f"SET VARIABLE {source}_{part} = $files", {"files": files})
            rows = files_sql(spec, source, complete=bool(complete), partial=bool(partial))
            try:
                con.execute(f"CREATE VIEW {INTERNAL}.{source} AS {rows}")
            except duckdb.Error as exc:
                raise damaged_file(exc) or DataError(
                    f"lake table {spec.name} cannot be read: {first_line(exc)}"
                ) from None
        else:
            try:
                _register_dataset(con, source, self.lake.dataset(spec, table))
            except Exception as exc:
                raise DataError(
                    f"lake table {spec.name} cannot be read: {first_line(exc)}"
                ) from None

    def _requests_hourly(
        self,
        con: duckdb.DuckDBPyConnection,
        requests: DeltaTable | None,
        days: tuple[date, date] | None,
    ) -> None:
        """``requests_hourly``: rollups where they are fresh, rows where they are not (of
        the partitions of ``days`` only, when given)."""
        on = None if days is None else _days(days)
        parts = partitions(requests, days=on) if requests is not None else Partitions()
        current = parts.fingerprints()
        rollup = self.table(ROLLUP) if current else None
        self._register(con, ROLLUP, rollup, "_rollup")
        first, last = days or (None, None)
        done = {
            (int(zone), day): fingerprint
            for zone, day, fingerprint in con.execute(
                internal_sql("rollup_fingerprints"), {"first": first, "last": last}
            ).fetchall()
        }
        rolled = fresh(current, done)
        # Bound lists, not a registered Arrow table: DuckDB imports pandas (a third of a
        # second) to ask whether what it is handed is a DataFrame.
        con.execute(
            internal_sql("fresh_partitions"),
            {
                "zones": [zone for zone, _ in rolled],
                "dates": [day for _, day in rolled],
                "hashes": [current[key] for key in rolled],
            },
        )
        if requests is None:
            self._register(con, REQUESTS, None, "_requests_stale")
        elif self.lake.local is not None:
            paths = [path for key in stale(current, done) for path in parts.files[key]]
            self._register(con, REQUESTS, requests, "_requests_stale", paths=paths)
        else:  # an object store: the stale partitions by an anti-join
            con.execute(
                f"CREATE VIEW {INTERNAL}._requests_stale AS SELECT * FROM requests "
                f"ANTI JOIN {INTERNAL}._fresh USING (pull_zone_id, date)"
            )
        con.execute(internal_sql("requests_hourly"))


def _days(days: tuple[date, date]) -> list[date]:
    first, last = days
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _on(days: tuple[date, date]) -> list[Any]:
    """The partition conditions of the days from first to last."""
    return [("date", "in", [day.isoformat() for day in _days(days)])]


def _materialize_hourly(con: duckdb.DuckDBPyConnection, first: date, last: date) -> None:
    con.execute(
        f"CREATE TABLE {INTERNAL}._hourly AS SELECT * FROM {HOURLY} "
        "WHERE date BETWEEN $first AND $last",
        {"first": first, "last": last},
    )
    con.execute(f"DROP VIEW main.{HOURLY}")
    con.execute(f"CREATE VIEW main.{HOURLY} AS SELECT * FROM {INTERNAL}._hourly")


class DuckDBSession:
    """Queries on one DuckDB connection of :meth:`Warehouse.connect`."""

    engine = "duckdb"

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def interrupt(self) -> None:
        """Stop the query running on the connection (from another thread): it raises
        :class:`duckdb.InterruptException` there, and the connection stays usable."""
        self.con.interrupt()

    def run(
        self, sql: str, params: dict[str, Any] | None = None, *, limit: int | None = None
    ) -> Result:
        try:
            cursor = self.con.execute(sql, params) if params is not None else self.con.execute(sql)
            columns = [d[0] for d in cursor.description or []]
            if not columns:
                return Result([], [])
            if limit is None:
                return Result(columns, cursor.fetchall())
            rows = cursor.fetchmany(limit + 1)  # one more tells that there are more
            total = len(rows) + _count_rest(cursor) if len(rows) > limit else len(rows)
        except duckdb.InterruptException:  # interrupt(): the user cancelled it
            raise KeyboardInterrupt from None
        except duckdb.Error as exc:
            raise damaged_file(exc) or QueryError(f"sql: {first_line(exc)}") from None
        return Result(columns, rows[:limit], more=len(rows) > limit, total=total)

    def run_named(
        self, query: NamedQuery, params: dict[str, Any], *, limit: int | None = None
    ) -> Result:
        return self.run(query.sql, params, limit=limit)


def _count_rest(cursor: duckdb.DuckDBPyConnection) -> int:
    """The rows a result still holds, counted in Arrow batches (millions a second), not
    fetched as Python tuples: "(5 rows, 2 shown)" says how many the limit left out."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "an extra copy": of a batch at a time, dropped
        reader = cursor.to_arrow_reader(100_000)
    return sum(batch.num_rows for batch in reader or ())
