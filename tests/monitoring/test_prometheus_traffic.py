"""A real Prometheus scrapes a daemon that ingests from the emulator with log forwarding
on: its traffic counters, as Prometheus holds them, equal the lake's own counts label by
label, though forwarding sent some requests twice, the passes read again every request
forwarding stored first, and each pass re-reads its overlap. The alert rules load and
evaluate, and every dashboard query runs."""

from __future__ import annotations

import json
from datetime import timedelta

import cdnlake
from cdnlake.emulator.forwarding import TCP, Target
from cdnlake.lake.log.progress import to_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.scheduler import wait_for
from cdnlake.status import zone_watermarks
from tests.conftest import KEY, REPO, free_port, lake_of, load_test_config, start_emulator
from tests.conftest import write_config as write_base_config
from tests.forwarding.helpers import send_tcp, synthetic, syslog
from tests.monitoring.prometheus import running_prometheus
from tests.sessions import session_for, session_of
from tests.test_scheduler import spawn_daemon, stop, wait_for_line

LAKE_COUNTS = """
SELECT CAST(pull_zone_id AS VARCHAR) AS zone, source, cache_status,
       CAST(status_code // 100 AS VARCHAR) || 'xx' AS status_class,
       count(*) AS requests, sum(bytes_sent) AS bytes
FROM requests GROUP BY ALL
"""
REPEATED = 30  # requests only forwarding has, sent twice


def lake_counts(path) -> tuple[dict, dict]:
    """The lake's requests by (zone, source, cache status, status class) and bytes by
    (zone, source, cache status), read by DuckDB as `cdnlake sql` reads them."""
    con = cdnlake.connect(path)
    try:
        found = con.sql(LAKE_COUNTS).fetchall()
    finally:
        con.close()
    requests: dict[tuple[str, ...], float] = {}
    sent: dict[tuple[str, ...], float] = {}
    for zone, source, cache, klass, n, size in found:
        requests[(zone, source, cache, klass)] = float(n)
        sent[(zone, source, cache)] = sent.get((zone, source, cache), 0.0) + float(size or 0)
    return requests, nonzero(sent)


def nonzero(counts: dict) -> dict:
    """The labels that counted something (the daemon also exports its zones' series at
    zero, which the lake has no row for)."""
    return {key: n for key, n in counts.items() if n}


def differences(seen: tuple[dict, dict], lake: tuple[dict, dict]) -> list[tuple]:
    """Where Prometheus and the lake disagree: (labels, Prometheus', the lake's)."""
    return [
        (key, a.get(key), b.get(key))
        for a, b in zip(seen, lake, strict=True)
        for key in sorted(set(a) | set(b))
        if a.get(key) != b.get(key)
    ]


def test_prometheus_counts_each_stored_request_once(tmp_path, monkeypatch):
    monkeypatch.setenv("CDNLAKE_ACCESS_KEY", KEY)
    emu = start_emulator("1234:extended,1235", rpm=600, now=None, frozen=False)
    proc = None
    try:
        receive, serve = free_port(), free_port()
        path = write_base_config(
            tmp_path,
            emu,
            zones=[(1234, "v2"), (1235, "v2")],
            lag_seconds=5,
            overlap_seconds=30,
            max_window_seconds=1800,
        )
        extra = (
            f'[forwarding]\nlisten = "127.0.0.1:{receive}"\nflush_seconds = 0.5\n'
            f'[metrics]\nlisten = "127.0.0.1:{serve}"\n'
        )
        text = path.read_text().replace("[[zones]]", extra + "[[zones]]", 1)
        daily = '[schedule]\nreport_at = "23:59"\nmaintain_at = "23:59"\n'  # no daily job now
        text = text.replace("[schedule]\n", daily)
        path.write_text(text)
        config = load_test_config(path)
        began = emu.clock.now()
        for zone in (1234, 1235):  # the passes read from a minute back: small passes
            writer = ZoneWriter(session_of(lake_of(config)), REQUESTS, zone)
            writer.commit(writer.empty(), {"": to_ms(began - timedelta(minutes=1))})

        with running_prometheus(tmp_path, f"127.0.0.1:{serve}") as prometheus:
            proc = spawn_daemon(path)
            wait_for_line(proc, "daemon started")
            # Each configured zone's series are there at zero before its first request, so
            # that rate() counts that request (a series' first sample is its start).
            zero = 'cdnlake_requests_total{zone="1235", source="v2", status_class="5xx"}'
            assert wait_for(lambda: len(prometheus.query(zero)) == 8, 30, step=0.5), (
                prometheus.query(zero)
            )
            wait_for_line(proc, f"forwarding: receiving tcp syslog on 127.0.0.1:{receive}")
            emu.management.forwarder.set(1234, Target("127.0.0.1", receive, TCP))
            start_ms = to_ms(began - timedelta(hours=1))
            own = b"".join(syslog(synthetic(i, start_ms=start_ms)) + b"\n" for i in range(REPEATED))
            send_tcp(("127.0.0.1", receive), own)
            send_tcp(("127.0.0.1", receive), own)  # forwarding's repeats

            def forwarded() -> float:
                found = prometheus.values('sum(cdnlake_requests_total{source="forwarded"})')
                return next(iter(found.values()), 0.0)

            # Prometheus sees what forwarding stored, seconds after it was sent.
            assert wait_for(lambda: forwarded() >= REPEATED + 40, 30, step=0.5), (
                prometheus.query("cdnlake_requests_total"),
                proc.log.read_text()[-3000:],  # type: ignore[attr-defined]
            )
            emu.management.forwarder.set(1234, None)
            ended = emu.clock.now()
            # The provider's time stops: no request after ``ended``. Once the passes'
            # watermark (the daemon's own clock, less lag_seconds) is past it, they have
            # read every request, forwarded ones again, and find nothing new.
            emu.clock.set(ended, frozen=True)
            session = session_for(config)
            caught_up = ended + timedelta(seconds=1)
            assert wait_for(
                lambda: min(zone_watermarks(session, config).values()) >= caught_up, 30, step=0.5
            ), (zone_watermarks(session, config), ended)

            # The daemon started at zero over a lake holding no request: the counters' last
            # values are their increase over the run, exactly (increase() would
            # extrapolate to the range's edges, and miss each series' first sample).
            def prometheus_counts() -> tuple[dict, dict]:
                requests = prometheus.values(
                    "sum by (zone, source, cache_status, status_class) (cdnlake_requests_total)",
                    "zone",
                    "source",
                    "cache_status",
                    "status_class",
                )
                sent = prometheus.values(
                    "sum by (zone, source, cache_status) (cdnlake_bytes_sent_total)",
                    "zone",
                    "source",
                    "cache_status",
                )
                return nonzero(requests), nonzero(sent)

            assert wait_for(lambda: prometheus_counts() == lake_counts(path), 30, step=0.5), (
                differences(prometheus_counts(), lake_counts(path)),
                prometheus.api("targets")["activeTargets"][0]["lastError"],
            )
            requests, sent = lake_counts(path)
            sources = {(zone, source) for zone, source, _, _ in requests}
            assert sources == {("1234", "v2"), ("1234", "forwarded"), ("1235", "v2")}
            assert {klass for *_, klass in requests} >= {"2xx", "5xx"}
            assert all(n > 0 for n in sent.values())
            # The repeats were there to be counted twice: forwarding's own, and the
            # passes' overlap and re-reads of forwarded requests (dropped as duplicates).
            # (A pass may store a pushed request before the receiver's flush does.)
            pushed = emu.management.forwarder.pushed[1234]
            lake_forwarded = sum(n for k, n in requests.items() if k[1] == "forwarded")
            assert REPEATED + 40 <= lake_forwarded <= REPEATED + pushed.sent
            read_again = prometheus.values('cdnlake_duplicates_dropped_total{zone="1234"}')
            assert sum(read_again.values()) > 0  # the passes met requests already stored
            con = cdnlake.connect(path)
            try:
                stored = con.sql("SELECT count(*), count(DISTINCT request_id) FROM requests")
                ((total, distinct),) = stored.fetchall()
            finally:
                con.close()
            assert total == distinct == sum(requests.values())

            # The rules load and evaluate without error against the daemon's series.
            groups = prometheus.api("rules")["groups"]
            rules = [rule for group in groups for rule in group["rules"]]
            assert {r["name"] for r in rules} >= {"CdnlakeHigh5xxRate", "CdnlakeTrafficStopped"}
            assert wait_for(
                lambda: all(
                    r["health"] == "ok"
                    for g in prometheus.api("rules")["groups"]
                    for r in g["rules"]
                ),
                10,
                step=0.5,
            ), prometheus.api("rules")
            # Every dashboard query runs; the traffic panels have data.
            for board in sorted((REPO / "contrib" / "grafana").glob("*.json")):
                for panel in json.loads(board.read_text())["panels"]:
                    for target in panel["targets"]:
                        expr = target["expr"].replace("$__rate_interval", "1m")
                        result = prometheus.query(expr.replace("$zone", ".*"))
                        if board.name == "cdnlake-traffic.json" and panel["id"] <= 4:
                            assert result, (panel["title"], expr)
    finally:
        if proc is not None:
            code, _took, err = stop(proc)
            assert code == 0, err[-3000:]
        emu.stop()
