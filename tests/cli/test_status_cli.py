"""`cdnlake status`: the numbers, and an exit code a health check can use."""

from __future__ import annotations

import json

from tests.cli.test_sql_cli import setup
from tests.conftest import run_cli, start_emulator, write_config


def test_status_exit_codes(tmp_path):
    emu = start_emulator("1234,1240:disabled", rpm=5, now=None, frozen=False)
    try:
        healthy = write_config(tmp_path, emu, zones=[(1234, "v2")])
        never = run_cli("--config", str(healthy), "status")
        assert never.returncode == 1 and "never ingested" in never.stdout
        assert run_cli("--config", str(healthy), "ingest").returncode == 0
        ok = run_cli("--config", str(healthy), "status", "--format", "json")
        assert ok.returncode == 0, ok.stdout
        zone = json.loads(ok.stdout)[0]
        assert zone["healthy"] is True and zone["rows_today"] > 0
        assert 290 <= zone["lag_seconds"] < 400  # lag_seconds = 300
        behind = run_cli("--config", str(healthy), "status", "--max-lag", "60")
        assert behind.returncode == 1 and "behind by" in behind.stdout

        both = write_config(tmp_path, emu, zones=[(1234, "v2"), (1240, "v2")])
        run_cli("--config", str(both), "ingest")
        failing = run_cli("--config", str(both), "status")
        assert failing.returncode == 1
        assert "PROBLEM: last run failed" in failing.stdout and "logging_disabled" in failing.stdout
    finally:
        emu.stop()


def test_status_lists_shield_zones_apart_from_a_pull_zone_with_the_same_id(tmp_path):
    """Shield and pull zone ids are separate numberings: 5001 can be both, and healthy once."""
    emu = start_emulator("1234,5001:disabled", rpm=5, now=None, frozen=False)
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2"), (5001, "v2")])
        with open(path, "a") as f:
            f.write('[[shield_zones]]\nid = 5001\nname = "www-shield"\n')
        assert run_cli("--config", str(path), "ingest").returncode == 1  # pull zone 5001 fails
        result = run_cli("--config", str(path), "status", "--format", "json")
        assert result.returncode == 1
        rows = {(z["zone_id"], z["source"]): z for z in json.loads(result.stdout)}
        assert set(rows) == {(1234, "v2"), (5001, "v2"), (5001, "shield")}
        assert rows[(1234, "v2")]["healthy"]
        assert "logging_disabled" in rows[(5001, "v2")]["problem"]
        shield = rows[(5001, "shield")]
        assert shield["healthy"] and shield["last_outcome"] == "ok", shield
        assert shield["name"] == "www-shield" and shield["lag_seconds"] < 120
        table = run_cli("--config", str(path), "status")
        assert "5001 www-shield" in table.stdout and "shield" in table.stdout
    finally:
        emu.stop()


def test_the_table_fits_80_columns_under_the_lake_it_reads(tmp_path):
    cfg = setup(tmp_path)  # a lake whose zones were never ingested by a pass
    root = tmp_path / "root"
    r = run_cli("--config", str(cfg), "status")
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert lines[0] == f"lake: {root / 'lake'} (storage root {root})"
    header = next(line for line in lines if line.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == [
        "zone",
        "source",
        "lag",
        "last run",
        "health",
    ]
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 80 for line in table), "\n".join(table)
    assert "PROBLEM: never ingested" in r.stdout

    wide = run_cli("--config", str(cfg), "status", "--wide")
    assert wide.returncode == 1 and wide.stdout.splitlines()[0] == lines[0]
    header = next(line for line in wide.stdout.splitlines() if line.startswith("┃"))
    for column in ("watermark", "freshest row", "rejected", "rows today", "gaps 7d", "owner"):
        assert column in header, column
    assert max(len(line) for line in wide.stdout.splitlines()) > 80

    as_json = run_cli("--config", str(cfg), "status", "--format", "json")
    assert [z["zone_id"] for z in json.loads(as_json.stdout)] == [1, 2]  # no lake: line
