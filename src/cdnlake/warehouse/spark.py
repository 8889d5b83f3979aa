"""The relations on a Spark Connect server: the same Delta tables, the same named queries.

Each relation is a temporary view over ``spark.read.format("delta").load(uri)`` (the
server reads the lake itself: a local lake must be on a disk the server sees, an S3 lake
needs the server's own S3 settings). Named queries are translated from DuckDB's dialect
by :func:`to_spark`; ad-hoc SQL is Spark's own. The session's time zone is UTC, so that
``hour(ts)`` and dates mean what they mean in DuckDB.
"""

from __future__ import annotations

import socket
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa

from cdnlake.config import StorageConfig
from cdnlake.errors import EngineError, QueryError, first_line
from cdnlake.lake.log.schema import TABLES, TableSpec
from cdnlake.lake.log.store import Lake
from cdnlake.sqlfiles import internal_sql
from cdnlake.warehouse.dialect import to_spark
from cdnlake.warehouse.named import NamedQuery
from cdnlake.warehouse.relations import ALIASES, Result

CONNECT_TIMEOUT_SECONDS = 10.0

_SPARK_TYPES = {
    pa.int64(): "BIGINT",
    pa.int32(): "INT",
    pa.int16(): "SMALLINT",
    pa.string(): "STRING",
    pa.large_string(): "STRING",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.date32(): "DATE",
}


def spark_ddl(schema: pa.Schema) -> str:
    """``a BIGINT, b STRING, ...``: a table's columns for an empty view."""
    columns = []
    for f in schema:
        kind = "TIMESTAMP" if pa.types.is_timestamp(f.type) else _SPARK_TYPES.get(f.type)
        if kind is None:
            raise EngineError(f"engine: no Spark type for column {f.name} ({f.type})")
        columns.append(f"`{f.name}` {kind}")
    return ", ".join(columns)


def address(remote: str) -> tuple[str, int]:
    """``sc://host:port/;params`` -> (host, port); Spark Connect's port is 15002 by default."""
    parsed = urlparse(remote)
    return parsed.hostname or "localhost", parsed.port or 15002


def shown(remote: str) -> str:
    """``sc://host:port`` without its parameters, which may hold a token."""
    host, port = address(remote)
    return f"sc://{host}:{port}"


def check_reachable(remote: str, timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
    """One line, at once, when nothing answers: the gRPC client would retry for minutes."""
    host, port = address(remote)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise EngineError(
            f"engine: cannot reach Spark Connect at {shown(remote)}: {reason}"
        ) from None


def plain_value(value: Any) -> Any:
    """Spark's Python values as DuckDB gives them: decimals as floats, times in UTC."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


class SparkSessionQueries:
    """Queries on one Spark Connect session whose views are the lake's relations."""

    engine = "spark"

    def __init__(self, spark: Any, remote: str) -> None:
        self.spark = spark
        self.remote = remote

    def run(
        self, sql: str, params: dict[str, Any] | None = None, *, limit: int | None = None
    ) -> Result:
        from pyspark.errors import PySparkException

        try:
            frame = self.spark.sql(sql, args=params or None)
            if limit is not None:
                frame = frame.limit(limit + 1)
            columns = list(frame.columns)
            rows = [tuple(plain_value(v) for v in row) for row in frame.collect()]
        except PySparkException as exc:
            if _unreachable(exc):
                raise EngineError(
                    f"engine: Spark Connect at {shown(self.remote)} failed: {first_line(exc)}"
                ) from None
            raise QueryError(f"sql: {first_line(exc)}") from None
        if limit is not None and len(rows) > limit:
            return Result(columns, rows[:limit], more=True)
        return Result(columns, rows)

    def run_named(
        self, query: NamedQuery, params: dict[str, Any], *, limit: int | None = None
    ) -> Result:
        return self.run(to_spark(query.sql), params, limit=limit)


def _unreachable(exc: BaseException) -> bool:
    text = str(exc)
    return any(s in text for s in ("UNAVAILABLE", "Connection refused", "failed to connect"))


class SparkWarehouse:
    """The lake's relations as temporary views of a Spark Connect session."""

    def __init__(self, remote: str, storage: StorageConfig, lake: Lake | None = None) -> None:
        self.remote = remote
        self.storage = storage
        self.lake = lake or Lake.from_config(storage)

    @contextmanager
    def connect(self) -> Iterator[SparkSessionQueries]:
        check_reachable(self.remote)
        with warnings.catch_warnings():
            # pyspark warns about pandas versions on import; cdnlake never uses pandas here.
            warnings.simplefilter("ignore", FutureWarning)
            try:
                from pyspark.sql import SparkSession
            except ImportError:  # pragma: no cover - the extra is part of dev installs
                raise EngineError(
                    "engine: the Spark Connect client is not installed "
                    "(pip install 'cdnlake[spark]')"
                ) from None
            try:
                spark = SparkSession.builder.remote(self.remote).create()
                spark.conf.set("spark.sql.session.timeZone", "UTC")
            except Exception as exc:
                raise EngineError(
                    f"engine: cannot open a Spark Connect session at {shown(self.remote)}: "
                    f"{first_line(exc)}"
                ) from None
        try:
            for spec in TABLES:
                self._register(spark, spec)
            spark.sql(internal_sql("requests_hourly_spark"))
            yield SparkSessionQueries(spark, self.remote)
        finally:
            try:
                spark.stop()
            except Exception:  # the session ends with the server anyway
                pass

    def _register(self, spark: Any, spec: TableSpec) -> None:
        if self.lake.open(spec) is None:
            frame = spark.createDataFrame([], spark_ddl(spec.arrow_schema()))
        else:
            try:
                frame = spark.read.format("delta").load(self.lake.table_uri(spec))
            except Exception as exc:
                raise EngineError(
                    f"engine: Spark cannot read lake table {spec.name}: {first_line(exc)}"
                ) from None
        if spec.name in ALIASES:
            frame = frame.selectExpr("zone AS pull_zone_id", "*")
        frame.createOrReplaceTempView(spec.name)
