"""`cdnlake status`: the numbers, and an exit code a health check can use."""

from __future__ import annotations

import json

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
