"""The provider's JSON forwarding format, message by message: the v2 field names (or the
management API's spelling), checked by a plain line's rules, bad messages rejected alone."""

from __future__ import annotations

import msgspec
import polars as pl

from cdnlake.forwarding.json_messages import decode, is_json, normalize, redacted_text
from cdnlake.ingest.v1_parser import Block, parse_block

ZONE = 1234
TS_MS = 1_795_172_400_417  # 2026-11-20T...
RECORD = {
    "timestamp": "2026-11-20T10:15:02.417Z",
    "pullZoneId": ZONE,
    "requestId": "322b688bd63fb63f2babe9de30a5d262",
    "cacheStatus": "HIT",
    "statusCode": 200,
    "bytesSent": 412,
    "edgeLocation": "DE",
    "scheme": "https",
    "host": "cdn.example.com",
    "path": "/assets/app.js",
    "url": "https://cdn.example.com/assets/app.js?v=3",
    "remoteIp": "203.0.113.0",
    "countryCode": "DE",
    "userAgent": "Mozilla/5.0",
    "referer": None,
    "bodyBytesSent": 300,
    "contentRange": None,
    "authorizationHeader": "Bearer end-user-secret",
    "ja4Fingerprint": "t13d1516h2_8daaf6152771_b0da82dd1658",
    "asn": 3320,
    "asnOrganization": "Example Telecom",
}


def text(**fields: object) -> str:
    return msgspec.json.encode({**RECORD, **fields}).decode()


def parse(texts: list[str], zone: int = ZONE) -> tuple[pl.DataFrame, pl.DataFrame]:
    return normalize(decode(texts, list(range(1, len(texts) + 1))), zone)


def test_only_text_starting_with_a_brace_is_json():
    assert is_json(text())
    assert not is_json("HIT|200|1|2|3")
    assert not is_json(" {")  # message_text keeps what follows the header as it is


def test_a_record_becomes_the_row_a_plain_line_of_it_makes():
    rows, rejects = parse([text()])
    assert rejects.height == 0
    row = rows.row(0, named=True)
    assert row["ts"].isoformat() == "2026-11-20T10:15:02.417000+00:00"
    assert (row["request_id"], row["cache_status"], row["status_code"]) == (
        RECORD["requestId"],
        "HIT",
        200,
    )
    assert (row["host"], row["path"]) == ("cdn.example.com", "/assets/app.js")
    assert (row["asn"], row["ja4_fingerprint"]) == (3320, RECORD["ja4Fingerprint"])
    assert "end-user-secret" not in str(rows.rows())
    # The same request as a plain v1 line: the same values where the line has them.
    line = (
        f"HIT|200|{int(rows['ts'].dt.epoch('ms')[0])}|412|{ZONE}|203.0.113.0|-|{RECORD['url']}|DE|"
        f"Mozilla/5.0|{RECORD['requestId']}|DE|300|-|Bearer end-user-secret"
    )
    plain, plain_rejects, _ = parse_block(Block(1, line.encode() + b"\n", False), ZONE)
    assert plain_rejects.height == 0
    not_in_a_line = ("ja4_fingerprint", "asn", "asn_organization", "source")
    same = [c for c in plain.columns if c not in not_in_a_line]
    assert rows.select(same).rows() == plain.select(same).rows()


def test_the_management_api_spelling_and_epoch_timestamps_are_taken():
    pascal = {k[0].upper() + k[1:]: v for k, v in RECORD.items()}
    texts = [
        msgspec.json.encode({**pascal, "Timestamp": TS_MS, "RequestId": "pascal-0001"}).decode(),
        text(timestamp=TS_MS // 1000, requestId="seconds-0001"),  # 10 digits: seconds
        text(timestamp=str(TS_MS), requestId="as-text-0001", statusCode="404"),  # lenient
        text(path=None, host=None, scheme=None, requestId="from-url-0001"),  # from the URL
    ]
    rows, rejects = parse(texts)
    assert rejects.height == 0, rejects.rows()
    by_id = {r["request_id"]: r for r in rows.iter_rows(named=True)}
    assert by_id["pascal-0001"]["ts"].timestamp() * 1000 == TS_MS
    assert by_id["pascal-0001"]["cache_status"] == "HIT"
    assert by_id["seconds-0001"]["ts"].timestamp() == TS_MS // 1000
    assert by_id["as-text-0001"]["status_code"] == 404
    assert (by_id["from-url-0001"]["host"], by_id["from-url-0001"]["path"]) == (
        "cdn.example.com",
        "/assets/app.js",
    )


HOSTILE = [
    ("bad JSON", '{"pullZoneId":1234, "authorizationHeader":"Bearer leak" oops'),
    ("wrong type", text(statusCode="abc", requestId="wrongtype-01")),
    ("wrong type", text(bytesSent=2**70, requestId="too-wide-0001")),
    ("wrong type", text(requestId=12345678)),
    ("missing request id", text(requestId=None)),
    ("bad request id", text(requestId="no spaces, please")),
    ("bad timestamp", text(timestamp="yesterday", requestId="bad-ts-00001")),
    ("bad timestamp", text(timestamp=None, requestId="no-ts-000001")),
    ("future timestamp", text(timestamp="2099-01-01T00:00:00Z", requestId="future-00001")),
    ("unknown cache status", text(cacheStatus="WARM", requestId="cache-000001")),
    ("bad status code", text(statusCode=999, requestId="status-00001")),
    ("bad bytes sent", text(bytesSent=-1, requestId="bytes-000001")),
    ("not a URL", text(url="no url at all", host=None, requestId="nourl-000001")),
    ("bad country code", text(countryCode="Germany", requestId="country-0001")),
    ("bad JSON", '{"pullZoneId":1234,"x":' + "[" * 10_000 + "]" * 10_000 + "}"),
]


def test_hostile_messages_are_rejected_alone_with_a_reason():
    hostile = [t for _, t in HOSTILE]
    texts = [text(requestId="good-before-1"), *hostile, text(requestId="good-after-1")]
    rows, rejects = parse(texts)
    assert sorted(rows["request_id"]) == ["good-after-1", "good-before-1"]
    assert rejects["kind"].to_list() == [kind for kind, _ in HOSTILE]
    assert rejects["line_number"].to_list() == list(range(2, len(HOSTILE) + 2))
    assert rejects["reason"].null_count() == 0
    reasons = dict(zip(rejects["kind"], rejects["reason"], strict=False))
    assert reasons["missing request id"] == "requestId: missing"
    assert reasons["bad status code"] == "statusCode: bad status code '999'"
    assert "statusCode" in rejects["reason"][1]  # the field named, not the value
    assert "more than 1 hour(s) in the future" in reasons["future timestamp"]
    # A rejected message's text is kept, the end user's Authorization header never.
    assert not rejects["raw_line"].str.contains("end-user-secret|leak").any()
    assert rejects["raw_line"].str.contains("[redacted]", literal=True).sum() == len(HOSTILE) - 1
    assert rejects.filter(pl.col("kind") == "bad status code")["request_id"][0] == "status-00001"
    assert rejects.filter(pl.col("kind") == "wrong type")["request_id"][0] == "wrongtype-01"


def test_messages_that_make_json_only_when_joined_are_rejected_each():
    # Joined as one array these are two good objects; each alone is no JSON.
    texts = [
        text(requestId="good-000001"),
        '{"pullZoneId":1234,"requestId":"merged-0001","x":[1',
        '{"y":2}]},{"pullZoneId":1234,"requestId":"merged-0002"}',
        text(requestId="good-000002"),
    ]
    rows, rejects = parse(texts)
    assert sorted(rows["request_id"]) == ["good-000001", "good-000002"]
    assert rejects.select("line_number", "kind").rows() == [(2, "bad JSON"), (3, "bad JSON")]


def test_a_batch_of_good_messages_and_one_message_at_a_time_agree():
    texts = [text(requestId=f"batch-{i:06d}", statusCode=200 + i) for i in range(50)]
    together, _ = parse(texts)
    alone = pl.concat([parse([t])[0] for t in texts])
    assert together.equals(alone)
    # A number given as text is taken message by message (the fast reader refuses it).
    lenient, rejects = parse([*texts, text(requestId="as-text-0002", statusCode="201")])
    assert rejects.height == 0 and lenient.height == 51


def test_the_zone_of_a_message_is_its_own():
    texts = [
        text(pullZoneId=777, requestId="other-zone-1"),
        text(pullZoneId=None, requestId="no-zone-0001"),
        '{"pullZoneId": 777, broken',
        text(pullZoneId="1234", requestId="zone-as-text"),
    ]
    decoded = decode(texts, [1, 2, 3, 4])
    assert decoded.frame["_zone"].to_list() == [777, None, 777, 1234]
    rows, rejects = normalize(decoded, ZONE)
    assert rows["request_id"].to_list() == ["zone-as-text"] and rejects.height == 0
    rows, rejects = normalize(decoded, 777)
    assert rows["request_id"].to_list() == ["other-zone-1"]
    assert rejects["kind"].to_list() == ["bad JSON"]


def test_redaction_reaches_any_depth_and_any_spelling():
    nested = '{"a":[{"AUTHORIZATIONHEADER":"x-secret"}],"authorization":"y-secret"}'
    assert "secret" not in redacted_text(nested)
    assert redacted_text('{"b":1,"Authorization": "z-secret') == '{"b":1,"[redacted]'
