"""The bookkeeping holds each row once: runs by run id, rejected lines by key, gaps by span.

The lost answer is acted out on a real store: an HTTP proxy of our own in front of moto's
S3 server passes a commit to the store and then drops the connection, so delta-rs does
not know that its commit landed and retries it; a compaction (as ``maintain`` runs) lands
in between, which is when re-adding a file doubles its rows.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import polars as pl
import pytest
from deltalake import DeltaTable

from cdnlake.ingest.normalize import REJECT_SCHEMA
from cdnlake.lake.log.schema import INGEST_GAPS, INGEST_RUNS, REJECTED_LINES, TableSpec
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.bookkeeping import Bookkeeping, rejects_frame
from tests.conftest import S3Server
from tests.sessions import session_of

BASE = datetime(2026, 11, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
HOP = {"connection", "transfer-encoding", "content-length", "date", "server"}


class LosingProxy:
    """Forwards every request to the S3 server; loses the answer of one commit that the
    server applied (``lose``): it runs ``meanwhile`` and then drops the connection."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.target: str | None = None  # the commit files of this table are lost once
        self.meanwhile: Callable[[], None] = lambda: None
        self.lost: list[str] = []
        self.retried: list[tuple[str, int]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                try:
                    upstream.request(self.command, self.path, body, dict(self.headers.items()))
                    answer = upstream.getresponse()
                    data = answer.read()
                finally:
                    upstream.close()
                if proxy.is_lost(self.command, self.path, answer.status):
                    proxy.meanwhile()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # applied, never answered
                    return
                self.send_response_only(answer.status, answer.reason)
                for name, value in answer.getheaders():
                    if name.lower() not in HOP:
                        self.send_header(name, value)
                length_out = answer.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length_out or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def is_lost(self, method: str, path: str, status: int) -> bool:
        commit = method == "PUT" and "/_delta_log/" in path and path.endswith(".json")
        if not commit or self.target is None or f"/{self.target}/_delta_log/" not in path:
            return False
        if self.lost:
            self.retried.append((path, status))
            return False
        if status != 200:
            return False
        self.lost.append(path)
        return True

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def lakes(s3_server: S3Server) -> Iterator[tuple[Lake, Lake, LosingProxy]]:
    """The same lake through the losing proxy, and straight to the store."""
    proxy = LosingProxy(s3_server.port)
    uri = f"s3://{s3_server.new_bucket()}/lake"
    options = {"AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    yield (
        Lake(uri, {**options, "AWS_ENDPOINT_URL": proxy.url}),
        Lake(uri, {**options, "AWS_ENDPOINT_URL": s3_server.url}),
        proxy,
    )
    proxy.stop()


def run_row(n: int) -> dict[str, Any]:
    started = BASE + n * HOUR
    return {"run_id": f"run-{n}", "source": "v2", "started": started, "finished": started}


def gap_row(n: int, source: str = "v2") -> dict[str, Any]:
    start = BASE + 2 * n * HOUR  # apart: each its own gap
    return {
        "gap_from": start,
        "gap_to": start + HOUR,
        "reason": f"gap {n}",
        "detected_at": BASE,
        "run_id": f"run-{n}",
        "source": source,
    }


def reject(books: Bookkeeping, n: int) -> None:
    frame = pl.DataFrame(
        {
            "line_number": [n],
            "reason": ["bad"],
            "raw_line": [f"line {n}"],
            "kind": ["bad timestamp"],
            "request_id": [None],
        },
        schema=REJECT_SCHEMA,
    )
    books.record_rejects(
        [rejects_frame(1, frame, source="v1", file="day.log", rejected_at=BASE, run_id="r")]
    )


WRITES: dict[str, tuple[TableSpec, str, Callable[[Bookkeeping, int], object]]] = {
    "ingest_runs": (INGEST_RUNS, "run_id", lambda b, n: b.record_run(1, run_row(n))),
    "ingest_gaps": (INGEST_GAPS, "gap_from", lambda b, n: b.record_gaps(1, [gap_row(n)])),
    "rejected_lines": (REJECTED_LINES, "record_key", reject),
}


def keys(lake: Lake, spec: TableSpec, column: str) -> list[Any]:
    table = lake.open(spec)
    assert table is not None
    return sorted(table.to_pyarrow_table(columns=[column]).column(column).to_pylist())


@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_whose_answer_was_lost_is_kept_once(lakes, name):
    through, direct, proxy = lakes
    spec, key, write = WRITES[name]
    books = Bookkeeping(session_of(through))
    for n in (1, 2):
        write(books, n)

    def compact() -> None:  # maintain, while delta-rs waits for the lost answer
        table = DeltaTable(direct.table_uri(spec), storage_options=direct.storage_options)
        assert table.optimize.compact()["numFilesRemoved"] >= 2

    proxy.target, proxy.meanwhile = spec.name, compact
    write(books, 3)  # no error: the write did land
    assert proxy.lost, "the proxy lost no answer"
    assert proxy.retried, "delta-rs did not find out that its commit had landed"
    found = keys(direct, spec, key)
    assert len(found) == len(set(found)) == 3, found


def test_gaps_claim_each_instant_once_and_an_ongoing_one_grows(tmp_path):
    books = Bookkeeping(session_of(Lake(str(tmp_path / "lake"), {})))

    def gap(start: int, end: int, source: str = "v2") -> dict[str, Any]:
        row = gap_row(0, source)
        return {**row, "gap_from": BASE + start * HOUR, "gap_to": BASE + end * HOUR}

    def rows() -> list[tuple[Any, ...]]:
        table = books.session.lake.open(INGEST_GAPS)
        assert table is not None
        found = table.to_pyarrow_table(columns=["zone", "source", "gap_from", "gap_to"])
        return sorted(tuple(r.values()) for r in found.to_pylist())

    assert books.record_gaps(1, [gap(0, 2)]) == 2 * 3600
    assert books.record_gaps(1, [gap(0, 3)]) == 3600  # the outage goes on: the gap grows
    assert books.record_gaps(1, [gap(1, 3)]) == 0  # claimed already
    assert books.record_gaps(1, [gap(2, 5), gap(4, 6)]) == 3 * 3600
    assert books.record_gaps(1, [gap(8, 9)]) == 3600  # apart: a gap of its own
    assert books.record_gaps(1, [gap(0, 1, "shield")]) == 3600  # shield zone 1 is another
    assert books.record_gaps(1, [gap(7, 7)]) == 0  # an empty span claims nothing
    assert rows() == [
        (1, "shield", BASE, BASE + HOUR),
        (1, "v2", BASE, BASE + 6 * HOUR),
        (1, "v2", BASE + 8 * HOUR, BASE + 9 * HOUR),
    ]
