"""An erasure is explained, never taken for loss (issue 48): after ``cdnlake forget`` of a
busy client, the audit of the day (the daily audit's path too) is green, each hour
counting the requests the erasure removed; the kept day and its ratio say so.
Through the CLI against the emulator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cdnlake.emulator import Emulator
from tests.conftest import run_cli, start_emulator, write_config

ZONE = 1234


@pytest.fixture(scope="module")
def forgotten(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Emulator, Path, str]]:
    day = (datetime.now(UTC) - timedelta(minutes=10)).date() - timedelta(days=1)
    emu = start_emulator(f"{ZONE}", rpm=2, now=None, frozen=False)
    try:
        config = write_config(tmp_path_factory.mktemp("erased"), emu, [(ZONE, "v2")])
        ingest = run_cli("--config", str(config), "ingest", timeout=300)
        assert ingest.returncode == 0, ingest.stdout + ingest.stderr
        query = (
            "SELECT remote_ip, count(*) AS n FROM requests "
            f"WHERE date = DATE '{day}' GROUP BY remote_ip ORDER BY n DESC LIMIT 1"
        )
        found = run_cli("--config", str(config), "sql", "--format", "json", query)
        assert found.returncode == 0, found.stderr
        busiest = json.loads(found.stdout)[0]["remote_ip"]
        erased = run_cli("--config", str(config), "forget", "--ip", busiest)
        assert erased.returncode == 0, erased.stderr
        assert busiest not in erased.stdout
        yield emu, config, str(day)
    finally:
        emu.stop()


def test_the_audit_after_a_forget_is_green(forgotten) -> None:
    _, config, day = forgotten
    r = run_cli("--config", str(config), "audit", "--format", "json", "--date", day)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(r.stdout)
    assert {row["verdict"] for row in rows} == {"ok"}
    erased = [row for row in rows if row["erased_requests"]]
    assert erased, "no hour counts the erased requests"
    for row in erased:
        assert row["lake_requests"] + row["erased_requests"] == row["provider_requests"]
        assert row["difference"] == 0 and row["ratio"] == 1.0
        assert "erased by `cdnlake forget`" in row["advice"]
    total = sum(int(row["erased_requests"]) for row in rows)
    kept = run_cli(
        "--config",
        str(config),
        "sql",
        "--format",
        "json",
        f"SELECT verdict, erased_requests FROM audit_days WHERE day = DATE '{day}'",
    )
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout) == [{"verdict": "ok", "erased_requests": total}]
