"""The two v2 routes, the fast columnar decoder and the careful record-by-record one,
agree; odd bodies fall back safely."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import msgspec
import polars as pl
import pytest

from cdnlake.emulator.records import ZoneSpec
from cdnlake.emulator.traffic import Traffic
from cdnlake.errors import MalformedResponseError
from cdnlake.ingest.decode import (
    V2_WIRE_SCHEMA,
    decode_v2_batch,
    decode_v2_careful,
    decode_v2_fast,
)
from cdnlake.ingest.normalize import normalize_v2, parse_timestamps


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


def test_fast_and_careful_routes_agree():
    body = page_body()
    fast = decode_v2_batch(body)
    careful = decode_v2_careful(body)
    assert fast.pagination == careful.pagination and fast.pagination.hasMore
    assert fast.frame.equals(careful.frame)
    assert "authorizationHeader" not in fast.frame.columns
    good, rejects = normalize_v2(fast.frame, 1)
    assert good.height == 500 and rejects.height == 0


def test_the_fast_route_itself_reads_the_providers_pages():
    """The fallback must not hide a broken fast route: call it alone."""
    body = page_body()
    fast = decode_v2_fast(body)
    careful = decode_v2_careful(body)
    assert fast.frame.equals(careful.frame)
    assert fast.pagination == careful.pagination
    assert fast.frame.schema["timestamp"] == pl.String and fast.frame.height == 500


def test_the_fast_route_refuses_what_it_cannot_read():
    with pytest.raises(Exception):  # noqa: B017 - any refusal sends the page the careful way
        decode_v2_fast(b'{"data": [{"statusCode": "200"}], "pagination": {}}')


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
    for route in (decode_v2_fast, decode_v2_careful):  # null, as the provider's lists may be
        none = route(b'{"data": null, "pagination": {"hasMore": false}}')
        assert none.frame.height == 0 and none.frame.schema == empty.frame.schema
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


def _careful_frame(body: bytes) -> pl.DataFrame:
    return decode_v2_careful(body).frame


def test_strings_full_of_json_syntax_read_as_they_are():
    """Record bounds come from a JSON parser, not from bytes that look like them."""
    page = msgspec.json.decode(page_body(200))
    for record in page["data"]:
        record["userAgent"] = 'curl/8 },{"timestamp":"x"},{ \n line'
        record["referer"] = "}\n{"
    body = msgspec.json.encode(page)
    fast = decode_v2_fast(body)
    assert fast.frame.equals(_careful_frame(body))
    assert set(fast.frame["userAgent"]) == {'curl/8 },{"timestamp":"x"},{ \n line'}


def test_a_pretty_printed_page_reads_like_a_compact_one():
    body = page_body(50)
    pretty = msgspec.json.format(body, indent=2)
    assert pretty.count(b"\n") > 50 * 10
    fast = decode_v2_fast(pretty)
    assert fast.frame.equals(_careful_frame(body))
    assert fast.pagination == decode_v2_careful(body).pagination


def test_records_that_are_not_objects_are_rejected_records():
    with pytest.raises(Exception):  # noqa: B017 - the fast reader refuses; the batch falls back
        decode_v2_fast(b'{"data": [1, 2], "pagination": {}}')
    good, rejects = normalize_v2(decode_v2_batch(b'{"data": [1, [2]], "pagination": {}}').frame, 1)
    assert good.height == 0
    assert rejects.select("line_number", "raw_line", "kind").rows() == [
        (0, "1", "undecodable record"),
        (1, "[2]", "undecodable record"),
    ]
    assert rejects["reason"][0] == "record does not decode: a record is a JSON int, not an object"


@pytest.mark.parametrize(
    "body",
    [b"<html>busy</html>", b'{"data": {"timestamp": "x"}}', b'{"data": [1,', b"[]"],
)
def test_a_body_that_is_no_page_is_malformed(body):
    """Only the page as a whole can fail a request (and be fetched again)."""
    with pytest.raises(MalformedResponseError):
        decode_v2_batch(body)


def _record(request_id: str, **fields: object) -> dict[str, object]:
    return {"timestamp": "2026-11-20T10:15:02Z", "pullZoneId": 1, "requestId": request_id, **fields}


def test_a_field_of_the_wrong_type_fails_its_record_not_its_page():
    """A status code of "abc", a number wider than its column, a boolean: each record is
    rejected with the field named and its text kept (the Authorization header removed);
    the page's other records are stored."""
    records = [
        _record("r0000001", statusCode="abc", authorizationHeader="Bearer s3cret"),
        _record("r0000002", asn=2**31),
        _record("r0000003", bytesSent=True),
        _record("r0000004", statusCode="200", asn=3320),
        _record("r0000005", statusCode=200.0),
    ]
    body = msgspec.json.encode({"data": records, "pagination": {"offset": 40}})
    batch = decode_v2_batch(body)
    good, rejects = normalize_v2(batch.frame, 1, batch.pagination.offset)
    assert good.select("request_id", "status_code", "asn").rows() == [
        ("r0000004", 200, 3320),
        ("r0000005", 200, None),
    ]
    assert rejects.select("line_number", "request_id", "kind").rows() == [
        (40, "r0000001", "undecodable record"),
        (41, "r0000002", "undecodable record"),
        (42, "r0000003", "undecodable record"),
    ]
    reasons = rejects["reason"].to_list()
    assert reasons[0].endswith("got `str` - at `$.statusCode`")
    assert "2147483647" in reasons[1] and reasons[1].endswith("$.asn`")
    assert reasons[2].endswith("got `bool` - at `$.bytesSent`")
    assert not any("s3cret" in raw or "authorization" in raw for raw in rejects["raw_line"])
    assert msgspec.json.decode(rejects["raw_line"][0]) == _record("r0000001", statusCode="abc")


def test_a_text_field_given_another_json_value_keeps_its_text_on_both_routes():
    """The fast reader keeps a number or boolean in a text field as its JSON text; so does
    the careful route, which a wrong-typed integer elsewhere on the page sends it to."""
    odd = _record("r0000001", countryCode=12, userAgent=True, referer=1.5)
    fast = decode_v2_fast(msgspec.json.encode({"data": [odd], "pagination": {}})).frame
    careful = decode_v2_batch(
        msgspec.json.encode({"data": [odd, _record("r0000002", statusCode="x")], "pagination": {}})
    ).frame
    columns = ["countryCode", "userAgent", "referer"]
    assert fast.select(columns).row(0) == careful.select(columns).row(0) == ("12", "true", "1.5")


def test_timestamps_fast_path_and_fallback_agree():
    fast = ["2026-11-20T10:15:02.417Z", "2026-11-20T10:15:02Z", None, "2026-11-20T11:15:02+01:00"]
    assert parse_timestamps(pl.Series(fast)).to_list() == [
        datetime(2026, 11, 20, 10, 15, 2, 417000, tzinfo=UTC),
        datetime(2026, 11, 20, 10, 15, 2, tzinfo=UTC),
        None,
        datetime(2026, 11, 20, 10, 15, 2, tzinfo=UTC),
    ]
    # One value Arrow refuses sends the column to polars, value by value.
    mixed = [*fast, "2026-11-20T10:15:02.123456Z", "junk"]
    parsed = parse_timestamps(pl.Series(mixed))
    assert parsed.dtype == pl.Datetime("ms", "UTC")
    assert parsed.to_list()[:4] == parse_timestamps(pl.Series(fast)).to_list()
    assert parsed.to_list()[4:] == [datetime(2026, 11, 20, 10, 15, 2, 123000, tzinfo=UTC), None]


def _canonical(frame: pl.DataFrame) -> pl.DataFrame:
    """Nested JSON kept as text compared by value: polars writes ``{"a": 1}``, msgspec
    ``{"a":1}``."""

    def value(text: str) -> str:
        if text[:1] not in "{[":
            return text
        try:
            return msgspec.json.encode(msgspec.json.decode(text)).decode()
        except msgspec.DecodeError:
            return text

    return frame.with_columns(pl.col(pl.String).map_elements(value, return_dtype=pl.String))


def test_the_two_routes_agree_on_every_page_the_fast_one_reads():
    """Random records of odd values (wrong JSON types, escapes, JSON syntax inside
    strings, absent fields): wherever the fast reader takes a page, the careful route
    gives the same columns and rejects nothing; where it refuses, the careful route
    still gives one row per record, and each record that the fast reader takes alone
    reads the same on both routes."""
    rng = random.Random(5)
    texts = ['"abc"', '""', "null", '"\\u00e9t\\u00e9"', '"\\ud83d\\ude00"', '"a\\nb"', '"x\\"y"',
             '"},{\\"a\\":1"', "12", "1.5", "true", "[1]", '{"a":1}', '"\\/p"']  # fmt: skip
    numbers = ["200", "0", "-1", "null", "200.0", "2e2", '"200"', str(2**63), "1.5", "true",
               '"x"', "[]", "-0", str(2**31)]  # fmt: skip
    fast_read = refused_pages_records = 0
    for _ in range(1500):
        records = []
        for _ in range(rng.randint(1, 4)):
            fields = [name for name in V2_WIRE_SCHEMA if rng.random() < 0.9]
            fields += ["authorizationHeader"] if rng.random() < 0.2 else []
            rng.shuffle(fields)
            items = []
            for name in fields:
                pool = numbers if V2_WIRE_SCHEMA.get(name, pl.String()).is_integer() else texts
                items.append(f'"{name}":{rng.choice(pool) if rng.random() < 0.5 else pool[0]}')
            records.append("{" + rng.choice([",", ", ", ",\n "]).join(items) + "}")
        body = ('{"data":[' + ",".join(records) + '],"pagination":{"offset":0}}').encode()
        careful = decode_v2_careful(body).frame
        assert careful.height == len(records)
        try:
            fast = decode_v2_fast(body).frame
        except Exception:  # refused: the careful route alone reads it, record by record
            for i, record in enumerate(records):
                alone = ('{"data":[' + record + '],"pagination":{}}').encode()
                try:
                    one = decode_v2_fast(alone).frame
                except Exception:  # (the careful route may take it, or reject it alone)
                    continue
                refused_pages_records += 1
                row = careful.select(list(V2_WIRE_SCHEMA)).slice(i, 1)
                assert _canonical(one).equals(_canonical(row)), record
                if "_fault" in careful.columns:
                    assert careful["_fault"][i] is None, record
            continue
        fast_read += 1
        assert "_fault" not in careful.columns, body
        assert _canonical(fast).equals(_canonical(careful)), body
    assert fast_read > 50 and refused_pages_records > 50
