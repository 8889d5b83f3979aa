"""Each request_id lands once, however windows overlap, pages repeat or records arrive late."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import duckdb
import polars as pl

from cdnlake.emulator import Faults
from cdnlake.ingest.runner import RETENTION, RETENTION_MARGIN, Ingestor
from cdnlake.warehouse.db import Warehouse
from tests.conftest import (
    FAST_RETRY,
    FAULT_RETRY,
    NOW,
    lake_ids,
    load_test_config,
    logging_client,
    start_emulator,
    truth_ids,
    write_config,
)


def ingestor(config, emu, retry=FAST_RETRY, **kwargs):
    return Ingestor(config, logging_client(config, retry), clock=emu.clock.now, **kwargs)


def test_first_run_reads_all_of_retention_then_reruns_add_nothing(tmp_path, emulator):
    config = load_test_config(write_config(tmp_path, emulator, max_window_seconds=4 * 3600))
    results = ingestor(config, emulator).run(config.zones)
    assert [r.outcome for r in results] == ["ok", "ok", "ok"]
    root = config.storage.root
    start = NOW - RETENTION + RETENTION_MARGIN
    end = NOW - timedelta(seconds=300)
    for zone in (1234, 1236):
        ids = lake_ids(root, zone)
        assert len(ids) == len(set(ids))
        assert set(ids) == truth_ids(emulator, zone, start, end)
    # v1: every visible record of the retained days.
    v1 = lake_ids(root, 1235)
    assert len(v1) == len(set(v1))
    assert set(v1) == truth_ids(emulator, 1235, NOW - RETENTION, NOW + timedelta(seconds=1))
    before = {z: sorted(lake_ids(root, z)) for z in (1234, 1235, 1236)}
    files_before = {p: p.read_bytes() for p in (root / "lake").rglob("*.parquet")}
    again = ingestor(config, emulator).run(config.zones)
    assert all(r.rows == 0 for r in again)
    assert sum(r.duplicates for r in again) > 0
    assert {z: sorted(lake_ids(root, z)) for z in (1234, 1235, 1236)} == before
    # Nothing new: the lake is byte-for-byte what it was.
    assert {p: p.read_bytes() for p in (root / "lake").rglob("*.parquet")} == files_before


def test_late_arrivals_are_picked_up_by_the_overlap(tmp_path):
    emu = start_emulator("1234", rpm=30)
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2")], lag_seconds=0, overlap_seconds=600)
        config = load_test_config(path)
        first = ingestor(config, emu).run(config.zones)[0]
        assert first.ok
        t0 = emu.clock.now()
        root = config.storage.root
        late = truth_ids(
            emu, 1234, t0 - timedelta(minutes=5), t0, at=t0 + timedelta(minutes=6)
        ) - set(lake_ids(root, 1234))
        assert late, "the first pass (lag 0) must have missed some late records"
        emu.clock.advance(360)
        second = ingestor(config, emu).run(config.zones)[0]
        assert second.ok and second.duplicates > 0
        ids = lake_ids(root, 1234)
        assert len(ids) == len(set(ids))
        assert late <= set(ids)
        start = NOW - RETENTION + RETENTION_MARGIN
        assert set(ids) == truth_ids(emu, 1234, start, emu.clock.now())
    finally:
        emu.stop()


def test_pages_repeated_by_retries_and_small_pages_stay_unique(tmp_path):
    faults = Faults(
        seed=11, truncate_rate=0.2, drop_rate=0.1, spurious_429_rate=0.2, retry_after="zero"
    )
    emu = start_emulator("1234", faults=faults)
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")], page_size=500))
        result = ingestor(config, emu, retry=FAULT_RETRY).run(config.zones)[0]
        assert result.ok, result.error
        assert result.stats.retries > 0 and result.stats.rate_limited > 0
        ids = lake_ids(config.storage.root, 1234)
        assert len(ids) == len(set(ids))
        start = NOW - RETENTION + RETENTION_MARGIN
        assert set(ids) == truth_ids(emu, 1234, start, NOW - timedelta(seconds=300))
        with Warehouse(config.storage).connect(read_only=True) as con:
            row = con.execute(
                "SELECT rate_limited, retries, pages, rows FROM ingest_runs "
                "WHERE pull_zone_id = 1234"
            ).fetchone()
        assert row[0] == result.stats.rate_limited and row[1] > 0 and row[3] == len(ids)
    finally:
        emu.stop()


def test_lake_files_are_hive_partitioned_by_event_date_and_sorted(tmp_path, emulator):
    config = load_test_config(write_config(tmp_path, emulator, zones=[(1234, "v2")]))
    ingestor(config, emulator).run(config.zones)
    lake = config.storage.root / "lake" / "requests"
    files = sorted(lake.rglob("*.parquet"))
    assert files
    for f in files:
        day = f.parent.name.removeprefix("date=")
        hour = int(f.stem.removeprefix("part-"))
        frame = pl.read_parquet(f)
        assert frame["ts"].dt.strftime("%Y-%m-%d").unique().to_list() == [day]
        assert frame["ts"].dt.hour().unique().to_list() == [hour]
        assert frame["ts"].is_sorted()
        assert "authorizationHeader" not in frame.columns
    # Readable as-is by DuckDB and pyarrow with hive partitioning.
    n = duckdb.execute(
        f"SELECT count(*) FROM read_parquet('{lake}/*/*/*.parquet', hive_partitioning=true) "
        "WHERE pull_zone_id = 1234"
    ).fetchone()[0]
    import pyarrow.dataset as ds

    assert ds.dataset(lake, format="parquet", partitioning="hive").count_rows() == n


def test_same_file_imported_twice_changes_nothing(tmp_path, emulator):
    from tests.ingest.test_import_v1 import write_day_file

    config = load_test_config(write_config(tmp_path, emulator, zones=[(1234, "v2")]))
    src = write_day_file(emulator, tmp_path / "day.log", 1234)
    from cdnlake.ingest.runner import import_v1_files

    first = import_v1_files(config, [src], 1234)
    files = {p: p.read_bytes() for p in (config.storage.root / "lake").rglob("*.parquet")}
    second = import_v1_files(config, [src], 1234)
    assert first.rows > 1000 and second.rows == 0 and second.duplicates == first.rows
    assert {p: p.read_bytes() for p in (config.storage.root / "lake").rglob("*.parquet")} == files
    assert Counter(lake_ids(config.storage.root, 1234)).most_common(1)[0][1] == 1
