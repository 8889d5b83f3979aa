"""SIGKILL at any instant, then a clean rerun: nothing lost, nothing doubled, all readable."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cdnlake.lake.log.progress import from_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.retention import RETENTION, oldest_served
from cdnlake.scheduler import wait_for
from tests.conftest import (
    lake_ids,
    lake_of,
    load_test_config,
    run_cli,
    s3_lake_lines,
    spawn_cli,
    start_emulator,
    truth_ids,
    write_config,
)


def spawn_ingest(config: Path) -> subprocess.Popen[str]:
    return spawn_cli("--config", str(config), "ingest")


def assert_lake_consistent(where, zones: list[int]) -> None:
    """Every file the Delta log names reads (a kill never leaves half a commit), and no
    request is there twice."""
    table = lake_of(where).open(REQUESTS)
    if table is not None:
        table.to_pyarrow_table()
    for zone in zones:
        ids = lake_ids(where, zone)
        assert len(ids) == len(set(ids)), f"duplicates in zone {zone}"


def first_progress(root, app_id: str) -> datetime:
    """When the first commit that carries the zone's watermark landed: the pass that made
    it started before, so it read everything the provider kept since that instant less
    retention."""
    table = lake_of(root).open(REQUESTS)
    for entry in sorted(table.history(), key=lambda e: e["version"]):
        table.load_as_version(entry["version"])
        if table.transaction_version(app_id) is not None:
            return datetime.fromtimestamp(entry["timestamp"] / 1000, tz=UTC)
    raise AssertionError(f"no commit carries {app_id}")


def crash_rounds(rounds: int, seed: int, tmp_path: Path, s3=None) -> None:
    emu = start_emulator("1234:extended,1235", rpm=20, now=None, frozen=False)
    try:
        path = write_config(
            tmp_path,
            emu,
            zones=[(1234, "v2"), (1235, "v1")],
            s3=s3,
            page_size=400,
            max_window_seconds=3600,
            flush_rows=2000,
        )
        root = load_test_config(path)
        rng = random.Random(seed)
        first_launch = datetime.now(UTC)
        for _ in range(rounds):
            proc = spawn_ingest(path)
            time.sleep(rng.uniform(0.3, 2.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert_lake_consistent(root, [1234, 1235])
        final = run_cli("--config", str(path), "ingest")
        assert final.returncode == 0, final.stdout + final.stderr
        assert_lake_consistent(root, [1234, 1235])
        table = lake_of(root).open(REQUESTS)
        for zone in (1234, 1235):
            watermark = from_ms(table.transaction_version(REQUESTS.app_id(zone)))
            assert watermark is not None
            # What is promised starts where the zone's first pass that committed could
            # still read: a round killed before its first commit read nothing, and the
            # provider's retention moved on meanwhile.
            first = max(first_launch, first_progress(root, REQUESTS.app_id(zone)))
            start = oldest_served(first) + timedelta(seconds=5)
            truth = truth_ids(emu, zone, start, watermark, at=emu.clock.now())
            lake = set(lake_ids(root, zone))
            missing = truth - lake
            lost = sorted(
                r.ts_ms
                for r in emu.traffic.records(
                    zone, int(start.timestamp() * 1000), int(watermark.timestamp() * 1000)
                )
                if r.wire.requestId in missing
            )
            assert not lost, (
                f"zone {zone} lost {len(lost)} requests, from {lost[0]} to {lost[-1]} ms "
                f"(read from {start.isoformat()}, watermark {watermark.isoformat()})"
            )
            everything = truth_ids(
                emu,
                zone,
                first_launch - RETENTION - timedelta(hours=1),
                datetime.now(UTC) + timedelta(hours=1),
            )
            assert lake <= everything, "rows the provider never had"
    finally:
        emu.stop()


SOAK = os.environ.get("SOAK") == "1"


@pytest.mark.parametrize("seed", list(range(1, 21)) if SOAK else [1, 2])
def test_sigkill_during_ingest_then_rerun(tmp_path, seed, lake_kind, request):
    s3 = request.getfixturevalue("s3_server") if lake_kind == "s3" else None
    crash_rounds(rounds=5 if SOAK else 3, seed=seed, tmp_path=tmp_path, s3=s3)


@pytest.mark.parametrize("seed", list(range(1, 11)) if SOAK else [3])
def test_sigkill_during_import_v1_then_rerun(tmp_path, seed, lake_kind, request):
    import duckdb

    from tests.bench.bench import make_v1_file

    src = make_v1_file(tmp_path / "day.log", 300_000, seed=seed)
    server = request.getfixturevalue("s3_server") if lake_kind == "s3" else None

    def config_file(path: Path, root: Path) -> Path:
        lake = s3_lake_lines(server) if server is not None else []
        storage = "\n".join([f'root = "{root}"', *lake])
        path.write_text(
            f"[storage]\n{storage}\n[ingest]\nflush_rows = 50000\n[[zones]]\nid = 1234\n"
        )
        return path

    cfg = config_file(tmp_path / "config.toml", tmp_path / "data")
    # Kill inside the run however fast this machine is: time one whole run elsewhere first.
    scratch = config_file(tmp_path / "scratch.toml", tmp_path / "scratch")
    args = ("import-v1", str(src), "--zone", "1234")
    started = time.monotonic()
    assert run_cli("--config", str(scratch), *args).returncode == 0
    whole = time.monotonic() - started
    rng = random.Random(seed)
    killed = 0

    def version() -> int:
        table = lake_of(load_test_config(cfg)).open(REQUESTS)
        return -1 if table is None else int(table.version())

    for _ in range(3):
        before = version()
        proc = spawn_cli("--config", str(cfg), *args)
        # Into the commits, however busy the machine: after this run's first commit (its
        # first of six), then a little further at random.
        assert wait_for(lambda b=before, p=proc: version() > b or p.poll() is not None, 120)
        time.sleep(rng.uniform(0.0, 0.2) * whole)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed += proc.returncode == -signal.SIGKILL
        assert_lake_consistent(load_test_config(cfg), [1234])
    assert killed >= 2, f"only {killed} of 3 runs were still going when killed"
    final = run_cli("--config", str(cfg), "import-v1", str(src), "--zone", "1234")
    assert final.returncode == 0, final.stderr
    want = {
        r[0]
        for r in duckdb.execute(
            f"SELECT split_part(line, '|', 11) FROM read_csv('{src}', "
            "columns={'line': 'VARCHAR'}, delim='\x01', quote='', escape='', header=false)"
        ).fetchall()
    }
    got = lake_ids(load_test_config(cfg), 1234)
    assert len(got) == len(set(got)) and set(got) == want
