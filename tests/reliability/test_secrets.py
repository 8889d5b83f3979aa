"""The access key never appears anywhere; the end user's Authorization is never stored."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import lake_text_contains, run_cli, start_emulator, write_config

KEY = "sk-VERY-SECRET-0123456789"


def test_access_key_never_leaks(tmp_path):
    emu = start_emulator("1234:extended,1235:extended,1240:disabled")
    emu.config.access_key = KEY
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2"), (1235, "v1"), (1240, "v2")])
        env = {"CDNLAKE_ACCESS_KEY": KEY}
        outputs = []
        for args in (
            ["--log-level", "DEBUG", "ingest"],
            ["status"],
            ["status", "--format", "json"],
            ["report", "--date", emu.clock.now().date().isoformat()],
            ["sql", "SELECT * FROM ingest_runs", "--format", "json"],
            ["sql", "SELECT * FROM rejected_lines", "--format", "json"],
        ):
            r = run_cli("--config", str(path), *args, env=env)
            outputs.append(r.stdout + r.stderr)
        wrong = run_cli(
            "--config",
            str(path),
            "--log-level",
            "DEBUG",
            "ingest",
            env={"CDNLAKE_ACCESS_KEY": KEY + "x"},
        )
        outputs.append(wrong.stdout + wrong.stderr)
        assert "Forbidden" in wrong.stdout
        for text in outputs:
            assert KEY not in text
        root = tmp_path / "data"
        for f in root.rglob("*"):
            if f.is_file() and f.suffix != ".parquet":
                assert KEY.encode() not in f.read_bytes(), f
        assert lake_text_contains(root, KEY) == []
        # The end user's Authorization header from the log data is not stored either.
        assert lake_text_contains(root, "Bearer eyJ") == []
    finally:
        emu.stop()


def test_emulator_process_logs_no_credentials(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cdnlake",
            "--log-level",
            "DEBUG",
            "emulator",
            "--port",
            "0",
            "--access-key",
            KEY,
            "--zones",
            "1234",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip().rsplit(" ", 1)[-1]
        import httpx

        httpx.get(f"{url}/v2/pullzones/1234/logs", headers={"AccessKey": KEY})
        httpx.get(f"{url}/v2/pullzones/1234/logs", headers={"Authorization": f"Bearer {KEY}"})
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert "GET /v2/pullzones/1234/logs" in err  # it does log requests at DEBUG
    assert KEY not in out + err


def test_key_in_config_file_is_refused(tmp_path):
    path = Path(tmp_path / "c.toml")
    path.write_text(f'[api]\naccess_key = "{KEY}"\n')
    r = run_cli("--config", str(path), "status")
    assert r.returncode == 2 and "secrets must not be written" in r.stderr
    assert KEY not in r.stderr
