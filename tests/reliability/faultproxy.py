"""A faulty road to S3: an HTTP proxy of our own in front of moto's server.

Point a lake's ``endpoint_url`` at :attr:`FaultProxy.url` and every request of the
lake's clients (delta-rs' object store and Arrow's S3 filesystem alike) goes through it.
Each request is forwarded, or answered by a fault the test chose:

- ``read_503`` / ``write_503``: that share of reads (GET, HEAD) / writes (PUT, POST,
  DELETE) is answered ``503 SlowDown`` without reaching the store;
- ``write_lost``: that share of writes is applied by the store, then the connection is
  closed before the answer: the client cannot know whether it happened;
- ``slow``: that share of requests is answered after ``slow_seconds``;
- ``refuse="data-file-reads"``: every read of a data file is answered ``503 SlowDown``,
  as a throttled prefix is (see :func:`data_file_reads`);
- :meth:`FaultProxy.burst`: every request is refused for a while.

Faults are drawn from a seeded generator, and counted by kind (:meth:`FaultProxy.faults`).
The proxy runs in a process of its own: some delta-rs calls (``repair``) hold the GIL
while they wait for the store, which a proxy thread of the same process could never answer.
The test drives it through ``/_faultproxy`` (a name no bucket can have).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
READS = frozenset({"GET", "HEAD"})
# Hop-by-hop headers are the proxy's own business, never forwarded.
HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te"})
CONTROL = "/_faultproxy"
SETTINGS = ("read_503", "write_503", "write_lost", "slow", "slow_seconds", "refuse")


def data_file_reads(method: str, path: str) -> bool:
    """Reads of the lake's data files (not of the Delta log): what a throttled prefix refuses."""
    return method in READS and path.split("?", 1)[0].endswith(".parquet")


class FaultProxy:
    """The test's handle on a proxy process in front of ``upstream``."""

    def __init__(self, upstream: str, *, seed: int = 0) -> None:
        from tests.conftest import REPO, free_port, wait_listening

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "tests.reliability.faultproxy", upstream]
        self.proc = subprocess.Popen([*command, str(self.port), str(seed)], cwd=REPO)
        wait_listening(self.proc, self.port, "faultproxy")

    def _control(self, method: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, CONTROL, body=json.dumps(body or {}).encode())
            answer: dict[str, Any] = json.loads(connection.getresponse().read())
            return answer
        finally:
            connection.close()

    def configure(self, **settings: Any) -> None:
        """Set fault rates and modes (``read_503=0.03``, ``refuse="data-file-reads"``...)."""
        unknown = set(settings) - set(SETTINGS)
        assert not unknown, unknown
        self._control("POST", settings)

    def burst(self, seconds: float) -> None:
        """Refuse every request from now on for ``seconds``."""
        self._control("POST", {"burst": seconds})

    def calm(self) -> None:
        """No more faults of any kind."""
        self._control("POST", {"calm": True})

    def faults(self) -> Counter[str]:
        """Faults injected so far, by kind."""
        return Counter(self._control("GET"))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


class Road:
    """The proxy's own state, in its process: what to do to each request."""

    def __init__(self, upstream: str, *, seed: int = 0) -> None:
        target = urlsplit(upstream)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.random = random.Random(seed)
        self.read_503 = 0.0
        self.write_503 = 0.0
        self.write_lost = 0.0
        self.slow = 0.0
        self.slow_seconds = 1.0
        self.refuse: str | None = None  # "data-file-reads"
        self.faults: Counter[str] = Counter()
        self.forwarded = 0
        self._burst_until = 0.0
        self._lock = threading.Lock()

    def control(self, settings: dict[str, Any]) -> None:
        if settings.pop("calm", False):
            self.calm()
        if "burst" in settings:
            self.burst(float(settings.pop("burst")))
        for name, value in settings.items():
            setattr(self, name, value)

    def burst(self, seconds: float) -> None:
        """Refuse every request from now on for ``seconds``."""
        self._burst_until = time.monotonic() + seconds

    def calm(self) -> None:
        """No more faults of any kind."""
        self.read_503 = self.write_503 = self.write_lost = self.slow = 0.0
        self.refuse = None
        self._burst_until = 0.0

    def decide(self, method: str, path: str) -> str | None:
        """The fault for this request, if any: refused, slow, lost or None (forward)."""
        with self._lock:
            draw = self.random.random()
            slow = self.random.random() < self.slow
        if time.monotonic() < self._burst_until:
            fault = "burst"
        elif self.refuse == "data-file-reads" and data_file_reads(method, path):
            fault = "refused"
        elif method in READS:
            fault = "read_503" if draw < self.read_503 else None
        elif draw < self.write_503:
            fault = "write_503"
        elif draw < self.write_503 + self.write_lost:
            fault = "write_lost"
        else:
            fault = None
        if slow and fault is None:
            fault = "slow"
        if fault is not None:
            with self._lock:
                self.faults[fault] += 1
        return fault


def _handler(proxy: Road) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                parts = []
                while True:
                    size = int(self.rfile.readline().split(b";", 1)[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _refuse(self) -> None:
            self.send_response(503, "Slow Down")
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(SLOW_DOWN)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(SLOW_DOWN)

        def _handle(self) -> None:
            try:
                self._forward()
            except (BrokenPipeError, ConnectionResetError):  # the client gave up first
                self.close_connection = True

        def _forward(self) -> None:
            body = self._body()
            if self.path == CONTROL:
                if self.command == "POST":
                    proxy.control(json.loads(body or b"{}"))
                answer = json.dumps(dict(proxy.faults)).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                return
            fault = proxy.decide(self.command, self.path)
            if fault in ("burst", "refused", "read_503", "write_503"):
                self._refuse()
                return
            if fault == "slow":
                time.sleep(proxy.slow_seconds)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            headers["Content-Length"] = str(len(body))
            upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
            try:
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                content = answer.read()
            finally:
                upstream.close()
            proxy.forwarded += 1
            if fault == "write_lost":  # the store applied it; the answer never arrives
                self.close_connection = True
                self.connection.close()
                return
            self.send_response(answer.status, answer.reason)
            for name, value in answer.getheaders():
                if name.lower() not in HOP and name.lower() != "content-length":
                    self.send_header(name, value)
            length = answer.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(content)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(content)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="a fault-injecting proxy in front of S3")
    parser.add_argument("upstream")
    parser.add_argument("port", type=int)
    parser.add_argument("seed", type=int)
    args = parser.parse_args()
    server = ThreadingHTTPServer(
        ("127.0.0.1", args.port), _handler(Road(args.upstream, seed=args.seed))
    )
    server.daemon_threads = True
    parent = os.getppid()

    def orphaned() -> None:  # the test process died without stopping it
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
