"""The provider's own statistics of a pull zone, hour by hour (``GET /statistics``).

``core.json`` (``StatisticsModel``) gives each chart as an object from an instant to a
number (a double, though the charts used here count requests and bytes). The provider's
prose lists ``CacheHitRate`` among the charts while its OpenAPI document makes it the
range's average (a number) beside ``CacheHitRateChart``: both forms are accepted. A chart
key is an ISO-8601 instant, with or without an offset (none means UTC); a key that is no
instant, or a count that is negative, is a malformed answer.

The provider publishes no rate limit for this endpoint: each call takes a slot of the
zone's request budget (the logging API's 30 per 10 s), so an audit never sends faster
than ingestion of the same zone may.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import msgspec

from cdnlake.client.area import Area, check_id, decode_model
from cdnlake.client.core import read_body
from cdnlake.client.error_bodies import generic_result
from cdnlake.errors import MalformedResponseError, RequestValidationError

HOUR = timedelta(hours=1)
Chart = dict[str, float]


class StatisticsModel(msgspec.Struct):
    """The part of ``StatisticsModel`` an audit reads (every chart is nullable)."""

    RequestsServedChart: Chart | None = None
    Error4xxChart: Chart | None = None
    Error5xxChart: Chart | None = None
    BandwidthUsedChart: Chart | None = None
    CacheHitRateChart: Chart | None = None
    CacheHitRate: float | Chart | None = None
    TotalRequestsServed: int | None = None
    TotalBandwidthUsed: int | None = None


@dataclass
class HourCounts:
    """What the provider served in one hour."""

    requests: int = 0
    errors_4xx: int = 0
    errors_5xx: int = 0
    bytes: int = 0
    cache_hit_rate: float | None = None


@dataclass
class ZoneStatistics:
    """A zone's hourly statistics over ``[start, end)``; an hour absent from every chart
    is an hour the provider served nothing in."""

    zone_id: int
    start: datetime
    end: datetime
    hours: dict[datetime, HourCounts] = field(default_factory=dict)

    def hour(self, moment: datetime) -> HourCounts:
        return self.hours.get(moment, HourCounts())


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_instant(key: str) -> datetime:
    """A chart key as a UTC instant: ``2026-11-20T05:00:00Z``, ``...+00:00`` or naive."""
    try:
        moment = datetime.fromisoformat(key.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"chart key {key!r} is not an ISO-8601 instant") from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _count(chart: str, key: str, value: float) -> int:
    if value < 0 or value != value:  # negative or NaN
        raise ValueError(f"{chart}[{key}]: {value!r} is not a count")
    return round(value)


def hourly(model: StatisticsModel, zone_id: int, start: datetime, end: datetime) -> ZoneStatistics:
    """The model's charts by hour, only the hours of ``[start, end)`` (the provider's
    ``dateTo`` may be inclusive)."""
    out = ZoneStatistics(zone_id, start, end)
    charts: list[tuple[str, Chart | None]] = [
        ("RequestsServedChart", model.RequestsServedChart),
        ("Error4xxChart", model.Error4xxChart),
        ("Error5xxChart", model.Error5xxChart),
        ("BandwidthUsedChart", model.BandwidthUsedChart),
    ]
    rate = model.CacheHitRateChart
    if rate is None and isinstance(model.CacheHitRate, dict):
        rate = model.CacheHitRate
    for name, chart in charts:
        for key, value in (chart or {}).items():
            moment = parse_instant(key)
            if not start <= moment < end:
                continue
            counts = out.hours.setdefault(moment, HourCounts())
            amount = _count(name, key, value)
            if name == "RequestsServedChart":
                counts.requests = amount
            elif name == "Error4xxChart":
                counts.errors_4xx = amount
            elif name == "Error5xxChart":
                counts.errors_5xx = amount
            else:
                counts.bytes = amount
    for key, value in (rate or {}).items():
        moment = parse_instant(key)
        if start <= moment < end and moment in out.hours:
            out.hours[moment].cache_hit_rate = float(value)
    return out


class StatisticsApi(Area):
    """``GET /statistics`` of the main API (AccessKey)."""

    def zone_hourly(self, zone_id: int, start: datetime, end: datetime) -> ZoneStatistics:
        """The provider's hourly counts of ``zone_id`` for the whole hours of
        ``[start, end)`` (UTC), one call."""
        check_id("pullZone", zone_id)
        if start.tzinfo is None or end.tzinfo is None:
            raise RequestValidationError("dateFrom", "give UTC instants, not naive times")
        if start.minute or start.second or start.microsecond or not start < end:
            raise RequestValidationError("dateFrom", "a whole hour before dateTo")
        params: dict[str, Any] = {
            "pullZone": zone_id,
            "dateFrom": iso(start),
            "dateTo": iso(end),
            "hourly": "true",
            "loadRequestsServed": "true",
            "loadBandwidthUsed": "true",
            "loadErrors": "true",
        }

        def handle(response: httpx.Response) -> ZoneStatistics:
            model = decode_model(response, read_body(response), StatisticsModel)
            try:
                return hourly(model, zone_id, start, end)
            except ValueError as exc:
                raise MalformedResponseError(
                    f"unexpected statistics body: {exc}",
                    status=response.status_code,
                    request_line=f"GET {response.request.url}",
                ) from None

        result: ZoneStatistics = self.api.call(
            "GET",
            f"{self.base}/statistics",
            params=params,
            zone=zone_id,
            parser=generic_result,
            handle=handle,
        )
        return result
