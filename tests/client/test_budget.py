"""The per-zone request budget across processes: a process started right after another
(even one killed with SIGKILL) leaves room for the requests the provider still counts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from cdnlake.cli.common import open_api
from cdnlake.client import LoggingClient, V2Query
from cdnlake.client.budget import BudgetRegistry, RequestBudget, SendLog
from tests.conftest import KEY, load_test_config, start_emulator, write_config

# Sends N requests for zone 1234 through the CLI's own client, says so, then waits to be
# killed: the provider still counts them when the next process starts.
SENDER = """
import sys, threading
from cdnlake.cli.common import open_api
from cdnlake.client import LoggingClient, V2Query
from cdnlake.config import load_config

client = LoggingClient(open_api(load_config(sys.argv[1])))
for _ in range(int(sys.argv[2])):
    client.query_v2(1234, V2Query(limit=1))
print("sent", flush=True)
threading.Event().wait()
"""


@pytest.mark.slow
def test_a_process_after_a_sigkill_waits_for_its_predecessors_window(tmp_path):
    emu = start_emulator("1234", rate=(30, 10.0))  # the provider's real limit
    try:
        path = write_config(tmp_path, emu, [(1234, "v2")], requests_per_window=30)
        sender = subprocess.Popen(
            [sys.executable, "-c", SENDER, str(path), "30"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
        )
        try:
            assert sender.stdout is not None
            assert sender.stdout.readline().strip() == "sent"
        finally:
            sender.send_signal(signal.SIGKILL)
            sender.wait(timeout=30)
        assert emu.counters[1234].requests == 30
        started = time.monotonic()
        with open_api(load_test_config(path)) as api:
            client = LoggingClient(api)
            for _ in range(5):
                client.query_v2(1234, V2Query(limit=1))
        assert emu.counters[1234].rate_limited == 0
        assert emu.counters[1234].requests == 35
        assert time.monotonic() - started > 1.0  # it waited for the window
        assert (tmp_path / "data" / "work" / "budget" / "1234").is_file()
    finally:
        emu.stop()


class Clocks:
    """A monotonic and a wall clock that move together, by hand."""

    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = 1_800_000_000.0

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def budget_on(path, clocks: Clocks, limit: int = 3, window: float = 10.0) -> RequestBudget:
    return RequestBudget(
        limit,
        window,
        clock=lambda: clocks.mono,
        send_log=SendLog(path, window, limit, wall=lambda: clocks.wall),
    )


def test_a_new_budget_starts_from_the_sends_of_the_last_window(tmp_path):
    clocks = Clocks()
    first = budget_on(tmp_path / "z", clocks)
    for _ in range(3):
        assert first.acquire()
        clocks.advance(1)
        first.release()
    second = budget_on(tmp_path / "z", clocks)
    assert len(second._completed) == 3
    clocks.advance(8.5)  # the first answer is a window old: one slot free, no more
    second._expire(clocks.mono)
    assert len(second._completed) == 2
    clocks.advance(5)
    assert not budget_on(tmp_path / "z", clocks)._completed


def test_an_unanswered_send_counts_until_one_window_after_it(tmp_path):
    clocks = Clocks()
    dead = budget_on(tmp_path / "z", clocks)
    assert dead.acquire()  # killed before its answer: no release
    clocks.advance(3)
    assert len(budget_on(tmp_path / "z", clocks)._completed) == 1
    clocks.advance(17.5)  # counted from 10 s after the send, so gone 20 s after it
    assert len(budget_on(tmp_path / "z", clocks)._completed) == 0


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\xff garbage\nnot a line\n",
        b"abc s 1799999999.000\nabc d 17999",  # cut short by a crash
        b"abc s nan\nabc d nan\n",
        b"x" * (2 << 20),
    ],
    ids=["empty", "garbage", "torn", "nan", "huge"],
)
def test_an_unreadable_log_is_ignored(tmp_path, content):
    clocks = Clocks()
    (tmp_path / "z").write_bytes(content)
    budget = budget_on(tmp_path / "z", clocks)
    held = 1 if content.startswith(b"abc s 17") else 0  # a send whose answer was cut
    assert len(budget._completed) == held
    for _ in range(3 - held):
        assert budget.acquire()
        budget.release()


def test_a_log_that_cannot_be_written_leaves_the_budget_in_memory(tmp_path):
    clocks = Clocks()
    (tmp_path / "file").write_text("")
    budget = budget_on(tmp_path / "file" / "z", clocks)  # its folder is a file
    for _ in range(3):
        assert budget.acquire()
        budget.release()
    assert len(budget._completed) == 3


def test_the_log_stays_small(tmp_path):
    clocks = Clocks()
    budget = budget_on(tmp_path / "z", clocks, limit=30)
    for _ in range(3000):
        assert budget.acquire()
        budget.release()
        clocks.advance(1)
    assert (tmp_path / "z").stat().st_size < 30 * 2 * 4 * 40
    assert len(budget_on(tmp_path / "z", clocks, limit=30)._completed) == 9  # ages 1..9 s


def test_the_registry_keeps_one_file_per_zone(tmp_path):
    registry = BudgetRegistry(30, 10.0, folder=tmp_path / "budget")
    for zone in (1, 2):
        budget = registry.for_zone(zone)
        assert budget.acquire()
        budget.release()
    assert sorted(p.name for p in (tmp_path / "budget").iterdir()) == ["1", "2"]
    assert BudgetRegistry(30, 10.0).for_zone(1)._log is None
