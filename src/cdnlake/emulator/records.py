"""The emulator's records: one request as logging API v2 renders it (and its v1 line),
and what a zone is. Shared by the hourly traffic and the sustained-rate maker."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

HOUR_MS = 3_600_000
MAX_DELAY_MS = 299_999  # "up to 5 minutes after its own timestamp"


class WireRecord(msgspec.Struct):
    """One request exactly as logging API v2 renders it."""

    timestamp: str
    pullZoneId: int
    requestId: str
    cacheStatus: str
    statusCode: int
    bytesSent: int
    edgeLocation: str
    scheme: str
    host: str
    path: str
    url: str
    remoteIp: str
    countryCode: str | None
    userAgent: str | None
    referer: str | None
    bodyBytesSent: int | None
    contentRange: str | None
    authorizationHeader: str | None
    ja4Fingerprint: str | None
    asn: int | None
    asnOrganization: str | None


@dataclass(slots=True)
class Record:
    ts_ms: int
    visible_ms: int
    wire: WireRecord

    def v1_line(self, extended: bool) -> str:
        w = self.wire
        fields = [
            w.cacheStatus,
            str(w.statusCode),
            str(self.ts_ms),
            str(w.bytesSent),
            str(w.pullZoneId),
            w.remoteIp,
            w.referer or "-",
            w.url,
            w.edgeLocation,
            w.userAgent or "-",
            w.requestId,
            w.countryCode or "-",
        ]
        if extended:
            fields.append(str(w.bodyBytesSent) if w.bodyBytesSent is not None else "-")
            fields.append(w.contentRange or "-")
            fields.append(w.authorizationHeader or "-")
        return "|".join(fields)


@dataclass(frozen=True)
class ZoneSpec:
    id: int
    extended: bool = False
    disabled: bool = False
    suspended: bool = False
    full_ips: bool = False  # client addresses whole, not anonymised by the provider
    signed_urls: bool = False  # a fifth of the URLs carry token authentication
    # A sustained rate (requests per second, > 0): the zone's records are made second by
    # second on demand (``sustained.py``), from ``since_ms`` on (None: at every time),
    # instead of hour by hour from ``rpm``.
    per_second: float = 0.0
    since_ms: int | None = None
    archived: bool = False  # permanent log storage on from the start (``--zones ID:archived``)
