"""Several daemons share the zones through PostgreSQL: heartbeats, leases, fleet jobs.

Every ``tick`` (a quarter of the lease time) a daemon writes its heartbeat, reads the
live daemons, computes the fair share (:func:`share`, alike in every daemon), renews the
leases it keeps, takes the free ones it should have and releases those it should not
(after the pass in flight). Times are the database's own ``now()``, so clocks of
different machines never meet.

- A lease lasts ``schedule.poll_seconds``: a daemon that dies loses its zones to the
  others within ``2 * poll_seconds`` (its lease lapses, the next tick of another takes it).
- A daemon that cannot renew (database gone, network cut) treats its leases as lost a
  tick before they lapse in the database: no pass starts, a pass in flight stops at its
  next page. It reconnects at every tick and takes its share again.
- A new owner makes its first request only after the previous owner's rate window
  (``ingest.window_seconds``) has passed, so the zone's budget is spent by one process.
- A daemon takes no more zones than it can start polling now (the ``room`` its daemon
  gives: its reading slots, ``ingest.concurrency``, less the zones it took whose first
  pass has not ended); the rest stay free, for a later round (at the latest the next
  tick, at once when a first pass ends) or another daemon. A lease taken is polled at
  once, not held idle while its first pass waits for a slot.
- Every take of a lease gives it a new, larger generation; the passes run under it carry
  it into the lake as the zone's fence token (:mod:`cdnlake.lake.log.progress`). The first
  commit of the new owner advances the zone's fence, after which a daemon whose lease
  lapsed (a stall, a SIGSTOP) is refused on every commit, in the pass it had in flight
  and in any pass it starts before it takes the lease anew.
- ``maintain`` holds a zone's lease while it rewinds the zone (:class:`MaintainHold`): it
  asks for the lease, the owner starts no new pass of it and lets it go at its next tick
  once its pass in flight ends, and no daemon takes it until ``maintain`` is done. Its
  take, like any, advances the generation: a pass of the earlier owner cannot commit over
  the rewind.
- Correctness does not rest on the leases: if two daemons ever overlap on a zone, the
  Delta commit protocol still keeps every request once, and the fence its progress.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cdnlake.coordination.assign import share
from cdnlake.coordination.fleet import Hold, Turn, never
from cdnlake.errors import CoordinationError, StopRequested, ZoneBusyError, first_line
from cdnlake.sqlfiles import postgres_sql

log = logging.getLogger("cdnlake.coordination")

SCHEMA_LOCK = 0x63646E6C616B65  # advisory lock key while the tables are made ("cdnlake")
JOB_SECONDS = 3600  # a fleet job (report, maintenance) whose daemon died may be retried after


def connect(dsn: str, *, timeout: float) -> Any:
    """A connection whose every wait is bounded by about ``timeout`` seconds."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the extra is part of dev installs
        raise CoordinationError(
            "coordination: the PostgreSQL driver is not installed (pip install 'cdnlake[postgres]')"
        ) from None
    seconds = max(1, round(timeout))
    try:
        return psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=seconds,
            application_name="cdnlake",
            keepalives=1,
            keepalives_idle=seconds,
            keepalives_interval=1,
            keepalives_count=3,
            tcp_user_timeout=seconds * 1000,
            options=f"-c statement_timeout={seconds * 1000}",
        )
    except psycopg.Error as exc:
        raise CoordinationError(
            f"coordination: cannot connect to PostgreSQL: {first_line(exc)}"
        ) from None


def ensure_schema(conn: Any) -> None:
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        conn.execute(postgres_sql("schema"))


@dataclass
class Lease:
    valid_until: float  # time.monotonic(): the lease may be another daemon's after this
    ready_at: float  # time.monotonic(): the previous owner's rate window has passed
    generation: int  # this take's, the fence token of its passes
    lost: threading.Event = field(default_factory=threading.Event)
    running: int = 0  # passes in flight on it (a zone's poll and its archive job)
    # Let go at this round (not this daemon's share, or asked for by `maintain`): no pass
    # starts on it any more, so a lease is renewed whenever a pass of it runs.
    releasing: bool = False


class PostgresFleet:
    """This daemon's view of the fleet; one background thread talks to the database."""

    done_elsewhere = "done (or being done) by a daemon of the fleet"

    def __init__(
        self,
        dsn: str,
        fleet: str,
        daemon_id: str,
        *,
        lease_seconds: float,
        rate_window_seconds: float,
    ) -> None:
        self.dsn = dsn
        self.fleet = fleet
        self.daemon_id = daemon_id
        self.ttl = float(lease_seconds)
        self.window = float(rate_window_seconds)
        self.tick_seconds = max(0.25, self.ttl / 4)
        self.leases: dict[str, Lease] = {}
        self.zone_keys: list[str] = []
        self.connected = False
        self._asked: set[str] = set()  # asked for by `maintain`: no new pass starts
        self._on_acquired: Callable[[str, float], None] = lambda key, ready: None
        self._daemon_stopping: Callable[[], bool] = never
        self._room: Callable[[], int] | None = None
        self._short = False  # the last round left zones of the share for lack of room
        self._wake = threading.Event()  # a round now: room for them (more_room)
        self.rounds = 0  # rounds had with the database (tests wait for them)
        self._conn: Any = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------
    def start(
        self,
        zone_keys: list[str],
        on_acquired: Callable[[str, float], None],
        *,
        stopping: Callable[[], bool] = never,
        room: Callable[[], int] | None = None,
    ) -> None:
        """Join the fleet: the first tick runs here, so a bad DSN fails the start. Once
        ``stopping()`` is true (the daemon stops: no pass starts any more) its rounds take
        no lease and let go of every one without a pass in flight. A round takes at most
        ``room()`` new leases (None: its whole share)."""
        self.zone_keys = sorted(zone_keys)
        self._on_acquired = on_acquired
        self._daemon_stopping = stopping
        self._room = room
        self._conn = connect(self.dsn, timeout=self.tick_seconds)
        ensure_schema(self._conn)
        self.tick()
        for target, name in ((self._tick_loop, "fleet-tick"), (self._watch_loop, "fleet-watch")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Leave: release every lease (passes have ended) and the heartbeat row."""
        self._stopping.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=self.tick_seconds + 5)
        try:
            conn = self._conn or connect(self.dsn, timeout=self.tick_seconds)
            params = self._params(keys=list(self.leases))
            with conn.transaction():
                conn.execute(postgres_sql("release_leases"), params)
                conn.execute(postgres_sql("leave"), params)
            conn.close()
        except Exception as exc:  # the leases lapse on their own within ttl
            log.warning("could not leave the fleet cleanly: %s", first_line(exc))
        self._conn = None
        with self._lock:
            for lease in self.leases.values():
                lease.lost.set()
            self.leases.clear()

    # -- what the daemon asks ----------------------------------------------------------
    def more_room(self) -> None:
        """A round at once if the last one left zones of the share for lack of room."""
        if self._short:
            self._wake.set()

    @contextlib.contextmanager
    def claim(self, key: str) -> Iterator[Hold | None]:
        """The hold of ``key`` if this daemon has it now, else None. While the block runs
        (a pass in flight) the lease is renewed, never released. None too for a lease that
        ``maintain`` asks for (the pass in flight ends, no next one starts: the lease goes
        to it at the next round) or that this round lets go."""
        with self._lock:
            lease = self.leases.get(key)
            if (
                lease is None
                or lease.releasing
                or key in self._asked
                or lease.lost.is_set()
                or time.monotonic() >= lease.valid_until
            ):
                lease = None
            else:
                lease.running += 1
        try:
            yield None if lease is None else Hold(lease.ready_at, lease.lost, lease.generation)
        finally:
            if lease is not None:
                with self._lock:
                    lease.running -= 1

    @contextlib.contextmanager
    def fleet_job(self, job: str) -> Iterator[Turn]:
        """``MINE`` for the one daemon of the fleet that should do ``job`` (e.g. a day's
        report), marked done when the block ends without an exception; ``DONE`` when
        another daemon did it or does it; ``UNKNOWN`` when PostgreSQL cannot be asked
        (the caller tries again later)."""
        params = self._params(job=job, ttl=JOB_SECONDS)
        try:
            conn = connect(self.dsn, timeout=self.tick_seconds)
            try:
                mine = conn.execute(postgres_sql("claim_job"), params).fetchone() is not None
            except Exception as exc:
                conn.close()
                raise CoordinationError(
                    f"coordination: PostgreSQL failed: {first_line(exc)}"
                ) from None
        except CoordinationError as exc:
            log.warning("%s: cannot tell whether it is done in the fleet: %s", job, exc)
            yield Turn.UNKNOWN
            return
        with conn:
            done = False
            try:
                yield Turn.MINE if mine else Turn.DONE
                done = True
            finally:
                if mine:
                    try:
                        conn.execute(postgres_sql("finish_job"), {**params, "done": done})
                    except Exception as exc:  # its claim lapses after JOB_SECONDS
                        log.warning(
                            "%s: %s here, but not recorded in PostgreSQL: %s",
                            job,
                            "done" if done else "not done",
                            first_line(exc),
                        )

    # -- the tick ----------------------------------------------------------------------
    def _params(self, **extra: Any) -> dict[str, Any]:
        host, _, pid = self.daemon_id.rpartition(":")
        return {
            "fleet": self.fleet,
            "daemon": self.daemon_id,
            "host": host or socket.gethostname(),
            "pid": int(pid) if pid.isdigit() else os.getpid(),
            "ttl": self.ttl,
            "window": self.window,
            "zones": self.zone_keys,
            **extra,
        }

    def tick(self) -> None:
        """One round with the database; CoordinationError if it could not be had."""
        sent = time.monotonic()
        try:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.dsn, timeout=self.tick_seconds)
            self._round(sent)
            if not self.connected:
                log.info("fleet: connected to PostgreSQL as %s", self.daemon_id)
            self.connected = True
        except CoordinationError:
            self._disconnected()
            raise
        except Exception as exc:
            self._disconnected()
            raise CoordinationError(f"coordination: PostgreSQL failed: {first_line(exc)}") from None

    def _disconnected(self) -> None:
        if self.connected:
            log.warning("fleet: lost PostgreSQL; leases lapse unless renewed in time")
        self.connected = False
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def _round(self, sent: float) -> None:
        conn = self._conn
        params = self._params()
        with conn.transaction():
            conn.execute(postgres_sql("heartbeat"), params)
            live = {
                daemon: set(zones)
                for daemon, zones in conn.execute(postgres_sql("live_daemons"), params)
            }
            # Asked for by `maintain`: let go once the pass in flight ends, not taken.
            asked = {row[0] for row in conn.execute(postgres_sql("wanted_leases"), params)}
        live.setdefault(self.daemon_id, set(self.zone_keys))
        share_here = {zone for zone, daemon in share(live).items() if daemon == self.daemon_id}
        # A daemon that stops starts no pass: it takes nothing, renews only the leases
        # whose pass is in flight and lets go of the others (stop() releases the rest).
        wanted = set() if self._daemon_stopping() else share_here - asked
        with self._lock:
            self._asked = asked
            held = set(self.leases)
            keep = {k for k in held if k in wanted or self.leases[k].running}
            for key in held - keep:  # from now on no pass starts on it: it is not renewed
                self.leases[key].releasing = True
        renewed = {
            row[0]
            for row in conn.execute(postgres_sql("renew_leases"), self._params(keys=sorted(keep)))
        }
        new = sorted(wanted - held)
        if self._room is not None:  # only what this daemon can start polling now
            room = max(0, self._room())
            self._short, new = len(new) > room, new[:room]
        taken: list[tuple[str, str, float, int]] = []
        if new:
            with conn.transaction():
                conn.execute(postgres_sql("ensure_leases"), self._params(keys=new))
                taken = list(conn.execute(postgres_sql("take_leases"), self._params(keys=new)))
        with self._lock:
            release = sorted(held - keep)  # none of them runs a pass (claim refuses them)
            for key in held:
                lease = self.leases.get(key)
                if lease is None:  # lapsed meanwhile (the watch thread)
                    continue
                if key in renewed:
                    lease.valid_until = sent + self.ttl - self.tick_seconds
                elif key in keep:  # taken over by another daemon: stop at once
                    lease.lost.set()
                    del self.leases[key]
                    log.warning("fleet: lease of %s was taken by another daemon", key)
            for key in release:
                gone = self.leases.pop(key, None)
                if gone is not None:
                    gone.lost.set()
            acquired = []
            for key, previous, quiet, generation in taken:
                # Our own earlier lease (lapsed while the database was away) left no
                # budget spent elsewhere: this process's own budget still counts it.
                wait = 0.0 if previous == self.daemon_id else float(quiet)
                ready_at = time.monotonic() + max(0.0, wait)
                valid_until = sent + self.ttl - self.tick_seconds
                self.leases[key] = Lease(valid_until, ready_at, int(generation))
                acquired.append((key, previous, float(wait)))
        if release:
            conn.execute(postgres_sql("release_leases"), self._params(keys=release))
            log.info("fleet: released %s", ", ".join(release))
        for key, previous, wait in acquired:
            came = f" from {previous}" if previous and previous != self.daemon_id else ""
            log.info("fleet: took %s%s (first request in %.1fs)", key, came, wait)
            self._on_acquired(key, wait)
        self.rounds += 1

    def _tick_loop(self) -> None:
        while True:
            self._wake.wait(self.tick_seconds)  # a tick, or sooner: room for more zones
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self.tick()
            except CoordinationError as exc:
                log.warning("fleet: %s", exc)

    def _watch_loop(self) -> None:
        """Lapse leases on time even while a database call hangs in the tick thread."""
        while not self._stopping.wait(0.1):
            now = time.monotonic()
            with self._lock:
                for key, lease in list(self.leases.items()):
                    if now >= lease.valid_until and not lease.lost.is_set():
                        lease.lost.set()
                        del self.leases[key]
                        log.warning("fleet: lease of %s lapsed (PostgreSQL not reached)", key)


class MaintainHold:
    """The zone leases ``maintain`` holds while it rewinds zones, as ``<daemon id>/maintain``
    (a holder apart from any daemon, the one ``maintain`` runs in included).

    Called with a table and a zone, it is a context holding that zone's lease: it asks for
    the lease, waits up to ``wait`` seconds for it (the owner's pass in flight ends, no
    next pass of it starts, its next tick lets the lease go; a lapsed owner's lease is free
    at once), keeps it renewed while the block runs and lets it go at the end. The block
    gets the lease's generation, the fence token to rewind under. Not had in time (or
    PostgreSQL not reached): :class:`~cdnlake.errors.ZoneBusyError`, naming the zone and
    the owner; ``stop`` turning true while it waits: :class:`~cdnlake.errors.StopRequested`.

    The request stands for one lease time (``ttl``) and is asked again at every step of
    the wait: however ``maintain`` ends while it waits (an error, Ctrl-C, the daemon
    stopping: the request is dropped; SIGKILL: it lapses), the zone's owner may take the
    zone back within ``ttl``.
    """

    def __init__(
        self,
        dsn: str,
        fleet: str,
        daemon_id: str,
        *,
        lease_seconds: float,
        wait: float,
        stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.dsn = dsn
        self.fleet = fleet
        self.holder = f"{daemon_id}/maintain"
        self.ttl = float(lease_seconds)
        self.wait = float(wait)
        self.stop = stop
        self.step = min(1.0, max(0.1, self.ttl / 4))

    @contextlib.contextmanager
    def __call__(self, table: str, zone_id: int) -> Iterator[int | None]:
        key = f"{table}/{zone_id}"
        params = {"fleet": self.fleet, "daemon": self.holder, "key": key, "ttl": self.ttl}
        try:
            conn = connect(self.dsn, timeout=max(self.step, 5.0))
        except CoordinationError as exc:
            raise ZoneBusyError(f"{key}: its lease could not be asked for: {exc}") from None
        with conn:
            try:
                generation = self._take(conn, key, params)
                log.info("maintain: holding %s (generation %d)", key, generation)
                done = threading.Event()
                keeper = threading.Thread(
                    target=self._keep, args=(key, params, done), name="maintain-lease", daemon=True
                )
                keeper.start()
                try:
                    yield generation
                finally:
                    done.set()
                    keeper.join()
            finally:  # whatever ended it (KeyboardInterrupt too); else it lapses within ttl
                with contextlib.suppress(Exception):
                    conn.execute(postgres_sql("drop_wanted_lease"), params)

    def _take(self, conn: Any, key: str, params: dict[str, Any]) -> int:
        deadline = time.monotonic() + self.wait
        try:
            conn.execute(postgres_sql("ensure_leases"), {**params, "keys": [key]})
            while True:
                if self.stop():
                    raise StopRequested()
                # Asked again at every step, for one lease time: a maintain that dies here
                # keeps no zone from its owner longer than that.
                if conn.execute(postgres_sql("want_lease"), params).fetchone() is not None:
                    row = conn.execute(postgres_sql("take_wanted_lease"), params).fetchone()
                    if row is not None:
                        return int(row[0])
                if time.monotonic() >= deadline:
                    break
                time.sleep(self.step)
            owners = dict(conn.execute(postgres_sql("owners"), params).fetchall())
        except StopRequested:
            raise
        except Exception as exc:
            raise ZoneBusyError(f"{key}: its lease could not be had: {first_line(exc)}") from None
        raise ZoneBusyError(
            f"{key}: its lease is still held by {owners.get(key) or 'another holder'} "
            f"after {self.wait:.0f}s"
        )

    def _keep(self, key: str, params: dict[str, Any], done: threading.Event) -> None:
        """Renew the lease every quarter of its time until ``done``; a renewal that fails
        is only logged: the zone's fence still refuses whoever takes it meanwhile."""
        try:
            conn = connect(self.dsn, timeout=max(self.step, 5.0))
        except CoordinationError as exc:
            log.warning("maintain: %s: cannot renew its lease: %s", key, exc)
            return
        with conn:
            while not done.wait(self.ttl / 4):
                try:
                    kept = conn.execute(postgres_sql("keep_wanted_lease"), params).fetchone()
                except Exception as exc:
                    log.warning("maintain: %s: lease not renewed: %s", key, first_line(exc))
                    continue
                if kept is None:
                    log.warning("maintain: %s: its lease lapsed while maintain held it", key)
                    return


@dataclass
class FleetView:
    """What ``status`` shows of the fleet: each zone's owner and the daemons."""

    owners: dict[str, str]
    daemons: list[tuple[str, datetime, datetime, bool]]  # id, started, heartbeat, live


def fleet_view(dsn: str, fleet: str, *, timeout: float = 5.0) -> FleetView:
    conn = connect(dsn, timeout=timeout)
    try:
        with conn:
            params = {"fleet": fleet}
            try:
                owners = dict(conn.execute(postgres_sql("owners"), params).fetchall())
                daemons = [tuple(r) for r in conn.execute(postgres_sql("daemons"), params)]
            except Exception as exc:
                if "does not exist" in str(exc):  # no daemon has joined yet
                    return FleetView({}, [])
                raise
    except Exception as exc:
        raise CoordinationError(f"coordination: PostgreSQL failed: {first_line(exc)}") from None
    return FleetView(owners, daemons)  # type: ignore[arg-type]
