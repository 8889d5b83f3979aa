"""Audited days kept in the lake (``audit_days``): `status` shows each zone's last audit,
the daily report its day's completeness, `/metrics` the ratio; the daemon audits
yesterday once a day, before its report."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import msgspec
import pytest
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client import generate_latest

from cdnlake.emulator import Faults
from cdnlake.monitoring.metrics import DaemonMetrics
from cdnlake.scheduler import Daemon, wait_for
from cdnlake.status import completeness
from tests.audit.test_audit_cli import Setup, audited_day
from tests.conftest import (
    lake_frame,
    load_test_config,
    make_client,
    run_cli,
    start_emulator,
    write_config,
)
from tests.sessions import session_for


@pytest.fixture(scope="module")
def lost(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """Zones 1234 (v2) and 1236 (v2) ingested; 05:00 of the audited day (yesterday, or the
    day before just after midnight, while yesterday's last hour is pending) of 1234 was lost."""
    day = audited_day()
    faults = Faults(lose_hours=f"1234@{day}T05")
    emu = start_emulator("1234,1236", rpm=2, now=None, frozen=False, faults=faults)
    try:
        config = write_config(tmp_path_factory.mktemp("days"), emu, [(1234, "v2"), (1236, "v2")])
        r = run_cli("--config", str(config), "ingest", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        yield Setup(emu, config, day)
    finally:
        emu.stop()


def cli(setup: Setup, *args: str) -> tuple[int, str, str]:
    r = run_cli("--config", str(setup.config), *args, timeout=300)
    return r.returncode, r.stdout, r.stderr


def test_audit_keeps_each_day_status_and_the_report_show_it(lost: Setup) -> None:
    day = str(lost.day)
    # Before any audit: the report says so, and status shows no audit.
    code, _, err = cli(lost, "report", "--date", day, "--format", "json,md,csv,html")
    assert code == 0, err
    reports = lost.config.parent / "data" / "reports"
    payload = json.loads((reports / f"report-all-{day}.json").read_text())
    assert [r["verdict"] for r in payload["completeness"]] == ["not audited yet"] * 2
    assert "Completeness" in (reports / f"report-all-{day}.html").read_text()
    code, out, _ = cli(lost, "status", "--format", "json")
    assert [z["last_audit"] for z in json.loads(out)] == [None, None]

    code, _, _ = cli(lost, "audit", "--date", day)
    assert code == 1
    code, out, _ = cli(lost, "status")
    assert "last audit: zone 1234 " + day + " short (ratio 0.9" in out
    assert f"zone 1236 {day} ok (ratio 1.000000)" in out
    code, out, _ = cli(lost, "status", "--format", "json")
    audits = {z["zone_id"]: z["last_audit"] for z in json.loads(out)}
    assert audits[1234]["day"] == day and audits[1234]["verdict"] == "short"
    assert audits[1234]["hours_short"] == 1 and audits[1234]["detail"] == "05:00 missing"
    assert 0.9 < audits[1234]["ratio"] < 1 and audits[1236]["ratio"] == 1.0
    code, out, _ = cli(
        lost, "sql", "SELECT pull_zone_id, day, verdict FROM audit_days ORDER BY 1", "--format",
        "csv",
    )  # fmt: skip
    assert out.splitlines() == [
        "pull_zone_id,day,verdict",
        f"1234,{day},short",
        f"1236,{day},ok",
    ]

    # The report shows the day's audit in every format.
    code, _, err = cli(lost, "report", "--date", day, "--format", "json,md,csv,html")
    assert code == 0, err
    payload = json.loads((reports / f"report-all-{day}.json").read_text())
    rows = {r["pull_zone_id"]: r for r in payload["completeness"]}
    assert rows[1234]["verdict"] == "short" and rows[1234]["short_hours"] == "05:00 missing"
    assert rows[1236]["verdict"] == "ok" and rows[1236]["ratio"] == 1.0
    assert payload["sections"]["completeness"]["rows"] == payload["completeness"]
    md = (reports / f"report-all-{day}.md").read_text()
    assert "## Completeness" in md and "short" in md and "not audited yet" not in md
    csv = (reports / f"report-all-{day}.completeness.csv").read_text().splitlines()
    assert csv[0].startswith("pull_zone_id,verdict,ratio,") and len(csv) == 3
    html = (reports / f"report-all-{day}.html").read_text()
    assert "short: zone 1234" in html and "05:00 missing" in html

    # Read again and audited again: the day's row is replaced, not added.
    httpx.post(f"{lost.emu.url}/_emulator/faults", json={"lose_hours": ""}).raise_for_status()
    frm, to = f"{day}T05:00Z", f"{day}T06:00Z"
    assert cli(lost, "ingest", "--zone", "1234", "--from", frm, "--to", to)[0] == 0
    assert cli(lost, "audit", "--date", day)[0] == 0
    kept = lake_frame(lost.config.parent / "data", "audit_days")
    assert kept.height == 2 and set(kept["verdict"].to_list()) == {"ok"}
    config = load_test_config(lost.config)
    assert completeness(config, session_for(config)) == {("1234", day): 1.0, ("1236", day): 1.0}


def away_from_midnight() -> datetime:
    """Now, or an hour earlier within half an hour of midnight UTC: where the emulator and
    the daemon's clock stand so that, for the test's few minutes, the daemon's yesterday is
    one day, its last hour behind ``lag_seconds`` (300): just after midnight it is not yet,
    and it waits minutes for it; just before, its yesterday changes under it."""
    now = datetime.now(UTC)
    of_day = now - now.replace(hour=0, minute=0, second=0, microsecond=0)
    near = of_day < timedelta(minutes=30) or of_day > timedelta(hours=23, minutes=30)
    return now - timedelta(hours=1) if near else now


def test_the_daemon_audits_yesterday_before_its_report_and_exports_the_ratio(
    tmp_path: Path,
) -> None:
    start = away_from_midnight()
    day = (start - timedelta(days=1)).date()
    emu = start_emulator(
        "1234", rpm=2, now=start, frozen=False, faults=Faults(lose_hours=f"1234@{day}T07")
    )
    try:
        config = load_test_config(write_config(tmp_path, emu, [(1234, "v2")]))
        session = session_for(config)
        metrics = DaemonMetrics(config, completeness=lambda: completeness(config, session))
        daemon = Daemon(
            config,
            make_client(config),
            clock=emu.clock.now,
            report_trigger=IntervalTrigger(seconds=1),
            metrics=metrics,
            catch_up=False,
        )
        daemon.start()
        try:
            # The first report job may run before the first pass: the zone is only behind
            # then, its hours pending, and the day is not kept (the job stays open); once
            # the pass has read the day it is kept, once (a fleet job), not again.
            assert wait_for(lambda: daemon.report_runs and daemon.audit_runs, 300, step=0.2)
        finally:
            assert daemon.stop()
        assert daemon.audit_runs == [day]
        text = generate_latest(metrics.registry).decode()
        line = next(
            x
            for x in text.splitlines()
            if x.startswith("cdnlake_completeness_ratio{") and f'day="{day}"' in x
        )
        assert 'zone="1234"' in line
        assert float(line.rsplit(" ", 1)[1]) < 0.999  # hour 07 is short
        kept = lake_frame(tmp_path / "data", "audit_days")
        kept = kept.filter(kept["day"] == day)
        assert kept.height == 1 and kept["verdict"].to_list() == ["short"]
        assert kept["detail"].to_list() == ["07:00 missing"]  # no hour short for being behind
        assert (tmp_path / "data" / "reports" / f"report-all-{day}.html").exists()
    finally:
        emu.stop()


def test_a_day_not_kept_yet_is_said_and_audited_again_by_the_next_days_audit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With lag_seconds above 30 minutes the daily audit at report_at 00:30 finds
    yesterday's 23:00 hour still pending: the day is not kept, a warning names it and the
    job stays open. The next day's audit audits it again (and a short day read again
    since is corrected the same way)."""
    day = audited_day()  # the real clock's ingest has read all of it, even just after midnight
    emu = start_emulator(
        "1234,1236", rpm=2, now=None, frozen=False, faults=Faults(lose_hours=f"1234@{day}T05")
    )
    try:
        path = write_config(tmp_path, emu, [(1234, "v2"), (1236, "v2")])
        r = run_cli("--config", str(path), "ingest", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        config = load_test_config(path)
        lagging = msgspec.structs.replace(
            config, ingest=msgspec.structs.replace(config.ingest, lag_seconds=3600)
        )
        report_at = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(
            days=1, minutes=30
        )
        first = Daemon(lagging, make_client(config), clock=lambda: report_at, catch_up=False)
        with caplog.at_level(logging.WARNING, logger="cdnlake.daemon"):
            first.audit(day)
        assert first.audit_runs == []  # not done: audited again later
        for zone in (1234, 1236):
            assert (
                f"zone {zone} {day} cannot be kept yet (1 hour(s) pending from 23:00" in caplog.text
            )

        def kept() -> dict[tuple[int, date], str]:
            frame = lake_frame(tmp_path / "data", "audit_days")
            rows = frame.filter(frame["day"] == day).select("zone", "verdict").rows()
            return {(int(z), day): v for z, v in rows}

        assert kept() == {}

        # Today's audit (the real clock's: the next day's, or the one after just after
        # midnight) audits the day again; today is not whole: its job stays open.
        today = datetime.now(UTC).date()
        second = Daemon(config, make_client(config), catch_up=False)
        second.audit(today)
        assert kept() == {(1234, day): "short", (1236, day): "ok"}

        # Read again; the next audit corrects the short day.
        httpx.post(f"{emu.url}/_emulator/faults", json={"lose_hours": ""}).raise_for_status()
        r = run_cli(
            "--config", str(path), "ingest", "--zone", "1234",
            "--from", f"{day}T05:00Z", "--to", f"{day}T06:00Z", timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        second.audit(today)  # today is not whole yet: its job is still open
        assert kept() == {(1234, day): "ok", (1236, day): "ok"}
    finally:
        emu.stop()


def test_a_day_not_kept_at_report_time_is_audited_again_the_same_day_with_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With lag_seconds at an hour, the audit at report_at 00:30 finds yesterday's 23:00
    hour pending: the report says "not audited yet", the warning is said once, and the
    daemon's compaction rounds audit the day again the same day, 10 then 20 minutes later,
    not a day later: kept at 01:00, once the hour is past the lag."""
    day = audited_day()
    emu = start_emulator("1234", rpm=2, now=None, frozen=False)
    try:
        path = write_config(tmp_path, emu, [(1234, "v2")])
        r = run_cli("--config", str(path), "ingest", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        config = load_test_config(path)
        lagging = msgspec.structs.replace(
            config, ingest=msgspec.structs.replace(config.ingest, lag_seconds=3600)
        )
        midnight = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
        now = [midnight + timedelta(minutes=30)]
        daemon = Daemon(lagging, make_client(config), clock=lambda: now[0], catch_up=False)
        tries: list[datetime] = []
        audit = daemon.audit

        def counted(audited: date) -> None:
            tries.append(now[0])
            audit(audited)

        daemon.audit = counted  # type: ignore[method-assign]

        def at(hh_mm: str) -> datetime:
            hours, minutes = map(int, hh_mm.split(":"))
            return midnight + timedelta(hours=hours, minutes=minutes)

        warned = f"completeness audit: zone 1234 {day} cannot be kept yet (1 hour(s) pending"
        with caplog.at_level(logging.INFO, logger="cdnlake"):
            daemon.write_report(day)
            report = tmp_path / "data" / "reports" / f"report-all-{day}.json"
            verdicts = [r["verdict"] for r in json.loads(report.read_text())["completeness"]]
            assert verdicts == ["not audited yet"]
            assert daemon.audit_runs == []
            for moment in ("00:35", "00:40", "00:50", "01:00", "01:10", "03:00"):
                now[0] = at(moment)
                daemon.compact_open_days()
        assert tries == [at("00:30"), at("00:40"), at("01:00")], tries
        assert daemon.audit_runs == [day]
        assert caplog.text.count(warned) == 1, caplog.text
        first = f"not done (not kept yet); tried again from {midnight:%Y-%m-%d} 00:40 UTC"
        assert first in caplog.text
        assert "still not done at try 2" in caplog.text
        assert f"tried again from {midnight:%Y-%m-%d} 01:00 UTC" in caplog.text
        kept = lake_frame(tmp_path / "data", "audit_days")
        assert kept.filter(kept["day"] == day)["verdict"].to_list() == ["ok"]
    finally:
        emu.stop()
