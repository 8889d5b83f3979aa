"""The lake on S3 through a faulty road (our proxy in front of moto's server).

A transient failure of the store (503 SlowDown, a write applied and its answer lost, a
slow answer, a refused read, a burst of refusals) is retried, then fails the work: it is
never damage. Rows stay exactly once and nothing is set aside, through a real
``cdnlake ingest`` SIGKILLed mid-pass on that road too.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import polars as pl
import pytest

from cdnlake.lake.log.progress import from_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.zone import damage
from cdnlake.retention import oldest_served
from cdnlake.scheduler import wait_for
from tests.conftest import (
    NOW,
    ingest_all,
    lake_frame,
    lake_ids,
    lake_of,
    load_test_config,
    run_cli,
    spawn_cli,
    start_emulator,
    truth_ids,
    write_config,
)
from tests.reliability.faultproxy import FaultProxy


@pytest.fixture
def proxy(s3_server) -> Iterator[FaultProxy]:
    road = FaultProxy(s3_server.url, seed=11)
    yield road
    road.stop()


@pytest.fixture
def emu():
    e = start_emulator("1234", rpm=5)
    yield e
    e.stop()


def faulty_config(tmp_path, emu, s3_server, proxy):
    """A config whose lake is in a new bucket of moto's server, reached through ``proxy``."""
    path = write_config(tmp_path, emu, zones=[(1234, "v2")], s3=s3_server)
    path.write_text(path.read_text().replace(s3_server.url, proxy.url))
    return path


def quarantined(s3_server, config) -> list[str]:
    bucket, prefix = config.storage.lake_location.removeprefix("s3://").split("/", 1)
    s3 = boto3.client("s3", endpoint_url=s3_server.url, region_name="us-east-1")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/_quarantine/")
    return [o["Key"] for o in listed.get("Contents", [])]


def test_passes_and_a_check_through_a_faulty_road_set_nothing_aside(
    tmp_path, emu, s3_server, proxy, monkeypatch
):
    monkeypatch.setattr(damage, "FIRST_WAIT", 0.01)  # this process's bound: the test's pace
    monkeypatch.setattr(damage, "READ_ATTEMPTS", 2)
    path = faulty_config(tmp_path, emu, s3_server, proxy)
    config = load_test_config(path)
    assert ingest_all(config, emu)[0].ok  # a clean start: the table exists
    proxy.configure(read_503=0.03, write_503=0.08, write_lost=0.06, slow=0.03, slow_seconds=0.3)
    for number in range(12):  # three passes, more (bounded) until a write's answer was lost
        if number == 1:
            proxy.burst(1.5)  # everything refused for a moment
        if number >= 3 and proxy.faults()["write_lost"]:
            break
        emu.clock.advance(60)
        ingest_all(config, emu)  # a pass may fail on a fault: the next one goes on
    proxy.configure(refuse="data-file-reads")  # as a throttled prefix does
    emu.clock.advance(60)
    refused = ingest_all(config, emu)[0]  # its deduplication cannot read a file
    assert not refused.ok and "nothing was set aside" in (refused.error or ""), refused.error
    assert quarantined(s3_server, config) == []
    proxy.configure(refuse=None)
    emu.clock.advance(60)
    for _ in range(3):
        if (last := ingest_all(config, emu)[0]).ok:
            break
    assert last.ok, last.error
    check = run_cli("--config", str(path), "maintain", "--check-all", "--retention-hours", "0")
    proxy.calm()
    assert check.returncode == 0 or len(check.stderr.splitlines()) == 1, check.stderr
    assert "DAMAGED" not in check.stdout
    assert quarantined(s3_server, config) == []
    faults = proxy.faults()
    assert sum(faults.values()) > 20 and faults["write_lost"] and faults["burst"], faults
    ids = lake_ids(config, 1234)
    assert len(ids) == len(set(ids))
    start = oldest_served(NOW)
    table = lake_of(config).open(REQUESTS)
    watermark = from_ms(table.transaction_version(REQUESTS.app_id(1234)))
    assert watermark is not None
    # Complete up to the watermark; past it, what the fresh read found (a record arriving
    # late there waits for the stable read, within lag_seconds).
    assert truth_ids(emu, 1234, start, watermark) <= set(ids)
    assert set(ids) <= truth_ids(emu, 1234, start, emu.clock.now())


def test_a_check_while_every_data_file_read_is_refused_fails_and_sets_nothing_aside(
    tmp_path, emu, s3_server, proxy
):
    path = faulty_config(tmp_path, emu, s3_server, proxy)
    config = load_test_config(path)
    assert ingest_all(config, emu)[0].ok
    before = sorted(lake_ids(config, 1234))
    proxy.configure(refuse="data-file-reads")  # as a throttled prefix does
    check = run_cli("--config", str(path), "maintain", "--check-all")
    refused = proxy.faults()["refused"]
    proxy.calm()
    assert check.returncode == 1, check.stdout + check.stderr
    assert refused > 0
    lines = check.stderr.strip().splitlines()
    assert len(lines) == 1 and "requests/" in lines[0] and "503" in lines[0], check.stderr
    assert "nothing was set aside" in lines[0] and "DAMAGED" not in check.stdout
    assert quarantined(s3_server, config) == []
    assert sorted(lake_ids(config, 1234)) == before  # every row still in the table


def test_an_ingest_sigkilled_mid_pass_on_a_faulty_road_leaves_rows_once_and_nothing_aside(
    tmp_path, s3_server, proxy
):
    """A real ``cdnlake ingest`` (the provider on the wall clock) is SIGKILLed after some
    of its commits landed through the faults; passes and ``maintain --check-all`` through
    the same faults then leave every row once, each bookkeeping row once, nothing set aside.
    """
    emu = start_emulator("1234:extended,1235", rpm=1, now=None, frozen=False)
    try:
        path = write_config(
            tmp_path,
            emu,
            zones=[(1234, "v2"), (1235, "v1")],
            s3=s3_server,
            page_size=400,
            max_window_seconds=3600,
            flush_rows=400,
        )
        path.write_text(path.read_text().replace(s3_server.url, proxy.url))
        config = load_test_config(path)
        lake = lake_of(config)

        def version() -> int:
            table = lake.open(REQUESTS)
            return -1 if table is None else int(table.version())

        # 503s and lost answers (slow answers are the test above's: they cost only time)
        proxy.configure(read_503=0.03, write_503=0.08, write_lost=0.06)
        first_launch = datetime.now(UTC)
        # Mid-pass, however busy the machine: once a few of its commits have landed. A
        # fault may fail every zone's pass before that (exit 1): launched again.
        for _launch in range(5):
            killed = spawn_cli("--config", str(path), "ingest")
            assert wait_for(lambda p=killed: version() >= 3 or p.poll() is not None, 180)
            if killed.poll() is None:
                break
        killed.send_signal(signal.SIGKILL)
        assert killed.wait(30) == -signal.SIGKILL, "the pass had ended before the kill"
        for _attempt in range(4):  # a pass may fail on a fault: the next one goes on
            if (done := run_cli("--config", str(path), "ingest", timeout=300)).returncode == 0:
                break
        assert done.returncode == 0, done.stdout + done.stderr
        check = run_cli("--config", str(path), "maintain", "--check-all", timeout=300)
        faults = proxy.faults()
        proxy.calm()
        assert check.returncode == 0 or len(check.stderr.splitlines()) == 1, check.stderr
        assert "DAMAGED" not in check.stdout
        assert quarantined(s3_server, config) == []
        assert faults["write_lost"] and sum(faults.values()) > 10, faults

        table = lake.open(REQUESTS)
        assert table is not None
        table.to_pyarrow_table()  # every file the log names reads
        for zone in (1234, 1235):
            ids = lake_ids(config, zone)
            assert len(ids) == len(set(ids)), f"zone {zone}: a request stored twice"
            watermark = from_ms(table.transaction_version(REQUESTS.app_id(zone)))
            assert watermark is not None
            start = oldest_served(first_launch) + timedelta(minutes=1)
            missing = truth_ids(emu, zone, start, watermark) - set(ids)
            assert not missing, f"zone {zone}: {len(missing)} requests lost"
        for name, key in (
            ("ingest_runs", ["run_id"]),
            ("rejected_lines", ["record_key"]),
            ("ingest_gaps", ["zone", "gap_from"]),
        ):
            frame = lake_frame(config, name)
            assert frame.height == frame.unique(subset=key).height, f"{name} doubled"
        runs = lake_frame(config, "ingest_runs")
        assert runs.filter(pl.col("outcome") == "ok").height >= 2  # both zones' last pass
    finally:
        emu.stop()
