"""Logging API v1 and v2 as ``shared/contract/logging-api.md`` fixes them."""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

import msgspec

from cdnlake.emulator.http import HttpProblem, Request, Response, json_response, logging_error
from cdnlake.emulator.records import HOUR_MS, Record, WireRecord
from cdnlake.emulator.state import is_bad_record
from cdnlake.retention import RETENTION_SECONDS

if TYPE_CHECKING:
    from cdnlake.emulator.state import Provider

RETENTION_MS = RETENTION_SECONDS * 1000  # the provider's documented 3 days
DAY_MS = 24 * HOUR_MS
CACHE_STATUSES = {"HIT", "MISS", "BYPASS", "REVALIDATED", "STALE", "UPDATING", "EXPIRED", "-"}
V2_PATH = re.compile(r"^/v2/pullzones/(\d+)/logs/?$")
V1_PATH = re.compile(r"^/(\d{2})-(\d{2})-(\d{2})/(\d+)\.log$")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$")
_STATUS_TOKEN = re.compile(r"^(\d{3}|[1-5]xx)$")


def _bad(message: str) -> HttpProblem:
    return HttpProblem(logging_error(400, "invalid_request", message))


def _parse_time(name: str, text: str) -> int:
    if not _ISO.match(text):
        raise _bad(f"{name} must be an ISO-8601 UTC date-time, got {text!r}")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _bad(f"{name} is not a valid date-time: {text!r}") from None
    return int(moment.astimezone(UTC).timestamp() * 1000)


def _int_arg(req: Request, name: str, default: int, lo: int, hi: int) -> int:
    text = req.arg(name)
    if text is None:
        return default
    if not re.fullmatch(r"\d+", text):
        raise _bad(f"{name} must be an integer, got {text!r}")
    value = int(text)
    if not lo <= value <= hi:
        raise _bad(f"{name} must be within {lo}..{hi}, got {value}")
    return value


def _list_arg(req: Request, name: str) -> list[str]:
    text = req.arg(name)
    if text is None or text == "":
        return []
    return [part.strip() for part in text.split(",") if part.strip()]


def _status_matcher(tokens: list[str]) -> Callable[[int], bool] | None:
    if not tokens:
        return None
    exact: set[int] = set()
    classes: set[int] = set()
    for token in tokens:
        if not _STATUS_TOKEN.match(token):
            raise _bad(f"status: bad value {token!r} (use codes or classes like 5xx)")
        if token.endswith("xx"):
            classes.add(int(token[0]))
        else:
            exact.add(int(token))
    return lambda code: code in exact or code // 100 in classes


def _retention_start(emu: Provider, now_ms: int) -> int:
    return now_ms - RETENTION_MS


def handle_v2(emu: Provider, req: Request, zone_id: int) -> Response:
    now_ms = emu.clock.now_ms()
    to_ms = _parse_time("to", req.arg("to") or "") if req.arg("to") else now_ms
    from_ms = _parse_time("from", req.arg("from") or "") if req.arg("from") else to_ms - DAY_MS
    if from_ms >= to_ms:
        raise _bad("from must be before to")
    if to_ms - from_ms > RETENTION_MS:
        raise _bad("to - from must be at most 72h")
    if from_ms < _retention_start(emu, now_ms):
        raise _bad("from lies outside the 3-day retention")
    limit = _int_arg(req, "limit", 100, 1, 10_000)
    offset = _int_arg(req, "offset", 0, 0, 2**31 - 1)
    order = req.arg("order") or "desc"
    if order not in ("asc", "desc"):
        raise _bad(f"order must be asc or desc, got {order!r}")
    status_ok = _status_matcher(_list_arg(req, "status"))
    caches = _list_arg(req, "cacheStatus")
    if any(c not in CACHE_STATUSES for c in caches):
        raise _bad("cacheStatus: unknown value")
    countries = _list_arg(req, "country")
    if any(not re.fullmatch(r"[A-Za-z]{2}", c) for c in countries):
        raise _bad("country: expected ISO-3166 alpha-2 codes")
    shield = req.arg("includeOriginShield")
    if shield is not None and shield.lower() not in ("true", "false"):
        raise _bad("includeOriginShield must be true or false")
    search = req.arg("search")
    tokens = search.split() if search else []
    if len(tokens) > 16 or any(len(t) > 128 for t in tokens):
        raise _bad("search: at most 16 tokens of at most 128 characters")
    edge = req.arg("edgeLocation")
    remote_ip = req.arg("remoteIp")
    request_id = req.arg("requestId")
    cache_set = set(caches)
    country_set = {c.upper() for c in countries}

    def db_filter(r: Record) -> bool:
        w = r.wire
        return (
            (status_ok is None or status_ok(w.statusCode))
            and (not cache_set or w.cacheStatus in cache_set)
            and (not country_set or (w.countryCode or "") in country_set)
            and (edge is None or w.edgeLocation == edge)
            and (remote_ip is None or w.remoteIp == remote_ip)
            and (request_id is None or w.requestId == request_id)
        )

    unfiltered = not (status_ok or cache_set or country_set or edge or remote_ip or request_id)
    spec = emu.traffic.spec(zone_id)
    if spec.per_second > 0 and unfiltered and not emu.faults.lose_hours:
        # A sustained zone: only the page is made, never the whole window.
        window, more = emu.traffic.sustained.page(
            spec, from_ms, to_ms, now_ms, offset, limit, order == "desc"
        )
    else:
        records = [
            r
            for r in emu.faults.logged(zone_id, emu.traffic.records(zone_id, from_ms, to_ms))
            if r.visible_ms <= now_ms and db_filter(r)
        ]
        if order == "desc":
            records.reverse()
        window = records[offset : offset + limit]
        more = offset + limit < len(records)
    # Late filters run after the database query: a page can come back short, even
    # empty, with hasMore still true.
    late = _late_filters(req, tokens)
    data = [r.wire for r in window if late is None or late(r)]
    if emu.faults.bad_record_rate:
        data = [
            spoiled(w) if is_bad_record(w.requestId, emu.faults.bad_record_rate) else w
            for w in data
        ]
    emu.traffic.note_served(zone_id, len(data))
    body = {
        "data": data,
        "pagination": {
            "offset": offset,
            "limit": limit,
            "returned": len(data),
            "hasMore": more,
        },
        "query": {
            "pullZoneId": zone_id,
            "from": _iso(from_ms),
            "to": _iso(to_ms),
            "order": order,
        },
    }
    return json_response(200, body, gzip_ok=True)


def bad_record_kind(request_id: str) -> str:
    """How a spoiled record is spoiled: a timestamp that is no time, or a status code of
    the wrong JSON type (the same answer every time)."""
    return "bad timestamp" if zlib.crc32(request_id.encode()[::-1]) % 2 else "wrong type"


def spoiled(record: WireRecord) -> WireRecord:
    if bad_record_kind(record.requestId) == "bad timestamp":
        return msgspec.structs.replace(record, timestamp="not-a-time")
    return msgspec.structs.replace(record, statusCode="abc")


def _late_filters(req: Request, tokens: list[str]) -> Callable[[Record], bool] | None:
    url_c = (req.arg("urlContains") or "").lower()
    ua_c = (req.arg("userAgentContains") or "").lower()
    ref_c = (req.arg("refererContains") or "").lower()
    if not (url_c or ua_c or ref_c or tokens):
        return None

    def match(r: Record) -> bool:
        w = r.wire
        if url_c and url_c not in w.url.lower():
            return False
        if ua_c and ua_c not in (w.userAgent or "").lower():
            return False
        if ref_c and ref_c not in (w.referer or "").lower():
            return False
        if tokens:
            hay = [
                w.cacheStatus,
                w.requestId,
                w.edgeLocation,
                w.host,
                w.path,
                w.userAgent or "",
                w.referer or "",
                w.contentRange or "",
            ]
            return any(t in field for t in tokens for field in hay)
        return True

    return match


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def handle_v1(emu: Provider, req: Request, zone_id: int, day: date) -> Response:
    now_ms = emu.clock.now_ms()
    day_start = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
    lo = max(day_start, _retention_start(emu, now_ms))
    hi = min(day_start + DAY_MS, now_ms + 1)
    # The provider's OpenAPI document calls the parameter ``sort``, its prose ``order``:
    # either is honoured, and both together must agree.
    given = {v for v in (req.arg("order"), req.arg("sort")) if v is not None}
    if len(given) > 1:
        raise _bad("order and sort disagree")
    order = given.pop() if given else "desc"
    if order not in ("asc", "desc"):
        raise _bad(f"order must be asc or desc, got {order!r}")
    status_ok = None
    classes = _list_arg(req, "status")
    if classes:
        if any(not re.fullmatch(r"[1-5]00", c) for c in classes):
            raise _bad("status: expected classes such as 200,300,400,500")
        wanted = {int(c[0]) for c in classes}
        status_ok = lambda code: code // 100 in wanted  # noqa: E731
    download = req.arg("download")
    if download is not None and download.lower() not in ("true", "false"):
        raise _bad("download must be true or false")
    start = _int_arg(req, "start", 0, 0, 2**31 - 1)
    end_text = req.arg("end")
    end = _int_arg(req, "end", 0, 0, 2**31 - 1) if end_text is not None else None
    search = req.arg("search")
    extended = emu.zones[zone_id].extended
    records: list[Record] = []
    if lo < hi:
        records = [
            r
            for r in emu.faults.logged(zone_id, emu.traffic.records(zone_id, lo, hi))
            if r.visible_ms <= now_ms and (status_ok is None or status_ok(r.wire.statusCode))
        ]
    # A day file is in time order (``order`` sorts by timestamp), as the provider's is: a
    # record that arrives late is inserted among the lines of its own time, not appended.
    lines = [r.v1_line(extended) for r in records]
    if search:
        lines = [line for line in lines if search in line]
    if order == "desc":
        lines.reverse()
    lines = lines[start:end]
    emu.traffic.note_served(zone_id, len(lines))
    body = ("\n".join(lines) + "\n").encode() if lines else b""
    headers = {}
    if download == "true":
        headers["Content-Disposition"] = f'attachment; filename="{zone_id}.log"'
    return Response(200, body, "text/plain; charset=utf-8", headers=headers, gzip_ok=True)


def parse_v1_day(match: re.Match[str]) -> date:
    month, day, year = (int(g) for g in match.group(1, 2, 3))
    try:
        return date(2000 + year, month, day)
    except ValueError:
        raise _bad("not a valid MM-dd-yy date") from None
