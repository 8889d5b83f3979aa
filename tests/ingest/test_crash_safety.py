"""SIGKILL at any instant, then a clean rerun: nothing lost, nothing doubled, all readable."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from cdnlake.ingest.runner import RETENTION, RETENTION_MARGIN
from cdnlake.ingest.state import StateStore
from tests.conftest import lake_ids, run_cli, spawn_cli, start_emulator, truth_ids, write_config


def spawn_ingest(config: Path) -> subprocess.Popen[str]:
    return spawn_cli("--config", str(config), "ingest")


def assert_lake_consistent(root: Path, zones: list[int]) -> None:
    for f in (root / "lake").rglob("*.parquet"):
        pl.read_parquet(f)  # never unreadable
    for zone in zones:
        ids = lake_ids(root, zone)
        assert len(ids) == len(set(ids)), f"duplicates in zone {zone}"


def crash_rounds(rounds: int, seed: int, tmp_path: Path) -> None:
    emu = start_emulator("1234:extended,1235", rpm=20, now=None, frozen=False)
    try:
        path = write_config(
            tmp_path,
            emu,
            zones=[(1234, "v2"), (1235, "v1")],
            page_size=400,
            max_window_seconds=3600,
        )
        root = tmp_path / "data"
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
        leftovers = [p for p in (root / "lake").rglob(".*") if p.is_file()]
        assert leftovers == []
        staging = root / "state" / "staging"
        assert not staging.exists() or not any(staging.iterdir())
        store = StateStore(root / "state")
        start = first_launch - RETENTION + RETENTION_MARGIN + timedelta(seconds=5)
        for zone in (1234, 1235):
            watermark = store.load(zone).watermark
            assert watermark is not None
            truth = truth_ids(emu, zone, start, watermark, at=emu.clock.now())
            lake = set(lake_ids(root, zone))
            assert truth <= lake, f"zone {zone} lost {len(truth - lake)} requests"
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
def test_sigkill_during_ingest_then_rerun(tmp_path, seed):
    crash_rounds(rounds=5 if SOAK else 3, seed=seed, tmp_path=tmp_path)


@pytest.mark.parametrize("seed", list(range(1, 11)) if SOAK else [3])
def test_sigkill_during_import_v1_then_rerun(tmp_path, seed):
    import duckdb

    from tests.bench.bench import make_v1_file

    src = make_v1_file(tmp_path / "day.log", 300_000, seed=seed)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[storage]\nroot = "{tmp_path / "data"}"\n[[zones]]\nid = 1234\n')
    # Kill inside the run however fast this machine is: time one whole run elsewhere first.
    scratch = tmp_path / "scratch.toml"
    scratch.write_text(f'[storage]\nroot = "{tmp_path / "scratch"}"\n[[zones]]\nid = 1234\n')
    args = ("import-v1", str(src), "--zone", "1234")
    started = time.monotonic()
    assert run_cli("--config", str(scratch), *args).returncode == 0
    whole = time.monotonic() - started
    rng = random.Random(seed)
    killed = 0
    for _ in range(3):
        proc = spawn_cli("--config", str(cfg), *args)
        # Past start-up (half the run or more is interpreter and imports), into the merges.
        time.sleep(rng.uniform(0.5, 0.95) * whole)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed += proc.returncode == -signal.SIGKILL
        assert_lake_consistent(tmp_path / "data", [1234])
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
    got = lake_ids(tmp_path / "data", 1234)
    assert len(got) == len(set(got)) and set(got) == want
    assert not [p for p in (tmp_path / "data" / "lake").rglob(".*") if p.is_file()]
