"""Turning provider records into lake rows (the normalise stage), vectorised with polars.

Both sources end in the same frame: :data:`cdnlake.lake.layout.REQUEST_SCHEMA` plus
rejected rows with a reason. ``-`` means "empty" in v1 and is stored as NULL for country,
user agent and referer, whichever version it came from.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import polars as pl

from cdnlake.client.logging_api import V2Record

URL_PATTERN = r"^([A-Za-z][A-Za-z0-9+.\-]*)://([^/?#]*)([^?#]*)"
REJECT_SCHEMA: dict[str, pl.DataType] = {
    "line_number": pl.Int64(),
    "reason": pl.String(),
    "raw_line": pl.String(),
}

_V2_FIELDS = [f for f in V2Record.__struct_fields__]


def dash_to_null(column: str) -> pl.Expr:
    return pl.when(pl.col(column).is_in(["-", ""])).then(None).otherwise(pl.col(column))


def url_parts(url: pl.Expr) -> list[pl.Expr]:
    return [
        url.str.extract(URL_PATTERN, 1).str.to_lowercase().alias("_scheme"),
        url.str.extract(URL_PATTERN, 2).alias("_host"),
        url.str.extract(URL_PATTERN, 3).alias("_path"),
    ]


def v2_frame(records: Sequence[V2Record], zone_id: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rows for the lake and rejected records (with a reason) from decoded v2 pages."""
    columns = {name: [getattr(r, name) for r in records] for name in _V2_FIELDS}
    raw = pl.DataFrame(
        columns,
        schema={
            "timestamp": pl.String,
            "pullZoneId": pl.Int64,
            "requestId": pl.String,
            "cacheStatus": pl.String,
            "statusCode": pl.Int32,
            "bytesSent": pl.Int64,
            "edgeLocation": pl.String,
            "scheme": pl.String,
            "host": pl.String,
            "path": pl.String,
            "url": pl.String,
            "remoteIp": pl.String,
            "countryCode": pl.String,
            "userAgent": pl.String,
            "referer": pl.String,
            "bodyBytesSent": pl.Int64,
            "contentRange": pl.String,
            "ja4Fingerprint": pl.String,
            "asn": pl.Int32,
            "asnOrganization": pl.String,
        },
    ).with_row_index("_row")
    frame = raw.with_columns(
        pl.col("timestamp")
        .str.to_datetime(time_unit="ms", time_zone="UTC", strict=False)
        .alias("ts"),
        *url_parts(pl.col("url")),
    )
    reason = (
        pl.when(pl.col("requestId").is_null() | (pl.col("requestId") == ""))
        .then(pl.lit("missing requestId"))
        .when(pl.col("ts").is_null())
        .then(pl.format("bad timestamp {}", pl.col("timestamp").fill_null("null")))
        .when(pl.col("pullZoneId").is_not_null() & (pl.col("pullZoneId") != zone_id))
        .then(pl.format("record of pull zone {}", pl.col("pullZoneId")))
        .otherwise(None)
    )
    frame = frame.with_columns(reason.alias("_reason"))
    good = frame.filter(pl.col("_reason").is_null()).select(
        pl.col("ts"),
        pl.col("requestId").alias("request_id"),
        pl.col("cacheStatus").alias("cache_status"),
        pl.col("statusCode").alias("status_code"),
        pl.col("bytesSent").alias("bytes_sent"),
        pl.col("edgeLocation").alias("edge_location"),
        pl.coalesce(pl.col("scheme"), pl.col("_scheme")).alias("scheme"),
        pl.coalesce(pl.col("host"), pl.col("_host")).alias("host"),
        pl.coalesce(pl.col("path"), pl.col("_path")).alias("path"),
        pl.col("url"),
        pl.col("remoteIp").alias("remote_ip"),
        dash_to_null("countryCode").alias("country_code"),
        dash_to_null("userAgent").alias("user_agent"),
        dash_to_null("referer").alias("referer"),
        pl.col("bodyBytesSent").alias("body_bytes_sent"),
        dash_to_null("contentRange").alias("content_range"),
        pl.col("ja4Fingerprint").alias("ja4_fingerprint"),
        pl.col("asn"),
        pl.col("asnOrganization").alias("asn_organization"),
        pl.lit("v2").alias("source"),
    )
    bad_rows = frame.filter(pl.col("_reason").is_not_null())
    rejects = pl.DataFrame(
        {
            "line_number": bad_rows["_row"].cast(pl.Int64).to_list(),
            "reason": bad_rows["_reason"].to_list(),
            "raw_line": [
                msgspec.json.encode(records[i]).decode() for i in bad_rows["_row"].to_list()
            ],
        },
        schema=REJECT_SCHEMA,
    )
    return good, rejects
