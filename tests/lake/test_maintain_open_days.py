"""Today's partitions compacted during the day (``OpenDays``), while passes commit.

Real Delta tables, real commits of :class:`ZoneWriter` (as a pass makes them) and a real
daemon over the loopback emulator. A compaction replaces exactly the small files it read,
in a commit that carries no application transaction: rows stay once, files per zone-day
stay bounded, and the zone's watermark is only ever moved by the passes, never back.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from apscheduler.triggers.interval import IntervalTrigger

from cdnlake.lake.log.progress import WATERMARK, from_ms, to_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.upkeep import maintain as maintain_module
from cdnlake.lake.upkeep.maintain import OpenDays
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.retention import oldest_served
from cdnlake.scheduler import Daemon, wait_for
from tests.conftest import (
    lake_ids,
    lake_of,
    load_test_config,
    make_client,
    start_emulator,
    truth_ids,
    write_config,
)
from tests.lake.test_fencing import provider, stored_ids, watermark
from tests.sessions import session_of

ZONE = 77
DAY = datetime(2026, 11, 20, tzinfo=UTC)
LIMIT = 5  # OPEN_DAY_FILES for these tests


@pytest.fixture(autouse=True)
def few_files(monkeypatch):
    monkeypatch.setattr(maintain_module, "OPEN_DAY_FILES", LIMIT)


def files_of(lake: Lake, zone: int, day: str) -> int:
    table = lake.open(REQUESTS)
    assert table is not None
    partition = [("pull_zone_id", "=", str(zone)), ("date", "=", day)]
    return len(lake.add_actions(REQUESTS, table, partition))


def log_entries(table_dir: Path) -> list[list[dict]]:
    return [
        [json.loads(line) for line in path.read_text().splitlines() if line]
        for path in sorted((table_dir / "_delta_log").glob("*.json"))
    ]


def assert_progress_only_from_passes(table_dir: Path, zone: int) -> None:
    """No compaction carries an application transaction of its own (a commit that only
    compacts, every action of it no data change, carries none; one that also lands a
    pass's rows in the same group carries the pass's), and the zone's watermark never went
    back from one commit to the next."""
    app = REQUESTS.app_id(zone)
    last = 0
    compactions = 0
    for actions in log_entries(table_dir):
        removes = [a for a in actions if "remove" in a]
        txns = [a["txn"] for a in actions if "txn" in a]
        if removes:
            compactions += 1
            changes = [a.get("add") or a.get("remove") for a in actions]
            if not any(c and c.get("dataChange") for c in changes):  # the compaction alone
                assert not txns, f"a compaction commit carried progress: {txns}"
        for txn in txns:
            if txn["appId"] == app:
                assert txn["version"] >= last, "the watermark went back"
                last = txn["version"]
    assert compactions, "nothing was compacted"


def test_a_days_small_files_are_compacted_while_a_pass_commits(tmp_path):
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, ZONE)
    minute = timedelta(minutes=1)
    for i in range(12):  # twelve small commits, a minute of records each
        start = DAY + i * minute
        writer.commit(provider(ZONE, start, start + minute), {WATERMARK: to_ms(start + minute)})
    assert files_of(lake, ZONE, "2026-11-20") == 12

    days = OpenDays(session_of(lake))
    committing = threading.Event()
    done = threading.Event()
    errors: list[BaseException] = []

    def a_pass() -> None:  # another writer, committing a minute at a time meanwhile
        try:
            other = ZoneWriter(session_of(lake), REQUESTS, ZONE)
            for i in range(12, 40):
                start = DAY + i * minute
                # each minute again with the one before: deduplication reads the day's
                # files, which the compaction is replacing
                rows = provider(ZONE, start - minute, start + minute)
                other.commit(rows, {WATERMARK: to_ms(start + minute)})
                committing.set()
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=a_pass)
    thread.start()
    assert committing.wait(60)
    rounds = 0
    while not done.is_set() or rounds < 2:
        days.compact(REQUESTS, [ZONE], DAY.date())
        rounds += 1
    thread.join(60)
    assert not errors, errors
    days.compact(REQUESTS, [ZONE], DAY.date())

    assert files_of(lake, ZONE, "2026-11-20") <= LIMIT
    ids = stored_ids(lake)
    assert len(ids) == len(set(ids)), "a request stored twice"
    assert set(ids) == set(provider(ZONE, DAY, DAY + 40 * minute)["request_id"])
    assert watermark(lake) == DAY + 40 * minute  # the passes' own, untouched
    assert_progress_only_from_passes(tmp_path / "lake" / "requests", ZONE)
    # Sorted by ts: the compacted file's rows are in time order.
    import pyarrow.parquet as pq

    table = lake.open(REQUESTS)
    assert table is not None
    largest = max(table.file_uris(), key=lambda uri: pq.ParquetFile(uri).metadata.num_rows)
    stamps = pq.read_table(largest, columns=["ts"]).column("ts").to_pylist()
    assert len(stamps) > 120 and stamps == sorted(stamps)


def test_other_days_and_large_files_are_left_alone(tmp_path, monkeypatch):
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, ZONE)
    minute = timedelta(minutes=1)
    yesterday = DAY - timedelta(days=1)
    for i in range(8):
        for day in (yesterday, DAY):
            start = day + i * minute
            writer.commit(provider(ZONE, start, start + minute), {})
    monkeypatch.setattr(maintain_module, "SMALL_FILE_BYTES", 1)  # every file is "large"
    assert OpenDays(session_of(lake)).compact(REQUESTS, [ZONE], DAY.date()) == 0
    monkeypatch.undo()
    monkeypatch.setattr(maintain_module, "OPEN_DAY_FILES", LIMIT)
    assert OpenDays(session_of(lake)).compact(REQUESTS, [ZONE], DAY.date()) == 8
    assert files_of(lake, ZONE, "2026-11-20") == 1
    assert files_of(lake, ZONE, "2026-11-19") == 8  # the nightly maintain's business


@pytest.mark.timeout(180)
def test_the_daemon_compacts_a_busy_open_day_while_its_passes_run(tmp_path):
    emu = start_emulator("1234", rpm=20, now=None, frozen=False)
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2")], page_size=10000)
        path.write_text(
            path.read_text().replace(
                "[schedule]\n", '[schedule]\nreport_at = "23:59"\nmaintain_at = "23:59"\n'
            )
        )
        config = load_test_config(path)
        lake = lake_of(config)
        # Many small commits today already (rows of their own, no progress), as a day of
        # minute-by-minute passes leaves them.
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        seeder = ZoneWriter(session_of(lake), REQUESTS, 1234)
        for i in range(30):
            rows = provider(1234, today + timedelta(seconds=i), today + timedelta(seconds=i + 1))
            seeder.commit(rows.with_columns(pl.lit(f"seed-{i}").alias("request_id")), {})
        assert files_of(lake, 1234, today.date().isoformat()) == 30
        daemon = Daemon(
            config,
            make_client(config),
            compact_trigger=IntervalTrigger(seconds=2),
            catch_up=False,
        )
        first_launch = datetime.now(UTC)
        passes = 8
        daemon.start()
        try:

            def compacted_while_passing() -> bool:
                days = daemon._open_days
                return (
                    days is not None
                    and days.rewritten >= 30
                    and daemon.zone_passes.get(1234, 0) >= passes
                )

            assert wait_for(compacted_while_passing, 150, step=0.2)
        finally:
            assert daemon.stop()
        assert daemon._open_days is not None and daemon._open_days.rewritten >= 30
        assert files_of(lake, 1234, today.date().isoformat()) <= LIMIT + 4
        ids = lake_ids(config, 1234)
        assert len(ids) == len(set(ids)), "a request stored twice"
        assert {f"seed-{i}" for i in range(30)} <= set(ids)
        table = lake.open(REQUESTS)
        assert table is not None
        mark = from_ms(table.transaction_version(REQUESTS.app_id(1234)))
        assert mark is not None
        start = oldest_served(first_launch) + timedelta(minutes=1)
        missing = truth_ids(emu, 1234, start, mark) - set(ids)
        assert not missing, f"{len(missing)} requests lost"
        assert_progress_only_from_passes(Path(config.storage.lake_location) / "requests", 1234)
    finally:
        emu.stop()


@pytest.mark.parametrize("trouble", ["undecodable", "store failing"])
def test_a_zone_whose_files_do_not_read_stops_no_other_zones_compaction(
    tmp_path, monkeypatch, trouble
):
    """Zone 1's day does not read: a file that does not decode (left in place for
    ``maintain``, a DataError) or a store that fails (transient, tried again at the next
    run). Zone 2, after it, is compacted all the same, and nothing raw escapes. Before, the
    first zone's ArrowInvalid or OSError ended the run: no later zone compacted, all day."""
    from cdnlake.errors import DataError, StorageUnavailableError

    lake = Lake(str(tmp_path / "lake"), {})
    minute = timedelta(minutes=1)
    for zone in (1, 2):
        writer = ZoneWriter(session_of(lake), REQUESTS, zone)
        for i in range(LIMIT + 1):
            writer.commit(provider(zone, DAY + i * minute, DAY + (i + 1) * minute), {})
    table = lake.open(REQUESTS)
    assert table is not None
    first = sorted(u for u in table.file_uris() if "pull_zone_id=1/" in u)[0]
    days = OpenDays(session_of(lake))
    if trouble == "undecodable":
        Path(first.removeprefix("file://")).write_bytes(b"not parquet")
        expected: type = DataError
    else:
        real = Lake.dataset

        def failing(self, spec, table, partitions=None, *, actions=None):
            if actions and any("pull_zone_id=1/" in a["path"] for a in actions):
                raise OSError("When reading information for key: AWS Error SLOW_DOWN (503)")
            return real(self, spec, table, partitions, actions=actions)

        monkeypatch.setattr(Lake, "dataset", failing)
        expected = StorageUnavailableError
    assert days.compact(REQUESTS, [1, 2], DAY.date()) == LIMIT + 1  # zone 2's files
    ((table_name, zone, failure),) = days.failures
    assert (table_name, zone) == (REQUESTS.name, 1)
    assert isinstance(failure, expected), failure
    assert files_of(lake, 1, DAY.date().isoformat()) == LIMIT + 1  # left as it was
    assert files_of(lake, 2, DAY.date().isoformat()) == 1
    table.update_incremental()
    kept = lake.dataset(REQUESTS, table, [("pull_zone_id", "=", "2")]).to_table()
    assert sorted(kept.column("request_id").to_pylist()) == sorted(
        provider(2, DAY, DAY + (LIMIT + 1) * minute)["request_id"].to_list()
    )
