"""The five Delta tables of the lake: their columns, partitions and keys.

Rows are built as polars frames with these schemas; ``arrow_schema`` is what each table
is created with. Delta keeps instants in microseconds (UTC), so ``ts`` is stored as
``timestamp[us, UTC]`` whatever precision the provider sent (milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pyarrow as pa

TS = pl.Datetime("us", "UTC")

REQUEST_SCHEMA: dict[str, pl.DataType] = {
    "ts": TS,
    "request_id": pl.String(),
    "cache_status": pl.String(),
    "status_code": pl.Int32(),
    "bytes_sent": pl.Int64(),
    "edge_location": pl.String(),
    "scheme": pl.String(),
    "host": pl.String(),
    "path": pl.String(),
    "url": pl.String(),
    "remote_ip": pl.String(),
    "country_code": pl.String(),
    "user_agent": pl.String(),
    "referer": pl.String(),
    "body_bytes_sent": pl.Int64(),
    "content_range": pl.String(),
    "ja4_fingerprint": pl.String(),
    "asn": pl.Int32(),
    "asn_organization": pl.String(),
    "source": pl.String(),
}

SHIELD_SCHEMA: dict[str, pl.DataType] = {
    "log_id": pl.String(),
    "ts": TS,
    "asn": pl.String(),
    "country": pl.String(),
    "rule_id": pl.String(),
    "severity": pl.String(),
    "method": pl.String(),
    "rule_group": pl.String(),
    "status": pl.String(),
    "server_zone": pl.String(),
    "labels_json": pl.String(),
    "log": pl.String(),
}

RUN_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "source": pl.String(),  # v2, v1, v1-file, shield
    "started": TS,
    "finished": TS,
    "window_from": TS,
    "window_to": TS,
    "pages": pl.Int32(),
    "rows": pl.Int64(),  # new rows that reached the lake
    "duplicates_dropped": pl.Int64(),
    "rejected": pl.Int64(),
    "rate_limited": pl.Int32(),  # 429 answers received
    "retries": pl.Int32(),
    "server_errors": pl.Int32(),
    "transport_errors": pl.Int32(),
    "outcome": pl.String(),  # ok, failed, busy, stopped
    "error": pl.String(),
    "daemon": pl.String(),  # host:pid of the process that ran the pass
}

GAP_SCHEMA: dict[str, pl.DataType] = {
    "gap_from": TS,
    "gap_to": TS,
    "reason": pl.String(),
    "detected_at": TS,
    "run_id": pl.String(),
    "source": pl.String(),
}

REJECT_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),  # v1 or v2
    "file": pl.String(),  # local path, api:v1:<MM-dd-yy>/<zone>.log, or api:v2?from=&to=
    "line_number": pl.Int64(),  # v1: line in the file; v2: offset in the query
    "reason": pl.String(),
    "raw_line": pl.String(),  # Authorization field redacted
    "rejected_at": TS,
    "run_id": pl.String(),
    "kind": pl.String(),  # what summaries count it by, e.g. 'bad timestamp'
    "request_id": pl.String(),
    "record_key": pl.String(),  # each rejected record once (see bookkeeping)
}


@dataclass(frozen=True)
class TableSpec:
    """One Delta table: where it lives under the lake, its partitions and its key."""

    name: str
    zone_column: str  # the partition column holding the zone id
    columns: dict[str, pl.DataType]
    by_date: bool  # also partitioned by the UTC date of ``ts``
    key: str | None = None  # each value once per zone (exactly-once tables)

    @property
    def partition_by(self) -> list[str]:
        return [self.zone_column, "date"] if self.by_date else [self.zone_column]

    @property
    def schema(self) -> dict[str, pl.DataType]:
        """Every column of a row as written: partitions first."""
        head: dict[str, pl.DataType] = {self.zone_column: pl.Int64()}
        if self.by_date:
            head["date"] = pl.Date()
        return {**head, **self.columns}

    def arrow_schema(self) -> pa.Schema:
        return pl.DataFrame(schema=self.schema).to_arrow().schema

    def app_id(self, zone_id: int, part: str = "") -> str:
        """The Delta application transaction that carries a zone's progress in this table."""
        return f"cdnlake/{self.name}/{zone_id}" + (f"/{part}" if part else "")


REQUESTS = TableSpec("requests", "pull_zone_id", REQUEST_SCHEMA, by_date=True, key="request_id")
SHIELD_EVENTS = TableSpec("shield_events", "shield_zone_id", SHIELD_SCHEMA, True, key="log_id")
INGEST_RUNS = TableSpec("ingest_runs", "zone", RUN_SCHEMA, by_date=False)
INGEST_GAPS = TableSpec("ingest_gaps", "zone", GAP_SCHEMA, by_date=False)
REJECTED_LINES = TableSpec("rejected_lines", "zone", REJECT_TABLE_SCHEMA, by_date=False)
TABLES = (REQUESTS, SHIELD_EVENTS, INGEST_RUNS, INGEST_GAPS, REJECTED_LINES)
TABLES_BY_NAME = {t.name: t for t in TABLES}
