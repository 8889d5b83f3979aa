"""The whole product from the command line with the lake on S3 (moto's server)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tests.conftest import load_test_config, run_cli, start_emulator, write_config


def test_ingest_status_sql_report_maintain_on_s3(tmp_path, s3_server):
    emu = start_emulator("1234,1235:v1", now=None, frozen=False)
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2"), (1235, "v1")], s3=s3_server)
        ingest = run_cli("--config", str(path), "ingest")
        assert ingest.returncode == 0, ingest.stdout + ingest.stderr
        status = run_cli("--config", str(path), "status", "--format", "json")
        assert status.returncode == 0, status.stdout
        assert all(z["watermark"] for z in json.loads(status.stdout))
        query = "SELECT count(*) - count(DISTINCT request_id), count(*) FROM requests"
        counted = run_cli("--config", str(path), "sql", query, "--format", "csv")
        dups, rows = (int(x) for x in counted.stdout.splitlines()[1].split(","))
        assert dups == 0 and rows > 1000
        # A filter on a column the log keeps no statistics for prunes no file.
        by_status = "SELECT cache_status, count(*) AS n FROM requests GROUP BY 1 ORDER BY 1"
        mix = run_cli("--config", str(path), "sql", by_status, "--format", "json")
        for row in json.loads(mix.stdout):
            one = f"SELECT count(*) AS n FROM requests WHERE cache_status = '{row['cache_status']}'"
            got = run_cli("--config", str(path), "sql", one, "--format", "json")
            assert json.loads(got.stdout) == [{"n": row["n"]}], row
        day = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()  # the emulator's
        report = run_cli("--config", str(path), "report", "--date", day, "--format", "json")
        assert report.returncode == 0, report.stderr
        maintained = run_cli("--config", str(path), "maintain", "--retention-hours", "0")
        assert maintained.returncode == 0, maintained.stdout + maintained.stderr
        again = run_cli("--config", str(path), "sql", query, "--format", "csv")
        assert again.stdout == counted.stdout
        # Nothing of the lake is on local disk.
        config = load_test_config(path)
        assert not (config.storage.root / "lake").exists()
    finally:
        emu.stop()
