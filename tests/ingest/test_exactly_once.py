"""Each request_id lands once, however windows overlap, pages repeat, records arrive late
or two processes write one zone; on a local lake and on S3 alike."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import polars as pl
from deltalake import DeltaTable

from cdnlake.emulator import Faults
from cdnlake.ingest.local_import import import_v1_files
from cdnlake.ingest.passes import Ingestor
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.retention import RETENTION, oldest_served
from cdnlake.warehouse.db import Warehouse
from tests.conftest import (
    FAST_RETRY,
    FAULT_RETRY,
    NOW,
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


def ingestor(config, emu, retry=FAST_RETRY, **kwargs):
    return Ingestor(
        config, logging_client(config, retry), session_for(config), clock=emu.clock.now, **kwargs
    )


def config_for(tmp_path, emu, lake_kind, request=None, **kwargs):
    s3 = request.getfixturevalue("s3_server") if lake_kind == "s3" else None
    return load_test_config(write_config(tmp_path, emu, s3=s3, **kwargs))


def watermark(config, zone: int) -> datetime | None:
    table = lake_of(config).open(REQUESTS)
    version = table.transaction_version(REQUESTS.app_id(zone))
    return datetime.fromtimestamp(version / 1000, tz=UTC) if version else None


def test_first_run_reads_all_of_retention_then_reruns_add_nothing(
    tmp_path, emulator, lake_kind, request
):
    config = config_for(tmp_path, emulator, lake_kind, request, max_window_seconds=4 * 3600)
    results = ingestor(config, emulator).run(config.zones)
    assert [r.outcome for r in results] == ["ok", "ok", "ok"]
    start = oldest_served(NOW)
    for zone in (1234, 1236):
        ids = lake_ids(config, zone)
        assert len(ids) == len(set(ids))
        # Fresh: what the provider serves up to now is stored at once...
        assert set(ids) == truth_ids(emulator, zone, start, NOW)
        # ... and the watermark stays where the data is stable.
        assert watermark(config, zone) == NOW - timedelta(seconds=300)
    v1 = lake_ids(config, 1235)
    assert len(v1) == len(set(v1))
    assert set(v1) == truth_ids(emulator, 1235, NOW - RETENTION, NOW + timedelta(seconds=1))
    before = {z: sorted(lake_ids(config, z)) for z in (1234, 1235, 1236)}
    version = lake_of(config).open(REQUESTS).version()
    again = ingestor(config, emulator).run(config.zones)
    assert all(r.ok and r.rows == 0 for r in again)
    assert sum(r.duplicates for r in again) > 0
    assert {z: sorted(lake_ids(config, z)) for z in (1234, 1235, 1236)} == before
    # Nothing new was written: the re-run's commits add no data file.
    table = lake_of(config).open(REQUESTS)
    added = [h for h in table.history() if h["version"] > version and h.get("operation") == "WRITE"]
    assert all(h.get("operationMetrics", {}).get("num_added_files", 0) == 0 for h in added)


def test_late_arrivals_are_picked_up_by_the_unstable_tail(tmp_path):
    emu = start_emulator("1234", rpm=30)
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2")], lag_seconds=300)
        config = load_test_config(path)
        first = ingestor(config, emu).run(config.zones)[0]
        assert first.ok
        t0 = emu.clock.now()
        late = truth_ids(emu, 1234, t0 - timedelta(minutes=5), t0, at=t0 + timedelta(minutes=6))
        late -= set(lake_ids(config, 1234))
        assert late, "records of the last minutes arrive after the first pass"
        emu.clock.advance(360)
        second = ingestor(config, emu).run(config.zones)[0]
        assert second.ok and second.duplicates > 0
        ids = lake_ids(config, 1234)
        assert len(ids) == len(set(ids)) and late <= set(ids)
        start = oldest_served(NOW)
        assert set(ids) == truth_ids(emu, 1234, start, emu.clock.now())
    finally:
        emu.stop()


def test_a_window_without_new_rows_still_moves_the_watermark(tmp_path):
    emu = start_emulator("1234", rpm=0.01)  # hardly any traffic
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")]))
        ingestor(config, emu).run(config.zones)
        emu.clock.advance(120)
        result = ingestor(config, emu).run(config.zones)[0]
        assert result.ok and result.rows == 0
        assert watermark(config, 1234) == emu.clock.now() - timedelta(seconds=300)
    finally:
        emu.stop()


def test_pages_repeated_by_retries_and_small_pages_stay_unique(tmp_path, lake_kind, request):
    faults = Faults(
        seed=11, truncate_rate=0.2, drop_rate=0.1, spurious_429_rate=0.2, retry_after="zero"
    )
    emu = start_emulator("1234", faults=faults)
    try:
        config = config_for(tmp_path, emu, lake_kind, request, zones=[(1234, "v2")], page_size=500)
        result = ingestor(config, emu, retry=FAULT_RETRY).run(config.zones)[0]
        assert result.ok, result.error
        assert result.stats.retries > 0 and result.stats.rate_limited > 0
        ids = lake_ids(config, 1234)
        assert len(ids) == len(set(ids))
        start = oldest_served(NOW)
        assert set(ids) == truth_ids(emu, 1234, start, NOW)
        with Warehouse(config.storage).connect() as con:
            row = con.execute(
                "SELECT rate_limited, retries, pages, rows, daemon FROM ingest_runs "
                "WHERE pull_zone_id = 1234"
            ).fetchone()
        assert row[0] == result.stats.rate_limited and row[1] > 0 and row[3] == len(ids)
        assert ":" in row[4]  # host:pid
    finally:
        emu.stop()


def test_two_processes_on_one_zone_never_duplicate(tmp_path, lake_kind, request):
    """A stale process and its successor (no shared lock: different machines, one lake)."""
    emu = start_emulator("1234", rpm=10)
    try:
        config = config_for(
            tmp_path, emu, lake_kind, request, zones=[(1234, "v2")], flush_rows=2000
        )
        other = tmp_path / "other"  # another machine: its own root and locks, the same lake
        other.mkdir()
        from msgspec.structs import replace

        twin = replace(config, storage=replace(config.storage, root=other))
        if lake_kind == "local":
            twin = replace(
                twin, storage=replace(twin.storage, lake_uri=config.storage.lake_location)
            )
        results = []

        def run(cfg):
            results.extend(ingestor(cfg, emu).run(cfg.zones))

        threads = [threading.Thread(target=run, args=(c,)) for c in (config, twin)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r.outcome in ("ok", "busy") for r in results), [r.error for r in results]
        ids = lake_ids(config, 1234)
        assert len(ids) == len(set(ids)), "a request was stored twice"
        # Whoever lost a commit re-read; a last pass completes whatever a busy one left.
        ingestor(config, emu).run(config.zones)
        ids = lake_ids(config, 1234)
        start = oldest_served(NOW)
        assert len(ids) == len(set(ids)) and set(ids) == truth_ids(emu, 1234, start, NOW)
    finally:
        emu.stop()


def test_lake_is_a_delta_table_partitioned_by_zone_and_event_date(tmp_path, emulator):
    config = load_test_config(write_config(tmp_path, emulator, zones=[(1234, "v2")]))
    ingestor(config, emulator).run(config.zones)
    uri = config.storage.lake_location + "/requests"
    table = DeltaTable(uri)
    assert table.metadata().partition_columns == ["pull_zone_id", "date"]
    frame = pl.from_arrow(table.to_pyarrow_table())
    assert frame.filter(pl.col("ts").dt.date() != pl.col("date")).height == 0
    assert "authorizationHeader" not in frame.columns
    # Any Delta reader: polars scans it without cdnlake.
    assert pl.scan_delta(uri).select(pl.len()).collect().item() == frame.height
    assert frame["request_id"].n_unique() == frame.height


def test_same_file_imported_twice_changes_nothing(tmp_path, emulator):
    from tests.ingest.test_import_v1 import write_day_file

    config = load_test_config(write_config(tmp_path, emulator, zones=[(1234, "v2")]))
    src = write_day_file(emulator, tmp_path / "day.log", 1234)
    first = import_v1_files(config, session_for(config), [src], 1234)
    before = lake_frame(config).sort("request_id")
    second = import_v1_files(config, session_for(config), [src], 1234)
    assert first.rows > 1000 and second.rows == 0 and second.duplicates == first.rows
    assert lake_frame(config).sort("request_id").equals(before)
    assert Counter(lake_ids(config, 1234)).most_common(1)[0][1] == 1
