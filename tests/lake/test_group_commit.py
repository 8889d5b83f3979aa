"""Group commits: zones of one process committing at once land as one Delta commit, and
each zone's exactly-once and fencing rules hold inside a group as they do alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import polars as pl
import pytest

from cdnlake.errors import FencedError, StopRequested
from cdnlake.lake.log import committer as committer_module
from cdnlake.lake.log.committer import Committer
from cdnlake.lake.log.progress import WATERMARK, from_ms, rewind, to_ms
from cdnlake.lake.log.schema import INGEST_RUNS, REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.log.table import LogTable
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.writer import Written, ZoneWriter
from cdnlake.scheduler import wait_for
from tests.lake.test_bookkeeping import LosingProxy, lakes, run_row  # noqa: F401
from tests.lake.test_commit import BASE, rows, storage  # noqa: F401
from tests.sessions import session_of

ZONES = list(range(1, 13))


def zone_rows(zone: int, first: int, n: int) -> pl.DataFrame:
    """Requests ``first`` .. of a zone, request k at ``BASE`` + k tenths of a second (a
    request read again has the same time)."""
    at = [BASE + timedelta(milliseconds=100 * k) for k in range(first, first + n)]
    return rows(first, n, BASE, tag=f"z{zone}-").with_columns(
        pl.Series("ts", at).dt.cast_time_unit("ms")
    )


def versions(lake: Lake, spec: Any = REQUESTS) -> int:
    table = lake.open(spec)
    assert table is not None
    return table.version()


def stored(lake: Lake) -> pl.DataFrame:
    table = lake.open(REQUESTS)
    assert table is not None
    frame = pl.from_arrow(table.to_pyarrow_table(columns=["pull_zone_id", "request_id"]))
    assert isinstance(frame, pl.DataFrame)
    return frame


def watermark(lake: Lake, zone: int) -> int | None:
    table = lake.open(REQUESTS)
    assert table is not None
    return table.transaction_version(REQUESTS.app_id(zone))


@contextmanager
def gathered(
    table: LogTable, waiting: int, meanwhile: Callable[[], None] = lambda: None
) -> Iterator[list[int]]:
    """The committer's first group waits until ``waiting`` shares in all are in it or
    queued behind it, then runs ``meanwhile`` (another process's commit, say) before
    committing: the rest then go as one group. Yields the sizes of the groups committed."""
    committer = table.committer
    apply = committer._apply
    sizes: list[int] = []
    first = threading.Event()

    def held(shares: list[Any]) -> list[Any]:
        if not first.is_set():
            first.set()
            assert wait_for(lambda: len(shares) + len(committer._queue) >= waiting, 60)
            meanwhile()
        sizes.append(len(shares))
        return apply(shares)

    committer._apply = held  # type: ignore[method-assign]
    try:
        yield sizes
    finally:
        committer._apply = apply  # type: ignore[method-assign]


def all_at_once(
    writers: dict[int, ZoneWriter], commit: Callable[[int, ZoneWriter], Written]
) -> dict[int, Written | BaseException]:
    """Each writer's commit on a thread of its own, at once; what each returned or raised."""
    outcome: dict[int, Written | BaseException] = {}

    def one(zone: int, writer: ZoneWriter) -> None:
        try:
            outcome[zone] = commit(zone, writer)
        except BaseException as exc:
            outcome[zone] = exc

    threads = [threading.Thread(target=one, args=item) for item in writers.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(outcome) == len(writers)
    return outcome


def test_zones_committing_at_once_land_in_a_few_commits(storage):  # noqa: F811
    lake = Lake.from_config(storage)
    writers = {zone: ZoneWriter(session_of(lake), REQUESTS, zone) for zone in ZONES}
    before = versions(lake)
    end = to_ms(BASE + timedelta(minutes=5))
    with gathered(writers[1].table, len(ZONES)) as sizes:
        done = all_at_once(writers, lambda z, w: w.commit(zone_rows(z, 0, 50), {WATERMARK: end}))
    assert all(isinstance(w, Written) and w.new == 50 for w in done.values()), done
    assert versions(lake) - before == len(sizes) <= 2, sizes  # those first, then the rest
    frame = stored(lake)
    assert frame.height == frame["request_id"].n_unique() == 50 * len(ZONES)
    assert all(watermark(lake, zone) == end for zone in ZONES)
    # One snapshot for the table in this process, shared by every zone's writer.
    assert all(w.table is session_of(lake).log_table(REQUESTS) for w in writers.values())


def test_a_fenced_zone_inside_a_group_is_refused_alone(storage):  # noqa: F811
    lake = Lake.from_config(storage)
    writers = {zone: ZoneWriter(session_of(lake), REQUESTS, zone) for zone in (1, 2, 3)}
    for zone, writer in writers.items():
        writer.commit(zone_rows(zone, 0, 10), {WATERMARK: to_ms(BASE)})
    other = Lake(lake.uri, lake.storage_options)  # another process, with its own snapshot

    def rewound() -> None:  # maintain elsewhere rewinds zone 2 while the group waits
        rewind(ZoneWriter(session_of(other), REQUESTS, 2), BASE - timedelta(minutes=1))

    end = to_ms(BASE + timedelta(minutes=5))
    with gathered(writers[1].table, 3, rewound):
        done = all_at_once(writers, lambda z, w: w.commit(zone_rows(z, 10, 20), {WATERMARK: end}))
    assert isinstance(done[2], FencedError), done[2]
    assert isinstance(done[1], Written) and isinstance(done[3], Written)
    assert (done[1].new, done[3].new) == (20, 20)
    assert watermark(lake, 1) == watermark(lake, 3) == end
    assert watermark(lake, 2) == to_ms(BASE - timedelta(minutes=1))  # the rewind holds
    frame = stored(lake)
    counts = dict(frame.group_by("pull_zone_id").len().iter_rows())
    assert counts == {1: 30, 2: 10, 3: 30}
    assert frame["request_id"].n_unique() == frame.height


def test_another_process_committing_during_a_group_commit(storage):  # noqa: F811
    """Another process commits to one zone of the group between the group's last read and
    its commit: the version the group meant to write is taken, the group reads it; that
    zone alone is prepared again (its rows deduplicated against the other's), the rest
    commit; nothing doubled or lost."""
    lake = Lake.from_config(storage)
    writers = {zone: ZoneWriter(session_of(lake), REQUESTS, zone) for zone in (1, 2, 3)}
    shared = writers[1].table
    table = shared._log
    other = Lake(lake.uri, lake.storage_options)
    late = to_ms(BASE + timedelta(minutes=9))
    commit = table.commit
    raced: list[int] = []

    def racing(actions: list[Any], transactions: list[Any], *removals: Any) -> Any:
        if not raced and any(t.app_id == REQUESTS.app_id(2) for t in transactions):
            raced.append(len(transactions))  # between the group's last read and its commit
            ZoneWriter(session_of(other), REQUESTS, 2).commit(
                zone_rows(2, 10, 15), {WATERMARK: late}
            )
        return commit(actions, transactions, *removals)

    table.commit = racing  # type: ignore[method-assign]
    end = to_ms(BASE + timedelta(minutes=5))
    with gathered(shared, 3) as sizes:
        first = all_at_once(writers, lambda z, w: w.commit(zone_rows(z, 0, 30), {WATERMARK: end}))
    assert raced and sizes, (raced, sizes)
    assert all(isinstance(w, Written) for w in first.values()), first
    assert isinstance(first[2], Written) and (first[2].new, first[2].duplicates) == (15, 15)
    assert watermark(lake, 2) == late  # never moved back by the slower commit
    assert watermark(lake, 1) == watermark(lake, 3) == end
    frame = stored(lake)
    assert frame.height == frame["request_id"].n_unique() == 90


def test_a_lost_answer_to_a_group_commit_keeps_each_row_once(lakes):  # noqa: F811
    through, direct, proxy = lakes
    # The data files straight to the store (Arrow's uploads do not pass this small
    # proxy); delta-rs's log reads and commits through it.
    object.__setattr__(through, "filesystem", direct.filesystem)
    writers = {zone: ZoneWriter(session_of(through), REQUESTS, zone) for zone in (1, 2, 3, 4)}
    for zone, writer in writers.items():
        writer.commit(zone_rows(zone, 0, 5), {})
    proxy.target = REQUESTS.name  # the next commit lands, its answer is lost
    end = to_ms(BASE + timedelta(minutes=5))
    with gathered(writers[1].table, 4) as sizes:
        done = all_at_once(writers, lambda z, w: w.commit(zone_rows(z, 5, 40), {WATERMARK: end}))
    assert proxy.lost and proxy.retried, (proxy.lost, proxy.retried)
    assert all(isinstance(w, Written) for w in done.values()), done
    assert max(sizes) > 1, sizes
    frame = stored(direct)
    assert frame.height == frame["request_id"].n_unique() == 4 * 45
    assert all(watermark(direct, zone) == end for zone in writers)


def test_runs_recorded_at_once_go_in_one_merge(tmp_path):
    lake = Lake(str(tmp_path / "lake"), {})
    books = Bookkeeping(session_of(lake))
    books.record_run(1, run_row(0))  # the table exists
    before = versions(lake, INGEST_RUNS)
    zones = list(range(1, 9))
    in_flight = threading.Barrier(len(zones))

    def one(zone: int) -> None:
        with books.passing():  # as a pass of the runner is
            in_flight.wait(60)
            books.record_run(zone, run_row(zone))

    threads = [threading.Thread(target=one, args=(zone,)) for zone in zones]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert versions(lake, INGEST_RUNS) - before == 1  # all of them in one MERGE
    table = lake.open(INGEST_RUNS)
    assert table is not None
    runs = table.to_pyarrow_table(columns=["zone", "run_id"]).to_pylist()
    assert sorted((r["zone"], r["run_id"]) for r in runs) == sorted(
        [(1, "run-0")] + [(zone, f"run-{zone}") for zone in zones]
    )
    # Recorded again (a lost answer re-runs the MERGE): found, not doubled.
    books.record_run(3, run_row(3))
    assert len(table.to_pyarrow_table(columns=["run_id"])) == len(runs)


TOTAL = 2000  # requests per zone: 200 chunks of 10
KILLED = """
import sys, threading
from datetime import timedelta
sys.path.insert(0, {root!r})
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.lake.log.progress import WATERMARK, to_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from tests.lake.test_group_commit import BASE, ZONES, zone_rows
from tests.sessions import session_of
lake = Lake({uri!r}, {{}})

def zone(z):
    writer = ZoneWriter(session_of(lake), REQUESTS, z)
    for chunk in range(200):
        end = to_ms(BASE + timedelta(seconds=chunk + 1))
        writer.commit(zone_rows(z, 10 * chunk, 10), {{WATERMARK: end}})

threads = [threading.Thread(target=zone, args=(z,)) for z in ZONES]
for t in threads: t.start()
for t in threads: t.join()
"""


@pytest.mark.parametrize("after", [3, 12])
def test_a_sigkill_around_group_commits_keeps_each_row_once(tmp_path, after):
    """A process whose zones commit in groups is killed mid-flight; each zone's next
    pass reads from its watermark again (the v2 way): every row once, none lost."""
    uri = str(tmp_path / "lake")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([f"{root}/src", root])}
    code = KILLED.format(root=root, uri=uri)
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    lake = Lake(uri, {})
    try:
        # ready: the table exists and holds some groups' commits, then killed at once
        assert wait_for(lambda: lake.open(REQUESTS) is not None, 120)
        assert wait_for(lambda: versions(Lake(uri, {})) >= after, 120)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lake = Lake(uri, {})
    marks = {zone: from_ms(watermark(lake, zone)) for zone in ZONES}

    def rerun(zone: int, writer: ZoneWriter) -> Written:
        mark = marks[zone]  # read again from a little before the watermark
        first = 0 if mark is None else max(int((mark - BASE).total_seconds()) * 10 - 10, 0)
        end = to_ms(BASE + timedelta(seconds=200))
        return writer.commit(zone_rows(zone, first, TOTAL - first), {WATERMARK: end})

    writers = {zone: ZoneWriter(session_of(lake), REQUESTS, zone) for zone in ZONES}
    done = all_at_once(writers, rerun)
    assert all(isinstance(w, Written) for w in done.values()), done
    frame = stored(lake)
    assert frame.height == frame["request_id"].n_unique() == TOTAL * len(ZONES)


def echo(batches: list[list[int]]) -> Committer[int, int]:
    """A committer whose groups are recorded in ``batches``, each item its own outcome."""
    return Committer("test", lambda items: batches.append(items) or list(items))


def test_a_lone_commit_never_waits_for_a_group(monkeypatch):
    """A caller alone (no pass in flight, or only its own) is committed at once."""
    monkeypatch.setattr(committer_module, "GROUP_WAIT", 600.0)
    batches: list[list[int]] = []
    group = echo(batches)
    began = time.monotonic()
    assert [group.run(n) for n in range(3)] == [0, 1, 2]
    with group.passing():
        assert group.run(3) == 3
    assert time.monotonic() - began < 30 and batches == [[0], [1], [2], [3]]


def test_a_group_waits_for_the_passes_in_flight(monkeypatch):
    """While passes registered on the table have not queued their share, the group waits
    for them; once all have, it goes at once, one group for all."""
    monkeypatch.setattr(committer_module, "GROUP_WAIT", 600.0)
    batches: list[list[int]] = []
    group = echo(batches)
    registered = threading.Barrier(3)
    go = threading.Event()
    results: list[int] = []

    def one_pass(n: int) -> None:
        with group.passing():
            registered.wait(60)
            if n == 2:
                go.wait(60)  # still reading while the others have queued
            results.append(group.run(n))

    threads = [threading.Thread(target=one_pass, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    assert wait_for(lambda: len(group._queue) == 2, 60)
    assert batches == []  # the two wait for the third pass
    go.set()
    for thread in threads:
        thread.join(60)
    assert sorted(results) == [0, 1, 2]
    assert [sorted(b) for b in batches] == [[0, 1, 2]], batches


def test_the_wait_for_passes_in_flight_is_bounded(monkeypatch):
    """A pass that never commits (it reads for long, or fails) holds a group at most
    ``GROUP_WAIT``."""
    monkeypatch.setattr(committer_module, "GROUP_WAIT", 0.2)
    batches: list[list[int]] = []
    group = echo(batches)
    with group.passing(), group.passing():  # this one, and one in flight that never submits
        began = time.monotonic()
        assert group.run(1) == 1
        assert time.monotonic() - began >= 0.2
    assert batches == [[1]]


def test_an_impatient_item_ends_the_wait_of_the_group(monkeypatch):
    """A commit from outside a pass (the forwarding receiver, a rewind) does not wait for
    the passes in flight: it takes the shares waiting with it at once."""
    monkeypatch.setattr(committer_module, "GROUP_WAIT", 600.0)
    batches: list[list[int]] = []
    group = echo(batches)
    with group.passing(), group.passing():  # two passes in flight, one of them waiting
        patient = group.submit([1])
        assert wait_for(lambda: len(group._queue) == 1, 60)
        assert group.run(-1, patient=False) == -1
        assert patient[0].result(60) == 1
    assert [sorted(b) for b in batches] == [[-1, 1]], batches


def test_an_error_reaches_each_caller_of_its_group_and_the_committer_goes_on():
    calls: list[list[int]] = []

    def apply(items: list[int]) -> list[int | BaseException]:
        calls.append(items)
        if len(calls) == 1:
            raise RuntimeError("the store failed")
        return [n if n >= 0 else ValueError(f"item {n}") for n in items]

    group: Committer[int, int] = Committer("test", apply)
    with pytest.raises(RuntimeError, match="the store failed"):
        group.run(1)
    with pytest.raises(ValueError, match="item -2"):  # an error for one item alone
        group.run(-2)
    assert group.run(3) == 3
    group.close()
    with pytest.raises(StopRequested, match="closed"):  # the process is ending
        group.run(4)


def test_a_cancelled_future_leaves_the_committer_working():
    batches: list[list[int]] = []
    group = echo(batches)
    with group.passing(), group.passing():  # held, so the cancel comes before the group
        (cancelled,) = group.submit([1])
        assert cancelled.cancel()
        assert group.run(2, patient=False) == 2
    assert batches == [[2]]
    assert group.run(3) == 3


def test_commit_together_gives_each_zone_its_own_outcome(storage):  # noqa: F811
    """The receiver's flush: zones submitted at once land in one group; a zone that cannot
    be prepared (fenced by a rewind since its writer began) gets its own error, the
    others commit."""
    from cdnlake.lake.zone.writer import commit_together

    lake = Lake.from_config(storage)
    writers = {zone: ZoneWriter(session_of(lake), REQUESTS, zone) for zone in (1, 2, 3)}
    other = Lake(lake.uri, lake.storage_options)  # another process
    rewind(ZoneWriter(session_of(other), REQUESTS, 2), BASE - timedelta(minutes=1))
    before = versions(lake)
    done = commit_together([(w, zone_rows(z, 0, 10)) for z, w in writers.items()])
    assert isinstance(done[1], FencedError), done[1]  # zone 2, not "busy"
    assert isinstance(done[0], Written) and isinstance(done[2], Written)
    assert versions(lake) - before == 1  # the two others in one commit
    alone = commit_together([(writers[2], zone_rows(2, 0, 10))])
    assert isinstance(alone[0], FencedError), alone  # its only zone fenced: its own error
