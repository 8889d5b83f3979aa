"""Many zones in one poll: ``ingest.concurrency`` of them read the provider at once, and
the quiet ones that have read wait together for one group commit, so a poll's commits do
not follow its number of zones (issue 30 item 3)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import polars as pl

from cdnlake.config import build_config
from cdnlake.ingest.normalize import REJECT_SCHEMA
from cdnlake.ingest.runner import Chunk, PassContext, Runner
from cdnlake.lake.log.progress import WATERMARK, to_ms
from cdnlake.lake.log.schema import INGEST_GAPS, INGEST_RUNS, REJECTED_LINES, REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.scheduler import wait_for
from tests.conftest import lake_frame
from tests.lake.test_commit import rows
from tests.sessions import session_for

START = datetime(2026, 11, 20, 12, tzinfo=UTC)
ZONES = 48
CONCURRENCY = 2


class QuietZone:
    """A poll of a quiet zone (three requests of its last minute), counting how many
    zones read at the same time."""

    kind = "v2"
    spec = REQUESTS
    noun = "records"

    def __init__(self, reading: list[int], lock: threading.Lock, height: int = 3) -> None:
        self.reading = reading  # [now, most]
        self.lock = lock
        self.height = height

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        with self.lock:
            self.reading[0] += 1
            self.reading[1] = max(self.reading)
        try:
            end = START + timedelta(minutes=1)
            frame = rows(0, self.height, START, tag=f"z{ctx.zone_id}-")
        finally:
            with self.lock:
                self.reading[0] -= 1
        yield Chunk(frame, {WATERMARK: to_ms(end)})


def version(lake: Lake, spec: object) -> int:
    table = lake.open(spec)  # type: ignore[arg-type]
    return -1 if table is None else table.version()


def runner(tmp_path) -> Runner:
    raw = {"storage": {"root": str(tmp_path / "data")}, "ingest": {"concurrency": CONCURRENCY}}
    config = build_config(raw, base_dir=tmp_path, env={})
    return Runner(config, session_for(config), clock=lambda: START + timedelta(minutes=10))


def test_a_polls_commits_do_not_follow_its_zones(tmp_path):
    run = runner(tmp_path)
    reading, lock = [0, 0], threading.Lock()
    results = run.run_many((zone, QuietZone(reading, lock)) for zone in range(1, ZONES + 1))
    assert [r.outcome for r in results] == ["ok"] * ZONES
    assert reading[1] <= CONCURRENCY  # never more zones reading than configured
    # Passes that had read waited for their commit outside the readers' slots: many
    # zones per commit. (Had each waited in its slot, groups would hold at most
    # CONCURRENCY zones: ZONES / CONCURRENCY = 24 commits or more.)
    commits = version(run.session.lake, REQUESTS) + 1
    assert commits <= ZONES // CONCURRENCY // 2, commits
    assert version(run.session.lake, INGEST_RUNS) + 1 <= ZONES // CONCURRENCY // 2
    stored = lake_frame(tmp_path / "data")
    assert stored.height == 3 * ZONES
    assert stored["request_id"].n_unique() == stored.height
    marks = run.session.lake.open(REQUESTS)
    assert marks is not None
    for zone in range(1, ZONES + 1):
        assert marks.transaction_version(REQUESTS.app_id(zone)) == to_ms(
            START + timedelta(minutes=1)
        )


class EndsApart(QuietZone):
    """A quiet zone whose pass begins with the others' and ends ``delay`` seconds later."""

    def __init__(self, started: threading.Barrier, delay: float) -> None:
        super().__init__([0, 0], threading.Lock())
        self.started, self.delay = started, delay

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        self.started.wait(60)  # every pass in flight
        time.sleep(self.delay)  # the scenario itself: passes that end apart
        yield from super().chunks(ctx)


def test_passes_ending_apart_record_their_runs_in_one_merge(tmp_path, monkeypatch):
    """The first pass to end waits for the others in flight beside it: one MERGE into
    ingest_runs for the six, not one per pass ending after the last MERGE began."""
    monkeypatch.setattr("cdnlake.lake.log.committer.GROUP_WAIT", 60.0)  # a busy machine
    raw = {"storage": {"root": str(tmp_path / "data")}, "ingest": {"concurrency": 6}}
    run = Runner(
        build_config(raw, base_dir=tmp_path, env={}),
        session_for(build_config(raw, base_dir=tmp_path, env={})),
        clock=lambda: START,
    )
    started = threading.Barrier(6)
    results = run.run_many((zone, EndsApart(started, 0.1 * zone)) for zone in range(1, 7))
    assert [r.outcome for r in results] == ["ok"] * 6
    assert version(run.session.lake, INGEST_RUNS) == 1  # made (version 0), then the one MERGE
    runs = run.session.lake.open(INGEST_RUNS)
    assert runs is not None
    assert sorted(runs.to_pyarrow_table(columns=["zone"])["zone"].to_pylist()) == [1, 2, 3, 4, 5, 6]


def test_passes_ending_apart_commit_their_rows_together(tmp_path, monkeypatch):
    """While passes are in flight, a group commit waits for them (up to GROUP_WAIT), not
    only for shares already being prepared: passes that end a little apart land in one
    commit, and a daemon's commits per poll do not follow its zones. (Waiting only for
    shares being prepared, each of these went alone.)"""
    monkeypatch.setattr("cdnlake.lake.log.committer.GROUP_WAIT", 60.0)  # a busy machine
    raw = {"storage": {"root": str(tmp_path / "data")}, "ingest": {"concurrency": 6}}
    run = Runner(
        build_config(raw, base_dir=tmp_path, env={}),
        session_for(build_config(raw, base_dir=tmp_path, env={})),
        clock=lambda: START,
    )
    started = threading.Barrier(6)
    results = run.run_many((zone, EndsApart(started, 0.2 * zone)) for zone in range(1, 7))
    assert [r.outcome for r in results] == ["ok"] * 6
    # Made (version 0), then the one group commit of the six.
    assert version(run.session.lake, REQUESTS) == 1
    assert lake_frame(tmp_path / "data").height == 3 * 6


class Chunks(QuietZone):
    """A pass of several commits: each chunk's rows and the watermark it reaches."""

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        for n in range(3):
            end = START + timedelta(minutes=n + 1)
            yield Chunk(rows(0, 3, end, tag=f"z{ctx.zone_id}c{n}-"), {WATERMARK: to_ms(end)})


def test_a_pass_alone_waits_for_nobody(tmp_path, monkeypatch):
    """Neither its run's gathering nor its commits (each chunk's) wait: nobody else is in
    flight (a command's only zone, an import)."""
    monkeypatch.setattr("cdnlake.lake.log.committer.GROUP_WAIT", 600.0)
    began = time.monotonic()
    result = runner(tmp_path).run(1, Chunks([0, 0], threading.Lock()))
    assert result.outcome == "ok" and result.rows == 9
    assert time.monotonic() - began < 300


class Blocked(QuietZone):
    """A pass in flight until ``release`` is set."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__([0, 0], threading.Lock())
        self.release = release

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        self.release.wait(120)
        yield from super().chunks(ctx)


def test_a_commit_outside_a_pass_does_not_wait_for_the_passes_in_flight(tmp_path, monkeypatch):
    """The forwarding receiver's commits, a rewind's: not a pass's, so they never wait
    for the passes in flight (a receiver committing its zones one after another would
    otherwise wait GROUP_WAIT for each)."""
    from cdnlake.lake.zone.writer import ZoneWriter

    monkeypatch.setattr("cdnlake.lake.log.committer.GROUP_WAIT", 600.0)
    run = runner(tmp_path)
    release = threading.Event()
    in_flight = [threading.Thread(target=run.run, args=(zone, Blocked(release))) for zone in (1, 2)]
    for thread in in_flight:
        thread.start()
    try:
        writer = ZoneWriter(run.session, REQUESTS, 99)
        # Two passes in flight, one commit waiting: a patient commit would wait for them.
        assert wait_for(lambda: writer.table.committer._passes == 2, 60)
        for n in range(3):  # the first goes at once in any case; the others must too
            done = threading.Thread(
                target=writer.commit, args=(rows(0, 2, START, tag=f"out{n}-"), {})
            )
            done.start()
            done.join(120)
            assert not done.is_alive(), "a commit outside a pass waited for the passes"
    finally:
        release.set()
        for thread in in_flight:
            thread.join(120)
    assert lake_frame(tmp_path / "data").height == 2 * 3 + 3 * 2


class ClaimsAGap(QuietZone):
    """A quiet zone whose pass claims a span lost (before the provider's retention), and
    sees it in ingest_gaps before its commit moves the zone's progress past it."""

    def __init__(self, lake: Lake) -> None:
        super().__init__([0, 0], threading.Lock())
        self.lake = lake
        self.recorded_before_the_commit = False

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        old = ctx.oldest() - timedelta(hours=2)
        ctx.claim_gap(old, old + timedelta(hours=1), "a test's loss")
        self.recorded_before_the_commit = version(self.lake, INGEST_GAPS) >= 1
        yield from super().chunks(ctx)


class WaitsForTheGap(QuietZone):
    """A pass still in flight until the other zone's loss is recorded (or a minute)."""

    def __init__(self, lake: Lake, seen: threading.Event) -> None:
        super().__init__([0, 0], threading.Lock())
        self.lake, self.seen = lake, seen

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if version(self.lake, INGEST_GAPS) >= 1:  # made, then the gap's MERGE
                self.seen.set()
                break
            time.sleep(0.05)
        yield from super().chunks(ctx)


def test_a_loss_is_recorded_before_the_commit_that_moves_past_it(tmp_path, monkeypatch):
    """A pass's commit moves its watermark past the loss it claims, so no later pass
    claims it again: the gap is recorded when it is claimed, before that commit, never
    held back with the pass's run in a gathering while other passes are in flight (a
    SIGKILL between the commit and the run's MERGE would lose the claim for good)."""
    monkeypatch.setattr("cdnlake.lake.log.committer.GROUP_WAIT", 600.0)
    run = runner(tmp_path)
    seen = threading.Event()
    claims = ClaimsAGap(run.session.lake)
    results = run.run_many([(1, claims), (2, WaitsForTheGap(run.session.lake, seen))])
    assert claims.recorded_before_the_commit
    assert seen.is_set(), "the loss was recorded only after the other pass ended"
    assert [r.outcome for r in results] == ["ok", "ok"]
    assert results[0].lost_seconds == 3600.0
    gaps = run.session.lake.open(INGEST_GAPS)
    assert gaps is not None
    assert gaps.to_pyarrow_table(columns=["zone"])["zone"].to_pylist() == [1]


def bad_records(zone_id: int, n: int) -> pl.DataFrame:
    """``n`` rejected v2 records of a zone, as normalize_v2 leaves them."""
    return pl.DataFrame(
        {
            "line_number": list(range(1, n + 1)),
            "reason": ["bad timestamp"] * n,
            "raw_line": [f'{{"bad": {i}}}' for i in range(n)],
            "kind": ["bad timestamp"] * n,
            "request_id": [f"bad-z{zone_id}-{i}" for i in range(n)],
        },
        schema=REJECT_SCHEMA,
    )


class RejectsApart(EndsApart):
    """A pass ending apart from the others whose page had two bad records."""

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        ctx.store_rejects(bad_records(ctx.zone_id, 2), "v2", "page")
        ctx.result.parsed += self.height  # the page's good records
        yield from super().chunks(ctx)


def test_passes_ending_apart_record_their_rejects_in_one_merge(tmp_path, monkeypatch):
    """A pass's rejected lines wait for the other passes in flight as its commit does:
    zones whose every poll has a bad record cost a MERGE a second, not one each (about
    60 ms of CPU each). Before, each page's rejects were a MERGE of their own."""
    monkeypatch.setattr("cdnlake.lake.log.committer.GROUP_WAIT", 60.0)  # a busy machine
    raw = {"storage": {"root": str(tmp_path / "data")}, "ingest": {"concurrency": 6}}
    run = Runner(
        build_config(raw, base_dir=tmp_path, env={}),
        session_for(build_config(raw, base_dir=tmp_path, env={})),
        clock=lambda: START,
    )
    started = threading.Barrier(6)
    results = run.run_many((zone, RejectsApart(started, 0.2 * zone)) for zone in range(1, 7))
    assert [(r.outcome, r.rejected) for r in results] == [("ok", 2)] * 6
    # Made (version 0), then the one MERGE of the six passes' rejects.
    assert version(run.session.lake, REJECTED_LINES) == 1
    table = run.session.lake.open(REJECTED_LINES)
    assert table is not None
    keys = table.to_pyarrow_table(columns=["zone", "record_key"]).to_pylist()
    assert sorted((k["zone"], k["record_key"]) for k in keys) == sorted(
        (zone, f"v2:bad-z{zone}-{i}") for zone in range(1, 7) for i in range(2)
    )


def test_a_chunks_rejects_are_in_the_lake_before_its_commit_moves_past_them(tmp_path, monkeypatch):
    """Recorded with the commit of the chunk whose progress covers their page, first:
    a SIGKILL between the two leaves them in the lake or the page unread, never lost."""
    from cdnlake.lake.zone.writer import ZoneWriter

    seen: list[int] = []
    commit = ZoneWriter.commit

    def watching(self, rows, progress, **kw):  # type: ignore[no-untyped-def]
        table = self.session.lake.open(REJECTED_LINES)
        seen.append(0 if table is None else len(table.to_pyarrow_table(columns=["record_key"])))
        return commit(self, rows, progress, **kw)

    monkeypatch.setattr(ZoneWriter, "commit", watching)

    class TwoPages(QuietZone):
        def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
            for n in range(2):
                ctx.store_rejects(bad_records(ctx.zone_id, 4).slice(n, 3), "v2", "p")
                end = START + timedelta(minutes=n + 1)
                ctx.result.parsed += 2
                yield Chunk(rows(0, 2, end, tag=f"c{n}-"), {WATERMARK: to_ms(end)})

    result = runner(tmp_path).run(1, TwoPages([0, 0], threading.Lock()))
    assert result.outcome == "ok" and result.rejected == 6
    assert seen == [3, 4]  # each chunk's rejects (the second page's: one new) before it
