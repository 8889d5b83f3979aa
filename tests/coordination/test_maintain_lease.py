"""In a fleet, ``maintain`` holds a zone's PostgreSQL lease while it rewinds the zone.

A real PostgreSQL and a real Delta table: a daemon's fleet (:class:`PostgresFleet`) holds
the zone and runs a pass under its lease; ``maintain`` meets a damaged file of that zone.
It asks for the lease and waits: the owner's pass in flight ends as it would have (not
refused), the owner lets the lease go, ``maintain`` takes it (a new generation), rewinds,
and lets it go; the owner takes it back and reads the span again. A commit prepared under
the owner's earlier lease is refused (the fence, the second line). On the code before,
``maintain`` in a fleet rewound at once, under no lease, failing the pass in flight.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from cdnlake.coordination.postgres import MaintainHold, PostgresFleet, fleet_view
from cdnlake.errors import FencedError, StopRequested
from cdnlake.ingest.result import ZoneResult
from cdnlake.ingest.runner import AnyStop, Runner
from cdnlake.lake.log.progress import FENCE, WATERMARK, holder_of
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.upkeep.maintain import _read_again_first, maintain
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.scheduler import wait_for
from tests.lake.test_fencing import (
    MIDNIGHT,
    T0,
    ZONE,
    Clock,
    ProviderSource,
    assert_complete,
    config_at,
    provider,
    seed,
    set_aside_first_day,
    watermark,
)
from tests.sessions import session_for, session_of

KEY = f"{REQUESTS.name}/{ZONE}"
TTL = 2.0


@pytest.fixture
def fleet_name() -> str:
    return f"/lakes/{uuid.uuid4().hex}"  # each test its own fleet in the shared database


def fence(lake: Lake) -> int:
    table = lake.open(REQUESTS)
    assert table is not None
    return table.transaction_version(REQUESTS.app_id(ZONE, FENCE)) or 0


@pytest.mark.timeout(180)
def test_maintain_takes_the_lease_after_the_owners_pass_and_the_rewind_sticks(
    tmp_path, postgres, fleet_name
):
    config = config_at(tmp_path)
    lake = Lake.from_config(config.storage)
    seed(lake)
    owner = PostgresFleet(postgres.dsn, fleet_name, "host:1", lease_seconds=TTL,
                          rate_window_seconds=0.2)  # fmt: skip
    hold = MaintainHold(postgres.dsn, fleet_name, "host:9", lease_seconds=TTL, wait=60)
    parked, resume, rewound = threading.Event(), threading.Event(), threading.Event()

    def park(i: int) -> None:
        if i == 2:  # two chunks handed over: one committed, one in the commit thread
            parked.set()
            assert resume.wait(60)

    clock = Clock(MIDNIGHT + timedelta(minutes=20))
    runner = Runner(config, session_for(config), clock=clock)
    results: list[ZoneResult] = []
    generations: list[int] = []

    def owners_pass(source: ProviderSource) -> None:
        with owner.claim(KEY) as held:
            assert held is not None
            generations.append(held.generation or 0)
            results.append(runner.run(ZONE, source, AnyStop(held.lost), holder=held.generation))

    owner.start([KEY], lambda key, wait: None)
    try:
        assert KEY in owner.leases
        passing = threading.Thread(target=owners_pass, args=(ProviderSource(park),))
        passing.start()
        assert parked.wait(60)
        stale = ZoneWriter(
            session_of(lake), REQUESTS, ZONE, holder=generations[0]
        )  # prepared before
        before_move = _read_again_first(
            session_of(lake),
            REQUESTS,
            config.storage.work / "locks",
            MIDNIGHT + timedelta(hours=1),
            hold,
        )
        maintaining = threading.Thread(
            target=lambda: (before_move(ZONE, T0, MIDNIGHT, "a damaged file"), rewound.set())
        )
        maintaining.start()
        # maintain waits while the owner's pass runs: the owner keeps renewing its lease.
        assert not rewound.wait(4 * TTL)
        assert KEY in owner.leases
        assert fleet_view(postgres.dsn, fleet_name).owners.get(KEY) == "host:1"
        assert watermark(lake) >= MIDNIGHT + timedelta(minutes=10)  # not rewound yet
        resume.set()
        passing.join(60)
        (result,) = results
        assert result.outcome == "ok", result.error  # ended as it would have: not refused
        assert watermark(lake) == clock.now
        # The owner lets the lease go at its next tick; maintain takes it and rewinds.
        assert rewound.wait(60)
        maintaining.join(10)
        set_aside_first_day(lake)  # as maintain moves the damaged file after the rewind
        assert watermark(lake) == T0
        assert holder_of(fence(lake)) > generations[0]  # maintain's own lease took the fence
        with pytest.raises(FencedError):  # a commit of the owner's earlier lease
            late = clock.now
            stale.commit(provider(ZONE, late, late + timedelta(minutes=1)), {WATERMARK: 1})
        assert watermark(lake) == T0

        # maintain let the lease go: its owner takes it back (a newer generation) and its
        # next pass reads the set-aside span again before the watermark covers it.
        assert wait_for(lambda: KEY in owner.leases, 30)
        clock.now += timedelta(minutes=1)
        owners_pass(ProviderSource())
        assert results[-1].outcome == "ok", results[-1].error
        assert generations[-1] > holder_of(fence(lake)) - 1 > generations[0]
        assert watermark(lake) == clock.now
        assert_complete(lake, T0, clock.now)
    finally:
        resume.set()
        owner.stop()


@pytest.mark.timeout(180)
def test_a_zone_whose_lease_is_not_had_in_time_keeps_its_damaged_file_in_place(
    tmp_path, postgres, fleet_name
):
    config = config_at(tmp_path)
    lake = Lake.from_config(config.storage)
    seed(lake)
    table = lake.open(REQUESTS)
    assert table is not None
    damaged = sorted(uri for uri in table.file_uris() if "date=2026-11-19" in uri)[0]
    with open(damaged, "wb") as spoiled:
        spoiled.write(b"not parquet at all")
    owner = PostgresFleet(postgres.dsn, fleet_name, "host:1", lease_seconds=TTL,
                          rate_window_seconds=0.2)  # fmt: skip
    hold = MaintainHold(postgres.dsn, fleet_name, "host:9", lease_seconds=TTL, wait=1.5)
    locks = config.storage.work / "locks"
    now = MIDNIGHT + timedelta(hours=1)
    before = watermark(lake)
    owner.start([KEY], lambda key, wait: None)
    try:
        with owner.claim(KEY) as held:  # a pass that outlasts maintain's wait
            assert held is not None
            report = maintain(
                session_of(lake), [ZONE], check_all=True, now=now, locks=locks, hold=hold
            )
            (item,) = [t for t in report.tables if t.table == REQUESTS.name]
            (file,) = item.damaged
            assert file.left and not file.moved_to
            assert "NOT set aside" in item.line() and "held by host:1" in item.line()
            assert watermark(lake) == before  # not rewound...
            with open(damaged, "rb") as still:  # ...so not moved
                assert still.read() == b"not parquet at all"
            assert not held.lost.is_set()  # the owner kept its lease
        # The owner's pass ended: the next maintain takes the lease, rewinds, sets aside.
        hold.wait = 30
        report = maintain(session_of(lake), [ZONE], check_all=True, now=now, locks=locks, hold=hold)
        (item,) = [t for t in report.tables if t.table == REQUESTS.name]
        (file,) = item.damaged
        assert file.moved_to and not file.left
        assert watermark(lake) == T0
        assert wait_for(lambda: KEY in owner.leases, 30)  # and let it go
    finally:
        owner.stop()


# -- the request of a maintain that waits, and its owner's passes ---------------------------


def starts(owner: PostgresFleet) -> bool:
    with owner.claim(KEY) as held:
        return held is not None


def wanted_by(postgres, fleet: str) -> str:
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT wanted_by FROM cdnlake_leases WHERE fleet = %s AND zone_key = %s AND "
            "wanted_until > now()",
            (fleet, KEY),
        ).fetchone()
    return "" if row is None else str(row[0])


@pytest.mark.timeout(180)
def test_a_maintain_killed_while_it_waits_keeps_the_zone_from_its_owner_one_lease_time(
    postgres, fleet_name
):
    """SIGKILLed while it waits for the lease: its request lapses within a lease time, and
    the owner takes the zone back then (before, the request stood for wait + ttl: here
    62 s, 4 to 20 minutes in a daemon)."""
    owner = PostgresFleet(postgres.dsn, fleet_name, "host:1", lease_seconds=TTL,
                          rate_window_seconds=0.0)  # fmt: skip
    owner.start([KEY], lambda key, wait: None)
    code = (
        "from cdnlake.coordination.postgres import MaintainHold\n"
        f"h = MaintainHold({postgres.dsn!r}, {fleet_name!r}, 'host:9', lease_seconds={TTL},"
        " wait=60)\n"
        "with h('requests', %d): pass\n" % ZONE
    )
    try:
        assert KEY in owner.leases
        with owner.claim(KEY) as held:  # a pass in flight while maintain asks
            assert held is not None
            proc = subprocess.Popen([sys.executable, "-c", code])
            try:
                assert wait_for(lambda: wanted_by(postgres, fleet_name) == "host:9/maintain", 60)
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        # The owner's pass ended: it lets the lease go (asked for) and takes it back once
        # the dead request lapses, within a lease time.
        killed = time.monotonic()
        assert wait_for(lambda: KEY in owner.leases and wanted_by(postgres, fleet_name) == "",
                        25, step=0.1)  # fmt: skip
        assert time.monotonic() - killed < 25
    finally:
        owner.stop()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("end", ["stop", "interrupt"])
def test_a_maintain_that_stops_waiting_drops_its_request_at_once(postgres, fleet_name, end):
    """The daemon stopping (its stop event) ends the wait at once with StopRequested, and
    Ctrl-C (KeyboardInterrupt) too: either way the request is dropped, the owner has its
    zone at its next round (before: no stop at all, and a KeyboardInterrupt left the
    request standing)."""
    owner = PostgresFleet(postgres.dsn, fleet_name, "host:1", lease_seconds=TTL,
                          rate_window_seconds=0.0)  # fmt: skip
    stopping = threading.Event()

    def stop() -> bool:
        if stopping.is_set() and end == "interrupt":
            raise KeyboardInterrupt
        return stopping.is_set()

    hold = MaintainHold(postgres.dsn, fleet_name, "host:9", lease_seconds=TTL, wait=60,
                        stop=stop)  # fmt: skip
    ended: list[BaseException] = []

    def maintaining() -> None:
        try:
            with hold(REQUESTS.name, ZONE):
                pass
        except BaseException as exc:  # the test looks at what ended it
            ended.append(exc)

    owner.start([KEY], lambda key, wait: None)
    try:
        with owner.claim(KEY) as held:
            assert held is not None
            waiting = threading.Thread(target=maintaining)
            waiting.start()
            assert wait_for(lambda: wanted_by(postgres, fleet_name) == "host:9/maintain", 30)
            stopping.set()
            waiting.join(10)
            assert not waiting.is_alive()
            assert not held.lost.is_set()  # the pass in flight kept its lease
        expected = StopRequested if end == "stop" else KeyboardInterrupt
        assert [type(e) for e in ended] == [expected]
        assert wanted_by(postgres, fleet_name) == ""  # dropped, not left to lapse
        # A round that read the request before it was dropped still lets the zone go once
        # the pass ends; the first round begun after the drop has it: wait for that round.
        since = owner.rounds
        assert wait_for(lambda: owner.rounds >= since + 2, 10)
        assert KEY in owner.leases and starts(owner)  # a lease time before it would lapse
    finally:
        owner.stop()


@pytest.mark.timeout(180)
def test_maintain_gets_the_lease_from_passes_run_back_to_back(postgres, fleet_name):
    """The owner runs its passes one after the other, no gap: maintain asks, the pass in
    flight ends, no next one starts, and maintain holds the zone with no pass running.
    Before, the owner started its next pass at once, and maintain got the lease only if a
    fleet tick fell between two passes (ZoneBusyError after its whole wait otherwise)."""
    owner = PostgresFleet(postgres.dsn, fleet_name, "host:1", lease_seconds=TTL,
                          rate_window_seconds=0.0)  # fmt: skip
    hold = MaintainHold(postgres.dsn, fleet_name, "host:9", lease_seconds=TTL, wait=8)
    done = threading.Event()
    running = threading.Event()
    cut: list[int] = []

    def passes() -> None:
        while not done.is_set():
            with owner.claim(KEY) as held:
                if held is None:
                    time.sleep(0.05)
                    continue
                running.set()
                if held.lost.wait(1.0):
                    cut.append(1)  # a pass stopped half-way: its lease was lost
                running.clear()

    owner.start([KEY], lambda key, wait: None)
    looping = threading.Thread(target=passes, daemon=True)
    looping.start()
    try:
        for _round in range(2):
            assert wait_for(running.is_set, 30)
            with hold(REQUESTS.name, ZONE) as generation:
                assert generation is not None
                assert not running.is_set()  # no pass of the owner while maintain holds
                time.sleep(0.3)
                assert not running.is_set()
            assert wait_for(lambda: KEY in owner.leases, 30)  # let go: the owner takes it back
        assert not cut  # every pass ended as it would have
    finally:
        done.set()
        looping.join(10)
        owner.stop()


@pytest.mark.timeout(120)
def test_a_pass_claimed_while_the_tick_decides_keeps_its_lease(postgres, fleet_name, monkeypatch):
    """A claim made after the tick decided which leases to keep (here: maintain asked for
    the zone) is refused. Before, it was granted, and its lease, neither renewed nor
    released, lapsed in the middle of the pass."""
    from cdnlake.coordination import postgres as module

    owner = PostgresFleet(postgres.dsn, fleet_name, "host:1", lease_seconds=TTL,
                          rate_window_seconds=0.0)  # fmt: skip
    armed = threading.Event()
    claims: list[tuple[Any, Any]] = []
    real = module.postgres_sql

    def sql(name: str) -> str:
        if name == "renew_leases" and armed.is_set():
            armed.clear()  # the tick has computed what it keeps: a pass starts now
            claim = owner.claim(KEY)
            claims.append((claim, claim.__enter__()))
        return real(name)

    owner.start([KEY], lambda key, wait: None)
    try:
        with psycopg.connect(postgres.dsn, autocommit=True) as conn:  # maintain asks
            conn.execute(module.postgres_sql("want_lease"),
                         {"fleet": fleet_name, "daemon": "other/maintain", "key": KEY,
                          "ttl": 60, "wait": 60})  # fmt: skip
        monkeypatch.setattr(module, "postgres_sql", sql)
        armed.set()
        assert wait_for(lambda: bool(claims), 30)
        ((claim, held),) = claims
        try:
            # Refused; were it granted, its lease would stay valid while the pass runs.
            assert held is None or not held.lost.wait(3 * TTL)
            assert held is None
        finally:
            claim.__exit__(None, None, None)
    finally:
        owner.stop()
