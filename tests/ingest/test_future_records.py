"""A record stamped more than FUTURE_TOLERANCE_SECONDS after now is rejected with its
reason, from v1 lines (the parser) as from v2 records (normalise)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import msgspec

from cdnlake.config import FUTURE_TOLERANCE_SECONDS
from cdnlake.ingest.decode import decode_v2_batch
from cdnlake.ingest.normalize import normalize_v2
from cdnlake.ingest.v1_parser import Block, parse_block
from tests.ingest.test_decode import page_body

V1 = "HIT|200|{ts}|412|1234|163.172.53.229|-|https://cdn.example.net/a.m4v|WA|UA|{rid}|DE"


def test_a_v1_line_from_the_future_is_rejected():
    now_ms = int(time.time() * 1000)
    soon = now_ms + (FUTURE_TOLERANCE_SECONDS - 60) * 1000  # within the tolerance: taken
    lines = [
        V1.format(ts=now_ms - 1000, rid="a" * 32),
        V1.format(ts=soon, rid="b" * 32),
        V1.format(ts=1_893_456_000_000, rid="c" * 32),  # 2030-01-01
        V1.format(ts=1_893_456_000, rid="d" * 32),  # the same in seconds
    ]
    data = ("\n".join(lines) + "\n").encode()
    good, rejects, _ = parse_block(Block(1, data, False), 1234)
    assert good["request_id"].to_list() == ["a" * 32, "b" * 32]
    assert rejects["kind"].to_list() == ["future timestamp"] * 2
    assert rejects["reason"].to_list() == [
        "field 3: timestamp 1893456000000 is more than 1 hour(s) in the future",
        "field 3: timestamp 1893456000 is more than 1 hour(s) in the future",
    ]


def test_a_v2_record_from_the_future_is_rejected():
    page = msgspec.json.decode(page_body(3))
    page["data"][1]["timestamp"] = "2030-01-01T00:00:00.000Z"
    page["data"][2]["timestamp"] = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    good, rejects = normalize_v2(decode_v2_batch(msgspec.json.encode(page)).frame, 1)
    assert good.height == 2
    assert rejects["kind"].to_list() == ["future timestamp"]
    assert rejects["reason"].to_list() == [
        "timestamp 2030-01-01T00:00:00.000Z is more than 1 hour(s) in the future"
    ]
