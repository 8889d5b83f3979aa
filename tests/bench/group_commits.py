"""Commits per poll for many zones, and a commit's cost on a table of few or many files.

    PYTHONPATH=src python tests/bench/group_commits.py [--zones 200] [--polls 3]
        [--files 1000,100000]

Not a test, not part of ``make bench``: a quick measure of group commits (issue 30 item 3).
Run it with another checkout's ``src`` first on PYTHONPATH to measure that code alike.
The zones are quiet (a few requests a poll each) and polled at once by one runner, as
the daemon's thread pool polls them; the figures are Delta commits (table versions) added.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from tests.lake.test_commit import rows  # noqa: E402
from tests.sessions import session_for  # noqa: E402

from cdnlake.config import build_config  # noqa: E402
from cdnlake.ingest.runner import Chunk, PassContext, Runner  # noqa: E402
from cdnlake.lake.log.progress import WATERMARK, to_ms  # noqa: E402
from cdnlake.lake.log.schema import INGEST_RUNS, REQUESTS  # noqa: E402
from cdnlake.lake.log.store import Lake  # noqa: E402

START = datetime(2026, 11, 20, 12, tzinfo=UTC)


class QuietZone:
    """A poll of a quiet zone: three requests of the last minute, and the watermark."""

    kind = "v2"
    spec = REQUESTS
    noun = "records"

    def __init__(self, poll: int) -> None:
        self.poll = poll

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        end = START + timedelta(minutes=self.poll + 1)
        frame: pl.DataFrame = rows(
            0, 3, end - timedelta(seconds=30), tag=f"z{ctx.zone_id}p{self.poll}-"
        )
        yield Chunk(frame, {WATERMARK: to_ms(end)})


def version(lake: Lake, spec: object) -> int:
    table = lake.open(spec)  # type: ignore[arg-type]
    return -1 if table is None else table.version()


def commits_per_poll(work: Path, zones: int, polls: int, concurrency: int) -> None:
    raw = {"storage": {"root": str(work / "data")}, "ingest": {"concurrency": concurrency}}
    config = build_config(raw, base_dir=work, env={})
    runner = Runner(config, session_for(config), clock=lambda: START + timedelta(minutes=10))
    lake = runner.session.lake
    for poll in range(polls):
        before = version(lake, REQUESTS), version(lake, INGEST_RUNS)
        began = time.perf_counter()
        results = runner.run_many((zone, QuietZone(poll)) for zone in range(1, zones + 1))
        took = time.perf_counter() - began
        failed = [r for r in results if r.outcome != "ok"]
        after = version(lake, REQUESTS), version(lake, INGEST_RUNS)
        print(
            f"poll {poll}: {zones} zones, concurrency {concurrency}: "
            f"{after[0] - before[0]} commits to requests, {after[1] - before[1]} to "
            f"ingest_runs, {took:.1f} s, {len(failed)} failed"
        )


def commit_on_files(work: Path, few: int, many: int, days: int) -> None:
    from tests.bench.bench import bench_commit_on_files

    figure = bench_commit_on_files(work, days, few, many)
    print(f"{figure.what}: {figure.ours:.3f} s against {figure.reference:.3f} s on {few:,}")
    print(f"  {figure.note}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zones", type=int, default=200)
    parser.add_argument("--polls", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=0, help="default: the config's")
    parser.add_argument("--files", default="1000,100000", help="few,many; empty: skip")
    parser.add_argument("--days", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        concurrency = (
            args.concurrency or build_config({}, base_dir=Path(tmp), env={}).ingest.concurrency
        )
        commits_per_poll(Path(tmp) / "zones", args.zones, args.polls, concurrency)
        if args.files:
            few, many = (int(n) for n in args.files.split(","))
            commit_on_files(Path(tmp) / "files", few, many, args.days)


if __name__ == "__main__":
    main()
