"""v1: a record that reaches the provider late is stored by the next pass, not at midnight.

A v1 day file is in time order, so a late record is inserted among the lines of its own
time, before lines an earlier pass already took. The open day's cursor moves only over
lines older than the stable point (now - lag_seconds); the rest is read again next pass.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import httpx
import polars as pl

from cdnlake.ingest.passes import Ingestor
from cdnlake.lake.log.progress import DAYS, DayCursor, day_start
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.retention import RETENTION
from tests.conftest import (
    KEY,
    NOW,
    S3Server,
    lake_frame,
    lake_ids,
    lake_of,
    load_test_config,
    logging_client,
    start_emulator,
    truth_ids,
    write_config,
)
from tests.sessions import session_for

ZONE = 1235
LAG = 300


def one_pass(config, emu):
    result = Ingestor(config, logging_client(config), session_for(config), clock=emu.clock.now).run(
        config.zones
    )[0]
    assert result.ok, result.error
    return result


def day_cursor(config) -> DayCursor:
    table = lake_of(config).open(REQUESTS)
    cursor = DayCursor.decode(table.transaction_version(REQUESTS.app_id(ZONE, DAYS)))
    assert cursor is not None
    return cursor


def settled_lines(emu, at: datetime) -> int:
    """The lines of ``at``'s day file older than the stable point: all have arrived."""
    stable = at - timedelta(seconds=LAG)
    return len(truth_ids(emu, ZONE, day_start(at.date()), stable, at=at))


def late_five(emu) -> set[str]:
    """Five requests made 30 s ago that reach the provider 90 s after they happened,
    behind lines of a later time that the last pass already took."""
    now_ms = emu.clock.now_ms()
    added = emu.traffic.add_late(ZONE, now_ms - 30_000, 90_000, count=5)
    return {r.wire.requestId for r in added}


def assert_complete(
    config, emu, rejected: frozenset[str] = frozenset(), first_pass: datetime = NOW
) -> None:
    ids = lake_ids(config, ZONE)
    assert len(ids) == len(set(ids)), "a request stored twice"
    now = emu.clock.now()
    truth = truth_ids(emu, ZONE, first_pass - RETENTION, now + timedelta(seconds=1))
    assert set(ids) == truth - rejected


def test_a_late_v1_record_is_stored_by_the_next_pass(tmp_path):
    emu = start_emulator(f"{ZONE}:v1", rpm=20)
    try:
        config = load_test_config(
            write_config(tmp_path, emu, zones=[(ZONE, "v1")], lag_seconds=LAG)
        )
        # Sixty requests of 20 s ago, on time: the first pass takes them.
        emu.traffic.add_late(ZONE, emu.clock.now_ms() - 20_000, 0, count=60)
        one_pass(config, emu)
        taken = lake_frame(config).filter(pl.col("ts") >= NOW - timedelta(seconds=30))
        assert taken.height >= 60, "the first pass took lines of a later time than the late ones"
        late = late_five(emu)
        assert not late & set(lake_ids(config, ZONE))

        emu.clock.advance(120)  # the five have arrived 30 s ago
        second = one_pass(config, emu)
        assert late <= set(lake_ids(config, ZONE)), "late v1 records wait for midnight"
        assert_complete(config, emu)
        # The cursor covers exactly the lines that can no longer change ...
        now = emu.clock.now()
        assert day_cursor(config) == DayCursor(now.date(), settled_lines(emu, now))
        # ... and the pass read the last minutes again, not the whole day.
        day_lines = len(truth_ids(emu, ZONE, day_start(now.date()), now))
        assert 0 < second.parsed < day_lines / 20
        assert second.duplicates > 0

        emu.clock.advance(60)
        one_pass(config, emu)
        assert_complete(config, emu)
    finally:
        emu.stop()


def test_just_after_midnight_yesterday_stays_open_until_it_closes(tmp_path):
    """At 00:02 yesterday's file can still grow: today's lines must not carry the cursor
    past it, or a record of 23:59 arriving at 00:03 would never be read."""
    midnight = datetime(2026, 11, 21, tzinfo=NOW.tzinfo)
    first = midnight + timedelta(minutes=2)
    emu = start_emulator(f"{ZONE}:v1", rpm=20, now=first)
    try:
        config = load_test_config(
            write_config(tmp_path, emu, zones=[(ZONE, "v1")], lag_seconds=LAG)
        )
        one_pass(config, emu)
        ts = int((midnight - timedelta(seconds=30)).timestamp() * 1000)
        late = {r.wire.requestId for r in emu.traffic.add_late(ZONE, ts, 90_000, count=5)}
        emu.clock.advance(120)  # 00:04: they arrived at 00:03
        one_pass(config, emu)
        assert late <= set(lake_ids(config, ZONE)), "yesterday's late records were skipped"
        assert_complete(config, emu, first_pass=first)
        assert day_cursor(config).day == midnight.date() - timedelta(days=1)  # still open
        emu.clock.advance(180)  # 00:07: yesterday has closed; the cursor moves to today
        one_pass(config, emu)
        now = emu.clock.now()
        assert day_cursor(config) == DayCursor(midnight.date(), settled_lines(emu, now))
        assert_complete(config, emu, first_pass=first)
    finally:
        emu.stop()


def test_a_rejected_line_in_the_open_tail_is_kept_once(tmp_path):
    """A line read again in the open tail is rejected again: it is kept only once its
    place in the file is final (rejects are kept by line number)."""
    emu = start_emulator(f"{ZONE}:v1", rpm=20)
    try:
        config = load_test_config(
            write_config(tmp_path, emu, zones=[(ZONE, "v1")], lag_seconds=LAG)
        )
        # One line of the last minute says it belongs to another zone.
        bad_ts = emu.clock.now_ms() - 60_000
        bad = emu.traffic.add_late(ZONE, bad_ts, 0)[0]
        bad.wire.pullZoneId = 9999
        one_pass(config, emu)
        for i in range(1, 3):  # late lines arrive before it while it is read again
            ts = bad_ts - 1000 * i
            emu.traffic.add_late(ZONE, ts, emu.clock.now_ms() + 60_000 - ts, count=5)
            emu.clock.advance(120)
            one_pass(config, emu)
        for _ in range(2):  # then it settles
            emu.clock.advance(120)
            one_pass(config, emu)
        rejects = lake_frame(config, "rejected_lines")
        assert rejects.filter(pl.col("raw_line").str.contains("|9999|", literal=True)).height == 1
        assert_complete(config, emu, frozenset({bad.wire.requestId}))
    finally:
        emu.stop()


def test_two_writers_at_once_store_the_late_records_once(tmp_path, s3_server: S3Server):
    """Two processes on two machines (two work directories, one lake) pass over the same
    v1 zone at the same time while late records arrive: every request once, none left
    for midnight, and the cursor never beyond what is settled."""
    emu = start_emulator(f"{ZONE}:v1", rpm=20)
    try:
        first = write_config(tmp_path, emu, zones=[(ZONE, "v1")], s3=s3_server, lag_seconds=LAG)
        (tmp_path / "b").mkdir()
        second = tmp_path / "b" / "config.toml"
        second.write_text(first.read_text())  # the same bucket, another work directory
        a, b = load_test_config(first), load_test_config(second)
        assert a.storage.work != b.storage.work
        one_pass(a, emu)
        late: set[str] = set()
        errors: list[BaseException] = []

        def run(config) -> None:
            try:
                one_pass(config, emu)
            except BaseException as exc:  # the assertion below names it
                errors.append(exc)

        for _ in range(3):
            late |= late_five(emu)
            emu.clock.advance(120)
            threads = [threading.Thread(target=run, args=(c,)) for c in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            assert not errors, errors
            assert late <= set(lake_ids(a, ZONE))
            assert_complete(a, emu)
            now = emu.clock.now()
            assert day_cursor(a) == DayCursor(now.date(), settled_lines(emu, now))
    finally:
        emu.stop()


def test_the_emulator_adds_late_records_on_demand():
    """``POST /_emulator/late``: requests made a while ago that reach the provider later;
    the v1 day file holds them among the lines of their own time once they arrived."""
    emu = start_emulator(f"{ZONE}:v1", rpm=20)
    try:
        answer = httpx.post(
            f"{emu.url}/_emulator/late",
            json={"zone": ZONE, "seconds_ago": 30, "delay_seconds": 90, "count": 5},
        )
        assert answer.status_code == 200
        late = set(answer.json()["request_ids"])
        assert len(late) == 5

        def day_file() -> list[str]:
            path = f"/{NOW:%m-%d-%y}/{ZONE}.log"
            got = httpx.get(emu.url + path, params={"order": "asc"}, headers={"AccessKey": KEY})
            return got.text.splitlines()

        assert not late & {line.split("|")[10] for line in day_file()}
        emu.clock.advance(60)
        lines = day_file()
        assert late <= {line.split("|")[10] for line in lines}
        stamps = [int(line.split("|")[2]) for line in lines]
        assert stamps == sorted(stamps)  # in time order: the late lines are not at the end
        assert stamps[-1] > int((NOW - timedelta(seconds=30)).timestamp() * 1000)
        bad = httpx.post(f"{emu.url}/_emulator/late", json={"zone": 1, "delay_seconds": 9})
        assert bad.status_code == 400
    finally:
        emu.stop()
