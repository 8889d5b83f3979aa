"""The daemon runs the receiver when ``[forwarding] listen`` is set, next to its passes, and
commits what it holds when SIGTERM stops it."""

from __future__ import annotations

import signal
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from cdnlake.lake.log.progress import to_ms
from tests.conftest import (
    free_port,
    lake_frame,
    lake_ids,
    load_test_config,
    run_cli,
    start_emulator,
    truth_ids,
)
from tests.conftest import write_config as write_base_config
from tests.forwarding.helpers import send_tcp, synthetic, syslog, v1_lines
from tests.test_scheduler import spawn_daemon, stop, wait_for_line


def daemon_config(tmp_path: Path, emu: object, listen: str, flush: float) -> Path:
    path = write_base_config(
        tmp_path, emu, zones=[(1234, "v2")], page_size=300, max_window_seconds=1800
    )
    forwarding = f'[forwarding]\nlisten = "{listen}"\nflush_seconds = {flush}\n'
    path.write_text(path.read_text().replace("[[zones]]", forwarding + "[[zones]]", 1))
    return path


def test_sigterm_commits_what_the_receiver_holds(tmp_path):
    emu = start_emulator("1234:extended", rpm=20, now=None, frozen=False)
    try:
        port = free_port()
        # flush_seconds far off: only the stop can commit what is sent after the start
        path = daemon_config(tmp_path, emu, f"127.0.0.1:{port}", flush=600)
        now = datetime.now(UTC)
        real = v1_lines(emu, 1234, now - timedelta(minutes=40), 30)  # the passes read these too
        start_ms = to_ms(now - timedelta(hours=1))
        own = [synthetic(i, start_ms=start_ms) for i in range(200)]  # only forwarding has these
        proc = spawn_daemon(path)
        wait_for_line(proc, f"forwarding: receiving tcp syslog on 127.0.0.1:{port}")
        wait_for_line(proc, "daemon started")
        send_tcp(("127.0.0.1", port), b"".join(syslog(line) + b"\n" for line in real + own))
        code, took, err = stop(proc)
        assert code == 0, err
        assert took < 10
        assert "Traceback" not in err
        assert f"forwarding stopped: {len(real) + len(own)} messages" in err
    finally:
        emu.stop()
    config = load_test_config(path)
    lake = lake_frame(config).filter(pl.col("pull_zone_id") == 1234)
    ids = lake["request_id"].to_list()
    assert len(ids) == len(set(ids)), "a request stored twice"
    assert {line.split("|")[10] for line in real + own} <= set(ids)
    mine = lake.filter(pl.col("request_id").str.starts_with("req"))
    assert mine.height == len(own) and set(mine["source"]) == {"forwarded"}


def test_a_port_the_receiver_cannot_take_stops_the_daemon_with_a_clear_error(tmp_path):
    emu = start_emulator("1234:extended")
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            path = daemon_config(tmp_path, emu, f"127.0.0.1:{port}", flush=5)
            started = time.monotonic()
            r = run_cli("--config", str(path), "daemon", timeout=60)
    finally:
        emu.stop()
    assert r.returncode == 2, r.stderr
    assert f"forwarding.listen: cannot listen on 127.0.0.1:{port} (tcp)" in r.stderr
    assert "Traceback" not in r.stderr
    assert time.monotonic() - started < 30


def test_sigkill_with_forwarded_rows_waiting_loses_nothing_the_api_serves(tmp_path):
    emu = start_emulator("1234:extended", rpm=20, now=None, frozen=False)
    try:
        port = free_port()
        path = daemon_config(tmp_path, emu, f"127.0.0.1:{port}", flush=600)
        now = datetime.now(UTC)
        start, end = now - timedelta(minutes=40), now - timedelta(minutes=10)
        lines = v1_lines(emu, 1234, start, 30)
        proc = spawn_daemon(path)
        wait_for_line(proc, f"forwarding: receiving tcp syslog on 127.0.0.1:{port}")
        send_tcp(("127.0.0.1", port), b"".join(syslog(line) + b"\n" for line in lines))
        code, _took, err = stop(proc, signal.SIGKILL)  # the buffer dies with it
        assert code == -signal.SIGKILL
        assert "forwarding stopped" not in err
        r = run_cli("--config", str(path), "ingest", timeout=300)
        assert r.returncode == 0, r.stderr
        truth = truth_ids(emu, 1234, start, end)
    finally:
        emu.stop()
    ids = lake_ids(load_test_config(path), 1234)
    assert len(ids) == len(set(ids)), "a request stored twice"
    assert {line.split("|")[10] for line in lines} <= set(ids)
    assert truth <= set(ids)


def test_metrics_count_the_rows_forwarding_stored_first_per_zone(tmp_path):
    import httpx

    from cdnlake.scheduler import wait_for

    emu = start_emulator("1234:extended", rpm=20, now=None, frozen=False)
    try:
        port, metrics_port = free_port(), free_port()
        path = daemon_config(tmp_path, emu, f"127.0.0.1:{port}", flush=0.5)
        text = path.read_text().replace(
            "[[zones]]", f'[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n[[zones]]', 1
        )
        path.write_text(text)
        start_ms = to_ms(datetime.now(UTC) - timedelta(hours=1))
        own = [synthetic(i, start_ms=start_ms) for i in range(40)]  # only forwarding has these
        fields = own[0].split("|")
        bad = "|".join([*fields[:1], "999", *fields[2:]])  # a configured zone's broken line
        proc = spawn_daemon(path)
        try:
            wait_for_line(proc, "daemon started")
            send_tcp(("127.0.0.1", port), b"".join(syslog(x) + b"\n" for x in [*own, bad]))
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            want = [
                f'cdnlake_forwarded_rows_total{{zone="1234"}} {len(own)}.0',
                'cdnlake_forwarded_rejected_total{zone="1234"} 1.0',
                # the traffic counters, from the same commits (each line: HIT, 200, 100 B)
                'cdnlake_requests_total{cache_status="HIT",source="forwarded",'
                f'status_class="2xx",zone="1234"}} {len(own)}.0',
                'cdnlake_bytes_sent_total{cache_status="HIT",source="forwarded",zone="1234"} '
                f"{100 * len(own)}.0",
            ]
            assert wait_for(lambda: all(w in httpx.get(url).text for w in want), 60), httpx.get(
                url
            ).text
        finally:
            code, _, err = stop(proc)
        assert code == 0, err
    finally:
        emu.stop()
