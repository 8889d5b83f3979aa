"""A v2 pass reads each span twice: once as soon as the provider serves it (fresh), once
more when it is stable at ``now - lag_seconds`` (complete); ``overlap_seconds`` is a margin
re-read about once an hour. Against the loopback emulator, whose records arrive late (up
to 5 minutes, and later on demand with ``Traffic.add_late``)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
from msgspec.structs import replace

from cdnlake.client import LoggingClient
from cdnlake.ingest.passes import Ingestor
from cdnlake.ingest.runner import margin_slice
from cdnlake.lake.log.progress import FRESH, from_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.retention import oldest_served
from tests.conftest import (
    FAST_RETRY,
    NOW,
    lake_ids,
    lake_of,
    load_test_config,
    make_client,
    start_emulator,
    truth_ids,
    write_config,
)
from tests.sessions import session_for

ZONE = 1234
LAG = 300
OVERLAP = 600
START = oldest_served(NOW)  # where the first pass starts reading


def ingestor(config, emu, client=None, clock=None):
    client = client or LoggingClient(make_client(config, retry=FAST_RETRY))
    return Ingestor(config, client, session_for(config), clock=clock or emu.clock.now)


def progress(config, part: str = "") -> datetime | None:
    table = lake_of(config).open(REQUESTS)
    return from_ms(table.transaction_version(REQUESTS.app_id(ZONE, part)))


def assert_promises_kept(config, emu, since: datetime) -> None:
    """Each request once; every request before the watermark in the lake, whenever it
    arrives (all arrive within ``lag_seconds`` here); every request the provider served
    from ``since`` (the pass before) to now in the lake already."""
    now = emu.clock.now()
    ids = lake_ids(config, ZONE)
    assert len(ids) == len(set(ids)), "a request was stored twice"
    stored = set(ids)
    watermark = progress(config)
    assert watermark is not None
    ever = truth_ids(emu, ZONE, START, watermark, at=now + timedelta(days=1))
    missing = ever - stored
    assert not missing, f"{len(missing)} requests before the watermark are not in the lake"
    served = truth_ids(emu, ZONE, since, now, at=now)
    assert served <= stored, f"{len(served - stored)} requests served are not in the lake yet"


def test_in_steady_state_each_record_is_read_about_twice(tmp_path):
    """Before, passes read ``lag + overlap + poll`` for every ``poll`` of new records
    (8.5x at a 120 s poll); now the stable span and the fresh span, once each, and a slice
    of the margin ``overlap_seconds`` before the watermark, ``overlap / 3600`` as wide as
    the pass's span: no pass pays for the whole margin at once."""
    emu = start_emulator(str(ZONE), rpm=20)
    try:
        config = load_test_config(
            write_config(tmp_path, emu, zones=[(ZONE, "v2")], lag_seconds=LAG)
        )
        ingest = ingestor(config, emu)
        first = ingest.run(config.zones)[0]
        assert first.ok, first.error
        watermark = first.reached
        read = new = 0
        for _ in range(30):  # an hour at a 120 s poll
            since = emu.clock.now()
            emu.clock.advance(120)
            result = ingest.run(config.zones)[0]
            assert result.ok, result.error
            read += result.parsed
            new += result.rows
            assert result.late == 0  # all arrive within lag_seconds: the margin finds none
            # each pass begins with its slice of the margin, never the whole of it
            assert result.window_from == watermark - timedelta(seconds=OVERLAP)
            watermark = result.reached
            assert watermark == emu.clock.now() - timedelta(seconds=LAG)
            assert_promises_kept(config, emu, since)
        assert new > 1000
        assert read <= (2 + OVERLAP / 3600 + 0.08) * new, (read, new)
        assert progress(config, FRESH) == emu.clock.now()  # where the next fresh read starts
    finally:
        emu.stop()


def test_the_margin_is_read_a_slice_a_pass():
    """The slices follow the spans: pass after pass they sample ``overlap_seconds`` of
    every hour at ``lag + overlap`` of age; with ``lag_seconds = 0`` the whole margin."""
    wm = START + timedelta(hours=5)
    oldest = START
    assert margin_slice(wm, wm + timedelta(seconds=60), 300, 600, oldest) == (
        wm - timedelta(seconds=600),
        wm - timedelta(seconds=590),
    )
    # an hour of spans reads 600 s of margin in all
    total = timedelta()
    mark = wm
    for _ in range(60):
        got = margin_slice(mark, mark + timedelta(seconds=60), 300, 600, oldest)
        assert got is not None
        total += got[1] - got[0]
        mark += timedelta(seconds=60)
    assert total == timedelta(seconds=600)
    # a long span (a zone catching up) never reads past the watermark
    assert margin_slice(wm, wm + timedelta(days=1), 300, 600, oldest) == (
        wm - timedelta(seconds=600),
        wm,
    )
    assert margin_slice(wm, wm + timedelta(seconds=60), 0, 600, oldest) == (
        wm - timedelta(seconds=600),
        wm,
    )
    assert margin_slice(wm, wm, 300, 600, oldest) is None  # nothing read, nothing again
    # never past retention
    edge = margin_slice(START + timedelta(seconds=5), START + timedelta(hours=1), 300, 600, START)
    assert edge is not None and edge[0] == START


def test_records_later_than_lag_are_counted_where_the_margin_finds_them(tmp_path):
    """Records that reach the provider after the stable read passed them (later than
    ``lag_seconds``) are found by the margin's slice, stored, and counted apart: the pass
    says so and ``cdnlake_records_later_than_lag_total`` counts them, so the operator
    raises ``lag_seconds`` (records as late between the slices are not read again)."""
    from cdnlake.monitoring.metrics import DaemonMetrics

    emu = start_emulator(str(ZONE), rpm=20)
    try:
        config = load_test_config(
            write_config(tmp_path, emu, zones=[(ZONE, "v2")], lag_seconds=LAG)
        )
        metrics = DaemonMetrics(config)
        ingest = ingestor(config, emu)
        first = ingest.run(config.zones)[0]
        assert first.ok and first.late == 0, first.error
        assert first.reached is not None
        # Made inside the next pass's margin slice (OVERLAP before the watermark, 10 s
        # wide for a 60 s poll), visible 5 s after this pass: 900 s late.
        made = first.reached - timedelta(seconds=OVERLAP - 5)
        made_ms = int(made.timestamp() * 1000)
        visible_ms = int((emu.clock.now() + timedelta(seconds=5)).timestamp() * 1000)
        late = emu.traffic.add_late(ZONE, made_ms, visible_ms - made_ms, count=3)
        emu.clock.advance(60)
        second = ingest.run(config.zones)[0]
        metrics.observe(second)
        assert second.ok, second.error
        assert second.late == 3
        assert "3 records later than lag_seconds" in second.summary()
        assert {r.wire.requestId for r in late} <= set(lake_ids(config, ZONE))
        counted = metrics.registry.get_sample_value(
            "cdnlake_records_later_than_lag_total", {"zone": str(ZONE), "source": "v2"}
        )
        assert counted == 3
        emu.clock.advance(60)
        third = ingest.run(config.zones)[0]
        assert third.ok and third.late == 0  # read again: duplicates, not late
    finally:
        emu.stop()


# (seconds until the next pass, seconds late of the requests made just before it)
ROUNDS = [
    (60, 2),
    (7, 45),
    (120, LAG),  # exactly as late as allowed
    (299, 150),
    (400, 1),  # a pass later than lag: the fresh read starts at the stable point
    (61, LAG - 1),
    (30, 90),
    (180, LAG),
]


def test_no_late_record_is_lost_while_the_lateness_changes(tmp_path):
    """Before each pass, requests of the last seconds that reach the provider later (how
    much later changes from pass to pass, up to ``lag_seconds``): the fresh read cannot
    see them, the stable read must."""
    emu = start_emulator(str(ZONE), rpm=10)
    try:
        config = load_test_config(
            write_config(tmp_path, emu, zones=[(ZONE, "v2")], lag_seconds=LAG)
        )
        ingest = ingestor(config, emu)
        assert ingest.run(config.zones)[0].ok
        added: list[str] = []
        since = emu.clock.now()
        for poll, late in ROUNDS:
            now_ms = int(emu.clock.now().timestamp() * 1000)
            for back_ms in (1, late * 500, late * 1000 - 1):  # they arrive after this pass
                records = emu.traffic.add_late(ZONE, now_ms - back_ms, late * 1000, count=3)
                added += [r.wire.requestId for r in records]
            result = ingest.run(config.zones)[0]
            assert result.ok, result.error
            assert_promises_kept(config, emu, since)
            since = emu.clock.now()
            emu.clock.advance(poll)
        emu.clock.advance(LAG)
        assert ingest.run(config.zones)[0].ok
        assert_promises_kept(config, emu, since)
        stored = set(lake_ids(config, ZONE))
        assert set(added) <= stored, f"{len(set(added) - stored)} late requests lost"
    finally:
        emu.stop()


class ParkingClient(LoggingClient):
    """A logging client whose pass stops before reading its first window that starts at
    or after ``park_from``, until the test lets it go on."""

    def __init__(self, api, park_from: datetime) -> None:
        super().__init__(api)
        self.park_from: datetime | None = park_from
        self.parked = threading.Event()
        self.resume = threading.Event()

    def iter_v2(self, zone_id, query, decode, stats=None):
        if self.park_from is not None and query.from_ >= self.park_from:
            self.park_from = None
            self.parked.set()
            assert self.resume.wait(120)
        return super().iter_v2(zone_id, query, decode, stats)


@pytest.mark.parametrize("parked_in", ["stable", "fresh"])
def test_a_stale_pass_and_its_successor_keep_every_request_once(tmp_path, parked_in):
    """Two daemons on one zone (another machine: its own locks, the same lake). One pass
    stops before its stable read, or before its fresh read with the rows of its stable
    read not yet committed, while the
    other runs whole passes that move the watermark and the fresh end past it; then it
    goes on and commits its older progress. Nothing doubled, nothing lost, the watermark
    never back, and the passes after it keep every promise."""
    emu = start_emulator(str(ZONE), rpm=20)
    try:
        config = load_test_config(
            write_config(tmp_path, emu, zones=[(ZONE, "v2")], lag_seconds=LAG)
        )
        other = tmp_path / "other"
        other.mkdir()
        twin = replace(
            config,
            storage=replace(config.storage, root=other, lake_uri=config.storage.lake_location),
        )
        assert ingestor(config, emu).run(config.zones)[0].ok
        emu.clock.advance(60)
        stale_now = emu.clock.now()
        park_from = (
            progress(config) if parked_in == "stable" else stale_now - timedelta(seconds=LAG)
        )
        assert park_from is not None
        client = ParkingClient(make_client(config, retry=FAST_RETRY), park_from=park_from)
        stale = ingestor(config, emu, client, clock=lambda: stale_now)
        results = []
        passing = threading.Thread(target=lambda: results.extend(stale.run(config.zones)))
        passing.start()
        try:
            while not client.parked.wait(0.05):
                assert passing.is_alive(), "the pass ended without reading that window"
            for _ in range(3):  # the successor moves everything past the stale pass
                since = emu.clock.now()
                emu.clock.advance(60)
                ts = int(emu.clock.now().timestamp() * 1000) - 1000
                emu.traffic.add_late(ZONE, ts, LAG * 1000, count=5)
                assert ingestor(twin, emu).run(twin.zones)[0].ok
            ahead = progress(config), progress(config, FRESH)
        finally:
            client.resume.set()
            passing.join()
        assert results and results[0].ok, results and results[0].error
        assert progress(config) == ahead[0], "the watermark moved back"
        assert_promises_kept(config, emu, since)
        for poll in (60, 60, LAG):
            since = emu.clock.now()
            emu.clock.advance(poll)
            assert ingestor(config, emu).run(config.zones)[0].ok
            assert_promises_kept(config, emu, since)
        start = START
        ids = lake_ids(config, ZONE)
        watermark = progress(config)
        assert set(ids) >= truth_ids(emu, ZONE, start, watermark)
        assert set(ids) <= truth_ids(emu, ZONE, start, emu.clock.now())
    finally:
        emu.stop()
