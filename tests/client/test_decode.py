"""The fast columnar decoder and the lenient typed one agree; odd bodies fall back safely."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import polars as pl

from cdnlake.client.logging_api import decode_v2_batch, decode_v2_page
from cdnlake.emulator.traffic import Traffic, ZoneSpec
from cdnlake.ingest.normalize import normalize_v2, records_frame


def page_body(n: int = 500) -> bytes:
    traffic = Traffic(9, {1: ZoneSpec(1, extended=True)}, rpm=60)
    start = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp() * 1000)
    recs = traffic.records(1, start, start + 6 * 3_600_000)[:n]
    return msgspec.json.encode(
        {
            "data": [r.wire for r in recs],
            "pagination": {"offset": 0, "limit": n, "returned": len(recs), "hasMore": True},
            "query": {"pullZoneId": 1},
        }
    )


def test_fast_and_typed_routes_agree():
    body = page_body()
    fast = decode_v2_batch(body)
    typed = decode_v2_page(body)
    assert fast.pagination == typed.pagination and fast.pagination.hasMore
    assert fast.frame.equals(records_frame(typed.data))
    assert "authorizationHeader" not in fast.frame.columns
    good, rejects = normalize_v2(fast.frame, 1)
    assert good.height == 500 and rejects.height == 0


def test_unexpected_types_and_extra_fields_take_the_lenient_route():
    body = (
        b'{"data": [{"timestamp": "2026-11-20T10:15:02Z", "requestId": "abc12345",'
        b' "statusCode": "200", "pullZoneId": 1, "brandNew": {"x": 1}}],'
        b' "pagination": {"offset": 0, "limit": 1, "returned": 1, "hasMore": false}}'
    )
    batch = decode_v2_batch(body)
    assert batch.frame["statusCode"].to_list() == [200]
    good, _ = normalize_v2(batch.frame, 1)
    assert good["ts"].to_list()[0] == datetime(2026, 11, 20, 10, 15, 2, tzinfo=UTC)


def test_empty_page_and_bad_records():
    empty = decode_v2_batch(b'{"data": [], "pagination": {"hasMore": true}}')
    assert empty.frame.height == 0 and empty.pagination.hasMore
    body = (
        b'{"data": [{"timestamp": "yesterday", "requestId": "r1234567"},'
        b' {"timestamp": "2026-11-20T10:15:02.5+01:00", "requestId": "r7654321"},'
        b' {"timestamp": "2026-11-20T10:15:02Z", "requestId": null},'
        b' {"timestamp": "2026-11-20T10:15:02Z", "requestId": "r0000001", "pullZoneId": 9}],'
        b' "pagination": {"hasMore": false}}'
    )
    good, rejects = normalize_v2(decode_v2_batch(body).frame, 1)
    assert good["request_id"].to_list() == ["r7654321"]
    assert good["ts"].to_list() == [datetime(2026, 11, 20, 9, 15, 2, 500000, tzinfo=UTC)]
    assert sorted(rejects["reason"].to_list()) == [
        "bad timestamp yesterday",
        "missing requestId",
        "record of pull zone 9",
    ]
    assert all(isinstance(pl.Series([r]).str.json_decode(), pl.Series) for r in rejects["raw_line"])
