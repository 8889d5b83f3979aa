"""An erasure is explained, never taken for loss (issue 48): after ``cdnlake forget`` of a
busy client, the audit of the day (the daily audit's path too) is green, each hour
counting the requests the erasure removed; the kept day and its ratio say so, and so do
``status``, the daemon's ``cdnlake_completeness_ratio`` and its alert's expression.
Through the CLI against the emulator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cdnlake.emulator import Emulator
from cdnlake.scheduler import wait_for
from tests.conftest import REPO, free_port, run_cli, start_emulator, write_config
from tests.monitoring.prometheus import running_prometheus
from tests.test_scheduler import spawn_daemon, stop, wait_for_line

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


def alert_expression() -> str:
    """The critical day-incomplete alert's expression, as Prometheus is given it."""
    import yaml

    rules = yaml.safe_load((REPO / "contrib" / "prometheus" / "alerts.yml").read_text())
    (rule,) = [
        r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "CdnlakeDayShort"
    ]
    return str(rule["expr"])


def test_status_the_metric_and_its_alert_after_a_forget_are_green(forgotten, tmp_path) -> None:
    """``status`` (text and json) says the day ok, ratio 1; the daemon's daily audit keeps
    it ok and its ``/metrics`` ratio, scraped by Prometheus with cdnlake's rules, does not
    make the day-incomplete alert's expression true."""
    _, config, day = forgotten
    port = free_port()
    daemon = config.with_name("daemon.toml")  # the same storage root
    text = config.read_text().replace(
        "[[zones]]", f'[metrics]\nlisten = "127.0.0.1:{port}"\n[[zones]]', 1
    )
    # the daily report (and its audit) caught up at the start; no maintenance now
    daemon.write_text(
        text.replace("[schedule]\n", '[schedule]\nreport_at = "00:00"\nmaintain_at = "23:59"\n')
    )
    with running_prometheus(tmp_path, f"127.0.0.1:{port}") as prometheus:
        proc = spawn_daemon(daemon)
        try:
            wait_for_line(proc, f"completeness audit of {day}: ", timeout=240)
            series = f'cdnlake_completeness_ratio{{zone="{ZONE}", day="{day}"}}'
            assert wait_for(lambda: prometheus.query(series), 60, step=0.5), proc.log.read_text()
            ratio = prometheus.values(series)
            shorts = prometheus.query(alert_expression())
        finally:
            code, _, log = stop(proc)
    assert code == 0, log[-3000:]
    assert f"completeness audit of {day}: 1 zone(s) audited, 1 ok, 0 not ok" in log, log
    assert "completeness audit: zone" not in log, log
    assert list(ratio.values()) == [1.0] and shorts == [], (ratio, shorts)

    shown = run_cli("--config", str(config), "status")
    assert f"zone {ZONE} {day} ok (ratio 1.000000)" in shown.stdout, shown.stdout + shown.stderr
    shown = run_cli("--config", str(config), "status", "--format", "json")
    (zone,) = [z for z in json.loads(shown.stdout) if z["zone_id"] == ZONE]
    audit = zone["last_audit"]
    assert (audit["day"], audit["verdict"], audit["ratio"]) == (day, "ok", 1.0), audit
    assert audit["erased_requests"] > 0
