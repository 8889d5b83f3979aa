"""Logging API v2 (JSON, offset pages) and v1 (one pipe-delimited file per UTC day).

Parameter and field names follow ``shared/contract/logging-api.md`` exactly. The end
user's ``authorizationHeader`` is deliberately absent from :class:`V2Record`: the decoder
drops it, so it never reaches memory we keep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import httpx
import msgspec

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

    def iter_v2(
        self,
        zone_id: int,
        query: V2Query,
        decode: Callable[[bytes], P],
        stats: RequestStats | None = None,
    ) -> Iterator[P]:
        """Every page of a query through the caller's decoder (which gives ``pagination``).

        The client knows nothing of what its callers make of a page: ingestion passes a
        columnar decoder, ``iter_v2_pages`` the typed one.
        """
        return self._pages(query, lambda q: self._logs(zone_id, q, stats, decode))

    def iter_v2_pages(
        self, zone_id: int, query: V2Query, stats: RequestStats | None = None
    ) -> Iterator[V2Page]:
        """Every page of a query as typed records."""
        return self.iter_v2(zone_id, query, decode_v2_page, stats)

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
