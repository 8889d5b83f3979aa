"""The syslog listener: TCP (RFC 6587 framing), TLS, or UDP, on an asyncio loop of its own.

A sender outside ``[forwarding] allow`` (loopback when empty) is refused before anything
it sent is read (a TCP connection is closed before the TLS handshake; a datagram is
dropped). Each message is taken alone: one that is not syslog is counted and the
connection goes on; an oversized frame, a stalled TLS handshake or a connection silent for
:data:`IDLE_SECONDS` ends that connection only. When the buffer is full, connections stop
being read (TCP flow control makes the senders wait) and datagrams are dropped and counted.

The flusher runs on a thread of its own, at least every ``flush_seconds`` and at once
when the buffer fills; :meth:`Receiver.stop` closes the listener, then commits what it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import Future
from typing import Any

from cdnlake.config import Config
from cdnlake.errors import ConfigError
from cdnlake.forwarding.batch import DEFAULT_MAX_LINES, Buffer, Counts, Flusher
from cdnlake.forwarding.framing import MAX_FRAME_BYTES, Deframer
from cdnlake.forwarding.syslog import NotSyslog, message_text
from cdnlake.lake.zone.session import LakeSession
from cdnlake.privacy import parse_address

log = logging.getLogger("cdnlake.forwarding")

READ_BYTES = 64 * 1024
IDLE_SECONDS = 600.0  # a connection that sends nothing for this long is closed
HANDSHAKE_SECONDS = 10.0
MAX_CONNECTIONS = 256
FULL_POLL_SECONDS = 0.05  # how often a paused connection looks whether there is room again
STOP_SECONDS = 10.0
UDP_RECEIVE_BUFFER = 4 << 20  # bytes (the kernel caps it at net.core.rmem_max)


class Receiver:
    """Receives forwarded logs and commits them; :meth:`start`, then :meth:`stop`."""

    def __init__(
        self,
        config: Config,
        session: LakeSession,
        *,
        max_lines: int = DEFAULT_MAX_LINES,
        max_frame: int = MAX_FRAME_BYTES,
    ) -> None:
        address = config.forwarding.address()
        if address is None:
            raise ConfigError("forwarding.listen: not set; the receiver has nowhere to listen")
        self.config = config.forwarding
        self.host, self.port = address
        self.networks = config.forwarding.networks()
        self.max_frame = max_frame
        self.buffer = Buffer(max_lines)
        self.flusher = Flusher(config, self.buffer, session)
        self.address: tuple[str, int] | None = None  # where it listens, once started
        self._tls = self._tls_context() if config.forwarding.protocol == "tls" else None
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._stopping = threading.Event()
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="forwarding-listener", daemon=True
        )
        self._flush_thread = threading.Thread(
            target=self._flush_forever, name="forwarding-commit", daemon=True
        )

    @property
    def counts(self) -> Counts:
        return self.buffer.counts

    def _tls_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.config.tls_cert, self.config.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"forwarding.tls_cert/tls_key: cannot load {self.config.tls_cert} with "
                f"{self.config.tls_key}: {exc}"
            ) from None
        return context

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> Receiver:
        self._loop_thread.start()
        opened: Future[tuple[str, int]] = asyncio.run_coroutine_threadsafe(self._open(), self._loop)
        try:
            self.address = opened.result(timeout=STOP_SECONDS)
        except OSError as exc:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(STOP_SECONDS)
            if not self._loop.is_running():
                self._loop.close()  # (else its finaliser complains at exit, on stderr)
            raise ConfigError(
                f"forwarding.listen: cannot listen on {self.config.listen} "
                f"({self.config.protocol}): {exc.strerror or exc}"
            ) from None
        self._flush_thread.start()
        log.info(
            "forwarding: receiving %s syslog on %s:%s",
            self.config.protocol,
            *self.address,
        )
        return self

    def stop(self) -> bool:
        """Stop listening, drop the connections, commit what was received; True if all
        of it was committed. Stopping again does nothing."""
        if self._stopping.is_set():
            return True
        if self.address is not None:
            done = asyncio.run_coroutine_threadsafe(self._close(), self._loop)
            with contextlib.suppress(Exception):
                done.result(timeout=STOP_SECONDS)
        self._stopping.set()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(STOP_SECONDS)
        self.buffer.wake.set()
        if self._flush_thread.is_alive():
            self._flush_thread.join()
        committed = self.flusher.flush()  # what came in after the last flush
        if not self._loop.is_running():
            self._loop.close()
        counts = self.counts
        log.info(
            "forwarding stopped: %d messages, %d new rows, %d known, %d held back (erased), "
            "%d rejected%s",
            counts.messages,
            counts.rows,
            counts.duplicates,
            counts.erased,
            counts.rejected,
            "".join(f", {n} {reason}" for reason, n in sorted(counts.dropped.items())),
        )
        return committed

    def _flush_forever(self) -> None:
        every = self.config.flush_seconds
        while not self._stopping.is_set():
            started = time.monotonic()
            self.buffer.wake.clear()  # a buffer that fills during this flush wakes the next
            try:
                self.flusher.flush()
            except Exception:  # the receiver must outlive a failed flush
                log.exception("forwarding: a flush failed")
            self.buffer.wake.wait(max(0.0, started + every - time.monotonic()))

    # -- the loop's side -----------------------------------------------------------------
    async def _open(self) -> tuple[str, int]:
        if self.config.protocol == "udp":
            transport, _ = await self._loop.create_datagram_endpoint(
                lambda: _Datagrams(self), local_addr=(self.host, self.port)
            )
            self._udp = transport
            with contextlib.suppress(OSError):  # bursts wait in the kernel, not lost there
                sock = transport.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECEIVE_BUFFER)
            name = transport.get_extra_info("sockname")
        else:
            self._server = await asyncio.start_server(
                self._connection, self.host, self.port, limit=READ_BYTES
            )
            name = self._server.sockets[0].getsockname()
        return str(name[0]), int(name[1])

    async def _close(self) -> None:
        if self._udp is not None:
            self._udp.close()
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=STOP_SECONDS)

    def allowed(self, host: str) -> bool:
        address = parse_address(host)  # an IPv4-mapped peer as its IPv4 address
        return address is not None and any(address in network for network in self.networks)

    def take(self, frame: bytes) -> None:
        """One message: into the buffer, or counted as not syslog."""
        try:
            text = message_text(frame)
        except NotSyslog:
            self.buffer.drop("not syslog")
            return
        self.buffer.put(text)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        if not self.allowed(str(peer[0])):
            if _seldom(self.buffer.drop("sender not allowed")):
                log.warning("forwarding: refused a connection from %s (not in allow)", peer[0])
            writer.transport.abort()
            return
        if len(self._connections) >= MAX_CONNECTIONS:
            self.buffer.drop("too many connections")
            writer.transport.abort()
            return
        self._connections.add(task)
        try:
            if self._tls is not None:
                try:
                    await writer.start_tls(self._tls, ssl_handshake_timeout=HANDSHAKE_SECONDS)
                except (TimeoutError, ConnectionError, ssl.SSLError, OSError):
                    self.buffer.drop("tls handshake failed")
                    return
            await self._read(reader, str(peer[0]))
        except (TimeoutError, ConnectionError, ssl.SSLError, OSError):
            pass  # the sender's connection ends; others go on
        except asyncio.CancelledError:
            pass  # the receiver stops: end as any connection (asyncio logs a cancelled one)
        finally:
            self._connections.discard(task)
            writer.transport.abort()

    async def _read(self, reader: asyncio.StreamReader, peer: str) -> None:
        deframer = Deframer(self.max_frame)
        while True:
            while self.buffer.full():  # back-pressure: unread bytes make the sender wait
                await asyncio.sleep(FULL_POLL_SECONDS)
            data = await asyncio.wait_for(reader.read(READ_BYTES), IDLE_SECONDS)
            if not data:
                if deframer.pending:
                    self.buffer.drop("cut frame")
                return
            for frame in deframer.feed(data):
                self.take(frame)
            if deframer.error is not None:
                if _seldom(self.buffer.drop("oversized frame")):
                    log.warning("forwarding: connection from %s dropped: %s", peer, deframer.error)
                return


class _Datagrams(asyncio.DatagramProtocol):
    """UDP: one message per datagram."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        receiver = self.receiver
        if not receiver.allowed(str(addr[0])):
            receiver.buffer.drop("sender not allowed")
            return
        if len(data) > receiver.max_frame:
            receiver.buffer.drop("oversized frame")
            return
        if receiver.buffer.full():
            receiver.buffer.drop("buffer full (udp)")
            return
        receiver.take(data.removesuffix(b"\n"))


def _seldom(count: int) -> bool:
    """Whether the ``count``-th event of a kind is logged: the 1st, 2nd, 4th, 8th..., so
    that a flood of them cannot flood the log (``counts`` has them all)."""
    return count & (count - 1) == 0
