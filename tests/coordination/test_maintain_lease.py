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

import threading
import uuid
from datetime import timedelta

import pytest

from cdnlake.coordination.postgres import MaintainHold, PostgresFleet, fleet_view
from cdnlake.errors import FencedError
from cdnlake.ingest.result import ZoneResult
from cdnlake.ingest.runner import AnyStop, Runner
from cdnlake.lake.commit import ZoneWriter
from cdnlake.lake.maintain import _read_again_first, maintain
from cdnlake.lake.progress import FENCE, WATERMARK, holder_of
from cdnlake.lake.schema import REQUESTS
from cdnlake.lake.store import Lake
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
    runner = Runner(config, clock=clock)
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
        stale = ZoneWriter(lake, REQUESTS, ZONE, holder=generations[0])  # prepared before
        before_move = _read_again_first(
            lake, REQUESTS, config.storage.work / "locks", MIDNIGHT + timedelta(hours=1), hold
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
            report = maintain(lake, [ZONE], check_all=True, now=now, locks=locks, hold=hold)
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
        report = maintain(lake, [ZONE], check_all=True, now=now, locks=locks, hold=hold)
        (item,) = [t for t in report.tables if t.table == REQUESTS.name]
        (file,) = item.damaged
        assert file.moved_to and not file.left
        assert watermark(lake) == T0
        assert wait_for(lambda: KEY in owner.leases, 30)  # and let it go
    finally:
        owner.stop()
