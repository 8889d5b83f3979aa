"""Turning provider records into lake rows (the normalise stage), vectorised with polars.

Both sources end in the same frame: :data:`cdnlake.lake.log.schema.REQUEST_SCHEMA` plus
rejected rows with a reason. ``-`` means "empty" in v1 and is stored as NULL for country,
user agent and referer, whichever version it came from.
"""

from __future__ import annotations

import time

import polars as pl

from cdnlake.config import FUTURE_TOLERANCE_SECONDS
from cdnlake.ingest.decode import FAULT, RAW
from cdnlake.ingest.decode import V2_WIRE_SCHEMA as V2_SCHEMA

URL_SCHEME = r"^[A-Za-z][A-Za-z0-9+.\-]*://"
# What with_url_parts computes, as one pattern: scheme, host, and path (empty or from "/").
URL_PATTERN = r"^([A-Za-z][A-Za-z0-9+.\-]*)://([^/?#]*)([^?#]*)"
ORIGIN_SAMPLE = 1000  # rows looked at to find a frame's most common scheme://host
# A rejected line or record: where it was (line number, or offset in the v2 query), why,
# the raw text (Authorization redacted), the kind of fault summaries count it by, and its
# request id where it has one.
REJECT_SCHEMA: dict[str, pl.DataType] = {
    "line_number": pl.Int64(),
    "reason": pl.String(),
    "raw_line": pl.String(),
    "kind": pl.String(),
    "request_id": pl.String(),
}


def future_limit_ms() -> int:
    """The latest record time taken now, in epoch milliseconds."""
    return int((time.time() + FUTURE_TOLERANCE_SECONDS) * 1000)


def future_reason(shown: pl.Expr) -> pl.Expr:
    """The reason of a record refused as from the future, naming its time as given."""
    hours = FUTURE_TOLERANCE_SECONDS / 3600
    return pl.format(f"timestamp {{}} is more than {hours:g} hour(s) in the future", shown)


def dash_to_null(column: str) -> pl.Expr:
    return pl.when(pl.col(column).is_in(["-", ""])).then(None).otherwise(pl.col(column))


def with_url_parts(frame: pl.DataFrame, url: str = "url") -> pl.DataFrame:
    """Add scheme (lower case), host and path of column ``url`` as ``_scheme/_host/_path``.

    Means exactly ``URL_PATTERN``'s three groups, computed the cheap way: a pull zone's
    URLs nearly all share one ``scheme://host``, so rows that start with the most common
    one (and a "/") only need their path cut at "?" or "#". Other rows take two
    whole-match extractions cut apart by length (about half the cost of capture groups).
    """
    column = pl.col(url)
    sample = frame.get_column(url).head(ORIGIN_SAMPLE)
    origins = sample.str.extract(URL_SCHEME + "[^/?#]*", 0).drop_nulls()
    if origins.len() == 0:
        return _with_any_url_parts(frame, column)
    origin = str(origins.mode().sort()[0])
    scheme, host = origin.split("://", 1)
    common = column.str.starts_with(origin + "/")
    # Python counts code points, as str.slice does, so a non-ASCII host cuts right.
    common_path = pl.when(common).then(column).str.slice(len(origin)).str.extract("^[^?#]*", 0)
    staged = _with_any_url_parts(frame, pl.when(~common).then(column))
    return staged.with_columns(
        pl.when(common).then(pl.lit(scheme.lower())).otherwise(pl.col("_scheme")).alias("_scheme"),
        pl.when(common).then(pl.lit(host)).otherwise(pl.col("_host")).alias("_host"),
        pl.coalesce(common_path, pl.col("_path")).alias("_path"),
    )


def _with_any_url_parts(frame: pl.DataFrame, url: pl.Expr) -> pl.DataFrame:
    """``URL_PATTERN``'s groups for any URL (NULL rows cost next to nothing)."""
    staged = frame.with_columns(
        url.str.extract(URL_SCHEME + "[^/?#]*", 0).alias("_origin"),
        url.str.extract(URL_SCHEME + "[^?#]*", 0).alias("_before_query"),
    )
    origin = pl.col("_origin")
    cut = origin.str.find("://", literal=True)  # before it all is ASCII: bytes = chars
    return staged.with_columns(
        origin.str.slice(0, cut).str.to_lowercase().alias("_scheme"),
        origin.str.slice(cut + 3).alias("_host"),
        pl.col("_before_query").str.slice(origin.str.len_chars()).alias("_path"),
    ).drop("_origin", "_before_query")


TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S%.fZ"  # milliseconds optional


def parse_timestamps(text: pl.Series) -> pl.Series:
    """ISO-8601 text as UTC milliseconds (``ts``), NULL where it is not a timestamp.

    Arrow's ISO-8601 cast is about ten times faster than a strptime format, but refuses
    the whole column at the first value it cannot take (microseconds, no offset, junk);
    then polars parses value by value. (Imported here: v1 files never need it, and it
    is a tenth of a short ``import-v1``'s start-up.)
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        parsed = pc.cast(text.to_arrow(), pa.timestamp("ms", "UTC"))
        return pl.Series("ts", parsed)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    stamp = pl.col("timestamp")
    frame = text.alias("timestamp").to_frame()
    ts = frame.select(
        stamp.str.to_datetime(TIMESTAMP_FORMAT, time_unit="ms", time_zone="UTC", strict=False)
    ).to_series()
    if ts.null_count() > text.null_count():
        # Offsets other than Z are valid ISO-8601 too: parse those the slower way.
        fallback = stamp.str.to_datetime(time_unit="ms", time_zone="UTC", strict=False)
        ts = frame.select(pl.coalesce(ts, fallback)).to_series()
    return ts.alias("ts")


def _v2_lake_columns() -> list[pl.Expr]:
    return [
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
    ]


def normalize_v2(
    wire: pl.DataFrame, zone_id: int, offset: int = 0
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rows for the lake and rejected records (with a reason) from a frame of v2 records.

    A rejected record's ``line_number`` is its offset in the query (``offset`` is the
    page's), so that the query that returned it finds it again.
    """
    if FAULT in wire.columns:  # records that did not decode: NULL rows, their fault and text
        raw = wire.select(*V2_SCHEMA, FAULT, RAW)
    else:
        raw = wire.select(list(V2_SCHEMA)).with_columns(
            pl.lit(None, pl.String).alias(FAULT), pl.lit(None, pl.String).alias(RAW)
        )
    if raw.select(pl.any_horizontal(pl.col("scheme", "host", "path").is_null().any())).item():
        plan = with_url_parts(raw).lazy()
    else:
        plan = raw.lazy().with_columns(
            pl.lit(None, pl.String).alias(c) for c in ("_scheme", "_host", "_path")
        )
    plan = plan.with_columns(parse_timestamps(raw["timestamp"]))
    undecodable = pl.col(FAULT).is_not_null()
    no_id = pl.col("requestId").is_null() | (pl.col("requestId") == "")
    bad_ts = pl.col("ts").is_null()
    future = pl.col("ts").dt.epoch("ms") > future_limit_ms()
    other_zone = pl.col("pullZoneId").is_not_null() & (pl.col("pullZoneId") != zone_id)
    reason = (
        pl.when(undecodable)
        .then(pl.format("record does not decode: {}", pl.col(FAULT)))
        .when(no_id)
        .then(pl.lit("missing requestId"))
        .when(bad_ts)
        .then(pl.format("bad timestamp {}", pl.col("timestamp").fill_null("null")))
        .when(future)
        .then(future_reason(pl.col("timestamp")))
        .when(other_zone)
        .then(pl.format("record of pull zone {}", pl.col("pullZoneId")))
        .otherwise(None)
    )
    kind = (
        pl.when(undecodable)
        .then(pl.lit("undecodable record"))
        .when(no_id)
        .then(pl.lit("missing request id"))
        .when(bad_ts)
        .then(pl.lit("bad timestamp"))
        .when(future)
        .then(pl.lit("future timestamp"))
        .when(other_zone)
        .then(pl.lit("other pull zone"))
    )
    frame = plan.collect()
    faults = undecodable | no_id | bad_ts | future.fill_null(False) | other_zone
    if not frame.select(faults.any()).item():  # usual
        return frame.select(_v2_lake_columns()), pl.DataFrame(schema=REJECT_SCHEMA)
    frame = frame.with_columns(reason.alias("_reason"), kind.alias("_kind")).with_row_index("_row")
    good = frame.filter(pl.col("_reason").is_null()).select(_v2_lake_columns())
    rejects = frame.filter(pl.col("_reason").is_not_null()).select(
        (pl.col("_row").cast(pl.Int64) + offset).alias("line_number"),
        pl.col("_reason").alias("reason"),
        pl.coalesce(RAW, pl.struct(list(V2_SCHEMA)).struct.json_encode()).alias("raw_line"),
        pl.col("_kind").alias("kind"),
        pl.when(no_id).then(None).otherwise(pl.col("requestId")).alias("request_id"),
    )
    return good, rejects
