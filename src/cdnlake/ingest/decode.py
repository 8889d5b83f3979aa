"""v2 pages into columns (the extract stage's decoder), and the wire schema.

The client hands over a page's bytes; this module makes them a frame with the wire's
column names, by one of two routes. The fast route finds the records with msgspec and
reads them with polars' native NDJSON reader and an explicit schema. A body it refuses
is read record by record (the careful route): a record that does not decode (a field of
the wrong type) is rejected with its fault, and only a body that is no page at all fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import polars as pl

from cdnlake.client.logging_wire import Pagination, V2Record
from cdnlake.errors import MalformedResponseError


@dataclass(frozen=True)
class V2Batch:
    """One v2 page as a frame (wire column names) plus its pagination."""

    frame: pl.DataFrame
    pagination: Pagination


# The record columns as the wire names them; decoders and the normaliser share it.
V2_WIRE_SCHEMA: dict[str, pl.DataType] = {
    "timestamp": pl.String(),
    "pullZoneId": pl.Int64(),
    "requestId": pl.String(),
    "cacheStatus": pl.String(),
    "statusCode": pl.Int32(),
    "bytesSent": pl.Int64(),
    "edgeLocation": pl.String(),
    "scheme": pl.String(),
    "host": pl.String(),
    "path": pl.String(),
    "url": pl.String(),
    "remoteIp": pl.String(),
    "countryCode": pl.String(),
    "userAgent": pl.String(),
    "referer": pl.String(),
    "bodyBytesSent": pl.Int64(),
    "contentRange": pl.String(),
    "ja4Fingerprint": pl.String(),
    "asn": pl.Int32(),
    "asnOrganization": pl.String(),
}
_WIRE_STRUCT = pl.Struct(V2_WIRE_SCHEMA)


class _RawPage(msgspec.Struct):
    """A page whose records stay the bytes they are (``msgspec.Raw``): their bounds found
    by a real JSON parser, nothing in them decoded yet."""

    data: list[msgspec.Raw] | None = None  # null: no records, as for V2Page
    pagination: Pagination = msgspec.field(default_factory=Pagination)


_RAW_PAGE = msgspec.json.Decoder(_RawPage, strict=False)


def decode_v2_fast(content: bytes) -> V2Batch:
    """A page straight into columns, without a Python object per record.

    msgspec walks the page once and hands each record back as its own bytes; one per
    line, they go through polars' native NDJSON reader (parallel) with the wire schema,
    so fields outside it (the end user's ``authorizationHeader`` among them) never
    materialise. A line break inside a record can only be whitespace between tokens
    (JSON escapes them in strings), so it becomes a space. Raises on a body the reader
    refuses (a type it did not expect, say).
    """
    page = _RAW_PAGE.decode(content)
    if not page.data:
        return V2Batch(pl.DataFrame(schema=V2_WIRE_SCHEMA), page.pagination)
    lines = b"\n".join(page.data)
    if b"\n" in content:  # a pretty-printed page: records over several lines
        lines = b"\n".join(bytes(record).replace(b"\n", b" ") for record in page.data)
    # One chunk per column: the reader's per-thread pieces cost more downstream than this.
    frame = pl.read_ndjson(lines, schema=V2_WIRE_SCHEMA).rechunk()
    if frame.height != len(page.data):
        raise ValueError("the reader's rows do not match the page's records")
    return V2Batch(frame, page.pagination)


def decode_v2_batch(content: bytes) -> V2Batch:
    """A page as columns: the fast reader, or record by record for a body it refuses, so
    that no page is lost to a decoder's mood."""
    try:
        return decode_v2_fast(content)
    except Exception:  # any refusal of the fast reader: decode the careful way
        return decode_v2_careful(content)


def decode_v2_careful(content: bytes) -> V2Batch:
    """The page record by record, each by msgspec's typed, lenient decoder.

    A record that does not decode (a status code of ``"abc"``, a number too wide for its
    column, a record that is no object) becomes a row of NULLs carrying the fault
    (:data:`FAULT`) and its text (:data:`RAW`, Authorization removed), which the
    normaliser rejects; the page's other records are kept. A text field given another
    JSON value keeps that value's JSON text, as the fast reader does. Only a body that
    is no page at all (not JSON, ``data`` not an array) raises
    :class:`MalformedResponseError`.
    """
    try:
        page = _RAW_PAGE.decode(content)
    except msgspec.DecodeError as exc:
        raise MalformedResponseError(f"undecodable v2 page: {exc}") from None
    records: list[V2Record] = []
    faults: list[str | None] = []
    raws: list[str | None] = []
    for raw in page.data or []:
        record, fault, text = _decode_record(raw)
        records.append(record)
        faults.append(fault)
        raws.append(text)
    frame = records_frame(records)
    if any(fault is not None for fault in faults):
        frame = frame.with_columns(
            pl.Series(FAULT, faults, pl.String), pl.Series(RAW, raws, pl.String)
        )
    return V2Batch(frame, page.pagination)


# Columns a frame carries when some of its records did not decode: why, and their text.
FAULT = "_fault"
RAW = "_raw"
AUTHORIZATION = "authorizationHeader"
_RECORD = msgspec.json.Decoder(V2Record, strict=False)
_TEXT_FIELDS = {name for name, kind in V2_WIRE_SCHEMA.items() if kind == pl.String()}


def _decode_record(raw: msgspec.Raw) -> tuple[V2Record, str | None, str | None]:
    """One record, or an empty one (its request id at most), why it does not decode, and
    its text without Authorization."""
    try:
        return _RECORD.decode(raw), None, None
    except msgspec.DecodeError:
        pass
    value = msgspec.json.decode(raw)  # JSON already: the page parsed
    if not isinstance(value, dict):
        fault = f"a record is a JSON {type(value).__name__}, not an object"
        return V2Record(), fault, _redacted_text(value)
    fields = {
        name: msgspec.json.encode(item).decode()
        if name in _TEXT_FIELDS and item is not None and not isinstance(item, str)
        else item
        for name, item in value.items()
    }
    try:
        return msgspec.convert(fields, V2Record, strict=False), None, None
    except msgspec.ValidationError as exc:
        request_id = value.get("requestId")  # what finds the record again, where it has one
        record = V2Record(requestId=request_id if isinstance(request_id, str) else None)
        return record, str(exc), _redacted_text(value)


def _redacted_text(value: Any) -> str:
    """A decoded record as text without the end user's Authorization header, at any depth."""

    def scrub(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: scrub(v) for k, v in item.items() if k != AUTHORIZATION}
        if isinstance(item, list):
            return [scrub(v) for v in item]
        return item

    return msgspec.json.encode(scrub(value)).decode()


_V2_FIELDS = list(V2Record.__struct_fields__)


def records_frame(records: Sequence[V2Record]) -> pl.DataFrame:
    """Decoded records as a frame with the wire's column names."""
    # Transpose in C: one tuple per record, then one tuple per field.
    columns = list(zip(*map(msgspec.structs.astuple, records), strict=True)) or [
        () for _ in _V2_FIELDS
    ]
    return pl.DataFrame(dict(zip(_V2_FIELDS, columns, strict=True)), schema=V2_WIRE_SCHEMA)
