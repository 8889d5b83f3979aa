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

from cdnlake.errors import FencedError
from cdnlake.lake.bookkeeping import Bookkeeping
from cdnlake.lake.commit import Written, ZoneWriter
from cdnlake.lake.progress import WATERMARK, from_ms, rewind, to_ms
from cdnlake.lake.schema import INGEST_RUNS, REQUESTS
from cdnlake.lake.shared import Batcher, SharedTable, shared_table
from cdnlake.lake.store import Lake
from cdnlake.scheduler import wait_for
from tests.lake.test_bookkeeping import LosingProxy, lakes, run_row  # noqa: F401
from tests.lake.test_commit import BASE, rows, storage  # noqa: F401

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
    shared: SharedTable, waiting: int, meanwhile: Callable[[], None] = lambda: None
) -> Iterator[list[int]]:
    """The first group's leader waits until ``waiting`` more parts queue behind it, then
    runs ``meanwhile`` (another process's commit, say) before committing: the rest then
    go as one group. Yields the sizes of the groups committed."""
    group = shared._group._group  # the Batcher inside the table's PassGroup
    run = group._run
    sizes: list[int] = []
    first = threading.Event()

    def held(parts: list[Any]) -> list[Any]:
        if not first.is_set():
            first.set()
            assert wait_for(lambda: len(group._queue) >= waiting, 60)
            meanwhile()
        sizes.append(len(parts))
        return run(parts)

    group._run = held  # type: ignore[method-assign]
    coming = group._coming
    group._coming = lambda: False  # the first leader goes alone, whoever is on the way
    try:
        yield sizes
    finally:
        group._run = run  # type: ignore[method-assign]
        group._coming = coming


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
    writers = {zone: ZoneWriter(lake, REQUESTS, zone) for zone in ZONES}
    before = versions(lake)
    end = to_ms(BASE + timedelta(minutes=5))
    with gathered(writers[1].shared, len(ZONES) - 1) as sizes:
        done = all_at_once(writers, lambda z, w: w.commit(zone_rows(z, 0, 50), {WATERMARK: end}))
    assert all(isinstance(w, Written) and w.new == 50 for w in done.values()), done
    assert versions(lake) - before == len(sizes) == 2, sizes  # the first alone, then the rest
    frame = stored(lake)
    assert frame.height == frame["request_id"].n_unique() == 50 * len(ZONES)
    assert all(watermark(lake, zone) == end for zone in ZONES)
    # One snapshot for the table in this process, shared by every zone's writer.
    assert all(w.shared is shared_table(lake, REQUESTS) for w in writers.values())


def test_a_fenced_zone_inside_a_group_is_refused_alone(storage):  # noqa: F811
    lake = Lake.from_config(storage)
    writers = {zone: ZoneWriter(lake, REQUESTS, zone) for zone in (1, 2, 3)}
    for zone, writer in writers.items():
        writer.commit(zone_rows(zone, 0, 10), {WATERMARK: to_ms(BASE)})
    other = Lake(lake.uri, lake.storage_options)  # another process, with its own snapshot

    def rewound() -> None:  # maintain elsewhere rewinds zone 2 while the group waits
        rewind(ZoneWriter(other, REQUESTS, 2), BASE - timedelta(minutes=1))

    end = to_ms(BASE + timedelta(minutes=5))
    with gathered(writers[1].shared, 2, rewound):
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
    writers = {zone: ZoneWriter(lake, REQUESTS, zone) for zone in (1, 2, 3)}
    shared = writers[1].shared
    table = shared._follow()
    other = Lake(lake.uri, lake.storage_options)
    late = to_ms(BASE + timedelta(minutes=9))
    commit = table.commit
    raced: list[int] = []

    def racing(actions: list[Any], transactions: list[Any]) -> Any:
        if not raced and any(t.app_id == REQUESTS.app_id(2) for t in transactions):
            raced.append(len(transactions))  # between the group's last read and its commit
            ZoneWriter(other, REQUESTS, 2).commit(zone_rows(2, 10, 15), {WATERMARK: late})
        return commit(actions, transactions)

    table.commit = racing  # type: ignore[method-assign]
    end = to_ms(BASE + timedelta(minutes=5))
    with gathered(shared, 2) as sizes:
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
    writers = {zone: ZoneWriter(through, REQUESTS, zone) for zone in (1, 2, 3, 4)}
    for zone, writer in writers.items():
        writer.commit(zone_rows(zone, 0, 5), {})
    proxy.target = REQUESTS.name  # the next commit lands, its answer is lost
    end = to_ms(BASE + timedelta(minutes=5))
    with gathered(writers[1].shared, 3) as sizes:
        done = all_at_once(writers, lambda z, w: w.commit(zone_rows(z, 5, 40), {WATERMARK: end}))
    assert proxy.lost and proxy.retried, (proxy.lost, proxy.retried)
    assert all(isinstance(w, Written) for w in done.values()), done
    assert max(sizes) > 1, sizes
    frame = stored(direct)
    assert frame.height == frame["request_id"].n_unique() == 4 * 45
    assert all(watermark(direct, zone) == end for zone in writers)


def test_runs_recorded_at_once_go_in_one_merge(tmp_path):
    lake = Lake(str(tmp_path / "lake"), {})
    books = Bookkeeping(lake)
    books.record_run(1, run_row(0))  # the table exists
    before = versions(lake, INGEST_RUNS)
    zones = list(range(1, 9))
    in_flight = threading.Barrier(len(zones))

    def one(zone: int) -> None:
        with books.runs().passing():  # as a pass of the runner is
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
from cdnlake.lake.commit import ZoneWriter
from cdnlake.lake.progress import WATERMARK, to_ms
from cdnlake.lake.schema import REQUESTS
from cdnlake.lake.store import Lake
from tests.lake.test_group_commit import BASE, ZONES, zone_rows
lake = Lake({uri!r}, {{}})

def zone(z):
    writer = ZoneWriter(lake, REQUESTS, z)
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

    writers = {zone: ZoneWriter(lake, REQUESTS, zone) for zone in ZONES}
    done = all_at_once(writers, rerun)
    assert all(isinstance(w, Written) for w in done.values()), done
    frame = stored(lake)
    assert frame.height == frame["request_id"].n_unique() == TOTAL * len(ZONES)


def test_a_lone_commit_never_waits_for_a_group():
    """The spacing between group commits applies only while other parts are on their way."""
    batches: list[list[int]] = []
    group: Batcher[int, int] = Batcher(lambda items: batches.append(items) or items, 60.0)
    began = time.monotonic()
    assert [group.submit(n) for n in range(3)] == [0, 1, 2]
    assert time.monotonic() - began < 30 and batches == [[0], [1], [2]]


def test_a_commit_waits_for_the_parts_being_prepared():
    """While parts are being prepared, the next group waits for them (up to its spacing)
    and they go in it, one commit for all."""
    batches: list[list[int]] = []
    preparing = threading.Event()
    group: Batcher[int, int] = Batcher(
        lambda items: batches.append(items) or items, 60.0, preparing.is_set
    )
    group.submit(0)  # the first batch: the spacing counts from it
    preparing.set()
    late = [threading.Thread(target=group.submit, args=(n,)) for n in (2, 3)]

    def first() -> None:
        group.submit(1)

    leader = threading.Thread(target=first)
    leader.start()
    assert wait_for(lambda: group._leading, 60)
    for thread in late:
        thread.start()
    assert wait_for(lambda: len(group._queue) == 3, 60)  # the leader's own, and theirs
    preparing.clear()  # all of them queued: the group goes
    for thread in [leader, *late]:
        thread.join(60)
    assert batches[0] == [0] and sorted(batches[1]) == [1, 2, 3], batches


def test_a_leader_interrupted_while_it_gathers_leaves_the_group_usable():
    """Ctrl-C (or any exception) while a leader waits for parts being prepared: its own
    item leaves the queue and the next caller leads (before, every later submit hung)."""
    batches: list[list[int]] = []
    calls = [0]

    def coming() -> bool:
        calls[0] += 1
        if calls[0] == 1:
            raise KeyboardInterrupt
        return False

    group: Batcher[int, int] = Batcher(lambda items: batches.append(items) or items, 60.0, coming)
    try:
        group.submit(0)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interruption was swallowed")
    result: list[int] = []
    later = threading.Thread(target=lambda: result.append(group.submit(1)))
    later.start()
    later.join(60)
    assert result == [1] and batches == [[1]]


def test_an_impatient_item_ends_the_wait_of_the_group():
    """A commit from outside a pass (the forwarding receiver, a rewind) does not wait for
    the passes in flight: it takes the parts waiting with it at once."""
    batches: list[list[int]] = []
    group: Batcher[int, int] = Batcher(
        lambda items: batches.append(items) or items, 600.0, lambda: True, lambda n: n >= 0
    )
    group.submit(0)  # the first batch: the spacing counts from it
    patient = threading.Thread(target=group.submit, args=(1,))
    patient.start()
    assert wait_for(lambda: group._leading and len(group._queue) == 1, 60)  # it waits
    impatient = threading.Thread(target=group.submit, args=(-1,))
    impatient.start()
    for thread in (patient, impatient):
        thread.join(60)
        assert not thread.is_alive(), "the group waited for its spacing"
    assert batches[0] == [0] and sorted(batches[1]) == [-1, 1], batches
