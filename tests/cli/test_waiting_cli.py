"""Waiting out loud: a provider that accepts connections and never answers is said to be
so while cdnlake waits (a line per retry on a pipe, the zone's row on a terminal), and the
final error is one readable line."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator

import pytest

from tests.cli.test_interrupts import Terminal
from tests.conftest import KEY, run_cli


@pytest.fixture
def silent_provider() -> Iterator[str]:
    """Accepts every connection, reads, never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    closing = threading.Event()

    def accept() -> None:
        while not closing.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    closing.set()
    server.close()
    for conn in held:
        conn.close()


def silent_config(tmp_path, url: str):
    path = tmp_path / "config.toml"
    path.write_text(
        f'[api]\nbase_url = "{url}"\nlogging_url = "{url}"\ntimeout_seconds = 0.5\n'
        'retry_attempts = 3\nretry_max_seconds = 20\n[storage]\nroot = "data"\n'
        '[[zones]]\nid = 1234\nsource = "v2"\n'
    )
    return path


def test_a_pipe_gets_a_line_per_retry_and_one_readable_error(tmp_path, silent_provider):
    config = silent_config(tmp_path, silent_provider)
    result = run_cli("--config", str(config), "ingest", "--zone", "1234", timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    retries = [line for line in result.stderr.splitlines() if "retry" in line]
    assert len(retries) == 2, result.stderr
    assert retries[0].startswith("cdnlake: zone 1234: timed out: no answer within 0.5s")
    assert "retry 1 of 2" in retries[0] and "retry 2 of 2" in retries[1]
    assert "(timeout 0.5s a request)" in retries[0]
    (summary,) = [line for line in result.stdout.splitlines() if "zone 1234" in line]
    assert "TransportError" not in summary and "Traceback" not in result.stderr
    assert "no answer within 0.5s (ReadTimeout), after 3 attempts over" in summary, summary


def test_a_terminal_shows_the_retry_in_the_zones_row(tmp_path, silent_provider):
    config = silent_config(tmp_path, silent_provider)
    env = {**os.environ, "CDNLAKE_ACCESS_KEY": KEY, "COLUMNS": "200", "TERM": "xterm"}
    args = [sys.executable, "-m", "cdnlake", "--config", str(config), "ingest"]
    term = Terminal(args, env)
    code = term.wait(timeout=60)
    screen = term.seen.decode("utf-8", "replace")
    assert code == 1, screen
    assert "retry 1 of 2 in" in screen and "no answer within 0.5s" in screen, screen
    assert "TransportError" not in screen and "Traceback" not in screen
