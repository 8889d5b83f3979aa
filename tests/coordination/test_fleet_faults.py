"""A fleet's daemons under faults (#43 item 8): a daemon that stops takes no zone; a daemon
takes only the zones it can start polling now; a daily job that cannot reach PostgreSQL is
said unknown and tried again; an audit not kept is not said failed.

Daemons in-process on a real PostgreSQL, their passes replaced by a stand-in (a pass holds
one of the runner's reading slots for ``PASS_SECONDS``): what is tested is who takes which
lease when, not the ingestion.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

import pytest

from cdnlake.config import Config, ZoneConfig, build_config
from cdnlake.coordination import lease_key
from cdnlake.coordination.postgres import PostgresFleet, fleet_view
from cdnlake.ingest.result import ZoneResult
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.scheduler import Daemon, wait_for
from tests.conftest import KEY, make_client

ZONES = list(range(501, 507))
KEYS = [lease_key(REQUESTS.name, z) for z in ZONES]


def config_of(root: Path, *, poll: int, concurrency: int = 2, zones: list[int] = ZONES) -> Config:
    raw = {
        "api": {"base_url": "http://127.0.0.1:1", "logging_url": "http://127.0.0.1:1"},
        "storage": {"root": str(root / "data")},
        "ingest": {"concurrency": concurrency},
        "schedule": {"poll_seconds": poll},
        "zones": [{"id": z, "name": f"z{z}", "source": "v2"} for z in zones],
    }
    return build_config(raw, base_dir=root, env={"CDNLAKE_ACCESS_KEY": KEY})


@pytest.fixture
def lake() -> str:
    return f"/lakes/{uuid.uuid4().hex}"  # each test its own fleet in the shared database


class StandIn:
    """A daemon's passes: each holds a reading slot of its runner for ``seconds``; a zone
    in ``blocked`` holds it until ``go`` is set. Records when each zone's first pass began
    reading."""

    def __init__(self, daemon: Daemon, seconds: float) -> None:
        self.daemon = daemon
        self.seconds = seconds
        self.first_read: dict[int, float] = {}
        self.blocked: set[int] = set()
        self.go = threading.Event()
        self.running: set[int] = set()
        daemon.ingestor.run_zone = self.run_zone  # type: ignore[method-assign]

    def run_zone(self, zone: ZoneConfig, *, stop: object, holder: int | None) -> ZoneResult:
        with self.daemon.ingestor.runner.reading:
            self.first_read.setdefault(zone.id, time.monotonic())
            self.running.add(zone.id)
            try:
                if zone.id in self.blocked:
                    self.go.wait(60)
                else:
                    threading.Event().wait(self.seconds)  # the pass's work
            finally:
                self.running.discard(zone.id)
        return ZoneResult(zone.id, "v2")


@pytest.fixture
def daemons(tmp_path, postgres, lake) -> Iterator[Callable[..., tuple[Daemon, StandIn]]]:
    made: list[StandIn] = []

    def make(name: str, *, poll: int, seconds: float = 0.05, concurrency: int = 2):
        config = config_of(tmp_path / name, poll=poll, concurrency=concurrency)
        fleet = PostgresFleet(postgres.dsn, lake, name, lease_seconds=poll, rate_window_seconds=0)
        daemon = Daemon(config, make_client(config), fleet=fleet, catch_up=False)
        made.append(StandIn(daemon, seconds))
        return daemon, made[-1]

    yield make
    for passes in made:
        passes.go.set()
        passes.daemon.stop(grace_seconds=5)


def leases_of(daemon: Daemon) -> set[str]:
    fleet = daemon.fleet
    assert isinstance(fleet, PostgresFleet)
    return set(fleet.leases)


def rounds_after(daemon: Daemon, n: int) -> Callable[[], bool]:
    """True once the daemon's fleet has had ``n`` more rounds with the database."""
    fleet = daemon.fleet
    assert isinstance(fleet, PostgresFleet)
    start = fleet.rounds
    return lambda: fleet.rounds >= start + n


def test_a_stopping_daemon_takes_no_lease_and_keeps_only_its_pass_in_flight(
    daemons, postgres, lake
):
    """SIGTERM sets the daemon's stop event; until its fleet leaves, its rounds take no
    zone (here the six that the other daemon frees) and keep only the lease whose pass is
    in flight, which goes once the pass ends."""
    a, passes = daemons("host:1", poll=2)
    other = PostgresFleet(postgres.dsn, lake, "host:2", lease_seconds=2, rate_window_seconds=0)
    a.start()
    try:
        other.start(KEYS, lambda key, wait: None)
        assert wait_for(lambda: len(leases_of(a)) == 3 and len(other.leases) == 3, 30)
        busy = sorted(leases_of(a))[0]
        zone = int(busy.split("/")[1])
        passes.blocked.add(zone)
        assert wait_for(lambda: zone in passes.running, 30)

        a.stop_event.set()  # what SIGTERM does first
    finally:
        other.stop()  # its three zones are free: a stopping daemon must not take them
    assert wait_for(rounds_after(a, 3), 30)
    assert leases_of(a) == {busy}, leases_of(a)
    assert fleet_view(postgres.dsn, lake).owners == {busy: "host:1"}
    passes.go.set()  # the pass ends: its lease goes too
    assert wait_for(lambda: not leases_of(a), 30), leases_of(a)
    assert fleet_view(postgres.dsn, lake).owners == {}


def test_a_starting_daemon_takes_only_the_zones_it_can_poll_now(daemons, postgres, lake):
    """Six free zones, two reading slots, passes of a second: a daemon that starts takes
    two at a time, the next two as a first pass ends; every zone's first request follows
    its take at once (before, it took the six at once and the last two waited 2 s for a
    slot, while their leases kept them from any other daemon)."""
    a, passes = daemons("host:1", poll=6, seconds=1.0, concurrency=2)
    taken: dict[int, float] = {}
    acquired = a._acquired

    def took(key: str, wait: float) -> None:
        taken.setdefault(int(key.split("/")[1]), time.monotonic())
        acquired(key, wait)

    a._acquired = took  # type: ignore[method-assign]
    a.start()
    assert wait_for(lambda: len(passes.first_read) == len(ZONES), 30), (taken, passes.first_read)
    late = {z: round(passes.first_read[z] - taken[z], 2) for z in ZONES}
    assert max(late.values()) < 0.9, late


UNREACHABLE = "host=127.0.0.1 port=1 user=x connect_timeout=1"


def test_a_daily_job_that_cannot_reach_postgres_is_said_unknown_and_tried_again(
    tmp_path, postgres, lake, caplog
):
    """PostgreSQL away when the day's report is due: the daemon cannot know whether another
    daemon made it. It says so (not "made by a daemon of the fleet") and makes it at its
    next compaction round, once PostgreSQL answers."""
    config = config_of(tmp_path, poll=2, zones=[501])
    written: list[date] = []
    fleet = PostgresFleet(UNREACHABLE, lake, "host:1", lease_seconds=2, rate_window_seconds=0)
    daemon = Daemon(
        config, make_client(config), fleet=fleet, report_writer=written.append, catch_up=False
    )
    audited: list[date] = []
    daemon.audit = audited.append  # type: ignore[method-assign]  # (its own test below)
    day = date(2026, 11, 21)
    with caplog.at_level(logging.INFO, "cdnlake"):
        daemon.write_report(day)
        daemon.maintain(day)
    assert written == [] and daemon.maintain_runs == 0
    assert "a daemon of the fleet" not in caplog.text, caplog.text
    assert f"daily report for {day}: not known whether it is done" in caplog.text, caplog.text
    assert f"lake maintenance for {day}: not known whether it is done" in caplog.text

    fleet.dsn = postgres.dsn  # PostgreSQL is back
    daemon.compact_open_days()
    assert written == [day]
    assert daemon.maintain_runs == 1
    with caplog.at_level(logging.INFO, "cdnlake"):
        daemon.write_report(day)  # done: said so, not tried again
    assert written == [day]
    done = f"daily report for {day}: done (or being done) by a daemon of the fleet"
    assert done in caplog.text, caplog.text
    daemon.compact_open_days()
    assert written == [day]


def test_a_sole_daemon_says_a_job_is_done_on_its_root_not_in_a_fleet(tmp_path, caplog):
    config = config_of(tmp_path, poll=2, zones=[501])
    written: list[date] = []
    daemon = Daemon(config, make_client(config), report_writer=written.append, catch_up=False)
    daemon.audit = lambda day: None  # type: ignore[method-assign]
    day = date(2026, 11, 21)
    with caplog.at_level(logging.INFO, "cdnlake"):
        daemon.write_report(day)
        daemon.write_report(day)  # a restart the same day
    assert written == [day]
    assert f"daily report for {day}: already done on this storage root" in caplog.text
    assert "fleet" not in caplog.text, caplog.text


def test_an_audit_done_but_not_kept_is_not_said_failed_and_is_tried_again(
    tmp_path, caplog, monkeypatch
):
    """The audit ran; only writing audit_days failed: said as such, the job left open (no
    marker: the next start audits it again) and run again at the next compaction round."""
    from cdnlake.audit import days as audit_days
    from cdnlake.audit import run as audit_run
    from cdnlake.coordination.sole import job_marker
    from cdnlake.errors import StorageError

    config = config_of(tmp_path, poll=2, zones=[501])
    daemon = Daemon(config, make_client(config), catch_up=False)
    day = date(2026, 11, 21)
    monkeypatch.setattr(audit_days, "due", lambda lake, zones, day, now: {day: zones})
    monkeypatch.setattr(audit_run, "audit", lambda *args: ["hours"])
    monkeypatch.setattr(audit_days, "unkept", lambda hours: [])
    kept: list[object] = []

    def keep(config: Config, hours: object, now: object) -> list[object]:
        if not kept:
            kept.append(hours)
            raise StorageError("audit_days: the disk is full")
        return []

    monkeypatch.setattr(audit_run, "keep", keep)
    with caplog.at_level(logging.INFO, "cdnlake"):
        daemon.audit(day)
    assert f"completeness audit of {day} failed" not in caplog.text, caplog.text
    assert (
        f"completeness audit of {day}: audited, but not kept in audit_days "
        "(audit_days: the disk is full)"
    ) in caplog.text, caplog.text
    assert daemon.audit_runs == [] and not job_marker(config.storage.work, f"audit/{day}").exists()

    daemon.compact_open_days()  # tried again: kept this time
    assert daemon.audit_runs == [day]
    assert job_marker(config.storage.work, f"audit/{day}").exists()
