"""/metrics, /healthz and JSON logs of a daemon ingesting from the emulator."""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
from datetime import UTC, datetime
from pathlib import Path

import httpx
import polars as pl
from prometheus_client.parser import text_string_to_metric_families

from cdnlake.ingest.passes import Ingestor
from cdnlake.lake.zone.session import LakeSession
from cdnlake.monitoring.http import MetricsServer
from cdnlake.monitoring.metrics import DaemonMetrics
from cdnlake.monitoring.traffic import TrafficCounters
from cdnlake.privacy import PrivacyPolicy
from cdnlake.scheduler import Daemon, wait_for
from cdnlake.status import health, zone_watermarks
from tests.conftest import (
    KEY,
    lake_frame,
    load_test_config,
    logging_client,
    make_client,
    run_cli,
    spawn_cli,
    start_emulator,
    write_config,
)
from tests.sessions import session_for


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of /metrics: name -> {sorted labels: value}, read by prometheus_client."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[key] = sample.value
    return samples


def per_zone(samples: dict, name: str, source: str = "v2") -> dict[str, float]:
    return {
        dict(labels)["zone"]: value
        for labels, value in samples.get(name, {}).items()
        if dict(labels).get("source") == source and "le" not in dict(labels)
    }


def test_counters_match_ingest_runs_and_lag_is_right_from_the_first_scrape(tmp_path):
    emu = start_emulator("1234,1235", rpm=4)
    server = None
    daemon = None
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2"), (1235, "v2")]))
        # Some history first: a new daemon's lag gauge must know it before its first pass.
        Ingestor(config, logging_client(config), session_for(config), clock=emu.clock.now).run(
            config.zones[:1]
        )
        # The daemon's session, which its lag gauge reads and which feeds its traffic.
        traffic = TrafficCounters()
        session = LakeSession.from_config(
            config.storage, privacy=PrivacyPolicy.from_config(config.privacy), traffic=traffic
        )
        metrics = DaemonMetrics(
            config, watermarks=lambda: zone_watermarks(session, config), traffic=traffic
        )
        server = MetricsServer("127.0.0.1", 0, metrics, lambda: health(config, session))
        server.start()
        first = scrape(server.url)
        lag = per_zone(first, "cdnlake_watermark_lag_seconds")
        marks = zone_watermarks(session, config)
        expected = (datetime.now(UTC) - marks[("1234", "v2")]).total_seconds()
        assert set(lag) == {"1234"} and abs(lag["1234"] - expected) < 30
        # Every zone's counters exist at zero before its first pass.
        assert per_zone(first, "cdnlake_rows_ingested_total") == {"1234": 0.0, "1235": 0.0}

        daemon = Daemon(
            config, make_client(config), clock=emu.clock.now, metrics=metrics, session=session
        )
        started = datetime.now(UTC)
        daemon.start()
        seen_mid_run = scrape(server.url)  # scraped while the daemon ingests
        assert "cdnlake_pass_duration_seconds_count" in seen_mid_run

        def runs_rows() -> dict[str, float]:
            """Rows that this daemon's passes recorded in ingest_runs, per zone."""
            runs = lake_frame(config, "ingest_runs").filter(pl.col("started") >= started)
            grouped = runs.group_by("zone").agg(pl.col("rows").sum())
            return {str(z): float(r) for z, r in grouped.iter_rows()}

        # The frozen emulator has nothing new after the first passes: the figures settle.
        assert wait_for(lambda: min(daemon.zone_passes.values(), default=0) >= 2, 60)
        assert wait_for(
            lambda: per_zone(scrape(server.url), "cdnlake_rows_ingested_total") == runs_rows(),
            30,
        ), (per_zone(scrape(server.url), "cdnlake_rows_ingested_total"), runs_rows())
        final = scrape(server.url)
        # The traffic counters add up to the rows, split by cache status and status class.
        requests: dict[str, float] = {}
        for labels, value in final["cdnlake_requests_total"].items():
            zone = dict(labels)["zone"]
            requests[zone] = requests.get(zone, 0.0) + value
        rows = per_zone(final, "cdnlake_rows_ingested_total")
        assert {zone: requests.get(zone, 0.0) for zone in rows} == rows
        classes = {dict(labels)["status_class"] for labels in final["cdnlake_requests_total"]}
        assert {"2xx", "5xx"} <= classes
        assert per_zone(final, "cdnlake_last_pass_ok") == {"1234": 1.0, "1235": 1.0}
        assert per_zone(final, "cdnlake_rate_limited_total") == {"1234": 0.0, "1235": 0.0}
        # Zone 1234's history was ingested before this daemon: its counter is what it added.
        assert per_zone(final, "cdnlake_duplicates_dropped_total")["1234"] >= 0
        lag = per_zone(final, "cdnlake_watermark_lag_seconds")
        assert set(lag) == {"1234", "1235"}
        assert all(v >= 0 for v in lag.values())
    finally:
        if daemon is not None:
            assert daemon.stop()
        if server is not None:
            server.stop()
        emu.stop()


def metrics_config(tmp_path: Path, emu) -> Path:
    path = write_config(tmp_path, emu, zones=[(1234, "v2"), (1235, "v2")])
    path.write_text(path.read_text() + '[metrics]\nlisten = "127.0.0.1:0"\n')
    return path


def test_healthz_follows_a_zone_whose_logging_is_disabled_and_logs_are_json(tmp_path):
    emu = start_emulator("1234,1235", rpm=20, now=None, frozen=False)
    proc = None
    try:
        path = metrics_config(tmp_path, emu)
        log = tmp_path / "daemon.log"
        proc = spawn_cli(
            "--config", str(path), "--log-format", "json", "daemon", stderr=open(log, "w")
        )

        def lines() -> list[dict]:
            return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]

        def url() -> str | None:
            for entry in lines():
                if entry["message"].startswith("metrics: serving "):
                    return entry["message"].split()[2].removesuffix("/metrics")
            return None

        assert wait_for(lambda: url() is not None, 60), log.read_text()
        base = url()

        def healthz() -> int:
            return httpx.get(f"{base}/healthz", timeout=30).status_code

        assert wait_for(lambda: healthz() == 200, 120), httpx.get(f"{base}/healthz").text
        body = httpx.get(f"{base}/healthz", timeout=30).json()
        assert {z["zone_id"] for z in body} == {1234, 1235}
        status = run_cli("--config", str(path), "status", "--format", "json")
        assert [z["zone_id"] for z in json.loads(status.stdout)] == [z["zone_id"] for z in body]

        emu.zones[1235] = dataclasses.replace(emu.zones[1235], disabled=True)
        assert wait_for(lambda: healthz() == 503, 60)
        body = httpx.get(f"{base}/healthz", timeout=30).json()
        sick = {z["zone_id"]: z for z in body if not z["healthy"]}
        assert set(sick) == {1235}
        assert "logging is not enabled" in sick[1235]["problem"].lower(), sick
        assert per_zone(scrape(base), "cdnlake_last_pass_ok")["1235"] == 0.0

        emu.zones[1235] = dataclasses.replace(emu.zones[1235], disabled=False)
        assert wait_for(lambda: healthz() == 200, 60)
        assert per_zone(scrape(base), "cdnlake_last_pass_ok")["1235"] == 1.0

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        entries = lines()
        passes = [e for e in entries if "run_id" in e]
        assert passes and all(
            {"zone", "source", "outcome", "time", "level"} <= set(e) for e in passes
        )
        assert {e["outcome"] for e in passes if e["zone"] == 1235} >= {"ok", "failed"}
        assert KEY not in log.read_text()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        emu.stop()


def test_a_taken_port_is_one_line_and_exit_2(tmp_path):
    emu = start_emulator("1234")
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            path = write_config(tmp_path, emu, zones=[(1234, "v2")])
            path.write_text(path.read_text() + f'[metrics]\nlisten = "127.0.0.1:{port}"\n')
            r = run_cli("--config", str(path), "daemon", timeout=60)
        assert r.returncode == 2
        assert r.stderr.strip().startswith(
            f"cdnlake: error: metrics.listen: cannot listen on 127.0.0.1:{port}"
        )
        bad = path.read_text().replace(f'listen = "127.0.0.1:{port}"', 'listen = "9464"')
        path.write_text(bad)
        r = run_cli("--config", str(path), "status")
        assert r.returncode == 2 and "metrics.listen: expected HOST:PORT" in r.stderr
    finally:
        emu.stop()


def test_the_alert_rules_name_only_metrics_the_daemon_exports(tmp_path):
    import re

    import yaml
    from prometheus_client import generate_latest

    from tests.conftest import REPO

    emu = start_emulator("1234")
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")]))
    finally:
        emu.stop()
    metrics = DaemonMetrics(
        config,
        watermarks=lambda: {("1234", "v2"): datetime.now(UTC)},
        traffic=TrafficCounters(),
    )
    exported = set(re.findall(r"^# TYPE (\w+)", generate_latest(metrics.registry).decode(), re.M))
    names = set()
    for suffix in ("_total", "_count", "_sum", "_bucket"):
        names |= {name + suffix for name in exported}
    names |= exported
    text = (REPO / "contrib" / "prometheus" / "alerts.yml").read_text()
    rules = yaml.safe_load(text)
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    dashboards = sorted((REPO / "contrib" / "grafana").glob("*.json"))
    assert [d.name for d in dashboards] == ["cdnlake-traffic.json", "cdnlake.json"]
    for source in [text] + [d.read_text() for d in dashboards]:
        used = set(re.findall(r"\b(cdnlake_[a-z_]+)\b", source))
        assert used and used <= names, used - names
        assert set(re.findall(r"\b(cdnlake:[a-z0-9_:]+)\b", source)) <= recorded
    for path in dashboards:  # every panel queries Prometheus, through the chosen source
        board = json.loads(path.read_text())
        ids = [panel["id"] for panel in board["panels"]]
        assert len(ids) == len(set(ids)), path
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"])
    traffic = (REPO / "contrib" / "grafana" / "cdnlake-traffic.json").read_text()
    for name in ("cdnlake_requests_total", "cdnlake_bytes_sent_total", "cdnlake_completeness_ratio",
                 "cdnlake_watermark_lag_seconds"):  # fmt: skip
        assert name in traffic, name
    assert {r.get("alert") for g in rules["groups"] for r in g["rules"]} >= {
        "CdnlakeZoneBehind",
        "CdnlakeZoneFailing",
        "CdnlakeDataLost",
        "CdnlakeRejectedLines",
        "CdnlakeRateLimited",
        "CdnlakeHigh5xxRate",
        "CdnlakeHitRatioDrop",
        "CdnlakeTrafficStopped",
    }


def test_a_pass_ending_while_a_scrape_reads_the_watermarks_does_not_wait_for_it(tmp_path):
    """Reading every zone's watermark from the lake takes seconds on a big log: a pass
    that ends meanwhile is observed at once (before, it waited for the read, holding its
    scheduler worker), and its watermark wins over the older one the read returns."""
    import threading
    from types import SimpleNamespace

    from cdnlake.ingest.result import ZoneResult

    nowhere = SimpleNamespace(url="http://127.0.0.1:9")  # no request is made
    config = load_test_config(write_config(tmp_path, nowhere, zones=[(1234, "v2")]))
    reading, release = threading.Event(), threading.Event()
    old, new = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)

    def slow_read() -> dict[tuple[str, str], datetime]:
        reading.set()
        assert release.wait(30)
        return {("1234", "v2"): old}

    metrics = DaemonMetrics(config, watermarks=slow_read)
    scrape_thread = threading.Thread(target=metrics.watermarks)
    scrape_thread.start()
    assert reading.wait(30)
    result = ZoneResult(1234, "v2")
    result.reached = new
    observed = threading.Thread(target=metrics.observe, args=(result,))
    observed.start()
    observed.join(5)
    try:
        assert not observed.is_alive(), "the pass waited for the scrape's read of the lake"
    finally:
        release.set()
        scrape_thread.join(30)
        observed.join(30)
    assert metrics.watermarks() == {("1234", "v2"): new}


def test_an_expiry_during_a_read_makes_the_next_scrape_read_again():
    """An audit that lands while a scrape reads the audited days expires the reading: the
    read begun before it must not count as fresh (the gauge would show the old ratios)."""
    import threading

    from cdnlake.monitoring.metrics import _Refreshed

    reads: list[int] = []
    began, release = threading.Event(), threading.Event()

    def read() -> dict[tuple[str, str], int]:
        reads.append(len(reads))
        if len(reads) == 1:
            began.set()
            release.wait(60)
        return {("1", "day"): len(reads)}

    reading = _Refreshed(read, 3600.0, "a test's reading")
    scrape = threading.Thread(target=reading.get)
    scrape.start()
    assert began.wait(60)
    reading.expire()  # the audit landed while the first read was under way
    release.set()
    scrape.join(60)
    assert reading.get() == {("1", "day"): 2}  # read again, not the stale first read
