"""The provider's log forwarding: each request of a zone that has it set, pushed as it
happens to the zone's syslog endpoint (RFC 5424, the text one plain v1 line, or with
``LogForwardingFormat`` 1 the request as a JSON object: the record the logging API v2
serves, since the provider documents no JSON fields of its own).

Best effort, as the provider says: on UDP a seeded share of the datagrams is lost; on TCP
and TLS (octet-counted frames on one connection per zone) what cannot be sent when the
endpoint is down is lost, and the next batch connects again. The emulator does not check
the endpoint's certificate (it plays a provider for tests, against self-signed ones).

Each request is pushed ``delay`` after it happened, on the emulator's clock: the provider
forwards within 10-30 s (``Delay(10, 30)``, ``cdnlake emulator --forward-delay 10-30``),
each request after a seeded delay of its own in that range, so they arrive out of order.
The default is none, for tests.
"""

from __future__ import annotations

import heapq
import random
import socket
import ssl
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from cdnlake.emulator.records import Record
    from cdnlake.emulator.state import Provider

UDP, TCP, TLS = 0, 1, 2  # PullZoneLogForwarderProtocolType
PLAIN, JSON = 0, 1  # PullZoneLogFormat
PUSH_EVERY_SECONDS = 0.2
CONNECT_SECONDS = 5.0
BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Delay:
    """How long after a request the provider pushes it: a seeded share of [low, high] s."""

    low: float = 0.0
    high: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high < float("inf"):
            raise ValueError(f"forward delay: expected 0 <= low <= high, got {self}")

    @classmethod
    def parse(cls, text: str) -> Delay:
        """``"10-30"`` (seconds, low-high) or ``"5"`` (always five)."""
        low, dash, high = text.partition("-")
        try:
            return cls(float(low), float(high if dash else low))
        except ValueError:
            raise ValueError(
                f"expected SECONDS or LOW-HIGH seconds such as 10-30, got {text!r}"
            ) from None


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    protocol: int  # UDP, TCP or TLS
    log_format: int = PLAIN  # PLAIN or JSON


@dataclass
class Pushed:
    """What the forwarder did, per zone (tests read it)."""

    sent: int = 0
    lost: int = 0  # dropped on UDP, or not sent to an endpoint that was down
    request_ids: list[str] = field(default_factory=list)  # those sent


def syslog_message(record: Record, extended: bool, log_format: int = PLAIN) -> bytes:
    moment = datetime.fromtimestamp(record.ts_ms / 1000, tz=UTC)
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{record.ts_ms % 1000:03d}Z"
    header = (
        f"<134>1 {stamp} {record.wire.edgeLocation.lower()}.edge cdn-logs - - "
        f'[origin@32473 eventSource="cdn" zone="{record.wire.pullZoneId}"] '
    )
    text = msgspec.json.encode(record.wire) if log_format == JSON else record.v1_line(extended)
    return header.encode() + BOM + (text if isinstance(text, bytes) else text.encode())


class Forwarder:
    def __init__(
        self,
        provider: Provider,
        udp_loss: float = 0.05,
        seed: int = 7,
        delay: Delay | None = None,
    ) -> None:
        self.provider = provider
        self.udp_loss = udp_loss
        self.delay = delay or Delay()
        self.pushed: dict[int, Pushed] = {}
        self._targets: dict[int, Target] = {}
        self._since: dict[int, int] = {}  # each zone's requests from this instant on
        # each zone's requests taken but not due yet: (due ms, request ms, order, record)
        self._due: dict[int, list[tuple[int, int, int, Record]]] = {}
        self._order = 0
        self._sockets: dict[int, socket.socket] = {}
        self._rng = random.Random(f"forwarding:{seed}")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set(self, zone_id: int, target: Target | None) -> None:
        """Forward the zone's requests from now on to ``target`` (None: stop). A zone that
        forwards already goes on where it was, to the new target in its format."""
        with self._lock:
            self._close(zone_id)
            if target is None:  # what was not pushed yet is not pushed
                self._targets.pop(zone_id, None)
                self._due.pop(zone_id, None)
                return
            if zone_id not in self._targets:
                self._since[zone_id] = self.provider.clock.now_ms()
                self._due[zone_id] = []
            self._targets[zone_id] = target
            self.pushed.setdefault(zone_id, Pushed())
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="emulator-forwarding", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self._lock:
            for zone_id in list(self._sockets):
                self._close(zone_id)

    def _run(self) -> None:
        while not self._stop.wait(PUSH_EVERY_SECONDS):
            with self._lock:
                self.push()

    def push(self) -> None:
        """Push every request that is due by the emulator's clock (call under the lock)."""
        now = self.provider.clock.now_ms()
        low, high = round(self.delay.low * 1000), round(self.delay.high * 1000)
        for zone_id, target in self._targets.items():
            due = self._due[zone_id]
            upto = now - low  # no request after this one is due yet
            since = self._since[zone_id]
            if upto > since:
                self._since[zone_id] = upto
                for record in self.provider.traffic.records(zone_id, since, upto):
                    wait = low if high == low else self._rng.randint(low, high)
                    self._order += 1
                    heapq.heappush(due, (record.ts_ms + wait, record.ts_ms, self._order, record))
            records = []
            while due and due[0][0] <= now:
                records.append(heapq.heappop(due)[3])
            if not records:
                continue
            spec = self.provider.zones.get(zone_id)
            extended = bool(spec and spec.extended)
            messages = [
                (r.wire.requestId, syslog_message(r, extended, target.log_format)) for r in records
            ]
            pushed = self.pushed[zone_id]
            if target.protocol == UDP:
                self._send_udp(target, messages, pushed)
            else:
                self._send_stream(zone_id, target, messages, pushed)

    def _send_udp(self, target: Target, messages: list[tuple[str, bytes]], pushed: Pushed) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for request_id, message in messages:
                if self._rng.random() < self.udp_loss:
                    pushed.lost += 1
                    continue
                try:
                    sock.sendto(message, (target.host, target.port))
                except OSError:
                    pushed.lost += 1
                    continue
                pushed.sent += 1
                pushed.request_ids.append(request_id)

    def _send_stream(
        self, zone_id: int, target: Target, messages: list[tuple[str, bytes]], pushed: Pushed
    ) -> None:
        payload = b"".join(str(len(m)).encode() + b" " + m for _, m in messages)
        try:
            sock = self._sockets.get(zone_id)
            if sock is None:
                sock = self._sockets[zone_id] = self._connect(target)
            sock.sendall(payload)
        except OSError:
            self._close(zone_id)
            pushed.lost += len(messages)
            return
        pushed.sent += len(messages)
        pushed.request_ids += [request_id for request_id, _ in messages]

    def _connect(self, target: Target) -> socket.socket:
        sock = socket.create_connection((target.host, target.port), timeout=CONNECT_SECONDS)
        if target.protocol != TLS:
            return sock
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            return context.wrap_socket(sock, server_hostname=target.host)
        except OSError:
            sock.close()
            raise

    def _close(self, zone_id: int) -> None:
        sock = self._sockets.pop(zone_id, None)
        if sock is not None:
            sock.close()
