"""What ``ingest`` prints: with ``--log-format json``, its summaries are JSON objects."""

from __future__ import annotations

import json

from tests.conftest import run_cli, start_emulator, write_config


def test_json_log_format_prints_summaries_as_json(tmp_path):
    emu = start_emulator("1234,1235:v1")
    try:
        config = write_config(tmp_path, emu, zones=[(1234, "v2"), (1235, "v1")])
        result = run_cli("--config", str(config), "--log-format", "json", "ingest")
    finally:
        emu.stop()
    assert result.returncode == 0, result.stdout + result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(r["zone"] for r in records) == [1234, 1235]
    assert all(r["outcome"] == "ok" and r["pages"] > 0 for r in records), records
    assert all(r["message"].startswith(f"zone {r['zone']} [") for r in records)
