"""``/metrics`` (Prometheus text format) and ``/healthz`` (the ``status`` JSON: 200 while
every zone is healthy, else 503), served by the daemon on ``metrics.listen``. ``/healthz``
answers from the health last computed in the background (:mod:`.health`), with its age in
seconds as the ``Age`` header."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from cdnlake.errors import ConfigError
from cdnlake.monitoring.health import Health, HealthCache, HealthTiming
from cdnlake.monitoring.metrics import DaemonMetrics

log = logging.getLogger("cdnlake.metrics")


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
        pass


class MetricsServer:
    def __init__(
        self,
        host: str,
        port: int,
        metrics: DaemonMetrics,
        health: Health,
        timing: HealthTiming | None = None,
    ) -> None:
        metrics_app = make_wsgi_app(metrics.registry)
        self.health = HealthCache(health, timing)
        metrics.after_pass(self.health.pass_done)

        def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                result: Iterable[bytes] = metrics_app(environ, start)
                return result
            if path == "/healthz":
                return self._healthz(start)
            start("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics or /healthz\n"]

        try:
            self.server = make_server(host, port, app, _Server, _Quiet)
        except OSError as exc:
            raise ConfigError(
                f"metrics.listen: cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="metrics-http", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://{name}:{port}"

    def _healthz(self, start: Callable[..., Any]) -> list[bytes]:
        answer = self.health.answer()
        body = (json.dumps(answer.zones, indent=1) + "\n").encode()
        start(
            "200 OK" if answer.healthy else "503 Service Unavailable",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Age", str(int(answer.age))),
            ],
        )
        return [body]

    def start(self) -> None:
        self.health.start()
        self.thread.start()
        log.info("metrics: serving %s/metrics and %s/healthz", self.url, self.url)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.health.stop()
