"""Senders of syslog over real sockets, and a receiver on loopback for a test config."""

from __future__ import annotations

import socket
import ssl
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cdnlake.config import Config
from cdnlake.forwarding.receiver import Receiver
from cdnlake.scheduler import wait_for
from tests.conftest import load_test_config, write_config
from tests.sessions import session_for

HEADER = '<165>1 2026-11-20T12:00:00.003Z edge-7 cdn-logs - - [meta@32473 zone="x"] '


def syslog(line: str) -> bytes:
    return (HEADER + line).encode()


def octets(message: bytes) -> bytes:
    return str(len(message)).encode() + b" " + message


def forwarding_config(
    tmp_path: Path,
    emu: Any,
    protocol: str = "tcp",
    *,
    flush: float = 0.2,
    zones: list[tuple[int, str]] | None = None,
    ingest: dict[str, Any] | None = None,
    **keys: str,
) -> Config:
    path = write_config(
        tmp_path, emu, zones=zones or [(1234, "v2"), (1235, "v1")], **(ingest or {})
    )
    lines = [
        "[forwarding]",
        'listen = "127.0.0.1:0"',
        f'protocol = "{protocol}"',
        f"flush_seconds = {flush}",
        *(f"{key} = {value}" for key, value in keys.items()),
    ]
    text = path.read_text().replace("[[zones]]", "\n".join(lines) + "\n[[zones]]", 1)
    path.write_text(text)
    return load_test_config(path)


def synthetic(i: int, zone: int = 1234, start_ms: int = 1_795_172_400_000) -> str:
    """A v1 line of request ``i``, one second after request ``i - 1``."""
    return (
        f"HIT|200|{start_ms + i * 1000}|100|{zone}|198.51.100.{i % 250}|-|"
        f"https://cdn.example.com/p/{i}|DE|curl/8|req{i:08d}|DE"
    )


def v1_lines(emu: Any, zone: int, start: datetime, minutes: int) -> list[str]:
    """The emulator's requests of ``zone`` in ``[start, start + minutes)`` as v1 lines."""
    end = start + timedelta(minutes=minutes)
    records = emu.traffic.records(zone, int(start.timestamp() * 1000), int(end.timestamp() * 1000))
    return [r.v1_line(extended=True) for r in records]


def send_tcp(
    address: tuple[str, int],
    payload: bytes,
    tls: ssl.SSLContext | None = None,
    timeout: float = 30,
) -> bytes:
    """Send ``payload`` on one connection, close the sending side, and return what came back
    before the receiver closed (b"" for a receiver that just closes). ``timeout``: how long
    the sender waits for the receiver to read on (it gives up and closes after it)."""
    with socket.create_connection(address, timeout=timeout) as raw:
        sock: socket.socket = (
            tls.wrap_socket(raw, server_hostname=address[0]) if tls is not None else raw
        )
        try:
            sock.sendall(payload)
            if tls is None:
                sock.shutdown(socket.SHUT_WR)
                return sock.recv(1)
        except OSError:  # the receiver reset the connection (refused, or an oversized frame)
            pass
        return b""


def send_udp(address: tuple[str, int], messages: list[bytes]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for message in messages:
            sock.sendto(message, address)


def until(predicate: Any, receiver: Any = None, timeout: float = 60) -> None:
    assert wait_for(predicate, timeout), f"not reached in time: {receiver and receiver.counts}"


def started(config: Config, **kwargs: Any) -> Receiver:
    return Receiver(config, session_for(config), **kwargs).start()
