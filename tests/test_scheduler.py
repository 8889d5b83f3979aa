"""The daemon: stops cleanly mid-pass, restarts, ends complete; report job; failing zones."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from apscheduler.triggers.interval import IntervalTrigger

from cdnlake.coordination.sole import job_marker
from cdnlake.lake.log.progress import from_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.retention import oldest_served
from cdnlake.scheduler import Daemon, wait_for
from cdnlake.warehouse.db import Warehouse
from tests.conftest import (
    KEY,
    lake_frame,
    lake_ids,
    lake_of,
    load_test_config,
    make_client,
    run_cli,
    spawn_cli,
    start_emulator,
    truth_ids,
    write_config,
)
from tests.ingest.test_crash_safety import assert_lake_consistent


def spawn_daemon(config: Path) -> subprocess.Popen[str]:
    log = config.parent / "daemon.log"
    # stderr to a file: an unread pipe would fill up and block the daemon.
    proc = spawn_cli("--config", str(config), "daemon", stderr=open(log, "w"))
    proc.log = log  # type: ignore[attr-defined]
    return proc


def wait_for_line(proc: subprocess.Popen[str], text: str, timeout: float = 60) -> None:
    """Until the daemon's log holds ``text`` (readiness, never a fixed sleep)."""
    log: Path = proc.log  # type: ignore[attr-defined]
    assert wait_for(lambda: text in log.read_text(), timeout), log.read_text()


def wait_until_mid_pass(proc: subprocess.Popen[str], root: Path) -> None:
    """Until the daemon is up and its first pass has put rows in the lake."""
    wait_for_line(proc, "daemon started")
    assert wait_for(lambda: any((root / "lake").rglob("*.parquet")), 60)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[int, float, str]:
    started = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=30)
    return proc.returncode, time.monotonic() - started, proc.log.read_text()  # type: ignore[attr-defined]


def test_sigterm_mid_pass_then_restart_ends_complete(tmp_path):
    emu = start_emulator("1234,1235", rpm=20, now=None, frozen=False)
    try:
        path = write_config(
            tmp_path,
            emu,
            zones=[(1234, "v2"), (1235, "v1")],
            page_size=300,
            max_window_seconds=1800,
        )
        # Passes alone: no daily job is due before 23:59, so none is caught up at start.
        path.write_text(
            path.read_text().replace(
                "[schedule]\n", '[schedule]\nreport_at = "23:59"\nmaintain_at = "23:59"\n'
            )
        )
        root = tmp_path / "data"
        first_launch = datetime.now(UTC)
        proc = spawn_daemon(path)
        wait_until_mid_pass(proc, root)
        code, took, err = stop(proc)
        assert code == 0, err
        assert took < 10
        assert "Traceback" not in err
        assert_lake_consistent(root, [1234, 1235])

        def watermark(zone: int) -> datetime | None:
            table = lake_of(root).open(REQUESTS)
            return from_ms(table.transaction_version(REQUESTS.app_id(zone)))

        stopped_at = {zone: watermark(zone) for zone in (1234, 1235)}
        second_launch = datetime.now(UTC)
        proc = spawn_daemon(path)

        def caught_up() -> bool:
            marks = [watermark(z) for z in (1234, 1235)]
            return all(m and m > datetime.now(UTC) - timedelta(seconds=330) for m in marks)

        assert wait_for(caught_up, 60)
        log: Path = proc.log  # type: ignore[attr-defined]

        def passes() -> int:
            return log.read_text().count("zone 1234 [v2] ok: reached")

        caught_up_at = passes()
        assert wait_for(lambda: passes() >= caught_up_at + 2, 60)  # steady-state passes
        code, took, err = stop(proc)
        assert code == 0 and took < 10, err
        assert "zone 1234 [v2] ok: reached" in err  # one log line per pass
        assert KEY not in err
        assert_lake_consistent(root, [1234, 1235])
        runs = lake_frame(root, "ingest_runs")
        for zone in (1234, 1235):
            # Complete from where a pass began reading that the zone's progress carried
            # on from: the first daemon's, when it committed a watermark before its stop;
            # else the restarted one's (what expired while no daemon ran was never due).
            mine = runs.filter(pl.col("zone") == zone)
            if stopped_at[zone] is None:
                mine = mine.filter(pl.col("started") >= second_launch)
            first = mine["window_from"].min()  # v1: the day's start, the file read whole
            assert isinstance(first, datetime)
            start = max(first, oldest_served(first_launch) + timedelta(seconds=5))
            truth = truth_ids(emu, zone, start, watermark(zone), at=emu.clock.now())
            assert truth <= set(lake_ids(root, zone))
    finally:
        emu.stop()


def test_second_signal_exits_at_once(tmp_path):
    emu = start_emulator("1234", rpm=20, now=None, frozen=False)
    try:
        path = write_config(
            tmp_path, emu, zones=[(1234, "v2")], page_size=200, max_window_seconds=900
        )
        # Every answer takes 6 s: a clean stop has to wait for the one in flight.
        emu.faults.update({"slow_rate": 1.0, "slow_seconds": 6.0})
        proc = spawn_daemon(path)
        wait_for_line(proc, "daemon started")
        assert wait_for(lambda: emu.counters[1234].requests >= 1, 60)  # a request in flight
        proc.send_signal(signal.SIGTERM)
        wait_for_line(proc, "signal SIGTERM: stopping")
        code, took, _ = stop(proc)
        assert took < 2 and code == 1
        assert_lake_consistent(tmp_path / "data", [1234])
    finally:
        emu.stop()


def test_configuration_error_at_start_is_exit_2(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("[schedule]\npoll_seconds = 'often'\n")
    r = run_cli("--config", str(bad), "daemon")
    assert r.returncode == 2 and r.stderr.strip() == (
        f"cdnlake: error: {bad}: schedule.poll_seconds: expected integer, got string"
    )


def test_report_job_fires_and_failing_zone_keeps_being_retried(tmp_path):
    emu = start_emulator("1234,1240:disabled")
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2"), (1240, "v2")]))
        api = make_client(config)
        daemon = Daemon(config, api, clock=emu.clock.now, report_trigger=IntervalTrigger(seconds=1))
        warehouse = Warehouse(config.storage)

        def outcomes() -> dict[tuple[int, str], int]:
            with warehouse.connect() as con:
                runs = con.execute(
                    "SELECT pull_zone_id, outcome, count(*) FROM ingest_runs GROUP BY ALL"
                ).fetchall()
            return {(z, o): n for z, o, n in runs}

        def seen_enough() -> bool:
            counted = outcomes()
            # Counted per zone: the failing zone itself is retried on its schedule.
            return (
                len(daemon.report_runs) >= 1
                and counted.get((1240, "failed"), 0) >= 2
                and counted.get((1234, "ok"), 0) >= 2
            )

        daemon.start()
        try:
            assert wait_for(seen_enough, 60, step=0.2)
        finally:
            assert daemon.stop()
        reports = sorted(p.name for p in config.storage.reports.iterdir())
        day = (emu.clock.now() - timedelta(days=1)).date().isoformat()
        assert f"report-all-{day}.html" in reports
        final = outcomes()
        assert final[(1240, "failed")] >= 2 and (1240, "ok") not in final
        assert final[(1234, "ok")] >= 2
    finally:
        emu.stop()


def daily_jobs_at_midnight(path: Path) -> Path:
    """Report and maintenance at 00:00 UTC: a daemon started now starts after both."""
    text = path.read_text().replace(
        "[schedule]\n", '[schedule]\nreport_at = "00:00"\nmaintain_at = "00:00"\n'
    )
    path.write_text(text)
    return path


def report_day(log: str) -> str:
    found = re.search(r"daily report for (\S+) written", log)
    assert found, log
    return found.group(1)


def test_a_daemon_started_after_report_at_makes_that_days_report_once(tmp_path):
    """The cron trigger only looks ahead: a daemon (re)started after report_at made no
    report that day. It catches up after its first passes, and a restart does not again."""
    emu = start_emulator("1234", rpm=2, now=None, frozen=False)
    try:
        path = daily_jobs_at_midnight(write_config(tmp_path, emu, zones=[(1234, "v2")]))
        root = tmp_path / "data"
        proc = spawn_daemon(path)
        wait_for_line(proc, "lake maintained", timeout=120)
        wait_for_line(proc, "written", timeout=120)
        code, _, log = stop(proc)
        assert code == 0 and "Traceback" not in log, log
        day = report_day(log)
        assert (root / "reports" / f"report-all-{day}.html").exists()

        # Restarted the same day: the report and the maintenance are done already.
        proc = spawn_daemon(path)
        wait_for_line(proc, f"daily report for {day}: already done on this storage root", 120)
        wait_for_line(proc, "lake maintenance for", timeout=120)
        code, _, log = stop(proc)
        assert code == 0 and "Traceback" not in log, log
        assert "written" not in log and "lake maintained" not in log, log
    finally:
        emu.stop()


def test_a_fleet_started_after_report_at_makes_that_days_report_once(
    tmp_path, postgres, monkeypatch
):
    """Two daemons of a PostgreSQL fleet, both started after report_at: one of them
    makes the day's report and maintenance, the other leaves them to it."""
    monkeypatch.setenv("PG_DSN", postgres.dsn)
    emu = start_emulator("1234,1236", rpm=2, now=None, frozen=False)
    procs: list[subprocess.Popen[str]] = []
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2"), (1236, "v2")])
        path.write_text(
            path.read_text()
            + '[coordination]\npostgres_dsn_env = "PG_DSN"\n[privacy]\nhash_key_env = "FLEET_KEY"\n'
        )
        daily_jobs_at_midnight(path)
        for name in ("a", "b"):
            log = tmp_path / f"{name}.log"
            proc = spawn_cli("--config", str(path), "daemon", stderr=open(log, "w"))
            proc.log = log  # type: ignore[attr-defined]
            procs.append(proc)
        for proc in procs:  # each has done the day's jobs, or left them to the other
            wait_for_line(proc, "daily report for ", timeout=120)
            wait_for_line(proc, "lake maint", timeout=120)
        logs = []
        for proc in procs:
            code, _, log = stop(proc)
            assert code == 0 and "Traceback" not in log, log
            logs.append(log)
        both = "\n".join(logs)
        assert both.count("written") == 1, both
        assert both.count("lake maintained") == 1, both
        day = report_day(both)
        assert (tmp_path / "data" / "reports" / f"report-all-{day}.html").exists()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        emu.stop()


def test_archive_jobs_keep_to_their_own_workers(tmp_path):
    """Many zones catching up on their archives at once (a daemon back from an outage): at
    most ARCHIVE_JOBS archive jobs run together, on workers of their own, and the polls
    go on meanwhile; the jobs left wait their turn."""
    import threading

    from cdnlake.config import build_config
    from cdnlake.scheduler import ARCHIVE_JOBS

    archive = {"storage_zone": "logs", "folder": "www", "password_env": "ARCHIVE_PW"}
    zones = [{"id": 2000 + i, "archive": {**archive, "folder": f"z{i}"}} for i in range(8)]
    raw = {
        "storage": {"root": str(tmp_path / "data")},
        "schedule": {"poll_seconds": 1, "archive_seconds": 3600},
        "zones": zones,
    }
    config = build_config(raw, base_dir=tmp_path, env={"ARCHIVE_PW": "pw"})
    daemon = Daemon(config, make_client(config), catch_up=False)
    release = threading.Event()
    lock = threading.Lock()
    running: set[int] = set()
    most = 0
    ran: set[int] = set()
    polls: list[int] = []

    def archive_job(zone):  # an archive job that takes its time
        nonlocal most
        with lock:
            running.add(zone.id)
            most = max(most, len(running))
        release.wait(30)
        with lock:
            running.discard(zone.id)
            ran.add(zone.id)

    daemon.pick_up_archive = archive_job  # type: ignore[method-assign]
    daemon.poll_zone = lambda zone: polls.append(zone.id)  # type: ignore[method-assign]
    daemon.start()
    try:
        assert wait_for(lambda: len(running) >= min(ARCHIVE_JOBS, 8), 30)
        # The polls go on while the archive jobs hold their workers (each zone twice
        # more), and by then every archive job has come due (50 ms apart).
        before = len(polls)
        assert wait_for(lambda: len(polls) >= before + 2 * len(zones), 30), polls
        assert most <= ARCHIVE_JOBS, f"{most} archive jobs at once"
        release.set()
        assert wait_for(lambda: len(ran) == 8, 30), ran
    finally:
        release.set()
        assert daemon.stop()


SLOW_REPORT = """
import sys, time
import cdnlake.reports.build as build

def slow(config, day, **kw):  # a report's queries over a thousand zones: not stoppable
    print("slow report begins", file=sys.stderr, flush=True)
    time.sleep(120)
    raise AssertionError("the daemon waited for the report")

build.write_reports = slow
from cdnlake.cli.main import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_sigterm_during_a_long_report_exits_within_ten_seconds_and_the_report_is_made_later(
    tmp_path,
):
    """SIGTERM while the catch-up report runs: the process exits within 10 s (it waited
    for the report), and the report, not marked done, is made at the next start."""
    emu = start_emulator("1234", rpm=2, now=None, frozen=False)
    try:
        path = daily_jobs_at_midnight(write_config(tmp_path, emu, zones=[(1234, "v2")]))
        log = tmp_path / "daemon.log"
        proc = subprocess.Popen(
            [sys.executable, "-c", SLOW_REPORT, "--config", str(path), "daemon"],
            env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
            stdout=subprocess.DEVNULL,
            stderr=open(log, "w"),
            text=True,
        )
        proc.log = log  # type: ignore[attr-defined]
        wait_for_line(proc, "slow report begins", timeout=120)
        code, took, text = stop(proc)
        assert code == 0 and took < 10, text
        assert "(forced)" in text and "Traceback" not in text, text
        assert "written" not in text

        proc = spawn_daemon(path)  # the report was not marked done: made now
        wait_for_line(proc, "written", timeout=120)
        code, _, text = stop(proc)
        assert code == 0 and "already done" not in text.split("daily report")[1], text
    finally:
        emu.stop()


def test_an_audit_stopped_by_the_daemons_stop_is_left_open_not_lost(tmp_path, caplog):
    """An audit in flight when the daemon stops is said to be stopped (not a failure, not
    'audited, but not kept'), and is not marked done: the next start audits again."""
    emu = start_emulator("1234", now=None, frozen=False)
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")]))
        with make_client(config) as api:
            daemon = Daemon(config, api, catch_up=False)
            try:
                daemon.stop_event.set()
                day = (datetime.now(UTC) - timedelta(days=1)).date()
                with caplog.at_level("INFO", logger="cdnlake.daemon"):
                    daemon.write_report(day)
            finally:
                daemon.session.close()  # never started: nothing else to stop
        assert f"completeness audit of {day} stopped" in caplog.text, caplog.text
        assert f"daily report for {day} stopped" in caplog.text, caplog.text
        assert "failed" not in caplog.text and "not kept" not in caplog.text
        assert daemon.audit_runs == [] and daemon.report_runs == []
        for job in (f"audit/{day}", f"report/{day}"):
            assert not job_marker(config.storage.work, job).exists(), job
    finally:
        emu.stop()


def test_the_daily_audit_logs_one_line_and_one_per_zone_not_ok(caplog):
    from datetime import date

    from cdnlake.audit.days import DayAudit
    from cdnlake.scheduler import log_audit

    day = date(2026, 11, 20)
    days = [DayAudit(zone, day, "ok", 10, 10, 0) for zone in range(1000)]
    days.append(DayAudit(5000, day, "short", 10, 8, 2, "2 hours short"))
    with caplog.at_level("INFO", logger="cdnlake.daemon"):
        log_audit(day, days)
    assert len(caplog.records) == 2, caplog.text
    assert "1001 zone(s) audited, 1000 ok, 1 not ok" in caplog.records[0].getMessage()
    assert "zone 5000 2026-11-20: short" in caplog.records[1].getMessage()
