"""Several ``cdnlake daemon`` processes share twelve zones through a real PostgreSQL.

One is SIGKILLed, a fourth joins, PostgreSQL restarts once; at the end every zone is
complete and exactly once, the emulator counted no 429, no two daemons' passes of a zone
overlapped, and SIGTERM exits 0. Without coordination, a second daemon on one storage
root exits 2 naming the first.
"""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from cdnlake.coordination.postgres import fleet_view
from cdnlake.lake.log.progress import from_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.scheduler import wait_for
from tests.conftest import (
    lake_frame,
    lake_ids,
    lake_of,
    load_test_config,
    run_cli,
    spawn_cli,
    start_emulator,
    truth_ids,
    write_config,
)

ZONES = list(range(3001, 3013))
POLL = 3  # lease time: a dead daemon's zones move within 2 * POLL


def spawn_daemon(config: Path, name: str) -> subprocess.Popen[str]:
    log = config.parent / f"{name}.log"
    proc = spawn_cli("--config", str(config), "daemon", stderr=open(log, "w"))
    proc.log = log  # type: ignore[attr-defined]
    return proc


def log_of(proc: subprocess.Popen[str]) -> str:
    return proc.log.read_text()  # type: ignore[attr-defined]


def recorded_runs(proc: subprocess.Popen[str]) -> set[str]:
    """The daemon ids (host:pid) of ``proc`` in ingest_runs: empty before its first pass."""
    runs = lake_frame(proc.log.parent / "data", "ingest_runs")  # type: ignore[attr-defined]
    return {d for d in runs["daemon"].unique().to_list() if d.endswith(f":{proc.pid}")}


def daemon_id(proc: subprocess.Popen[str]) -> str:
    """``proc``'s id, once it has recorded a pass (readiness: a new owner first waits
    out the previous owner's rate window)."""
    assert wait_for(lambda: len(recorded_runs(proc)) == 1, 60), log_of(proc)
    return recorded_runs(proc).pop()


def fleet_config(tmp_path: Path, emu, poll: int = POLL) -> Path:
    path = write_config(
        tmp_path,
        emu,
        zones=[(z, "v2") for z in ZONES],
        page_size=1000,
        requests_per_window=30,
        window_seconds=10,
        max_window_seconds=43200,
    )
    text = path.read_text().replace("poll_seconds = 1", f"poll_seconds = {poll}")
    path.write_text(
        text
        + '[coordination]\npostgres_dsn_env = "PG_DSN"\n[privacy]\nhash_key_env = "FLEET_KEY"\n'
    )
    return path


def watermarks(root: Path) -> dict[int, datetime | None]:
    table = lake_of(root).open(REQUESTS)
    if table is None:
        return dict.fromkeys(ZONES)
    return {z: from_ms(table.transaction_version(REQUESTS.app_id(z))) for z in ZONES}


def caught_up(root: Path, since: datetime) -> bool:
    """Every zone's watermark has moved past ``since - lag`` (lag is 300 s)."""
    return all(
        m is not None and m > since - timedelta(seconds=300) for m in watermarks(root).values()
    )


@pytest.mark.timeout(400)
def test_three_daemons_one_killed_one_joins_database_restarts(tmp_path, postgres, monkeypatch):
    monkeypatch.setenv("PG_DSN", postgres.dsn)
    emu = start_emulator(",".join(map(str, ZONES)), rpm=2, rate=(30, 10.0), now=None, frozen=False)
    procs: list[subprocess.Popen[str]] = []
    try:
        path = fleet_config(tmp_path, emu)
        config = load_test_config(path)
        root = tmp_path / "data"
        fleet = config.storage.lake_location
        launched = datetime.now(UTC)
        a, b, c = (spawn_daemon(path, name) for name in "abc")
        procs += [a, b, c]

        def owners() -> dict[str, str]:
            return fleet_view(postgres.dsn, fleet).owners

        def shares() -> dict[str, int]:
            counts: dict[str, int] = {}
            for owner in owners().values():
                counts[owner] = counts.get(owner, 0) + 1
            return counts

        assert wait_for(lambda: caught_up(root, launched), 180), [log_of(p) for p in procs]
        assert wait_for(lambda: sorted(shares().values()) == [4, 4, 4], 60), shares()

        # SIGKILL one: its zones go to the other two, nothing is lost or doubled.
        a_id = daemon_id(a)
        a_zones = {k for k, o in owners().items() if o == a_id}
        a.kill()
        a.wait()
        assert wait_for(lambda: a_id not in shares() and sorted(shares().values()) == [6, 6], 60)
        assert all(owners()[k] != a_id for k in a_zones)

        # A fourth joins and takes its share.
        d = spawn_daemon(path, "d")
        procs.append(d)
        assert wait_for(lambda: sorted(shares().values()) == [4, 4, 4], 60), shares()
        daemon_id(d)  # and ingests it

        # PostgreSQL restarts: the daemons reconnect and go on.
        restarted = datetime.now(UTC)
        postgres.restart()
        assert wait_for(lambda: sorted(shares().values()) == [4, 4, 4], 60), shares()
        assert wait_for(lambda: caught_up(root, restarted + timedelta(seconds=2 * POLL)), 120)

        status = run_cli(
            "--config", str(path), "status", "--format", "json", env={"PG_DSN": postgres.dsn}
        )
        rows = json.loads(status.stdout)
        assert {r["owner"] for r in rows} == set(shares())
        table = run_cli("--config", str(path), "status", "--wide", env={"PG_DSN": postgres.dsn})
        assert "daemons (PostgreSQL fleet):" in table.stdout and "owner" in table.stdout

        for proc in (b, c, d):
            proc.send_signal(signal.SIGTERM)
        for proc in (b, c, d):
            assert proc.wait(timeout=30) == 0, log_of(proc)
            assert "Traceback" not in log_of(proc)
        assert owners() == {}  # each released its leases on the way out

        assert sum(emu.counters[z].rate_limited for z in ZONES) == 0
        runs = lake_frame(root, "ingest_runs").sort("started")
        marks = watermarks(root)
        for zone in ZONES:
            got = lake_ids(root, zone)
            assert len(got) == len(set(got)), f"zone {zone}: duplicates"
            # Complete from where the zone's first pass began (3 days back at that moment).
            start = runs.filter(pl.col("zone") == zone)["window_from"].min()
            missing = truth_ids(emu, zone, start, marks[zone], at=emu.clock.now()) - set(got)
            assert not missing, f"zone {zone}: {len(missing)} requests missing"

        assert runs["daemon"].n_unique() == 4  # a, b, c and d all ingested
        for (zone,), group in runs.group_by("zone"):
            previous: tuple[str, datetime] | None = None
            for row in group.sort("started").iter_rows(named=True):
                if previous is not None and previous[0] != row["daemon"]:
                    assert row["started"] >= previous[1], f"zone {zone}: passes overlap"
                previous = (row["daemon"], row["finished"])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        emu.stop()


def test_without_coordination_a_second_daemon_on_one_root_exits_2(tmp_path):
    emu = start_emulator("1234", rpm=2, now=None, frozen=False)
    first = None
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2")])
        first = spawn_daemon(path, "first")
        assert wait_for(lambda: "daemon started" in log_of(first), 60)
        second = run_cli("--config", str(path), "daemon", timeout=60)
        assert second.returncode == 2
        line = second.stderr.strip()
        assert "\n" not in line
        assert f":{first.pid} since" in line and "is running on storage root" in line
        status = run_cli("--config", str(path), "status")
        assert f":{first.pid} since" in status.stdout
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        status = run_cli("--config", str(path), "status")
        assert "daemon: none running" in status.stdout
    finally:
        if first is not None and first.poll() is None:
            first.kill()
        emu.stop()


def test_coordination_without_its_dsn_variable_is_exit_2(tmp_path, monkeypatch):
    monkeypatch.delenv("PG_DSN", raising=False)
    emu = start_emulator("3001", now=None, frozen=False)
    try:
        path = fleet_config(tmp_path, emu)
        r = run_cli("--config", str(path), "daemon", timeout=60)
        assert r.returncode == 2
        assert r.stderr.strip() == (
            "cdnlake: error: coordination.postgres_dsn_env: environment variable PG_DSN is "
            "not set (it must hold the PostgreSQL DSN)"
        )
    finally:
        emu.stop()


def test_unreachable_database_is_one_line_exit_1(tmp_path):
    emu = start_emulator("3001", now=None, frozen=False)
    try:
        path = fleet_config(tmp_path, emu)
        dsn = "host=127.0.0.1 port=1 user=x password=sekrit connect_timeout=1"
        r = run_cli("--config", str(path), "daemon", env={"PG_DSN": dsn}, timeout=60)
        assert r.returncode == 1, r.stderr
        lines = r.stderr.strip().splitlines()
        assert lines[-1].startswith("cdnlake: error: coordination: cannot connect to PostgreSQL")
        assert "sekrit" not in r.stderr and "Traceback" not in r.stderr
        status = run_cli("--config", str(path), "status", env={"PG_DSN": dsn})
        assert status.returncode == 1 and "cannot connect to PostgreSQL" in status.stderr
    finally:
        emu.stop()
