"""Zones at a sustained rate: made second by second on demand, the same every time, in
bounded memory, and a v2 pass over real HTTP stores exactly what the emulator serves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from cdnlake.emulator.records import MAX_DELAY_MS, ZoneSpec
from cdnlake.emulator.server import Emulator, EmulatorConfig
from cdnlake.emulator.statistics import charts
from cdnlake.emulator.sustained import BUCKET_MS
from cdnlake.emulator.traffic import Traffic
from tests.conftest import (
    KEY,
    NOW,
    ingest_all,
    lake_ids,
    load_test_config,
    run_cli,
    truth_ids,
    write_config,
)

H = {"AccessKey": KEY}
NOW_MS = int(NOW.timestamp() * 1000)
SINCE = NOW - timedelta(minutes=20)
SINCE_MS = int(SINCE.timestamp() * 1000)


def busy(rate: float = 40.0, since_ms: int | None = SINCE_MS) -> dict[int, ZoneSpec]:
    return {1234: ZoneSpec(1234, extended=True, per_second=rate, since_ms=since_ms)}


def start(rate: float = 40.0, seed: int = 7) -> Emulator:
    config = EmulatorConfig(
        port=0,
        seed=seed,
        access_key=KEY,
        zones={**busy(rate), 1235: ZoneSpec(1235)},
        rate_limit=100_000,
        now=NOW,
        frozen=True,
    )
    return Emulator(config).start()


def page(emu: Emulator, **params: object) -> dict:
    r = httpx.get(f"{emu.url}/v2/pullzones/1234/logs", params=params, headers=H, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def read_all(
    emu: Emulator, frm: datetime, to: datetime, limit: int, order: str, **extra: object
) -> list[dict]:
    out: list[dict] = []
    offset = 0
    while True:
        body = page(
            emu,
            **{"from": frm.isoformat(), "to": to.isoformat()},
            limit=limit,
            offset=offset,
            order=order,
            **extra,
        )
        out += body["data"]
        if not body["pagination"]["hasMore"]:
            return out
        offset += limit


def test_the_same_window_twice_gives_the_same_records():
    a = Traffic(7, busy())
    b = Traffic(7, busy())
    lo, hi = NOW_MS - 90_000, NOW_MS - 30_000
    first = a.records(1234, lo, hi)
    assert len(first) > 1000
    assert all(lo <= r.ts_ms < hi for r in first)
    assert [r.ts_ms for r in first] == sorted(r.ts_ms for r in first)
    # Another instance, and the same one after its caches let the window go.
    assert [r.wire for r in b.records(1234, lo, hi)] == [r.wire for r in first]
    a.records(1234, lo - 600_000, lo - 300_000)
    assert [(r.wire, r.visible_ms) for r in a.records(1234, lo, hi)] == [
        (r.wire, r.visible_ms) for r in first
    ]
    # A different seed is different traffic; the rate holds on average.
    assert {r.wire.requestId for r in Traffic(8, busy()).records(1234, lo, hi)}.isdisjoint(
        r.wire.requestId for r in first
    )
    assert 0.9 * 40 * 60 < len(first) < 1.1 * 40 * 60
    delays = [r.visible_ms - r.ts_ms for r in first]
    assert max(delays) <= MAX_DELAY_MS and sum(d > 60_000 for d in delays) > 0


def test_nothing_before_the_zone_starts():
    traffic = Traffic(7, busy())
    assert traffic.records(1234, SINCE_MS - 3_600_000, SINCE_MS) == []
    after = traffic.records(1234, SINCE_MS - 3_600_000, SINCE_MS + 10_000)
    assert after and min(r.ts_ms for r in after) >= SINCE_MS


def test_memory_stays_bounded_after_many_windows():
    traffic = Traffic(7, busy(rate=500, since_ms=None))
    sustained = traffic.sustained
    sustained.records_cache.capacity = 5_000
    sustained.times_cache.capacity = 20_000
    spec = traffic.spec(1234)
    served = 0
    for k in range(40):  # 40 windows of 10 s: 200,000 records made in all
        lo = NOW_MS - 3_600_000 + k * 60_000
        records, _ = sustained.page(spec, lo, lo + 10_000, NOW_MS, 0, 10_000, False)
        served += len(records)
        for s in range(NOW_MS // BUCKET_MS - 300, NOW_MS // BUCKET_MS, 7):
            sustained.visible_count(spec, s, NOW_MS)  # the seconds still arriving late
        # At most the capacity, and one second beyond it (the newest is always kept).
        assert sustained.records_cache.total <= 5_000 + 700
        assert sustained.times_cache.total <= 20_000 + 700
    assert served > 150_000


def test_pages_without_filters_equal_the_whole_window_sliced():
    """The fast path (only the page is made) against the plain one (a filter that keeps
    every record sends the emulator down it), both ways, pages straddling seconds."""
    emu = start()
    try:
        frm, to = NOW - timedelta(minutes=8, seconds=0.25), NOW - timedelta(seconds=0.5)
        window = {"from": frm.isoformat(), "to": to.isoformat()}
        everything = {"status": "1xx,2xx,3xx,4xx,5xx"}
        for order in ("asc", "desc"):
            fast = read_all(emu, frm, to, 777, order)
            plain = read_all(emu, frm, to, 10_000, order, **everything)
            assert fast == plain and len(fast) > 10_000 * 1.5
            middle = page(emu, **window, limit=500, offset=6_000, order=order)
            assert middle["data"] == plain[6_000:6_500] and middle["pagination"]["hasMore"]
            beyond = page(emu, **window, limit=100, offset=len(plain), order=order)
            assert beyond["data"] == [] and not beyond["pagination"]["hasMore"]
        # The late ones: visible records only, the newest still arriving.
        ids = {r["requestId"] for r in fast}
        assert ids == truth_ids(emu, 1234, frm, to)
        made = emu.traffic.records(1234, int(frm.timestamp() * 1000), int(to.timestamp() * 1000))
        assert len(ids) < len(made)
    finally:
        emu.stop()


def test_a_v2_pass_stores_exactly_the_records_served(tmp_path):
    emu = start(rate=25)
    try:
        config = load_test_config(
            write_config(tmp_path, emu, [(1234, "v2")], page_size=1000, lag_seconds=300)
        )
        before = emu.traffic.served.get(1234, 0)
        ingest_all(config, emu)
        served_first = emu.traffic.served[1234] - before
        ids = lake_ids(config, 1234)
        assert len(ids) == len(set(ids)) > 20 * 60 * 25 * 0.8
        assert set(ids) == truth_ids(emu, 1234, SINCE, NOW)
        assert served_first == len(ids)  # a first pass: everything it read was new
        # Later: the records that arrived late since are stored, each once.
        emu.clock.advance(400)
        ingest_all(config, emu)
        ids = lake_ids(config, 1234)
        assert len(ids) == len(set(ids))
        assert set(ids) == truth_ids(emu, 1234, SINCE, emu.clock.now())
        stats = httpx.get(f"{emu.url}/_emulator/stats", headers=H).json()["zones"]["1234"]
        assert stats["records_served"] == emu.traffic.served[1234] > served_first
    finally:
        emu.stop()


def test_statistics_count_a_sustained_zone():
    emu = start(rate=5)
    try:
        got = charts(emu, [1234], SINCE_MS, NOW_MS, 3_600_000, NOW_MS)
        made = [r for r in emu.traffic.records(1234, SINCE_MS, NOW_MS) if r.ts_ms <= NOW_MS]
        assert got["TotalRequestsServed"] == len(made) > 0
        assert got["TotalBandwidthUsed"] == sum(r.wire.bytesSent for r in made)
    finally:
        emu.stop()


def test_late_records_join_their_second():
    emu = start(rate=5)
    try:
        r = httpx.post(
            f"{emu.url}/_emulator/late",
            json={"zone": 1234, "seconds_ago": 600, "delay_seconds": 590, "count": 3},
            headers=H,
        )
        added = set(r.json()["request_ids"])
        frm = NOW - timedelta(minutes=11)
        served = {x["requestId"] for x in read_all(emu, frm, NOW, 100, "asc")}
        assert added <= served
        assert served == truth_ids(emu, 1234, frm, NOW)
    finally:
        emu.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--zone-rate", "1234=fast"], "expected ZONE=REQUESTS/s[@SINCE]"),
        (["--zone-rate", "999=10/s"], "--zone-rate: zone 999 is not one of --zones"),
        (["--zone-rate", "1234=10/s@yesterday"], "expected an ISO-8601 instant"),
    ],
)
def test_zone_rate_flag_is_checked(args, message):
    r = run_cli("emulator", "--port", "0", "--zones", "1234", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert message in lines[-1], r.stderr
    if "999" in message:
        assert len(lines) == 1
    assert r.stdout == "" or "usage" in r.stderr


def test_a_zone_rate_starts_at_the_emulator_start_by_default():
    from argparse import ArgumentParser

    from cdnlake.cli.emulator_cmd import add_arguments, build_config

    parser = ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--zones", "1234,1235", "--zone-rate", "1234=10000/s", "--now", "2026-11-20T12:00:00Z"]
    )
    config = build_config(args)
    assert config.zones[1234].per_second == 10_000
    start = datetime(2026, 11, 20, 12, tzinfo=UTC)
    assert config.zones[1234].since_ms == 1000 * int(start.timestamp())
    assert config.zones[1235].per_second == 0
