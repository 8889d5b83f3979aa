"""A real Prometheus server on loopback (Debian's ``prometheus`` package), scraping what a
test names every second, with cdnlake's alert rules loaded."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from cdnlake.scheduler import wait_for
from tests.conftest import REPO, free_port

RULES = REPO / "contrib" / "prometheus" / "alerts.yml"


class Prometheus:
    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of an HTTP API answer; an error answer fails the test, naming it."""
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10).json()
        assert answer["status"] == "success", (params, answer)
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's samples, as of now."""
        data = self.api("query", query=expr)
        return list(data["result"])

    def values(self, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
        """An instant query's values, by the given labels' values."""
        return {
            tuple(s["metric"].get(label, "") for label in labels): float(s["value"][1])
            for s in self.query(expr)
        }


@contextmanager
def running_prometheus(tmp_path: Path, target: str) -> Iterator[Prometheus]:
    """Prometheus scraping ``target`` (host:port) every second, evaluating the alert rules
    every second; skipped where Debian's package is not installed."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (make test installs Debian's package)")
    folder = tmp_path / "prometheus"
    folder.mkdir()
    config = folder / "prometheus.yml"
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  scrape_timeout: 1s\n"
        "  evaluation_interval: 1s\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n"
        "  - job_name: cdnlake\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port()
    log = folder / "prometheus.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        prometheus = Prometheus(f"http://127.0.0.1:{port}", log)
        assert wait_for(prometheus.ready, 60, step=0.2), log.read_text()
        yield prometheus
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
