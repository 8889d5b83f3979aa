"""The logging API's wire format: v2 records and pages, query parameters, v1 day paths.

Names follow ``shared/contract/logging-api.md`` exactly. The end user's
``authorizationHeader`` is deliberately absent from :class:`V2Record`: the decoder drops
it, so it never reaches memory we keep. Free of the HTTP stack, so that decoding and
normalising records never load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Annotated, Any, Literal, Protocol

import msgspec

from cdnlake.errors import MalformedResponseError, RequestValidationError

MAX_PAGE_SIZE = 10_000


class Paged(Protocol):
    """Whatever a page decoder gives: at least the pagination to follow."""

    @property
    def pagination(self) -> Pagination: ...


MAX_SEARCH_TOKENS = 16
MAX_SEARCH_TOKEN_LENGTH = 128


# Integers as wide as the lake's columns (INTEGER, BIGINT): a wider one fails its record.
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class V2Record(msgspec.Struct, omit_defaults=True, gc=False):
    timestamp: str | None = None
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


class Pagination(msgspec.Struct, gc=False):
    offset: int = 0
    limit: int = 0
    returned: int = 0
    hasMore: bool = False


class V2Page(msgspec.Struct):
    # null reads as no records, as the provider's other APIs send their empty lists
    data: list[V2Record] | None = None
    pagination: Pagination = msgspec.field(default_factory=Pagination)
    query: dict[str, Any] | None = None

    @property
    def records(self) -> list[V2Record]:
        return self.data or []


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


def csv_param(name: str, values: Sequence[str] | None) -> str | None:
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
            "status": csv_param("status", self.status),
            "cacheStatus": csv_param("cacheStatus", self.cache_status),
            "country": csv_param("country", self.country),
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
