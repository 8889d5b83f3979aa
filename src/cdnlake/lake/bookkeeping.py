"""The bookkeeping tables: ``ingest_runs``, ``ingest_gaps`` and ``rejected_lines``.

Runs and gaps are appended (one small commit per pass; ``maintain`` compacts them).
Rejected lines are merged on ``record_key`` so that a record read again (an overlapping
v2 window, a closed v1 day read once more) is kept once: a v2 record by its request id, a
shield event by its log id, a line of a file by the file and its line number.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from typing import Any

import polars as pl
from deltalake import CommitProperties, write_deltalake

from cdnlake.errors import StorageError
from cdnlake.lake.schema import (
    INGEST_GAPS,
    INGEST_RUNS,
    REJECTED_LINES,
    TableSpec,
    conform,
    polars_schema,
)
from cdnlake.lake.store import COMMIT_ATTEMPTS, Lake, first_line

log = logging.getLogger(__name__)


def _frame(spec: TableSpec, zone_id: int, rows: list[dict[str, Any]]) -> pl.DataFrame:
    records = [{spec.zone_column: zone_id, **row} for row in rows]
    return pl.DataFrame(records, schema=polars_schema(spec.schema))


class Bookkeeping:
    def __init__(self, lake: Lake) -> None:
        self.lake = lake

    def _append(self, spec: TableSpec, frame: pl.DataFrame) -> None:
        if frame.height == 0:
            return
        table = self.lake.open_or_create(spec)
        try:
            write_deltalake(
                table,
                frame,  # an Arrow stream: no pyarrow needed
                mode="append",
                partition_by=spec.partition_by,
                commit_properties=CommitProperties(max_commit_retries=COMMIT_ATTEMPTS),
            )
        except Exception as exc:
            raise StorageError(f"cannot write {spec.name}: {first_line(exc)}") from None

    def record_run(self, zone_id: int, run: dict[str, Any], gaps: list[dict[str, Any]]) -> None:
        self._append(INGEST_RUNS, _frame(INGEST_RUNS, zone_id, [run]))
        self.record_gaps(zone_id, gaps)

    def record_gaps(self, zone_id: int, gaps: list[dict[str, Any]]) -> None:
        self._append(INGEST_GAPS, _frame(INGEST_GAPS, zone_id, gaps))

    def add_rejects(
        self,
        zone_id: int,
        rejects: pl.DataFrame,
        *,
        source: str,
        file: str,
        rejected_at: datetime,
        run_id: str,
    ) -> None:
        """Keep each rejected line or record once (see the module docstring)."""
        if rejects.height == 0:
            return
        if source in ("v2", "shield"):  # a record of the API: by its id (logId for shield)
            key = pl.concat_str(
                pl.lit(f"{source}:"),
                pl.coalesce(
                    pl.col("request_id"),
                    pl.lit("md5:") + pl.col("raw_line").map_elements(_md5, return_dtype=pl.String),
                ),
            )
        else:
            key = pl.concat_str(pl.lit(f"{file}:"), pl.col("line_number").cast(pl.String))
        frame = rejects.with_columns(
            pl.lit(zone_id, pl.Int64).alias("zone"),
            pl.lit(source).alias("source"),
            pl.lit(file).alias("file"),
            pl.lit(rejected_at).dt.cast_time_unit("us").alias("rejected_at"),
            pl.lit(run_id).alias("run_id"),
            key.alias("record_key"),
        ).unique(subset=["record_key"], keep="first", maintain_order=True)
        frame = conform(frame, REJECTED_LINES.schema)
        table = self.lake.open_or_create(REJECTED_LINES)
        try:
            (
                table.merge(
                    frame,
                    predicate=f"t.zone = {int(zone_id)} AND t.record_key = s.record_key",
                    source_alias="s",
                    target_alias="t",
                    commit_properties=CommitProperties(max_commit_retries=COMMIT_ATTEMPTS),
                )
                .when_not_matched_insert_all()
                .execute()
            )
        except Exception as exc:
            raise StorageError(f"cannot write rejected_lines: {first_line(exc)}") from None


def _md5(text: str | None) -> str:
    return hashlib.md5((text or "").encode(), usedforsecurity=False).hexdigest()
