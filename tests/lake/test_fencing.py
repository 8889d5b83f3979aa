"""The zone's fence: a rewind, or a new holder, refuses every commit prepared before it.

A real Delta table and real passes of the :class:`Runner`, over a "provider" that serves
one request a second and never forgets. The damaged span is a day's partition (23:55 to
midnight) removed from the table, as ``maintain`` sets a damaged file aside, followed by a
rewind to its start, as ``maintain`` does before it moves the file. Each test fails on the code
before the fence: there a pass in flight committed the watermark it computed before the
rewind, and the removed span was never read again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cdnlake.config import Config, build_config
from cdnlake.errors import FencedError
from cdnlake.ingest.result import ZoneResult
from cdnlake.ingest.runner import Chunk, PassContext, Runner, split_windows
from cdnlake.lake.log.progress import FENCE, WATERMARK, from_ms, rewind, taken_by, to_ms
from cdnlake.lake.log.schema import REQUEST_SCHEMA, REQUESTS, TableSpec, polars_schema
from cdnlake.lake.log.store import Lake
from cdnlake.lake.upkeep.maintain import _read_again_first
from cdnlake.lake.zone import writer as zone_module
from cdnlake.lake.zone.lock import zone_lock
from cdnlake.lake.zone.writer import ZoneWriter
from tests.sessions import session_for, session_of

ZONE = 77
T0 = datetime(2026, 11, 19, 23, 55, tzinfo=UTC)  # the span set aside: T0 to midnight
MIDNIGHT = datetime(2026, 11, 20, tzinfo=UTC)


def provider(zone: int, start: datetime, end: datetime) -> pl.DataFrame:
    """The provider's records of [start, end): one a second, ``<zone>-<epoch second>``."""
    first = int(start.timestamp()) + (start.microsecond > 0)
    seconds = list(range(first, int(end.timestamp()) + (end.microsecond > 0)))
    seconds = [s for s in seconds if s < end.timestamp()]
    frame = pl.DataFrame(
        {
            "ts": [datetime.fromtimestamp(s, UTC) for s in seconds],
            "request_id": [f"{zone}-{s}" for s in seconds],
        },
        schema={"ts": pl.Datetime("ms", "UTC"), "request_id": pl.String},
    )
    columns = polars_schema(REQUEST_SCHEMA)
    missing = [pl.lit(None, t).alias(c) for c, t in columns.items() if c not in frame]
    return frame.with_columns(missing).select(list(REQUEST_SCHEMA))


class ProviderSource:
    """Reads the provider from the pass's start to its ``now``, a chunk a minute; calls
    ``before(i)`` before handing over chunk ``i`` (a test parks the pass there)."""

    kind = "v2"
    spec = REQUESTS
    noun = "records"

    def __init__(self, before: Callable[[int], None] = lambda i: None) -> None:
        self.before = before

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        windows = split_windows(ctx.read_start(), ctx.now, timedelta(minutes=1))
        for i, (start, end) in enumerate(windows):
            self.before(i)
            ctx.check_stop()
            yield Chunk(provider(ctx.zone_id, start, end), {WATERMARK: to_ms(end)})


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def config_at(root: Path) -> Config:
    return build_config({"storage": {"root": str(root / "data")}}, base_dir=root, env={})


def seed(lake: Lake, zone: int = ZONE) -> None:
    """T0 to 00:10 in the lake, in two commits: the first day's span is its own file."""
    writer = ZoneWriter(session_of(lake), REQUESTS, zone)
    writer.commit(provider(zone, T0, MIDNIGHT), {WATERMARK: to_ms(MIDNIGHT)})
    end = MIDNIGHT + timedelta(minutes=10)
    writer.commit(provider(zone, MIDNIGHT, end), {WATERMARK: to_ms(end)})


def set_aside_first_day(lake: Lake, zone: int = ZONE) -> None:
    """The span T0 to midnight leaves the table, as a damaged file set aside does."""
    table = lake.open(REQUESTS)
    assert table is not None
    table.delete(f"pull_zone_id = {zone} AND date = '{T0.date().isoformat()}'")


def watermark(lake: Lake, zone: int = ZONE) -> datetime | None:
    table = lake.open(REQUESTS)
    assert table is not None
    return from_ms(table.transaction_version(REQUESTS.app_id(zone)))


def stored_ids(lake: Lake, zone: int = ZONE) -> list[str]:
    table = lake.open(REQUESTS)
    assert table is not None
    frame = pl.from_arrow(table.to_pyarrow_table(columns=["pull_zone_id", "request_id"]))
    assert isinstance(frame, pl.DataFrame)
    return frame.filter(pl.col("pull_zone_id") == zone)["request_id"].to_list()


def assert_complete(lake: Lake, start: datetime, end: datetime, zone: int = ZONE) -> None:
    """Every record of [start, end) once: nothing lost, nothing doubled."""
    got = stored_ids(lake, zone)
    assert len(got) == len(set(got)), "a request was stored twice"
    missing = set(provider(zone, start, end)["request_id"]) - set(got)
    assert not missing, f"{len(missing)} requests missing, from {min(missing)}"


def test_a_rewind_racing_a_pass_is_not_undone(tmp_path):
    config = config_at(tmp_path)
    lake = Lake.from_config(config.storage)
    seed(lake)
    parked, resume = threading.Event(), threading.Event()

    def park(i: int) -> None:
        if i == 2:  # two chunks handed over: one committed, one in the commit thread
            parked.set()
            assert resume.wait(60)

    clock = Clock(MIDNIGHT + timedelta(minutes=20))
    runner = Runner(config, session_for(config), clock=clock)
    source = ProviderSource(park)
    results: list[ZoneResult] = []
    passing = threading.Thread(target=lambda: results.append(runner.run(ZONE, source)))
    passing.start()
    try:
        assert parked.wait(60)
        # maintain, meanwhile: a damaged file of the zone set aside, the zone rewound.
        set_aside_first_day(lake)
        rewind(ZoneWriter(session_of(lake), REQUESTS, ZONE), T0)
        assert watermark(lake) == T0
    finally:
        resume.set()
        passing.join(60)
    (result,) = results
    assert result.outcome == "failed"
    assert "FencedError" in (result.error or "") and "rewound" in (result.error or "")
    assert watermark(lake) == T0  # the pass committed nothing after the rewind

    # The next pass reads the set-aside span again before the watermark covers it.
    clock.now += timedelta(minutes=1)
    again = runner.run(ZONE, ProviderSource())
    assert again.outcome == "ok", again.error
    assert watermark(lake) == clock.now
    assert_complete(lake, T0, clock.now)


def test_a_rewind_between_a_commits_read_and_its_write_refuses_it(tmp_path, monkeypatch):
    """The rewind lands after the commit re-read the table and checked its token: Delta
    refuses the commit as concurrent (both carry the zone's app ids), and the retry
    sees the new token instead of resending its watermark."""
    lake = Lake.from_config(config_at(tmp_path).storage)
    seed(lake)
    writer = ZoneWriter(session_of(lake), REQUESTS, ZONE)
    write_files = zone_module.write_files

    rewound: list[bool] = []

    def rewound_meanwhile(at: Lake, spec: TableSpec, frame: pl.DataFrame) -> Any:
        if not rewound:  # once: the rewind's own commit writes through here too
            rewound.append(True)
            set_aside_first_day(lake)
            rewind(ZoneWriter(session_of(lake), REQUESTS, ZONE), T0)
        return write_files(at, spec, frame)

    monkeypatch.setattr(zone_module, "write_files", rewound_meanwhile)
    end = MIDNIGHT + timedelta(minutes=11)
    later = provider(ZONE, MIDNIGHT + timedelta(minutes=10), end)
    with pytest.raises(FencedError, match="rewound or the zone taken"):
        writer.commit(later, {WATERMARK: to_ms(end)})
    assert watermark(lake) == T0
    assert len(stored_ids(lake)) == 600  # 00:00 to 00:10: the refused commit moved nothing


def test_outside_a_rewind_the_watermark_never_moves_back(tmp_path):
    lake = Lake.from_config(config_at(tmp_path).storage)
    ahead, behind = (
        ZoneWriter(session_of(lake), REQUESTS, ZONE),
        ZoneWriter(session_of(lake), REQUESTS, ZONE),
    )
    ahead.commit(provider(ZONE, T0, MIDNIGHT), {WATERMARK: to_ms(MIDNIGHT)})
    early = T0 + timedelta(minutes=1)
    written = behind.commit(provider(ZONE, T0 - timedelta(minutes=1), early), {WATERMARK: 1})
    assert (written.new, written.duplicates) == (60, 60)
    assert watermark(lake) == MIDNIGHT


def test_a_new_holder_fences_the_old_one_even_in_a_new_pass(tmp_path):
    config = config_at(tmp_path)
    lake = Lake.from_config(config.storage)
    seed(lake)
    clock = Clock(MIDNIGHT + timedelta(minutes=12))
    runner = Runner(config, session_for(config), clock=clock)
    stale = ZoneWriter(session_of(lake), REQUESTS, ZONE, holder=1_000)  # the old lease's pass
    assert stale.token == taken_by(1_000)
    assert runner.run(ZONE, ProviderSource(), holder=1_001).outcome == "ok"  # new owner
    table = lake.open(REQUESTS)
    assert table is not None and table.transaction_version(REQUESTS.app_id(ZONE, FENCE)) == (
        taken_by(1_001)
    )
    late = MIDNIGHT + timedelta(minutes=30)
    with pytest.raises(FencedError):  # the pass in flight of the old holder
        stale.commit(provider(ZONE, late, late + timedelta(minutes=1)), {WATERMARK: to_ms(late)})
    clock.now = late
    old = runner.run(ZONE, ProviderSource(), holder=1_000)  # and any pass it starts
    assert old.outcome == "failed" and "FencedError" in (old.error or "")
    assert watermark(lake) == MIDNIGHT + timedelta(minutes=12)
    # The holder's next pass goes on; a rewind does not fence the holder's next pass.
    rewind(ZoneWriter(session_of(lake), REQUESTS, ZONE), MIDNIGHT)
    assert runner.run(ZONE, ProviderSource(), holder=1_001).outcome == "ok"
    assert watermark(lake) == late
    assert_complete(lake, T0, late)


def test_a_rewind_before_a_new_holders_take_over_is_read_again(tmp_path, monkeypatch):
    """A rewind lands between a new holder's first look at the zone and its take-over
    commit (a stale process that met a damaged file, or maintain whose lease lapsed): the
    take-over passes the fence (a newer holder's token is larger), and its pass starts
    from the rewound progress, so the span set aside is read again, not skipped."""
    config = config_at(tmp_path)
    lake = Lake.from_config(config.storage)
    seed(lake)  # the watermark at 00:10
    session = session_for(config)
    table = session.log_table(REQUESTS)
    snapshot = table.snapshot
    first_look: list[Any] = []

    def rewound_after_the_first_look(zone_id: int, **asked: Any) -> Any:
        found = snapshot(zone_id, **asked)
        if not first_look:
            first_look.append(found)
            set_aside_first_day(lake)  # another process, meanwhile
            rewind(ZoneWriter(session_of(lake), REQUESTS, ZONE), T0)
        return found

    monkeypatch.setattr(table, "snapshot", rewound_after_the_first_look)
    clock = Clock(MIDNIGHT + timedelta(minutes=12))
    result = Runner(config, session, clock=clock).run(ZONE, ProviderSource(), holder=5)
    assert result.outcome == "ok", result.error
    assert from_ms(first_look[0].mark(WATERMARK)) == MIDNIGHT + timedelta(minutes=10)
    assert result.rows == 5 * 60 + 2 * 60  # 23:55 to 00:00 again, and 00:10 to 00:12
    assert watermark(lake) == clock.now
    assert_complete(lake, T0, clock.now)


def test_maintain_waits_for_the_local_pass_before_it_rewinds(tmp_path):
    """On one machine maintain's rewind holds the zone's lock: it waits for the pass in
    flight, which then ends as it would have, instead of being refused."""
    config = config_at(tmp_path)
    lake = Lake.from_config(config.storage)
    seed(lake)
    locks = config.storage.work / "locks"
    before_move = _read_again_first(
        session_of(lake), REQUESTS, locks, MIDNIGHT + timedelta(hours=1)
    )
    done = threading.Event()
    with zone_lock(locks, REQUESTS.name, ZONE):  # a pass in flight
        maintaining = threading.Thread(
            target=lambda: (before_move(ZONE, T0, MIDNIGHT, "a damaged file"), done.set())
        )
        maintaining.start()
        assert not done.wait(0.5)  # it waits for the pass...
        assert watermark(lake) == MIDNIGHT + timedelta(minutes=10)
    assert done.wait(60)  # ...and rewinds once it ends
    maintaining.join()
    assert watermark(lake) == T0
