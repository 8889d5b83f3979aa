"""``GET /statistics``: the provider's own counts, from the same traffic the logging API
serves.

Every request that has happened by the emulator's clock is counted in the hour of its
timestamp, whether the logging API shows it yet (late arrival) or at all (the
``lose_hours`` fault): the statistics are what the provider served, not what it logged.
Charts are objects from an instant (``2026-11-20T05:00:00Z``) to a number, as
``core.json``'s ``StatisticsModel`` gives them; ``hourly=false`` groups by UTC day.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdnlake.emulator.http import Request, Response, json_response
from cdnlake.emulator.logging_routes import RETENTION_MS
from cdnlake.emulator.records import HOUR_MS

if TYPE_CHECKING:
    from cdnlake.emulator.state import Provider

PATH = "/statistics"
DAY_MS = 24 * HOUR_MS
MAX_RANGE_MS = 400 * DAY_MS


def _error(status: int, message: str) -> Response:
    return json_response(status, {"Message": message})


def _instant(name: str, text: str) -> int:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name} is not a date-time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _bool(req: Request, name: str) -> bool:
    text = (req.arg(name) or "false").lower()
    if text not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, got {text!r}")
    return text == "true"


def _key(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def handle(emu: Provider, req: Request) -> Response:
    if req.method != "GET":
        return Response(405, b"")
    problem = emu.check_credentials(req, allow_bearer=False)
    if problem is not None:
        return Response(401, b"")  # "The request authorization failed", no body shown
    try:
        now_ms = emu.clock.now_ms()
        zone_text = req.arg("pullZone") or "-1"
        if not zone_text.lstrip("-").isdigit():
            raise ValueError(f"pullZone must be an integer, got {zone_text!r}")
        zone = int(zone_text)
        if zone != -1 and zone not in emu.zones:
            return _error(404, f"Pull zone {zone} not found")
        to_ms = _instant("dateTo", req.arg("dateTo") or "") if req.arg("dateTo") else now_ms
        from_ms = (
            _instant("dateFrom", req.arg("dateFrom") or "")
            if req.arg("dateFrom")
            else to_ms - 30 * DAY_MS
        )
        if from_ms >= to_ms or to_ms - from_ms > MAX_RANGE_MS:
            raise ValueError("dateFrom must be before dateTo, at most 400 days apart")
        step = HOUR_MS if _bool(req, "hourly") else DAY_MS
    except ValueError as exc:
        return _error(400, str(exc))
    zones = list(emu.zones) if zone == -1 else [zone]
    return json_response(200, charts(emu, zones, from_ms, to_ms, step, now_ms))


def charts(
    emu: Provider, zones: list[int], from_ms: int, to_ms: int, step: int, now_ms: int
) -> dict[str, Any]:
    """The charts of ``zones`` over the whole steps that overlap ``[from_ms, to_ms)``,
    counting the requests made by ``now_ms``."""
    first = from_ms - from_ms % step
    keys = list(range(first, to_ms, step))
    requests = dict.fromkeys(keys, 0)
    e4 = dict.fromkeys(keys, 0)
    e5 = dict.fromkeys(keys, 0)
    sent = dict.fromkeys(keys, 0)
    hits = dict.fromkeys(keys, 0)
    end = min(keys[-1] + step, now_ms + 1) if keys else first
    for zone in zones:
        for start in range(first, end, HOUR_MS):
            # One record at a time: a sustained zone's hour is never held whole.
            for r in emu.traffic.iter_records(zone, start, start + HOUR_MS):
                if r.ts_ms > now_ms:
                    break  # sorted by time: the rest has not happened yet
                slot = r.ts_ms - r.ts_ms % step
                if slot not in requests:
                    continue
                requests[slot] += 1
                sent[slot] += r.wire.bytesSent
                code = r.wire.statusCode
                if 400 <= code <= 499:
                    e4[slot] += 1
                elif 500 <= code <= 599:
                    e5[slot] += 1
                if r.wire.cacheStatus == "HIT":
                    hits[slot] += 1
            if start < now_ms - RETENTION_MS:
                # The logging API no longer serves it: not kept, so that statistics of
                # a month leave the emulator's memory as it was.
                emu.traffic.forget_before(now_ms - RETENTION_MS)
    total = sum(requests.values())
    rate = {k: round(100 * hits[k] / n, 2) if n else 0.0 for k, n in requests.items()}
    return {
        "TotalRequestsServed": total,
        "TotalBandwidthUsed": sum(sent.values()),
        "CacheHitRate": round(100 * sum(hits.values()) / total, 2) if total else 0.0,
        "RequestsServedChart": {_key(k): float(v) for k, v in requests.items()},
        "Error4xxChart": {_key(k): float(v) for k, v in e4.items()},
        "Error5xxChart": {_key(k): float(v) for k, v in e5.items()},
        "BandwidthUsedChart": {_key(k): float(v) for k, v in sent.items()},
        "CacheHitRateChart": {_key(k): v for k, v in rate.items()},
    }
