"""v2 pages into columns (the extract stage's decoder), and the wire schema.

The client hands over a page's bytes; this module makes them a frame with the wire's
column names. The fast route is polars' native JSON reader with an explicit schema, a
large page cut into pieces read side by side; a body it refuses takes msgspec's typed,
lenient route, so that no page is lost to a decoder's mood.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import msgspec
import polars as pl

from cdnlake.client.logging_api import Pagination, V2Record, decode_v2_page


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
_PAGE_SCHEMA = {
    "data": pl.List(_WIRE_STRUCT),
    "pagination": pl.Struct(
        {"offset": pl.Int64, "limit": pl.Int64, "returned": pl.Int64, "hasMore": pl.Boolean}
    ),
}


_DATA_OPEN = b'{"data":['
_RECORD_GAP = b'},{"'
DEFAULT_DECODE_PIECE_BYTES = 1 << 20  # pages smaller than this are read in one piece
DEFAULT_DECODE_THREADS = max(1, min(4, os.cpu_count() or 1))


def split_page(content: bytes, pieces: int) -> list[bytes]:
    """A compact page cut at record boundaries into at most ``pieces`` whole documents.

    Only a page that opens with ``{"data":[`` is cut; the last piece keeps everything
    after the records (pagination and the rest). A cut can never go wrong unnoticed: one
    that lands inside a string or a nested value leaves a piece that is not valid JSON
    (an unterminated string, unbalanced brackets), so the reader refuses it and the page
    is read whole instead.
    """
    if pieces < 2 or not content.startswith(_DATA_OPEN):
        return [content]
    step = len(content) // pieces
    cuts: list[int] = []
    at = len(_DATA_OPEN)
    for k in range(1, pieces):
        cut = content.find(_RECORD_GAP, max(at, k * step))
        if cut < 0:
            break
        cuts.append(cut)
        at = cut + 2
    view = memoryview(content)  # one copy per piece, straight from the page
    docs: list[bytes] = []
    begin = 0
    for cut in cuts:
        opening = b"" if begin == 0 else _DATA_OPEN
        docs.append(b"".join((opening, view[begin : cut + 1], b"]}")))
        begin = cut + 2
    docs.append(content if begin == 0 else b"".join((_DATA_OPEN, view[begin:])))
    return docs


def _read_piece(doc: bytes) -> tuple[pl.DataFrame, dict[str, Any]]:
    """One document through polars' native JSON reader: (records, pagination)."""
    page = pl.read_json(doc, schema=_PAGE_SCHEMA)
    if page.height != 1:
        raise ValueError("not one page")
    info = page["pagination"][0] or {}
    count = page.select(pl.col("data").list.len()).item() or 0
    if not count:
        return pl.DataFrame(schema=_WIRE_STRUCT.to_schema()), info
    return page.select(pl.col("data").explode()).unnest("data"), info


def decode_v2_fast(
    content: bytes,
    *,
    threads: int = DEFAULT_DECODE_THREADS,
    piece_bytes: int = DEFAULT_DECODE_PIECE_BYTES,
) -> V2Batch:
    """A page straight into columns (polars' native JSON reader, explicit schema).

    A large page is cut into pieces read side by side (the reader releases the GIL and
    reads one document on one core). Fields outside the schema, the end user's
    ``authorizationHeader`` among them, are never materialised. Raises on a body the
    reader refuses (a type it did not expect, say).
    """
    docs = split_page(content, min(threads, len(content) // max(1, piece_bytes)))
    if len(docs) == 1:
        parts = [_read_piece(content)]
    else:
        with ThreadPoolExecutor(max_workers=len(docs)) as pool:
            parts = list(pool.map(_read_piece, docs))
    info = parts[-1][1]
    data = parts[0][0] if len(parts) == 1 else pl.concat([frame for frame, _ in parts])
    returned = info.get("returned")
    if len(parts) > 1 and returned is not None and returned != data.height:
        raise ValueError("the pieces do not add up to the page")
    pagination = Pagination(
        offset=int(info.get("offset") or 0),
        limit=int(info.get("limit") or 0),
        returned=int(returned or 0),
        hasMore=bool(info.get("hasMore")),
    )
    return V2Batch(data, pagination)


def decode_v2_batch(
    content: bytes,
    *,
    threads: int = DEFAULT_DECODE_THREADS,
    piece_bytes: int = DEFAULT_DECODE_PIECE_BYTES,
) -> V2Batch:
    """A page as columns: the fast reader, or the lenient typed route for a body it
    refuses, so that no page is lost to a decoder's mood."""
    try:
        return decode_v2_fast(content, threads=threads, piece_bytes=piece_bytes)
    except Exception:  # any refusal of the fast reader: decode the careful way
        typed = decode_v2_page(content)
        return V2Batch(records_frame(typed.data), typed.pagination)


_V2_FIELDS = list(V2Record.__struct_fields__)


def records_frame(records: Sequence[V2Record]) -> pl.DataFrame:
    """Decoded records as a frame with the wire's column names."""
    # Transpose in C: one tuple per record, then one tuple per field.
    columns = list(zip(*map(msgspec.structs.astuple, records), strict=True)) or [
        () for _ in _V2_FIELDS
    ]
    return pl.DataFrame(dict(zip(_V2_FIELDS, columns, strict=True)), schema=V2_WIRE_SCHEMA)
