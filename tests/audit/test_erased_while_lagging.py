"""The audit of a day after a forget made while ingestion lags (review findings 9, 12):
the erased client's requests that reach the lake's passes only after the forget are held
back and counted once for the audit, whose day stays ``ok``; a forget stopped after its
first zone keeps that zone's counts. Against the emulator, forget and audit by the CLI."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from cdnlake.lake.personal import forget as forget_module
from cdnlake.lake.personal.forget import Target, forget
from tests.conftest import (
    ingest_all,
    lake_frame,
    load_test_config,
    run_cli,
    start_emulator,
    write_config,
)
from tests.sessions import session_for

# The emulator stands at the start of the last hour but one (its clock frozen): a pass
# reads to 5 minutes before it (the lag), so the hour before is cut at :55; an hour later
# (still not past this machine's clock, which the audit judges by) the rest is read.
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
HOUR = NOW - timedelta(hours=1)


def emulator(zones: str):
    return start_emulator(zones, rpm=30, now=NOW, frozen=True)


def busiest(config_path, zone: int) -> str:
    rows = lake_frame(load_test_config(config_path))
    hour = rows.filter(
        (pl.col("pull_zone_id") == zone) & (pl.col("ts") >= HOUR) & (pl.col("ts") < NOW)
    )
    return str(hour.group_by("remote_ip").len().sort("len", descending=True)["remote_ip"][0])


def audit_of_the_day(path) -> list[dict]:
    r = run_cli("--config", str(path), "audit", "--format", "json", "--date", str(HOUR.date()))
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("reread", [False, True])
def test_requests_held_back_after_a_forget_keep_the_audit_green(tmp_path, reread):
    emu = emulator("1234")
    try:
        path = write_config(tmp_path, emu, [(1234, "v2")])
        config = load_test_config(path)
        assert all(r.ok for r in ingest_all(config, emu))  # to :55 of HOUR: the daemon lags
        address = busiest(path, 1234)
        erased = run_cli("--config", str(path), "forget", "--ip", address)
        assert erased.returncode == 0, erased.stdout + erased.stderr
        emu.clock.advance(3600)
        results = ingest_all(config, emu)  # from :55 on: the client's rows held back
        assert all(r.ok for r in results), [r.error for r in results]
        assert sum(r.erased for r in results) > 0
        if reread:  # the same span read again: held back again, not counted twice
            start, end = HOUR, NOW + timedelta(minutes=50)
            span = (f"{start:%Y-%m-%dT%H:%M:%SZ}", f"{end:%Y-%m-%dT%H:%M:%SZ}")
            args = ("--zone", "1234", "--from", span[0], "--to", span[1])
            again = run_cli("--config", str(path), "ingest", *args, timeout=300)
            assert again.returncode == 0, again.stdout + again.stderr
        rows = audit_of_the_day(path)
        assert {row["verdict"] for row in rows} <= {"ok", "pending"}, rows
        cut = [row for row in rows if row["hour"].startswith(f"{HOUR:%Y-%m-%dT%H}")]
        assert cut and cut[0]["verdict"] == "ok"
        assert cut[0]["lake_requests"] + cut[0]["erased_requests"] == cut[0]["provider_requests"]
    finally:
        emu.stop()


def test_a_forget_stopped_after_its_first_zone_keeps_its_counts(tmp_path, monkeypatch):
    emu = emulator("1234,1236")
    try:
        path = write_config(tmp_path, emu, [(1234, "v2"), (1236, "v2")])
        config = load_test_config(path)
        assert all(r.ok for r in ingest_all(config, emu))
        address = busiest(path, 1234)
        landed: list[int] = []
        rewrite = forget_module.rewrite

        def failing_after_the_first_zone(make, mark):
            if landed:
                raise forget_module.StorageError("injected: the store went away")
            written = rewrite(make, mark)
            if make().zone_id != 0:
                landed.append(1)
            return written

        monkeypatch.setattr(forget_module, "rewrite", failing_after_the_first_zone)
        with session_for(config) as session, pytest.raises(forget_module.StorageError):
            forget(session, Target(ip=address), datetime.now(UTC))
        monkeypatch.undo()
        again = run_cli("--config", str(path), "forget", "--ip", address)  # finishes
        assert again.returncode == 0, again.stdout + again.stderr
        rows = audit_of_the_day(path)
        assert {row["verdict"] for row in rows} <= {"ok", "pending"}, rows
        assert sum(int(row["erased_requests"]) for row in rows) > 0
    finally:
        emu.stop()
