"""Leases in a real PostgreSQL: shares, hand-over, lapse without the database, fleet jobs."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import psycopg
import pytest

from cdnlake.coordination.fleet import Turn
from cdnlake.coordination.postgres import PostgresFleet, fleet_view
from cdnlake.errors import CoordinationError
from cdnlake.scheduler import wait_for

KEYS = [f"requests/{i}" for i in range(1, 7)]


def fleet_of(postgres, lake: str, name: str, ttl: float = 2.0, window: float = 0.5):
    return PostgresFleet(postgres.dsn, lake, name, lease_seconds=ttl, rate_window_seconds=window)


def held(fleet: PostgresFleet) -> set[str]:
    return set(fleet.leases)


def db_owners(postgres, lake: str) -> dict[str, str]:
    return fleet_view(postgres.dsn, lake).owners


@pytest.fixture
def lake() -> str:
    return f"/lakes/{uuid.uuid4().hex}"  # each test its own fleet in the shared database


def test_two_daemons_split_the_zones_and_never_share_one(postgres, lake):
    a, b = fleet_of(postgres, lake, "host:1"), fleet_of(postgres, lake, "host:2")
    acquired: list[str] = []
    try:
        a.start(KEYS, lambda key, wait: acquired.append(key))
        assert held(a) == set(KEYS)  # alone, it holds every zone
        b.start(KEYS, lambda key, wait: None)
        # a gives up its extra zones after their passes; b takes them when free.
        assert wait_for(lambda: len(held(a)) == 3 and len(held(b)) == 3, 30)
        assert not held(a) & held(b)
        owners = db_owners(postgres, lake)
        assert Counter(owners.values()) == {"host:1": 3, "host:2": 3}
        assert sorted(acquired) == sorted(KEYS)
    finally:
        a.stop()
        b.stop()
    assert db_owners(postgres, lake) == {}  # a clean stop releases every lease


def test_a_pass_in_flight_keeps_its_lease_until_it_ends(postgres, lake):
    a, b = fleet_of(postgres, lake, "host:1"), fleet_of(postgres, lake, "host:2")
    try:
        a.start(KEYS, lambda key, wait: None)
        with a.claim("requests/1") as lease:
            assert lease is not None
            b.start(KEYS, lambda key, wait: None)
            assert wait_for(lambda: len(held(b)) >= 2, 30)
            assert "requests/1" in held(a)  # renewed while the pass runs
        assert wait_for(lambda: len(held(a)) == 3 and len(held(b)) == 3, 30)
    finally:
        a.stop()
        b.stop()


def test_a_dead_daemons_zones_pass_to_the_other_after_its_lease(postgres, lake):
    # a's rate window outlasts its lease by 3 s: b, on a busy machine, may take the lease
    # more than the default 0.5 s after it expired, when nothing is left to wait out
    a = fleet_of(postgres, lake, "host:1", window=3.0)
    b = fleet_of(postgres, lake, "host:2")
    waits: dict[str, float] = {}
    try:
        a.start(KEYS, lambda key, wait: None)
        b.start(KEYS, lambda key, wait: waits.setdefault(key, wait))
        assert wait_for(lambda: len(held(b)) == 3, 30)
        gone = held(a)
        # a dies: its threads stop, nothing is released (as with SIGKILL).
        a._stopping.set()
        assert wait_for(lambda: held(b) == set(KEYS), 30)
        owners = db_owners(postgres, lake)
        assert set(owners.values()) == {"host:2"}
        for key in gone:  # the new owner waits out the dead one's rate window
            assert waits[key] > 0
            with b.claim(key) as lease:
                assert lease is not None
    finally:
        b.stop()


def test_leases_lapse_while_the_database_is_away_and_return_after(postgres, lake):
    a = fleet_of(postgres, lake, "host:1", ttl=2.0)
    lost: list[threading.Event] = []
    try:
        a.start(KEYS, lambda key, wait: None)
        with a.claim("requests/1") as lease:
            assert lease is not None
            lost.append(lease[1])
        postgres.stop()
        try:
            # A pass in flight hears of it; no new pass may start.
            assert wait_for(lambda: lost[0].is_set(), 10)
            with a.claim("requests/2") as lease:
                assert lease is None
        finally:
            postgres.start()
        assert wait_for(lambda: held(a) == set(KEYS), 30)
        with a.claim("requests/1") as lease:
            assert lease is not None and lease[0] <= time.monotonic()
    finally:
        a.stop()


def test_a_fleet_job_is_done_once(postgres, lake):
    a, b = fleet_of(postgres, lake, "host:1"), fleet_of(postgres, lake, "host:2")
    try:
        a.start(KEYS, lambda key, wait: None)
        b.start(KEYS, lambda key, wait: None)
        with (
            a.fleet_job("report/2026-11-21") as mine_a,
            b.fleet_job("report/2026-11-21") as mine_b,
        ):
            assert (mine_a, mine_b) == (Turn.MINE, Turn.DONE)
        with b.fleet_job("report/2026-11-21") as again:
            assert not again  # done: not again tomorrow by another daemon
        with pytest.raises(RuntimeError), a.fleet_job("maintain/2026-11-22") as mine:
            assert mine
            raise RuntimeError("failed")
        with pytest.raises(RuntimeError), b.fleet_job("maintain/2026-11-22") as mine:
            # a failed job is not done: it is free at once for another daemon
            assert mine
            raise RuntimeError("failed")
    finally:
        a.stop()
        b.stop()


def test_an_unreachable_database_is_one_clear_error(lake):
    fleet = PostgresFleet(
        "host=127.0.0.1 port=1 user=x password=hunter2 connect_timeout=1",
        lake,
        "host:1",
        lease_seconds=2,
        rate_window_seconds=1,
    )
    with pytest.raises(CoordinationError) as err:
        fleet.start(KEYS, lambda key, wait: None)
    assert "cannot connect to PostgreSQL" in str(err.value)
    assert "hunter2" not in str(err.value)


def test_tables_are_made_once_by_racing_first_starts(postgres):
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS cdnlake_daemons, cdnlake_leases, cdnlake_fleet_jobs")
    lake = f"/lakes/{uuid.uuid4().hex}"
    fleets = [fleet_of(postgres, lake, f"host:{i}") for i in range(4)]
    errors: list[BaseException] = []

    def start(fleet: PostgresFleet) -> None:
        try:
            fleet.start(KEYS, lambda key, wait: None)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(f,)) for f in fleets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors
    finally:
        for fleet in fleets:
            fleet.stop()


def test_two_daemons_write_one_report_a_day(tmp_path, postgres):
    from apscheduler.triggers.interval import IntervalTrigger

    from cdnlake.config import load_config
    from cdnlake.scheduler import Daemon
    from tests.conftest import KEY, make_client, start_emulator, write_config

    emu = start_emulator("1234")
    daemons = []
    written: list[tuple[str, object]] = []
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2")])
        path.write_text(
            path.read_text()
            + '[coordination]\npostgres_dsn_env = "PG_DSN"\n[privacy]\nhash_key_env = "FLEET_KEY"\n'
        )
        config = load_config(path, env={"CDNLAKE_ACCESS_KEY": KEY, "PG_DSN": postgres.dsn})
        assert config.coordination.require_dsn().reveal() == postgres.dsn
        for name in ("host:1", "host:2"):
            fleet = PostgresFleet(
                postgres.dsn,
                config.storage.lake_location,
                name,
                lease_seconds=2,
                rate_window_seconds=1,
            )
            daemons.append(
                Daemon(
                    config,
                    make_client(config),
                    clock=emu.clock.now,
                    report_trigger=IntervalTrigger(seconds=1),
                    report_writer=lambda day, name=name: written.append((name, day)),
                    fleet=fleet,
                )
            )
        for daemon in daemons:
            daemon.start()
        # Both fire every second; the day's report is made once, by one of them.
        assert wait_for(lambda: sum(len(d.report_runs) for d in daemons) >= 1, 30)
        assert wait_for(lambda: sum(d.passes for d in daemons) >= 2, 30)
    finally:
        for daemon in daemons:
            daemon.stop()
        emu.stop()
    assert len(written) == 1, written


def test_every_take_of_a_lease_has_a_larger_generation(postgres, lake):
    """The generation is the fence token a holder's passes carry into the lake: each take,
    by another daemon or by the same one after a lapse, gets a larger one."""
    a, b = fleet_of(postgres, lake, "host:1"), fleet_of(postgres, lake, "host:2")
    generations: list[int] = []
    try:
        a.start(KEYS[:1], lambda key, wait: None)
        with a.claim(KEYS[0]) as hold:
            assert hold is not None and hold.generation is not None
            generations.append(hold.generation)
        a._stopping.set()  # a dies (its lease lapses); b takes the zone
        b.start(KEYS[:1], lambda key, wait: None)
        assert wait_for(lambda: held(b) == {KEYS[0]}, 30)
        with b.claim(KEYS[0]) as hold:
            assert hold is not None and hold.generation is not None
            generations.append(hold.generation)
        b.stop()  # released; a comes back and takes it anew
        a = fleet_of(postgres, lake, "host:1")
        a.start(KEYS[:1], lambda key, wait: None)
        with a.claim(KEYS[0]) as hold:
            assert hold is not None and hold.generation is not None
            generations.append(hold.generation)
    finally:
        a.stop()
        b.stop()
    assert generations == sorted(set(generations)), generations
    assert generations[0] >= int(time.time()) - 600  # never below the clock's seconds
