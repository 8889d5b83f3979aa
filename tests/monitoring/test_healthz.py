"""/healthz answers from the health last computed: probes never compute a status."""

from __future__ import annotations

import threading

import httpx

from cdnlake.config import build_config
from cdnlake.ingest.result import ZoneResult
from cdnlake.monitoring.health import HealthTiming
from cdnlake.monitoring.http import MetricsServer
from cdnlake.monitoring.metrics import DaemonMetrics
from cdnlake.scheduler import wait_for


def metrics_for(tmp_path) -> DaemonMetrics:
    config = build_config(
        {"storage": {"root": str(tmp_path)}, "zones": [{"id": 1, "source": "v2"}]},
        base_dir=tmp_path,
        env={},
    )
    return DaemonMetrics(config)


class Status:
    """A stand-in for ``status``: counts its computations; its answer is set by the test."""

    def __init__(self) -> None:
        self.calls = 0
        self.healthy = True
        self.lock = threading.Lock()

    def __call__(self) -> tuple[list[dict], bool]:
        with self.lock:
            self.calls += 1
            return [{"zone_id": 1, "healthy": self.healthy, "call": self.calls}], self.healthy


def probe(server: MetricsServer) -> httpx.Response:
    return httpx.get(f"{server.url}/healthz", timeout=10)


def test_probes_read_the_last_status_and_never_compute_one(tmp_path):
    status = Status()
    # The timer alone would compute again only in ten minutes: any computation seen here
    # comes from a probe or a pass.
    server = MetricsServer(
        "127.0.0.1", 0, metrics_for(tmp_path), status, HealthTiming(after_pass=0, every=600)
    )
    server.start()
    try:
        assert wait_for(lambda: probe(server).status_code == 200, 30)
        first = status.calls
        answers = [probe(server) for _ in range(30)]
        assert status.calls == first == 1
        assert {a.status_code for a in answers} == {200}
        assert {a.json()[0]["call"] for a in answers} == {1}
        assert all(int(a.headers["Age"]) >= 0 for a in answers)
    finally:
        server.stop()


def test_the_body_follows_a_pass(tmp_path):
    status = Status()
    metrics = metrics_for(tmp_path)
    timing = HealthTiming(after_pass=0.05, every=600)
    server = MetricsServer("127.0.0.1", 0, metrics, status, timing)
    server.start()
    try:
        assert wait_for(lambda: probe(server).status_code == 200, 30)
        status.healthy = False  # what the next status will find...
        assert probe(server).status_code == 200  # ...once something asks for it
        metrics.observe(ZoneResult(1, "v2", outcome="failed", error="logging is not enabled"))
        assert wait_for(lambda: probe(server).status_code == 503, 30)
        body = probe(server).json()
        assert body[0]["healthy"] is False and body[0]["call"] == 2
        status.healthy = True
        metrics.observe(ZoneResult(1, "v2"))
        assert wait_for(lambda: probe(server).status_code == 200, 30)
    finally:
        server.stop()


def test_a_status_that_stopped_being_computed_is_not_served_as_healthy(tmp_path):
    """A health check stuck on an unreachable lake: its last answer grows old and the
    probe turns 503, naming how old it is."""
    release = threading.Event()
    status = Status()

    def stuck() -> tuple[list[dict], bool]:
        if status.calls >= 1:
            release.wait(60)
        return status()

    timing = HealthTiming(after_pass=0, every=0.01, stale_after=0.5)
    server = MetricsServer("127.0.0.1", 0, metrics_for(tmp_path), stuck, timing)
    server.start()
    try:
        assert wait_for(lambda: status.calls >= 1, 30)
        assert wait_for(lambda: probe(server).status_code == 503, 30)
        assert "health check is stuck" in probe(server).json()[0]["problem"]
    finally:
        release.set()
        server.stop()


def test_a_failing_status_is_unhealthy_and_says_why(tmp_path):
    def broken() -> tuple[list[dict], bool]:
        raise OSError("lake unreachable")

    server = MetricsServer("127.0.0.1", 0, metrics_for(tmp_path), broken, HealthTiming(every=600))
    server.start()
    try:
        assert wait_for(lambda: "lake unreachable" in probe(server).text, 30)
        assert probe(server).status_code == 503
    finally:
        server.stop()
