"""Forwarded messages in the provider's JSON format (``LogForwardingFormat`` 1), made the
same lake rows as a plain v1 line of the same request.

The provider names the format but documents none of its fields (docs/forwarding.md says
what was searched), so a message is read by the logging API v2's field names
(``timestamp``, ``pullZoneId``, ``requestId``, ``cacheStatus``, ...), each also taken in the
provider's management-API spelling (``PullZoneId``, ``RequestId``, ...), with ``timestamp``
as ISO-8601 text or as the v1 line's epoch milliseconds (10 digits: seconds).

A batch of good messages is checked by msgspec as one array of typed records and made
columns by polars' NDJSON reader, with no Python loop over the messages; a batch with a bad
message is decoded message by message, so that one that is not JSON, is nested too deeply
or has a field of the wrong type becomes a fault of its own, never the batch's. The
columns are then checked and shaped by polars, by the rules of a plain line
(:func:`cdnlake.ingest.v1_parser.parse_block`): a known cache status, a status code within
100..599, a timestamp neither absurd nor in the future, a URL, a request id. The end
user's ``authorizationHeader`` is not a field of the record, so it is never kept, and a
rejected message's text keeps it only as ``[redacted]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec
import polars as pl

from cdnlake.client.logging_wire import Int32, Int64
from cdnlake.ingest.normalize import (
    REJECT_SCHEMA,
    dash_to_null,
    future_limit_ms,
    future_reason,
    parse_timestamps,
    with_url_parts,
)
from cdnlake.ingest.v1_parser import CACHE_STATUSES, MAX_TS_MS, MIN_TS_MS, REDACTED


def is_json(text: str) -> bool:
    """Whether a forwarded message's text is taken as JSON: it starts with ``{``, which
    no v1 line does (its first field is a cache status)."""
    return text.startswith("{")


class _Record(msgspec.Struct, gc=False):
    """A forwarded JSON message: the v2 record's fields, each in both spellings."""

    timestamp: str | Int64 | None = None
    pullZoneId: Int64 | None = None
    requestId: str | None = None
    cacheStatus: str | None = None
    statusCode: Int32 | None = None
    bytesSent: Int64 | None = None
    edgeLocation: str | None = None
    scheme: str | None = None
    host: str | None = None
    path: str | None = None
    url: str | None = None
    remoteIp: str | None = None
    countryCode: str | None = None
    userAgent: str | None = None
    referer: str | None = None
    bodyBytesSent: Int64 | None = None
    contentRange: str | None = None
    ja4Fingerprint: str | None = None
    asn: Int32 | None = None
    asnOrganization: str | None = None
    Timestamp: str | Int64 | None = None
    PullZoneId: Int64 | None = None
    RequestId: str | None = None
    CacheStatus: str | None = None
    StatusCode: Int32 | None = None
    BytesSent: Int64 | None = None
    EdgeLocation: str | None = None
    Scheme: str | None = None
    Host: str | None = None
    Path: str | None = None
    Url: str | None = None
    RemoteIp: str | None = None
    CountryCode: str | None = None
    UserAgent: str | None = None
    Referer: str | None = None
    BodyBytesSent: Int64 | None = None
    ContentRange: str | None = None
    Ja4Fingerprint: str | None = None
    Asn: Int32 | None = None
    AsnOrganization: str | None = None


_FIELDS = list(_Record.__struct_fields__)
NAMES = _FIELDS[: len(_FIELDS) // 2]  # the v2 spelling; the management API's follows
_TYPES: dict[str, pl.DataType] = {
    "timestamp": pl.String(),  # text or a number, as text
    "pullZoneId": pl.Int64(),
    "statusCode": pl.Int32(),
    "bytesSent": pl.Int64(),
    "bodyBytesSent": pl.Int64(),
    "asn": pl.Int32(),
}


def _type(name: str) -> pl.DataType:
    """A field's column type, in either spelling."""
    return _TYPES.get(name[0].lower() + name[1:], pl.String())


_DECODER = msgspec.json.Decoder(_Record, strict=False)  # "200" is taken for 200, as in v2
_ALL = msgspec.json.Decoder(list[_Record], strict=False)
# Where a message that does not decode names its zone, so that it is kept under it.
_ZONE_IN_TEXT = re.compile(r'"(?:pullZoneId|PullZoneId)"\s*:\s*"?(\d{1,18})(?![\d.eE])')
_AUTHORIZATION = re.compile("authorization", re.IGNORECASE)
_REQUEST_ID = r"^[0-9A-Za-z_\-]{8,64}$"  # as field 11 of a v1 line
FAULT, ZONE, SEQ = "_fault", "_zone", "_seq"
_READ = {name: _type(name) for name in _FIELDS}
WRONG_TYPE, NOT_JSON = "wrong type", "bad JSON"  # the kinds of a message that does not decode


@dataclass(frozen=True)
class Decoded:
    """A batch of JSON messages as columns (the v2 field names), with each message's zone
    (``_zone``, NULL where it names none), its fault (``_fault``, NULL when it decoded)
    and its receiver number (``_seq``); ``texts`` are the messages, by row."""

    frame: pl.DataFrame
    texts: list[str]


def decode(texts: list[str], seqs: list[int]) -> Decoded:
    """The messages as columns; one that does not decode is a row of its zone and fault."""
    frame = _decode_all(texts)
    if frame is None:
        frame = _decode_each(texts)
    return Decoded(frame.with_columns(pl.Series(SEQ, seqs, pl.Int64)), texts)


def _decode_all(texts: list[str]) -> pl.DataFrame | None:
    """The usual batch, every message a good record, without a Python object per message:
    msgspec checks them all as one array (JSON, depth, types), polars' native NDJSON reader
    makes the columns. None when either refuses (a bad message, a number given as text):
    then message by message."""
    try:
        checked = _ALL.decode(("[" + ",".join(texts) + "]").encode())
    except (msgspec.DecodeError, RecursionError):
        return None
    if len(checked) != len(texts):  # a message of two objects
        return None
    try:  # a message that only joined with the next made JSON fails here, alone
        frame = pl.read_ndjson("\n".join(texts).encode(), schema=_READ)
    except Exception:  # any refusal of the reader: message by message
        return None
    if frame.height != len(texts):
        return None
    half = len(NAMES)  # a field in the v2 spelling, else in the management API's
    return frame.select(
        *(pl.coalesce(name, _FIELDS[i + half]).alias(name) for i, name in enumerate(NAMES)),
        pl.coalesce("pullZoneId", "PullZoneId").alias(ZONE),
        pl.lit(None, pl.String).alias(FAULT),
    )


def _decode_each(texts: list[str]) -> pl.DataFrame:
    """Message by message: a good one is its record, a bad one its fault and zone."""
    records: list[_Record] = []
    faults: list[str | None] = []
    zones: list[int | None] = []
    for text in texts:
        try:
            records.append(_DECODER.decode(text))
            faults.append(None)
            zones.append(None)
            continue
        except msgspec.ValidationError as exc:
            fault = f"{WRONG_TYPE}: {exc}"  # names the field, never its value
        except (msgspec.DecodeError, RecursionError):
            fault = f"{NOT_JSON}: not a JSON object, or one nested too deeply"
        zone, request_id = _keys_of(text)
        records.append(_Record(requestId=request_id))
        faults.append(fault)
        zones.append(zone)
    columns = list(zip(*map(msgspec.structs.astuple, records), strict=True)) or [
        () for _ in _FIELDS
    ]
    half = len(NAMES)
    frame = pl.DataFrame(
        [
            _series(name, columns[i]).fill_null(_series(name, columns[i + half]))
            for i, name in enumerate(NAMES)
        ]
    )
    return frame.with_columns(
        pl.coalesce(pl.col("pullZoneId"), pl.Series(ZONE, zones, pl.Int64)).alias(ZONE),
        pl.Series(FAULT, faults, pl.String),
    )


def _series(name: str, values: tuple[Any, ...]) -> pl.Series:
    return pl.Series(name, values, _type(name), strict=False)


def _keys_of(text: str) -> tuple[int | None, str | None]:
    """The zone and request id of a message that does not decode, where it names them."""
    try:
        value = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        found = _ZONE_IN_TEXT.search(text)
        return (int(found[1]) if found else None), None
    if not isinstance(value, dict):
        return None, None
    zone = value.get("pullZoneId", value.get("PullZoneId"))
    if isinstance(zone, str) and zone.isascii() and zone.isdecimal() and len(zone) < 19:
        zone = int(zone)
    request_id = value.get("requestId", value.get("RequestId"))
    return (
        zone if type(zone) is int and 0 <= zone < 2**63 else None,
        request_id if isinstance(request_id, str) else None,
    )


def normalize(decoded: Decoded, zone_id: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rows of ``zone_id``'s messages of a batch (the lake's columns, ``source`` left
    to the caller) and its rejected messages (``line_number`` the receiver's number)."""
    frame = decoded.frame.with_row_index("_row").filter(pl.col(ZONE) == zone_id)
    if frame.height == 0:
        return pl.DataFrame(), pl.DataFrame(schema=REJECT_SCHEMA)
    frame = with_url_parts(frame)
    text = pl.col("timestamp")
    digits = text.str.contains(r"^\d{10}$|^\d{13}$")
    epoch = text.str.to_integer(strict=False)
    iso = parse_timestamps(frame["timestamp"]).dt.epoch("ms")
    frame = frame.with_columns(
        pl.when(digits)
        .then(pl.when(text.str.len_bytes() == 10).then(epoch * 1000).otherwise(epoch))
        .when(~text.str.contains(r"^\d+$"))
        .then(iso)
        .alias("_ts")
    )
    ts = pl.col("_ts")
    status, sent, body = pl.col("statusCode"), pl.col("bytesSent"), pl.col("bodyBytesSent")
    rules: list[tuple[str, pl.Expr, pl.Expr]] = [
        (NOT_JSON, pl.col(FAULT).str.starts_with(NOT_JSON), pl.col(FAULT)),
        (WRONG_TYPE, pl.col(FAULT).str.starts_with(WRONG_TYPE), pl.col(FAULT)),
        (
            "missing request id",
            pl.col("requestId").is_null() | (pl.col("requestId") == ""),
            pl.lit("requestId: missing"),
        ),
        (
            "bad request id",
            ~pl.col("requestId").str.contains(_REQUEST_ID),
            pl.lit("requestId: bad request id"),
        ),
        (
            "bad timestamp",
            ts.is_null() | ~ts.is_between(MIN_TS_MS, MAX_TS_MS),
            pl.format("timestamp: bad timestamp '{}'", text.fill_null("null")),
        ),
        (
            "future timestamp",
            ts > future_limit_ms(),
            pl.format("timestamp: {}", future_reason(text)),
        ),
        (
            "unknown cache status",
            ~pl.col("cacheStatus").is_in(CACHE_STATUSES).fill_null(False),
            pl.format(
                "cacheStatus: unknown cache status '{}'", pl.col("cacheStatus").fill_null("null")
            ),
        ),
        (
            "bad status code",
            status.is_null() | ~status.is_between(100, 599),
            pl.format("statusCode: bad status code '{}'", status.cast(pl.String).fill_null("null")),
        ),
        (
            "bad bytes sent",
            sent.is_null() | (sent < 0),
            pl.format("bytesSent: bad bytes sent '{}'", sent.cast(pl.String).fill_null("null")),
        ),
        ("empty remote ip", pl.col("remoteIp") == "", pl.lit("remoteIp: empty remote ip")),
        ("not a URL", pl.col("_host").is_null(), pl.lit("url: not a URL")),
        (
            "bad country code",
            ~pl.col("countryCode").str.contains(r"^(-|[A-Za-z]{2})$"),
            pl.format("countryCode: bad country code '{}'", pl.col("countryCode")),
        ),
        (
            "bad body bytes",
            body < 0,
            pl.format("bodyBytesSent: bad body bytes '{}'", body.cast(pl.String)),
        ),
    ]
    first_failure: Any = pl
    for number, (_, test, _) in enumerate(rules):
        first_failure = first_failure.when(test.fill_null(False)).then(pl.lit(number, pl.Int8))
    frame = frame.with_columns(first_failure.otherwise(None).alias("_rule"))
    good = frame.filter(pl.col("_rule").is_null()).select(_lake_columns())
    bad = frame.filter(pl.col("_rule").is_not_null())
    if bad.height == 0:
        return good, pl.DataFrame(schema=REJECT_SCHEMA)
    message: Any = pl
    kind: Any = pl
    for number, (name, _, reason) in enumerate(rules):
        message = message.when(pl.col("_rule") == number).then(reason)
        kind = kind.when(pl.col("_rule") == number).then(pl.lit(name))
    raw = [redacted_text(decoded.texts[row]) for row in bad["_row"]]
    rejects = bad.select(
        pl.col(SEQ).alias("line_number"),
        message.otherwise(None).alias("reason"),
        pl.Series("raw_line", raw, pl.String),
        kind.otherwise(None).alias("kind"),
        pl.when(pl.col("requestId") == "")
        .then(None)
        .otherwise(pl.col("requestId"))
        .alias("request_id"),
    )
    return good, rejects.cast(REJECT_SCHEMA)  # type: ignore[arg-type]


def _lake_columns() -> list[pl.Expr]:
    """The lake's columns, as a plain line's rows have them (the v1 parser's conversions),
    taking a field the message carries over what its URL says."""
    path = pl.when(pl.col("_path") == "").then(pl.lit("/")).otherwise(pl.col("_path"))
    return [
        pl.from_epoch(pl.col("_ts"), time_unit="ms").dt.replace_time_zone("UTC").alias("ts"),
        pl.col("requestId").alias("request_id"),
        pl.col("cacheStatus").alias("cache_status"),
        pl.col("statusCode").alias("status_code"),
        pl.col("bytesSent").alias("bytes_sent"),
        pl.col("edgeLocation").alias("edge_location"),
        pl.coalesce(pl.col("scheme"), pl.col("_scheme")).alias("scheme"),
        pl.coalesce(pl.col("host"), pl.col("_host")).alias("host"),
        pl.coalesce(pl.col("path"), path).alias("path"),
        pl.col("url"),
        pl.col("remoteIp").alias("remote_ip"),
        dash_to_null("countryCode").str.to_uppercase().alias("country_code"),
        dash_to_null("userAgent").alias("user_agent"),
        dash_to_null("referer").alias("referer"),
        pl.col("bodyBytesSent").alias("body_bytes_sent"),
        dash_to_null("contentRange").alias("content_range"),
        pl.col("ja4Fingerprint").alias("ja4_fingerprint"),
        pl.col("asn"),
        pl.col("asnOrganization").alias("asn_organization"),
    ]


def redacted_text(text: str) -> str:
    """A rejected message's text without the end user's Authorization header: the message
    again with every ``authorization...`` key's value ``[redacted]``, or, for one that
    cannot be decoded, cut where the word first appears."""
    try:
        return msgspec.json.encode(_scrub(msgspec.json.decode(text))).decode()
    except (msgspec.DecodeError, RecursionError):
        pass
    found = _AUTHORIZATION.search(text)
    return text if found is None else text[: found.start()] + REDACTED


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: REDACTED if k.lower().startswith("authorization") else _scrub(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value
