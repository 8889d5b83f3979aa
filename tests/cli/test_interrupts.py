"""Ctrl-C and SIGTERM stop the bulk commands within seconds, on a terminal (the live
display) as on a pipe: one line says what was kept, exit 1, nothing half stored."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdnlake.emulator.state import Faults
from tests.conftest import KEY, start_emulator, write_config

STOP_WITHIN = 8.0  # seconds from the signal to the exit


def wait_for(condition, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def slow_setup(tmp_path: Path):
    """An emulator answering every logging request after 1.5 s; three zones of three days
    in pages of 200 records: minutes of work."""
    emu = start_emulator(rpm=20.0, faults=Faults(slow_rate=1.0, slow_seconds=1.5))
    config = write_config(tmp_path, emu, page_size=200)
    return emu, config


def started(emu) -> bool:
    return sum(c.requests for c in emu.counters.values()) >= 4


def cli(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "cdnlake", "--config", str(config), *args]


class Terminal:
    """A command as a person runs it: its own session on a pseudo-terminal, so that a
    Ctrl-C typed there (\\x03) is the terminal's SIGINT to it."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child
            os.execvpe(args[0], args, env)
        self.seen = b""

    def read(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                self.seen += chunk

    def type_ctrl_c(self) -> None:
        os.write(self.fd, b"\x03")

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.read(0.2)
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            self.read(0.1)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        return None


def test_ctrl_c_on_a_terminal_stops_ingest(tmp_path):
    emu, config = slow_setup(tmp_path)
    env = {**os.environ, "CDNLAKE_ACCESS_KEY": KEY, "COLUMNS": "200", "TERM": "xterm"}
    try:
        term = Terminal(cli(config, "ingest"), env)
        wait_for(lambda: (term.read(0.1), started(emu))[1], what="the first requests")
        term.type_ctrl_c()
        sent = time.monotonic()
        code = term.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        emu.stop()
    screen = term.seen.decode("utf-8", "replace")
    assert code == 1, screen
    assert took < STOP_WITHIN, (took, screen)
    assert "interrupted (SIGINT)" in screen and "new rows committed" in screen, screen
    assert "Traceback" not in screen


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_on_a_pipe_stops_ingest(tmp_path, signum):
    emu, config = slow_setup(tmp_path)
    try:
        proc = subprocess.Popen(
            cli(config, "ingest"),
            env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: started(emu), what="the first requests")
        proc.send_signal(signum)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        emu.stop()
    name = signal.Signals(signum).name
    assert proc.returncode == 1, out + err
    assert took < STOP_WITHIN, (took, out, err)
    kept = [line for line in err.splitlines() if f"interrupted ({name})" in line]
    assert len(kept) == 1, err
    assert "Traceback" not in err
    # every zone's summary said how it ended: stopped, or done before the signal
    assert out.count("zone 123") == 3, out


def test_sigint_stops_import_v1_between_chunks(tmp_path):
    emu = start_emulator()
    config = write_config(tmp_path, emu)
    emu.stop()
    line = "HIT|200|1764000000000|1000|1234|10.0.0.1|-|https://www.example.com/a.js|DE|-|{id}|DE\n"
    files = []
    for n in range(3):
        path = tmp_path / f"2026-11-2{n}.log"
        path.write_text("".join(line.format(id=f"{n}-{i:08d}") for i in range(400_000)))
        files.append(str(path))
    proc = subprocess.Popen(
        cli(config, "import-v1", "--zone", "1234", *files),
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first_commit = tmp_path / "data" / "lake" / "requests" / "_delta_log"
    wait_for(lambda: any(first_commit.glob("*.json")), what="the first file's first commit")
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == 1, out + err
    assert took < STOP_WITHIN, (took, out, err)
    assert "interrupted (SIGTERM)" in err and "not started" in err, err
    assert "Traceback" not in err


def test_a_zone_another_process_ingests_is_skipped_not_failed(tmp_path):
    """A cron job's ingest beside its last one still going: exit 0, the zone skipped."""
    from cdnlake.lake.zone.lock import zone_lock

    emu = start_emulator("1234,1236")
    try:
        config = write_config(tmp_path, emu, zones=[(1234, "v2"), (1236, "v2")])
        with zone_lock(tmp_path / "data" / "work" / "locks", "requests", 1234):
            result = subprocess.run(
                cli(config, "ingest"),
                env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
                capture_output=True,
                text=True,
                timeout=120,
            )
    finally:
        emu.stop()
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "zone 1234 [v2] skipped: pull zone 1234 is being ingested by another cdnlake process"
        in result.stdout
    ), result.stdout
    assert "zone 1236 [v2] ok" in result.stdout
