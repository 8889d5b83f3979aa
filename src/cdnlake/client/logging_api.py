"""Logging API v2 (JSON, offset pages) and v1 (one pipe-delimited file per UTC day).

The records, pages and query parameters are in :mod:`cdnlake.client.logging_wire`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from datetime import date
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx

from cdnlake.client.core import ApiClient, read_body
from cdnlake.client.logging_wire import (
    Paged,
    V2Page,
    V2Query,
    csv_param,
    decode_v2_page,
    v1_day_path,
)
from cdnlake.client.stats import RequestStats
from cdnlake.errors import RequestValidationError

T = TypeVar("T")
P = TypeVar("P", bound=Paged)


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
            params["status"] = csv_param("status", status)
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
