"""DuckDB over the lake's Delta tables: every relation of ``cdnlake sql``, nothing stored.

Each connection is an in-memory DuckDB database in which every Delta table is registered
as the Arrow dataset of its current snapshot (``DeltaTable.to_pyarrow_dataset``): DuckDB
pushes projections and filters into it, so a filter on ``pull_zone_id`` or ``date`` reads
only those partitions, and file statistics prune the rest. No data lives in a DuckDB
file and nothing holds a path beyond the lake's URI, so queries work while the daemon
writes (they see whole commits only) and the lake can move.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import pyarrow as pa

from cdnlake.config import StorageConfig
from cdnlake.errors import DataError
from cdnlake.lake.schema import TABLES, TableSpec
from cdnlake.lake.store import Lake, first_line

log = logging.getLogger(__name__)

# Relations keep the names users already query by: the bookkeeping tables are
# partitioned by ``zone``, which the relations also show as ``pull_zone_id``.
ALIASES = {"ingest_runs", "ingest_gaps", "rejected_lines"}


def relation_sql(spec: TableSpec, source: str) -> str:
    alias = "zone AS pull_zone_id, " if spec.name in ALIASES else ""
    return f"CREATE VIEW {spec.name} AS SELECT {alias}* FROM {source}"


class Warehouse:
    """The relations of the lake, queried with DuckDB."""

    def __init__(self, storage: StorageConfig, lake: Lake | None = None) -> None:
        self.storage = storage
        self.lake = lake or Lake.from_config(storage)

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        con = duckdb.connect(":memory:")
        try:
            con.execute("SET TimeZone = 'UTC'")
            for spec in TABLES:
                table = self.lake.open(spec)
                source = f"_{spec.name}"
                if table is None:
                    con.register(source, pa.table(spec.arrow_schema().empty_table()))
                else:
                    try:
                        con.register(source, self.lake.dataset(spec, table))
                    except Exception as exc:
                        raise DataError(
                            f"lake table {spec.name} cannot be read: {first_line(exc)}"
                        ) from None
                con.execute(relation_sql(spec, source))
            yield con
        finally:
            con.close()
