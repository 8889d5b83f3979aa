"""The loopback emulator: a real HTTP server that plays the provider.

It checks credentials, enforces the per-zone rate limit shared by v1 and v2, refuses
what is past retention, serves late-arriving records, and injects faults on demand.
Control endpoints under ``/_emulator/`` (clock, faults, stats) exist only here, for tests
and demos; they are not part of the provider's API.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import cdnlake.emulator.logging_routes as logging_routes
import cdnlake.emulator.statistics as statistics
import cdnlake.emulator.storage as storage
from cdnlake.emulator.archive import DAY_MS, Archive, ArchiveLimits
from cdnlake.emulator.area import ManagementFixtures
from cdnlake.emulator.clock import EmulatorClock
from cdnlake.emulator.forwarding import Delay
from cdnlake.emulator.http import (
    HttpProblem,
    Request,
    Response,
    json_response,
    logging_error,
)
from cdnlake.emulator.management import ManagementApi
from cdnlake.emulator.records import ZoneSpec
from cdnlake.emulator.state import Faults, ZoneRateLimiter, ceil_seconds
from cdnlake.emulator.storage import StorageApi
from cdnlake.emulator.storage_zones import DEFAULT_STORAGE_ZONES, StorageZone, StorageZones
from cdnlake.emulator.traffic import Traffic

log = logging.getLogger("cdnlake.emulator")

DEFAULT_ACCESS_KEY = "demo-key"
DEFAULT_RPM = 20.0
# The demo zones of the committed config.toml (a test keeps the two in step).
DEMO_ZONES = "1234:v2:extended,1235:v1,1236:v2"

Route = Callable[["Emulator", Request], Response]


def parse_zones(text: str) -> dict[int, ZoneSpec]:
    """``ID[:v2|v1|extended|disabled|suspended|archived|fullip|signed]...`` separated by
    commas (``archived``: permanent log storage on from the start, with ``archive_days`` of
    history; ``fullip``: whole client addresses, as a customer under the provider's data
    processing agreement gets them; ``signed``: some URLs carry token authentication)."""
    zones: dict[int, ZoneSpec] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        parts = item.split(":")
        if not parts[0].isdigit() or int(parts[0]) <= 0:
            raise ValueError(f"--zones: bad zone id in {item!r}")
        kinds = set(parts[1:])
        unknown = kinds - {"v1", "v2", "extended", "disabled", "suspended", "archived"}
        unknown -= {"fullip", "signed"}
        if unknown:
            raise ValueError(f"--zones: unknown kind {sorted(unknown)[0]!r} in {item!r}")
        zid = int(parts[0])
        zones[zid] = ZoneSpec(
            zid,
            extended="extended" in kinds,
            disabled="disabled" in kinds,
            suspended="suspended" in kinds,
            archived="archived" in kinds,
            full_ips="fullip" in kinds,
            signed_urls="signed" in kinds,
        )
    if not zones:
        raise ValueError("--zones: no zones given")
    return zones


@dataclass
class EmulatorConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    seed: int = 1
    access_key: str = DEFAULT_ACCESS_KEY
    bearer_token: str | None = None
    zones: dict[int, ZoneSpec] = field(default_factory=lambda: parse_zones(DEMO_ZONES))
    rate_limit: int = 30
    rate_window: float = 10.0
    rpm: float = DEFAULT_RPM
    faults: Faults = field(default_factory=Faults)
    now: datetime | None = None
    frozen: bool = False
    shield_zones: tuple[int, ...] = (5001, 5002)
    forward_delay: Delay = field(default_factory=Delay)  # log forwarding's push delay
    # Permanent log storage: the account's storage zones; zones marked ``archived`` archive
    # into the first from ``archive_days`` UTC days before the start, the first
    # ``archive_legacy_days`` of those under the older naming scheme.
    storage_zones: tuple[StorageZone, ...] = DEFAULT_STORAGE_ZONES
    archive_days: int = 30
    archive_legacy_days: int = 7
    archive_limits: ArchiveLimits = field(default_factory=ArchiveLimits)


@dataclass
class ZoneCounters:
    requests: int = 0
    rate_limited: int = 0
    faults: int = 0


class Emulator:
    """Provider state plus the HTTP server that exposes it."""

    def __init__(self, config: EmulatorConfig | None = None) -> None:
        self.config = config or EmulatorConfig()
        self.zones = self.config.zones
        self.clock = EmulatorClock(self.config.now, frozen=self.config.frozen)
        self.traffic = Traffic(self.config.seed, self.zones, self.config.rpm)
        self.faults = self.config.faults
        self.limiter = ZoneRateLimiter(self.config.rate_limit, self.config.rate_window)
        self.counters: dict[int, ZoneCounters] = {z: ZoneCounters() for z in self.zones}
        self._counter_lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.management = ManagementApi(
            self, ManagementFixtures(shield_zones=self.config.shield_zones)
        )
        self.management.forwarder.delay = self.config.forward_delay
        self.archive = Archive(
            self.config.seed, self.traffic, self.clock, self.config.archive_limits
        )
        self.storage_zones = StorageZones(self.config.storage_zones)
        self.storage = StorageApi(self)
        self._archive_from_start()

    def _archive_from_start(self) -> None:
        """Zones marked ``archived``: permanent storage on, with days of history."""
        archived = [z for z in self.zones.values() if z.archived]
        if not archived:
            return
        if not self.config.storage_zones:
            raise ValueError("archived zones need a storage zone (storage_zones is empty)")
        now = self.clock.now_ms()
        since = now - now % DAY_MS - self.config.archive_days * DAY_MS
        for spec in archived:
            self.archive.enable(
                spec.id,
                self.config.storage_zones[0].id,
                since,
                legacy_until_ms=since + self.config.archive_legacy_days * DAY_MS,
            )

    @property
    def storage_url(self) -> str:
        """The base URL of the storage zones' own API (Edge Storage)."""
        return f"{self.url}{storage.PREFIX}"

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> Emulator:
        """Bind and serve in a background thread (port 0 picks a free port)."""
        self._server = _Server((self.config.host, self.config.port), _Handler)
        self._server.emulator = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="cdnlake-emulator", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server = _Server((self.config.host, self.config.port), _Handler)
        self._server.emulator = self
        self._server.serve_forever()

    def stop(self) -> None:
        self.management.forwarder.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def port(self) -> int:
        assert self._server is not None, "emulator not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def count(self, zone_id: int, name: str) -> None:
        with self._counter_lock:
            counters = self.counters.setdefault(zone_id, ZoneCounters())
            setattr(counters, name, getattr(counters, name) + 1)

    # -- credentials -------------------------------------------------------------------
    def check_credentials(self, req: Request, *, allow_bearer: bool) -> str | None:
        """Return None when authorised, else 'missing' or 'invalid'."""
        key = req.headers.get("accesskey")
        auth = req.headers.get("authorization")
        if key is None and (auth is None or not allow_bearer):
            return "missing"
        if key is not None:
            return None if key == self.config.access_key else "invalid"
        assert auth is not None
        scheme, _, token = auth.partition(" ")
        valid = {self.config.access_key}
        if self.config.bearer_token:
            valid.add(self.config.bearer_token)
        if scheme.lower() == "bearer" and token in valid:
            return None
        return "invalid"

    # -- dispatch ----------------------------------------------------------------------
    def dispatch(self, req: Request) -> Response | str:
        """An answer, or a fault to act out ('drop' / 'truncate')."""
        if req.path.startswith("/_emulator/"):
            return self._control(req)
        if req.path.startswith(storage.PREFIX + "/"):
            return self.storage.handle(req)
        v2 = logging_routes.V2_PATH.match(req.path)
        v1 = logging_routes.V1_PATH.match(req.path)
        if v2 or v1:
            if req.method != "GET":
                return logging_error(405, "invalid_request", "only GET is allowed")
            zone_id = int((v2 or v1).group(1 if v2 else 4))  # type: ignore[union-attr]
            return self._logging(req, zone_id, v2 is not None, v1)
        if req.path == statistics.PATH:
            return statistics.handle(self, req)
        return self.management.dispatch(req)

    def _logging(self, req: Request, zone_id: int, is_v2: bool, v1: Any) -> Response | str:
        problem = self.check_credentials(req, allow_bearer=True)
        if problem == "missing":
            return logging_error(401, "unauthorized", "No credentials provided")
        if problem == "invalid":
            return logging_error(403, "forbidden", "Invalid credentials")
        spec = self.zones.get(zone_id)
        if spec is None or spec.suspended:
            return logging_error(403, "forbidden", f"Pull zone {zone_id} is not accessible")
        if spec.disabled:
            return logging_error(
                404, "logging_disabled", f"Logging is not enabled for pull zone {zone_id}"
            )
        wait = self.limiter.admit(zone_id)
        if wait is not None:
            self.count(zone_id, "rate_limited")
            return logging_error(
                429,
                "rate_limited",
                f"Rate limit exceeded for pull zone {zone_id}",
                headers={"Retry-After": str(ceil_seconds(wait))},
            )
        self.count(zone_id, "requests")
        fault = self._fault(zone_id, is_v2)
        if fault is not None and not (fault == "truncate" and not is_v2):
            return fault
        try:
            if is_v2:
                return logging_routes.handle_v2(self, req, zone_id)
            answer = logging_routes.handle_v1(self, req, zone_id, logging_routes.parse_v1_day(v1))
        except HttpProblem as problem_:
            return problem_.response
        answer.cut_short = fault == "truncate"  # a v1 file that ends early
        return answer

    def _fault(self, zone_id: int, is_v2: bool) -> Response | str | None:
        f = self.faults
        if f.roll(f.slow_rate):
            time.sleep(f.slow_seconds)
        outcome: Response | str | None = None
        if f.roll(f.spurious_429_rate):
            mode = f.retry_after if f.retry_after != "mixed" else None
            mode = mode or f.choice(["positive", "zero", "absent"])
            headers = {"positive": {"Retry-After": "1"}, "zero": {"Retry-After": "0"}}
            outcome = logging_error(
                429,
                "rate_limited",
                f"Rate limit exceeded for pull zone {zone_id}",
                headers=headers.get(mode, {}),
            )
        elif f.roll(f.error_rate):
            if f.choice(["json", "html"]) == "json":
                outcome = logging_error(500, "internal_error", "Unexpected server error")
            else:
                outcome = Response(
                    500,
                    b"<html><body><h1>500 Internal Server Error</h1></body></html>",
                    "text/html",
                )
        elif f.roll(f.drop_rate):
            outcome = "drop"
        elif f.roll(f.truncate_rate):
            outcome = "truncate"
        elif is_v2 and f.roll(f.malformed_rate):
            outcome = Response(200, b'{"data": [{"timestamp": "2026-', "application/json")
        if outcome is not None:
            self.count(zone_id, "faults")
        return outcome

    def _control(self, req: Request) -> Response:
        name = req.path.removeprefix("/_emulator/").strip("/")
        try:
            if name == "health":
                return json_response(200, {"ok": True, "now": self.clock.now().isoformat()})
            if name == "clock":
                if req.method == "POST":
                    body = req.json() or {}
                    if "now" in body:
                        self.clock.set(
                            datetime.fromisoformat(body["now"].replace("Z", "+00:00")),
                            frozen=body.get("frozen"),
                        )
                    if "advance_seconds" in body:
                        self.clock.advance(float(body["advance_seconds"]))
                return json_response(200, {"now": self.clock.now().isoformat()})
            if name == "faults":
                if req.method == "POST":
                    self.faults.update(req.json() or {})
                return json_response(200, self.faults.as_dict())
            if name == "late" and req.method == "POST":
                # Requests made ``seconds_ago`` that reach the provider ``delay_seconds``
                # after they happened (a late arrival on demand).
                body = req.json() or {}
                zone = int(body["zone"])
                if zone not in self.zones:
                    raise ValueError(f"unknown zone {zone}")
                at = self.clock.now_ms() - int(float(body.get("seconds_ago", 0)) * 1000)
                delay = int(float(body["delay_seconds"]) * 1000)
                if delay < 0:
                    raise ValueError("delay_seconds must not be negative")
                added = self.traffic.add_late(zone, at, delay, int(body.get("count", 1)))
                return json_response(200, {"request_ids": [r.wire.requestId for r in added]})
            if name == "archive":
                # The archive's closing rules, changed on demand (a test shrinks them).
                if req.method == "POST":
                    limits = dataclasses.asdict(self.archive.limits) | (req.json() or {})
                    self.archive.set_limits(ArchiveLimits(**limits))
                return json_response(
                    200,
                    {
                        "limits": dataclasses.asdict(self.archive.limits),
                        "zones": {
                            str(z.zone_id): {
                                "name": z.name,
                                "storage_zone_id": z.storage_zone_id,
                                "enabled": z.enabled,
                                "spans": z.spans,
                            }
                            for z in self.archive.zones.values()
                        },
                    },
                )
            if name == "stats":
                with self._counter_lock:
                    stats = {str(z): vars(c).copy() for z, c in self.counters.items()}
                for zone, served in dict(self.traffic.served).items():
                    stats.setdefault(str(zone), {})["records_served"] = served
                return json_response(200, {"zones": stats})
        except (ValueError, TypeError, KeyError) as exc:
            return json_response(400, {"error": {"code": "invalid_request", "message": str(exc)}})
        return json_response(404, {"error": {"code": "not_found", "message": req.path}})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    emulator: Emulator

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that reset or dropped its connection (killed, timed out) is one line,
        not socketserver's traceback; anything else is still a traceback in the log."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            log.info("a client closed its connection mid-request (%s)", type(exc).__name__)
            return
        log.exception("emulator: error while serving a request")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "cdnlake-emulator"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        # The request line only: headers (credentials) are never logged.
        log.debug("%s %s", self.address_string(), format % args)

    def _serve(self) -> None:
        try:
            self._answer()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (killed, timed out)

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        req = Request.build(self.command, self.path, dict(self.headers.items()), body)
        try:
            outcome = self.server.emulator.dispatch(req)
        except Exception:  # a bug in the emulator must still answer
            log.exception("emulator route failed")
            outcome = logging_error(500, "internal_error", "emulator failure")
        if outcome == "drop":
            self._cut()
            return
        truncate = outcome == "truncate"
        if truncate:
            response = json_response(200, {"data": [], "pagination": {}, "padding": "x" * 4000})
        else:
            assert isinstance(outcome, Response)
            response = outcome
        payload = response.body
        headers = dict(response.headers)
        accepts = self.headers.get("Accept-Encoding", "")
        if response.gzip_ok and "gzip" in accepts and len(payload) > 512:
            payload = gzip.compress(payload, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
            if response.cut_short:
                payload = payload[: len(payload) // 2]
        elif response.cut_short:
            truncate = True  # plain text: cut the connection instead
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if truncate:
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self._cut()
            return
        if response.cut_at is not None:
            self.wfile.write(payload[: response.cut_at])
            self.wfile.flush()
            self._cut()
            return
        self.wfile.write(payload)

    def _cut(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve
