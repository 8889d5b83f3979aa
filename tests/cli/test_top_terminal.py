"""`cdnlake top` on a real pseudo-terminal: keys, a resize, q and Ctrl-C leaving the
terminal as it was, and forwarded rows showing within seconds of landing in the lake."""

from __future__ import annotations

import os
import shlex
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pexpect
import polars as pl

from cdnlake.scheduler import wait_for
from tests.cli.test_top import lake  # noqa: F401 (the fixture)
from tests.conftest import KEY, free_port, lake_frame, load_test_config, run_cli, start_emulator
from tests.forwarding.test_daemon import daemon_config
from tests.test_scheduler import spawn_daemon, stop, wait_for_line

KEYS_LINE = "q quit  w window  s sort  z zone  d table"
LEAVE_SCREEN, SHOW_CURSOR = "\x1b[?1049l", "\x1b[?25h"


def spawn_top(config: Path, *args: str, rows: int = 24, columns: int = 80) -> pexpect.spawn:
    """``top`` in bash on a terminal of ``rows`` x ``columns``; after it ends, bash says
    its exit code and whether the terminal's modes are those it had before."""
    top = shlex.join([sys.executable, "-m", "cdnlake", "--config", str(config), "top", *args])
    script = (
        f'before=$(stty -g); {top}; echo "EXIT=$?"; '
        '[ "$(stty -g)" = "$before" ] && echo MODES=same || echo MODES=changed'
    )
    return pexpect.spawn(
        "bash",
        ["--norc", "--noprofile", "-c", script],
        env={**os.environ, "TERM": "xterm-256color", "CDNLAKE_ACCESS_KEY": KEY},
        encoding="utf-8",
        timeout=60,
        dimensions=(rows, columns),
    )


def ended(term: pexpect.spawn) -> tuple[int, str, str]:
    """The exit code, whether the modes came back, and what top drew last."""
    term.expect(r"EXIT=(\d+)")
    shown = str(term.before)
    code = int(term.match.group(1))
    term.expect(r"MODES=(\w+)")
    modes = term.match.group(1)
    term.expect(pexpect.EOF)
    return code, modes, shown


def test_keys_resize_and_quit(lake):  # noqa: F811
    # A refresh every 30 s: what changes on the screen sooner came from a key or a resize.
    term = spawn_top(lake, "--interval", "30")
    try:
        term.expect_exact("window 1m · sort requests")
        term.expect_exact(KEYS_LINE)
        for key, shows in (
            ("w", "window 5m"),
            ("w", "window 1h"),
            ("s", "sort bytes"),
            ("e", "sort errors"),
            ("z", "zone 1234 ·"),
            ("z", "zone 1235 ·"),
            ("z", "zones all ·"),
            ("d", "hosts by errors"),
            ("\t", "countries by errors"),
            ("5", "window 5m"),
        ):
            term.send(key)
            term.expect_exact(shows, timeout=10)
        term.expect_exact(KEYS_LINE)
        # Every line fits 80 columns: the keys' line is padded to 80, not beyond.
        term.setwinsize(30, 100)
        started = time.monotonic()
        term.expect_exact(KEYS_LINE + "\x1b[0m" + " " * (100 - len(KEYS_LINE)), timeout=10)
        assert time.monotonic() - started < 10  # redrawn at once, not at the next refresh
        term.send("q")
        code, modes, shown = ended(term)
    finally:
        term.close(force=True)
    assert code == 0
    assert modes == "same"
    assert LEAVE_SCREEN in shown and SHOW_CURSOR in shown
    assert "Traceback" not in shown


def test_the_screen_fits_80_by_24():
    from cdnlake.reports.top import ViewState, screen_lines
    from cdnlake.warehouse.live import Key, Snapshot, Span

    now = datetime.now(UTC)
    keys = [Key(f"/very/long/path/{'x' * 90}/{i}", 1000 - i, 10**9, 5, 7) for i in range(10)]
    snap = Snapshot(
        [1234, 1235],
        "5m",
        "requests",
        now - timedelta(minutes=5),
        now,
        [Span(10, 1000, 5, 1, 1)] * 30,
        {name: keys for name in ("path", "host", "country", "status", "cache", "agent", "client")},
        newest=now,
        newest_zone=1234,
        newest_source="forwarded",
    )
    state = ViewState("5m", "requests", None, [1234, 1235])
    lines = screen_lines(snap, state, 80, 24)
    assert len(lines) == 24
    assert all(len(text) <= 80 for text, _ in lines)
    texts = [text for text, _ in lines]
    assert texts[-1] == KEYS_LINE
    assert any(t.startswith("requests/s") for t in texts)
    assert any(t.startswith("paths by requests") for t in texts)
    assert sum(t.startswith("/very/long/path/") for t in texts) >= 5
    for title in ("hosts", "countries", "status codes", "cache statuses", "user agents"):
        assert any(t.startswith(title) for t in texts), title


def test_ctrl_c_leaves_the_terminal_clean(lake):  # noqa: F811
    term = spawn_top(lake, "--window", "5m")
    try:
        term.expect_exact(KEYS_LINE)
        term.expect_exact("newest row")
        term.sendintr()
        code, modes, shown = ended(term)
    finally:
        term.close(force=True)
    assert code == 1  # as every command Ctrl-C stops
    assert modes == "same"
    assert LEAVE_SCREEN in shown and SHOW_CURSOR in shown
    assert "Traceback" not in shown
    assert shown.rstrip().endswith("cdnlake: interrupted")


def test_forwarded_rows_show_within_seconds(tmp_path):
    """A daemon receives the emulator's pushed requests: top, open on the zone's last
    minute before the first arrives, shows them (newest row forwarded) within seconds of
    the lake holding them."""
    emu = start_emulator("1234:extended", rpm=600, now=None, frozen=False)
    daemon = None
    term = None
    try:
        port = free_port()
        path = daemon_config(tmp_path, emu, f"127.0.0.1:{port}", flush=0.5)
        daemon = spawn_daemon(path)
        wait_for_line(daemon, f"forwarding: receiving tcp syslog on 127.0.0.1:{port}")
        wait_for_line(daemon, "daemon started")
        term = spawn_top(path, "--zone", "1234", "--window", "1m")
        term.expect_exact(KEYS_LINE)
        r = run_cli(
            "--config",
            str(path),
            "api",
            "pullzone",
            "set-forwarding",
            "--zone",
            "1234",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--protocol",
            "tcp",
        )
        assert r.returncode == 0, r.stderr
        config = load_test_config(path)

        def forwarded() -> bool:
            frame = lake_frame(config)
            return frame.filter(pl.col("source") == "forwarded").height > 0

        assert wait_for(forwarded, 60), "no forwarded row stored"
        landed = time.monotonic()
        term.expect(r"newest row \d\d:\d\d:\d\dZ \(\d+s ago, forwarded, zone 1234\)", timeout=30)
        assert time.monotonic() - landed < 10
        term.expect(r"requests/s +(\d+\.\d+)")
        assert float(term.match.group(1)) > 0
        term.send("q")
        code, modes, _ = ended(term)
        assert code == 0 and modes == "same"
    finally:
        if term is not None:
            term.close(force=True)
        if daemon is not None:
            stop(daemon)
        emu.stop()
