"""Memory stays bounded when lines come faster than the lake takes them: TCP senders wait,
UDP datagrams are dropped and counted; nothing that was taken is lost."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from cdnlake.forwarding import batch
from tests.forwarding.helpers import (
    forwarding_config,
    send_tcp,
    send_udp,
    started,
    synthetic,
    syslog,
    until,
)

MAX_LINES = 50
# Held at most: a full buffer (what the stalled commit holds included) and one read's frames.
BOUND = MAX_LINES + 64 * 1024 // 150


@pytest.fixture
def stalled_lake(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Commits wait until the returned event is set (a slow or unreachable lake)."""
    release = threading.Event()
    original = batch.commit_together

    def slow(writes: list[Any]) -> list[Any]:
        assert release.wait(120)
        return original(writes)

    monkeypatch.setattr(batch, "commit_together", slow)
    return release


def test_a_full_buffer_makes_tcp_senders_wait_and_loses_nothing(tmp_path, emulator, stalled_lake):
    config = forwarding_config(tmp_path, emulator)
    lines = [synthetic(i) for i in range(100_000)]  # more than loopback's socket buffers
    payload = b"".join(syslog(line) + b"\n" for line in lines)
    receiver = started(config, max_lines=MAX_LINES)
    try:
        assert receiver.address is not None
        address = receiver.address
        # the sender waits as long as the test does: on a busy machine the first commits
        # after the stall may keep the receiver from reading for more than 30 s
        sender = threading.Thread(
            target=send_tcp, args=(address, payload), kwargs={"timeout": 120}, daemon=True
        )
        sender.start()
        until(receiver.buffer.full, receiver)
        sender.join(timeout=1.0)  # it cannot finish: the receiver does not read
        assert sender.is_alive()
        assert receiver.counts.messages <= BOUND
        stalled_lake.set()
        sender.join(timeout=120)
        assert not sender.is_alive()
        until(lambda: receiver.counts.rows == len(lines), receiver, timeout=120)
    finally:
        stalled_lake.set()
        assert receiver.stop()
    assert receiver.counts.dropped == {}


def test_a_full_buffer_drops_and_counts_udp_datagrams(tmp_path, emulator, stalled_lake):
    config = forwarding_config(tmp_path, emulator, "udp")
    lines = [synthetic(i) for i in range(5 * BOUND)]
    receiver = started(config, max_lines=MAX_LINES)
    try:
        assert receiver.address is not None
        send_udp(receiver.address, [syslog(line) for line in lines])
        until(lambda: receiver.counts.dropped["buffer full (udp)"] > 0, receiver)
        assert receiver.counts.messages <= BOUND
        stalled_lake.set()
    finally:
        stalled_lake.set()
        assert receiver.stop()
    assert receiver.counts.rows == receiver.counts.messages  # every datagram taken is stored
