"""Damaged lake files, state files and warehouses: detected, set aside, rebuilt."""

from __future__ import annotations

from datetime import timedelta

import duckdb
import polars as pl

from cdnlake.ingest.runner import RETENTION, RETENTION_MARGIN
from cdnlake.warehouse.db import Warehouse
from tests.conftest import (
    NOW,
    ingest_all,
    lake_ids,
    load_test_config,
    run_cli,
    start_emulator,
    truth_ids,
    write_config,
)

ingest = ingest_all


def test_truncated_lake_file_is_quarantined_and_its_hour_read_again(tmp_path):
    emu = start_emulator("1234")
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")]))
        assert ingest(config, emu)[0].ok
        root = config.storage.root
        files = sorted((root / "lake" / "requests").rglob("part-*.parquet"))
        victim = files[len(files) // 2]
        victim.write_bytes(victim.read_bytes()[:100])  # a disk that lost the tail
        result = ingest(config, emu)[0]
        assert result.ok, result.error
        assert any("damaged" in n and "read again" in n for n in result.notes)
        quarantined = list((root / "lake" / "quarantine").rglob(f"{victim.name}.*"))
        assert len(quarantined) == 1 and quarantined[0].stat().st_size == 100  # kept
        for f in (root / "lake" / "requests").rglob("*.parquet"):
            pl.read_parquet(f)
        ids = lake_ids(root, 1234)
        start = NOW - RETENTION + RETENTION_MARGIN
        assert len(ids) == len(set(ids))
        assert set(ids) == truth_ids(emu, 1234, start, NOW - timedelta(seconds=300))
        with Warehouse(config.storage).connect(read_only=True) as con:
            assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == len(ids)
    finally:
        emu.stop()


def test_damaged_file_past_retention_is_a_recorded_gap(tmp_path):
    emu = start_emulator("1234")
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")]))
        assert ingest(config, emu)[0].ok
        files = sorted((config.storage.root / "lake" / "requests").rglob("part-*.parquet"))
        files[0].write_bytes(b"not parquet at all")
        emu.clock.advance(3 * 3600)  # that first hour is now past retention
        result = ingest(config, emu)[0]
        assert result.ok
        assert [g.reason for g in result.gaps if "damaged" in g.reason]
        with Warehouse(config.storage).connect(read_only=True) as con:
            reasons = [r[0] for r in con.execute("SELECT reason FROM ingest_gaps").fetchall()]
        assert any("past retention" in r and "damaged" in r for r in reasons)
    finally:
        emu.stop()


def test_damaged_state_file_is_rebuilt_from_the_lake(tmp_path):
    emu = start_emulator("1234")
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")]))
        assert ingest(config, emu)[0].ok
        state = config.storage.state / "zones" / "1234.json"
        state.write_text('{"version": 1, "zone_id": 1234, "watermark": "yesterday-ish"')
        emu.clock.advance(600)
        result = ingest(config, emu)[0]
        assert result.ok and any("state file" in n and "damaged" in n for n in result.notes)
        assert list(state.parent.glob("1234.json.damaged-*"))  # kept, not deleted
        ids = lake_ids(config.storage.root, 1234)
        assert len(ids) == len(set(ids))
        start = NOW - RETENTION + RETENTION_MARGIN
        assert set(ids) == truth_ids(emu, 1234, start, emu.clock.now() - timedelta(seconds=300))
    finally:
        emu.stop()


def test_warehouse_from_an_older_schema_is_migrated(tmp_path):
    emu = start_emulator("1234")
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")]))
        path = config.storage.warehouse
        path.parent.mkdir(parents=True)
        old = duckdb.connect(str(path))
        old.execute(
            "CREATE TABLE ingest_runs (run_id VARCHAR, pull_zone_id BIGINT, outcome VARCHAR)"
        )
        old.execute("INSERT INTO ingest_runs VALUES ('old-run', 1234, 'ok')")
        old.close()
        assert ingest(config, emu)[0].ok
        kept = list(path.parent.glob("warehouse.duckdb.schema-v0-*"))
        assert len(kept) == 1
        with Warehouse(config.storage).connect(read_only=True) as con:
            runs = con.execute(
                "SELECT run_id, outcome FROM ingest_runs ORDER BY started NULLS FIRST"
            ).fetchall()
            assert runs[0] == ("old-run", "ok") and len(runs) == 2
            assert con.execute("SELECT count(*) FROM requests").fetchone()[0] > 0
    finally:
        emu.stop()


def test_garbage_warehouse_file_is_set_aside_and_rebuilt(tmp_path):
    emu = start_emulator("1234")
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2")])
        config = load_test_config(path)
        config.storage.warehouse.parent.mkdir(parents=True)
        config.storage.warehouse.write_bytes(b"this is not a database" * 100)
        assert ingest(config, emu)[0].ok
        assert list(config.storage.warehouse.parent.glob("warehouse.duckdb.damaged-*"))
        r = run_cli(
            "--config", str(path), "sql", "SELECT count(*) > 0 FROM requests", "--format", "csv"
        )
        assert r.returncode == 0 and r.stdout.splitlines()[1] == "True"
    finally:
        emu.stop()
