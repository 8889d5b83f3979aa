"""Logging API v2 (JSON, offset pages) and v1 (one pipe-delimited file per UTC day).

Parameter and field names follow ``shared/contract/logging-api.md`` exactly. The end
user's ``authorizationHeader`` is deliberately absent from :class:`V2Record`: the decoder
drops it, so it never reaches memory we keep.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import httpx
import msgspec
import polars as pl

from cdnlake.client.core import ApiClient, RequestStats, read_body
from cdnlake.errors import MalformedResponseError, RequestValidationError

MAX_PAGE_SIZE = 10_000
T = TypeVar("T")


class _Paged(Protocol):
    @property
    def pagination(self) -> Pagination: ...


P = TypeVar("P", bound=_Paged)
MAX_SEARCH_TOKENS = 16
MAX_SEARCH_TOKEN_LENGTH = 128


class V2Record(msgspec.Struct, omit_defaults=True, gc=False):
    timestamp: str | None = None
    pullZoneId: int | None = None
    requestId: str | None = None
    cacheStatus: str | None = None
    statusCode: int | None = None
    bytesSent: int | None = None
    edgeLocation: str | None = None
    scheme: str | None = None
    host: str | None = None
    path: str | None = None
    url: str | None = None
    remoteIp: str | None = None
    countryCode: str | None = None
    userAgent: str | None = None
    referer: str | None = None
    bodyBytesSent: int | None = None
    contentRange: str | None = None
    ja4Fingerprint: str | None = None
    asn: int | None = None
    asnOrganization: str | None = None


class Pagination(msgspec.Struct, gc=False):
    offset: int = 0
    limit: int = 0
    returned: int = 0
    hasMore: bool = False


class V2Page(msgspec.Struct):
    data: list[V2Record] = []
    pagination: Pagination = msgspec.field(default_factory=Pagination)
    query: dict[str, Any] | None = None


_PAGE_DECODER = msgspec.json.Decoder(V2Page, strict=False)


def iso_utc(moment: datetime) -> str:
    """ISO-8601 UTC with milliseconds and a ``Z``, as the API expects."""
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def v1_day_path(zone_id: int, day: date) -> str:
    """``/{MM}-{dd}-{yy}/{pullZoneId}.log``: two digits each, UTC day."""
    return f"/{day:%m-%d-%y}/{zone_id}.log"


def _csv(name: str, values: Sequence[str] | None) -> str | None:
    if not values:
        return None
    for v in values:
        if not v or "," in v:
            raise RequestValidationError(name, f"bad list value {v!r}")
    return ",".join(values)


@dataclass(frozen=True)
class V2Query:
    """Every query parameter of ``GET /v2/pullzones/{id}/logs``."""

    from_: datetime | None = None
    to: datetime | None = None
    limit: int = 100
    offset: int = 0
    order: Literal["asc", "desc"] = "desc"
    status: Sequence[str] = field(default_factory=tuple)
    cache_status: Sequence[str] = field(default_factory=tuple)
    country: Sequence[str] = field(default_factory=tuple)
    edge_location: str | None = None
    remote_ip: str | None = None
    url_contains: str | None = None
    user_agent_contains: str | None = None
    referer_contains: str | None = None
    search: str | None = None
    request_id: str | None = None
    include_origin_shield: bool | None = None

    def params(self) -> dict[str, Any]:
        if not 1 <= self.limit <= MAX_PAGE_SIZE:
            raise RequestValidationError("limit", f"must be 1..{MAX_PAGE_SIZE}, got {self.limit}")
        if self.offset < 0:
            raise RequestValidationError("offset", f"must be >= 0, got {self.offset}")
        if self.order not in ("asc", "desc"):
            raise RequestValidationError("order", f"must be asc or desc, got {self.order!r}")
        if self.from_ and self.to and self.to <= self.from_:
            raise RequestValidationError("to", "must be after from")
        if self.search is not None:
            tokens = self.search.split()
            if len(tokens) > MAX_SEARCH_TOKENS:
                raise RequestValidationError("search", f"at most {MAX_SEARCH_TOKENS} tokens")
            if any(len(t) > MAX_SEARCH_TOKEN_LENGTH for t in tokens):
                raise RequestValidationError(
                    "search", f"tokens are at most {MAX_SEARCH_TOKEN_LENGTH} characters"
                )
        raw: dict[str, Any] = {
            "from": iso_utc(self.from_) if self.from_ else None,
            "to": iso_utc(self.to) if self.to else None,
            "limit": self.limit,
            "offset": self.offset,
            "order": self.order,
            "status": _csv("status", self.status),
            "cacheStatus": _csv("cacheStatus", self.cache_status),
            "country": _csv("country", self.country),
            "edgeLocation": self.edge_location,
            "remoteIp": self.remote_ip,
            "urlContains": self.url_contains,
            "userAgentContains": self.user_agent_contains,
            "refererContains": self.referer_contains,
            "search": self.search,
            "requestId": self.request_id,
            "includeOriginShield": (
                None
                if self.include_origin_shield is None
                else ("true" if self.include_origin_shield else "false")
            ),
        }
        return {k: v for k, v in raw.items() if v is not None}


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
        from cdnlake.ingest.normalize import records_frame

        typed = decode_v2_page(content)
        return V2Batch(records_frame(typed.data), typed.pagination)


def decode_v2_page(content: bytes) -> V2Page:
    try:
        return _PAGE_DECODER.decode(content)
    except msgspec.DecodeError as exc:
        raise MalformedResponseError(f"undecodable v2 page: {exc}") from None


class LoggingClient:
    """Logging API v1 and v2 for any number of zones; every call inside the zone's budget."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.base = api.api.logging_url.rstrip("/")

    def _logs(
        self,
        zone_id: int,
        query: V2Query,
        stats: RequestStats | None,
        decode: Callable[[bytes], T],
    ) -> T:
        def handle(response: httpx.Response) -> T:
            return decode(read_body(response))

        result: T = self.api.call(
            "GET",
            f"{self.base}/v2/pullzones/{zone_id}/logs",
            params=query.params(),
            auth="logging",
            zone=zone_id,
            stats=stats,
            handle=handle,
        )
        return result

    def _pages(self, query: V2Query, fetch: Callable[[V2Query], P]) -> Iterator[P]:
        """Every page of a query, following ``hasMore`` (never ``returned < limit``).

        The offset advances by ``limit``: the provider counts offsets before its late
        filters, so a short page with ``hasMore`` still covers ``limit`` positions.
        """
        offset = query.offset
        while True:
            page = fetch(dataclasses.replace(query, offset=offset))
            yield page
            if not page.pagination.hasMore:
                return
            offset += query.limit

    def query_v2(self, zone_id: int, query: V2Query, stats: RequestStats | None = None) -> V2Page:
        """One page as typed records."""
        return self._logs(zone_id, query, stats, decode_v2_page)

    def query_v2_batch(
        self, zone_id: int, query: V2Query, stats: RequestStats | None = None
    ) -> V2Batch:
        """One page as columns: the fast path that ingestion uses."""
        return self._logs(zone_id, query, stats, decode_v2_batch)

    def iter_v2_pages(
        self, zone_id: int, query: V2Query, stats: RequestStats | None = None
    ) -> Iterator[V2Page]:
        return self._pages(query, lambda q: self.query_v2(zone_id, q, stats))

    def iter_v2_batches(
        self, zone_id: int, query: V2Query, stats: RequestStats | None = None
    ) -> Iterator[V2Batch]:
        return self._pages(query, lambda q: self.query_v2_batch(zone_id, q, stats))

    def download_v1(
        self,
        zone_id: int,
        day: date,
        dest: Path,
        *,
        start: int | None = None,
        end: int | None = None,
        order: Literal["asc", "desc"] = "asc",
        status: Sequence[str] = (),
        search: str | None = None,
        download: bool | None = None,
        stats: RequestStats | None = None,
    ) -> int:
        """Stream one UTC day file (gzip on the wire) to ``dest``; return its size."""
        if start is not None and start < 0:
            raise RequestValidationError("start", f"must be >= 0, got {start}")
        if end is not None and (end < 0 or (start is not None and end < start)):
            raise RequestValidationError("end", f"must be >= start, got {end}")
        if order not in ("asc", "desc"):
            raise RequestValidationError("order", f"must be asc or desc, got {order!r}")
        # The provider's OpenAPI document names this parameter ``sort`` and its prose
        # documentation ``order``; we send both, so the file is in our order whichever the
        # provider honours (line offsets into a day file depend on it).
        params: dict[str, Any] = {"order": order, "sort": order}
        if start is not None:
            params["start"] = start
        if end is not None:
            params["end"] = end
        if status:
            params["status"] = _csv("status", status)
        if search:
            params["search"] = search
        if download is not None:
            params["download"] = "true" if download else "false"
        return self.api.download(
            f"{self.base}{v1_day_path(zone_id, day)}",
            dest,
            params=params,
            auth="logging",
            zone=zone_id,
            stats=stats,
        )
