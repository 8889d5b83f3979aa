"""Where queries run: DuckDB in this process (the default), or Spark through Spark Connect.

Both give a :class:`Session` that runs SQL in its own dialect (``run``) and the named
queries, written once in DuckDB's dialect (``run_named``), over the same Delta tables.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from datetime import date
from typing import Any, Protocol

from cdnlake.config import Config
from cdnlake.errors import ConfigError, UsageError
from cdnlake.warehouse.named import NamedQuery
from cdnlake.warehouse.relations import Result

ENGINES = ("duckdb", "spark")


class Session(Protocol):
    engine: str

    def run(
        self, sql: str, params: dict[str, Any] | None = None, *, limit: int | None = None
    ) -> Result: ...

    def run_named(
        self, query: NamedQuery, params: dict[str, Any], *, limit: int | None = None
    ) -> Result: ...


@contextmanager
def open_session(
    config: Config,
    engine: str = "duckdb",
    relations: Collection[str] | None = None,
    *,
    days: tuple[date, date] | None = None,
    require_lake: bool = False,
) -> Iterator[Session]:
    """A session of ``engine`` over the lake that ``config`` names, with ``relations``
    (the names the SQL to run mentions, :func:`relations_named`; all by default).
    ``days``: the only days the session asks about (``requests`` and ``requests_hourly``
    then hold only those; see :meth:`Warehouse.connect`). ``require_lake``: a lake that
    holds no table raises :class:`NoLakeError` (DuckDB; Spark says so in its own words)."""
    if engine == "duckdb":
        from cdnlake.warehouse.db import DuckDBSession, Warehouse

        with Warehouse(config.storage).connect(
            relations, days=days, require_lake=require_lake
        ) as con:
            yield DuckDBSession(con)
    elif engine == "spark":
        if not config.engine.spark_remote:
            raise ConfigError(
                "engine.spark_remote: not set (the Spark Connect address, e.g. "
                '"sc://spark-host:15002", for --engine spark)'
            )
        from cdnlake.warehouse.spark import SparkWarehouse

        with SparkWarehouse(config.engine.spark_remote, config.storage).connect() as session:
            yield session
    else:
        raise UsageError(f"--engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
