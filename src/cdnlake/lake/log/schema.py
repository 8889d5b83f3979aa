"""The Delta tables of the lake: their columns, partitions and keys.

Columns are typed in the Delta protocol's names; the Arrow and polars schemas are derived
where needed, so that ``status`` loads neither pyarrow nor polars. ``ts`` is stored as
``timestamp[us, UTC]``, as Delta keeps instants.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa
    from deltalake import Schema as DeltaSchema

ColumnType = Literal["string", "long", "integer", "date", "timestamp"]
Columns = dict[str, ColumnType]
STRING: ColumnType = "string"
LONG: ColumnType = "long"
INTEGER: ColumnType = "integer"
DATE: ColumnType = "date"
TS: ColumnType = "timestamp"  # an instant: microseconds, UTC

REQUEST_SCHEMA: Columns = {
    "ts": TS,
    "request_id": STRING,
    "cache_status": STRING,
    "status_code": INTEGER,
    "bytes_sent": LONG,
    "edge_location": STRING,
    "scheme": STRING,
    "host": STRING,
    "path": STRING,
    "url": STRING,
    "remote_ip": STRING,
    "country_code": STRING,
    "user_agent": STRING,
    "referer": STRING,
    "body_bytes_sent": LONG,
    "content_range": STRING,
    "ja4_fingerprint": STRING,
    "asn": INTEGER,
    "asn_organization": STRING,
    "source": STRING,
}

SHIELD_SCHEMA: Columns = {
    "log_id": STRING,
    "ts": TS,
    "asn": STRING,
    "country": STRING,
    "rule_id": STRING,
    "severity": STRING,
    "method": STRING,
    "rule_group": STRING,
    "status": STRING,
    "server_zone": STRING,
    "labels_json": STRING,
    "log": STRING,
}

RUN_SCHEMA: Columns = {
    "run_id": STRING,
    "source": STRING,  # v2, v1, v1-file, shield
    "started": TS,
    "finished": TS,
    "window_from": TS,
    "window_to": TS,
    "pages": INTEGER,
    "rows": LONG,  # new rows that reached the lake
    "duplicates_dropped": LONG,
    "rejected": LONG,
    "rate_limited": INTEGER,  # 429 answers received
    "retries": INTEGER,
    "server_errors": INTEGER,
    "transport_errors": INTEGER,
    "outcome": STRING,  # ok, failed, busy, stopped
    "error": STRING,
    "daemon": STRING,  # host:pid of the process that ran the pass
    # Records (v2, shield) or lines (v1) the provider served, new or not: with ``rows``,
    # the pass's read amplification (NULL in runs of before the column).
    "rows_read": LONG,
}

GAP_SCHEMA: Columns = {
    "gap_from": TS,
    "gap_to": TS,
    "reason": STRING,
    "detected_at": TS,
    "run_id": STRING,
    "source": STRING,
}

AUDIT_DAY_SCHEMA: Columns = {  # one row per pull zone and UTC day audited (its last audit)
    "day": DATE,
    "audited_at": TS,
    "verdict": STRING,  # ok, short (some hour short or missing)
    "provider_requests": LONG,  # the provider's statistics, the day's hours summed
    "lake_requests": LONG,
    "hours_short": INTEGER,  # hours short or missing beyond the tolerance
    "detail": STRING,  # the short hours, e.g. "05:00 missing, 09:00 short"
    "erased_requests": LONG,  # removed by cdnlake forget: explained, never short
}

ARCHIVE_PART_SCHEMA: Columns = {  # one row per archived part of a pull zone (the last word on it)
    "path": STRING,  # <YYYY>/<MM>/<name> under the zone's folder of the archive
    "day": DATE,  # the UTC day the part holds
    "size": LONG,  # bytes, as listed
    "checksum": STRING,  # SHA-256, as listed ("" where the listing gives none)
    "last_changed": TS,  # as listed
    "state": STRING,  # open (may still grow), closed (to import), imported, damaged
    "lines": LONG,  # what importing it read (NULL until then)
    "rows": LONG,  # new rows it brought
    "duplicates": LONG,  # rows the lake held already (from the API, forwarding, import-v1)
    "rejected": LONG,
    "run_id": STRING,  # the ingest_runs row of its import
    "listed_at": TS,  # when a backfill last listed it
    "imported_at": TS,
}

REJECT_TABLE_SCHEMA: Columns = {
    "source": STRING,  # v1 or v2
    "file": STRING,  # local path, api:v1:<MM-dd-yy>/<zone>.log, or api:v2?from=&to=
    "line_number": LONG,  # v1: line in the file; v2: offset in the query
    "reason": STRING,
    "raw_line": STRING,  # Authorization field redacted
    "rejected_at": TS,
    "run_id": STRING,
    "kind": STRING,  # what summaries count it by, e.g. 'bad timestamp'
    "request_id": STRING,
    "record_key": STRING,  # each rejected record once (see bookkeeping)
}


ERASURE_SCHEMA: Columns = {  # one row per erasure and zone (zone 0: every zone)
    "erasure_id": STRING,
    "erased_at": TS,
    "kind": STRING,  # ip or request_id
    # What matches, never the address or the id itself: keyed hashes ("hmac-sha256:...")
    # of the address's forms, space-separated, a network's tagged "net@<zones>:"; for a
    # request id, its keyed hash (an erasure of an earlier cdnlake: the id itself).
    "filter": STRING,
    "key_id": STRING,  # which key hashed the address (a keyed hash of a constant)
    "from_day": DATE,  # the days it covers (NULL: from the first, to the last)
    "to_day": DATE,
    "days": STRING,  # the days rows were removed from, e.g. "2026-11-20,2026-11-21"
    "requests_removed": LONG,
    "rejected_removed": LONG,
    "shield_removed": LONG,
    "files_rewritten": LONG,
    "vacuumed_at": TS,  # when the old files left storage (NULL: at the next vacuum)
    # The requests removed per zone and UTC hour, as JSON: {"7": {"2026-11-20T10": 12}}
    # (the audit explains an hour short by them); NULL: none, or an erasure of before.
    "hours_removed": STRING,
    # The erasure marks (epoch ms, comma-separated) of the lake and of the zones concerned
    # when it was recorded: each names an earlier erasure this table must hold, so that
    # one lost is noticed though a later erasure moved the marks past it. NULL: none.
    "follows": STRING,
    # Lost erasures (marks, as above) this one was recorded in place of (`forget
    # --replaces-lost`): their marks no longer stop a zone's rows. NULL: none.
    "replaces": STRING,
}


ERASED_REQUEST_SCHEMA: Columns = {  # one row per erased request and zone
    "request_id": STRING,  # the keyed hash of its id (hmac-sha256:...), never the id
    "ts": TS,  # the hour the request was made in (never its instant): the audit's hour
    # "removed": by cdnlake forget (counted in erasures.hours_removed); "held": held back
    # by the erasure filter when a later pass read it (counted here, by the audit)
    "kind": STRING,
    "recorded_at": TS,
}


# Columns that hold personal data (client addresses, user agents, URLs, texts that may
# hold them, an erased client's activity, request ids): the log never records their values as file
# statistics (a file's smallest and largest value would outlive an erasure there), so no
# table lists them in ``delta.dataSkippingStatsColumns``.
PERSONAL_COLUMNS = frozenset(
    {
        "remote_ip",
        "user_agent",
        "url",
        "path",
        "referer",
        "ja4_fingerprint",
        "raw_line",
        "log",
        "labels_json",
        # an erasure's activity: the hours and days the erased client's requests fell in
        "days",
        "hours_removed",
        # the provider's id of a request: it links to the provider's own record (an erased
        # request's would stay in the log until its retention); no reader prunes by it
        "request_id",
    }
)
STATS_COLUMNS_PROPERTY = "delta.dataSkippingStatsColumns"


@dataclass(frozen=True)
class TableSpec:
    """One Delta table: where it lives under the lake, its partitions and its key."""

    name: str
    zone_column: str  # the partition column holding the zone id
    columns: Columns
    by_date: bool  # also partitioned by the UTC date of ``ts``
    key: str | None = None  # each value once per zone (exactly-once tables)

    @property
    def stats_columns(self) -> tuple[str, ...]:
        """The columns whose statistics the log records for a file (the table's
        ``delta.dataSkippingStatsColumns``, honoured by delta-rs and
        :mod:`cdnlake.lake.log.files`): every column but the personal ones."""
        return tuple(c for c in self.columns if c not in PERSONAL_COLUMNS)

    @property
    def configuration(self) -> dict[str, str]:
        """The table properties of this spec's own (beside the lake's common ones)."""
        return {STATS_COLUMNS_PROPERTY: ",".join(self.stats_columns)}

    @property
    def partition_by(self) -> list[str]:
        return [self.zone_column, "date"] if self.by_date else [self.zone_column]

    @property
    def schema(self) -> Columns:
        """Every column of a row as written: partitions first."""
        head: Columns = {self.zone_column: LONG}
        if self.by_date:
            head["date"] = DATE
        return {**head, **self.columns}

    def delta_schema(self) -> DeltaSchema:
        """What the table is created with: its columns in Delta's own types."""
        from deltalake.schema import Field, PrimitiveType, Schema

        return Schema([Field(name, PrimitiveType(kind)) for name, kind in self.schema.items()])

    def arrow_schema(self) -> pa.Schema:
        import pyarrow as pa

        types = {
            STRING: pa.large_string(),  # as polars hands its strings to Arrow
            LONG: pa.int64(),
            INTEGER: pa.int32(),
            DATE: pa.date32(),
            TS: pa.timestamp("us", "UTC"),
        }
        return pa.schema([(name, types[kind]) for name, kind in self.schema.items()])

    def app_id(self, zone_id: int, part: str = "") -> str:
        """The Delta application transaction that carries a zone's progress in this table."""
        return f"cdnlake/{self.name}/{zone_id}" + (f"/{part}" if part else "")


REQUESTS = TableSpec("requests", "pull_zone_id", REQUEST_SCHEMA, by_date=True, key="request_id")
SHIELD_EVENTS = TableSpec("shield_events", "shield_zone_id", SHIELD_SCHEMA, True, key="log_id")
INGEST_RUNS = TableSpec("ingest_runs", "zone", RUN_SCHEMA, by_date=False)
INGEST_GAPS = TableSpec("ingest_gaps", "zone", GAP_SCHEMA, by_date=False)
REJECTED_LINES = TableSpec("rejected_lines", "zone", REJECT_TABLE_SCHEMA, by_date=False)
AUDIT_DAYS = TableSpec("audit_days", "zone", AUDIT_DAY_SCHEMA, by_date=False)
ERASURES = TableSpec("erasures", "zone", ERASURE_SCHEMA, by_date=False)
ARCHIVE_PARTS = TableSpec("archive_parts", "zone", ARCHIVE_PART_SCHEMA, by_date=False)
ERASED_REQUESTS = TableSpec("erased_requests", "zone", ERASED_REQUEST_SCHEMA, by_date=False)
TABLES = (
    REQUESTS,
    SHIELD_EVENTS,
    INGEST_RUNS,
    INGEST_GAPS,
    REJECTED_LINES,
    AUDIT_DAYS,
    ARCHIVE_PARTS,
    ERASURES,
    ERASED_REQUESTS,
)
TABLES_BY_NAME = {t.name: t for t in TABLES}


def polars_schema(columns: Mapping[str, ColumnType]) -> pl.Schema:
    """The same columns as polars types, for building rows."""
    import polars as pl

    types: dict[str, pl.DataType] = {
        STRING: pl.String(),
        LONG: pl.Int64(),
        INTEGER: pl.Int32(),
        DATE: pl.Date(),
        TS: pl.Datetime("us", "UTC"),
    }
    return pl.Schema({name: types[kind] for name, kind in columns.items()})


def conform(frame: pl.DataFrame, columns: Mapping[str, ColumnType]) -> pl.DataFrame:
    """``frame`` as rows of ``columns``: those columns only, in their order and types."""
    return frame.select(list(columns)).cast(polars_schema(columns))


def frame_of(table: pa.Table) -> pl.DataFrame:
    """An Arrow table as a polars frame (``pl.from_arrow`` types it as a series too)."""
    import polars as pl

    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame
