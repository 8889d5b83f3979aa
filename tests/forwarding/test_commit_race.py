"""Progress is data: a forwarded commit racing a logging API pass on the same zone."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from cdnlake.config import load_config
from cdnlake.forwarding import batch
from cdnlake.forwarding.batch import Buffer, Flusher
from cdnlake.ingest.v1_parser import Block, parse_block
from cdnlake.lake.log.progress import from_ms, rewind, to_ms
from cdnlake.lake.log.schema import REQUESTS, TableSpec
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone import writer as zone_module
from cdnlake.lake.zone.writer import ZoneWriter
from tests.sessions import mark_of, session_for, session_of

START_MS = to_ms(datetime(2026, 11, 20, 11, 0, tzinfo=UTC))


def line(i: int, zone: int = 1234) -> str:
    return (
        f"HIT|200|{START_MS + i * 1000}|100|{zone}|198.51.100.{i % 250}|-|"
        f"https://cdn.example.com/p/{i}|DE|curl/8|req{i:08d}|DE"
    )


def rows(ids: range) -> pl.DataFrame:
    data = "".join(line(i) + "\n" for i in ids).encode()
    good, rejects, _ = parse_block(Block(1, data, False), 1234)
    assert rejects.height == 0
    return good


def config_at(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "config.toml"
    path.write_text('[storage]\nroot = "data"\n[[zones]]\nid = 1234\n')
    return load_config(path, env={})


def test_a_forwarded_commit_racing_a_pass_keeps_the_pass_watermark(tmp_path, monkeypatch):
    config = config_at(tmp_path)
    lake = Lake.from_config(config.storage)
    passes = ZoneWriter(session_of(lake), REQUESTS, 1234)
    passes.commit(rows(range(0, 5)), {"": START_MS})
    buffer = Buffer()
    for i in range(5, 15):
        buffer.put(line(i))
    committer = Flusher(config, buffer, session_of(lake))

    # Between the forwarded commit's read of the table and its write, a pass commits
    # requests 0..9 and moves the watermark: the forwarded commit must lose the race,
    # read again, add only what is new, and leave the pass's watermark.
    mark = START_MS + 10_000
    original = zone_module.write_files
    raced: list[int] = []

    def racing(at: Lake, spec: TableSpec, frame: pl.DataFrame) -> Any:
        if not raced:  # the forwarded share, once (the pass's own commit comes through too)
            raced.append(frame.height)
            passes.commit(rows(range(0, 10)), {"": mark})
        return original(at, spec, frame)

    monkeypatch.setattr(zone_module, "write_files", racing)
    assert committer.flush()
    assert raced == [10]
    assert mark_of(passes, "") == mark
    table = pl.from_arrow(lake.open(REQUESTS).to_pyarrow_table())  # type: ignore[union-attr]
    assert isinstance(table, pl.DataFrame)
    ids = table["request_id"].to_list()
    assert sorted(ids) == [f"req{i:08d}" for i in range(15)]  # each once
    by_source = dict(table.group_by("source").len().iter_rows())
    assert by_source == {"v1": 10, "forwarded": 5}
    assert (buffer.counts.rows, buffer.counts.duplicates) == (5, 5)


def test_a_forwarded_commit_on_a_zone_without_watermark_sets_none(tmp_path):
    config = config_at(tmp_path)
    buffer = Buffer()
    buffer.put(line(1))
    committer = Flusher(config, buffer, session_for(config))
    assert committer.flush()
    writer = ZoneWriter(committer.session, REQUESTS, 1234)
    assert not mark_of(writer, "")  # 0: rows, but no watermark yet (a pass starts afresh)


def test_rows_of_a_failed_commit_are_kept_and_committed_by_the_next_flush(tmp_path, monkeypatch):
    from cdnlake.errors import StorageError

    config = config_at(tmp_path)
    buffer = Buffer(max_lines=3)
    for i in range(3):
        buffer.put(line(i))
    committer = Flusher(config, buffer, session_for(config))
    original = batch.commit_together
    failures = [StorageError("lake commit failed: the store is away")]

    def failing(writes: list[Any]) -> list[Any]:
        if failures:
            failure = failures.pop()
            return [failure for _ in writes]
        return original(writes)

    monkeypatch.setattr(batch, "commit_together", failing)
    assert not committer.flush()
    assert buffer.full()  # the rows waiting count: senders wait until they are committed
    buffer.put(line(3))
    assert committer.flush()
    assert not buffer.full()
    assert buffer.counts.rows == 4
    table = pl.from_arrow(committer.session.lake.open(REQUESTS).to_pyarrow_table())  # type: ignore[union-attr]
    assert isinstance(table, pl.DataFrame)
    assert sorted(table["request_id"]) == [f"req{i:08d}" for i in range(4)]


def test_forwarded_rows_keep_landing_after_a_rewind_fences_the_zone(tmp_path):
    """A rewind (a damaged file set aside) advances the zone's fence: the receiver's
    writer of before is refused once, its rows wait, and the next flush commits them with
    the token as it is now, leaving the rewound watermark where the rewind put it."""
    config = config_at(tmp_path)
    lake = Lake.from_config(config.storage)
    ZoneWriter(session_of(lake), REQUESTS, 1234).commit(rows(range(0, 5)), {"": START_MS + 60_000})
    buffer = Buffer()
    committer = Flusher(config, buffer, session_of(lake))
    buffer.put(line(5))
    assert committer.flush()  # the receiver's writer now holds the token of before
    rewind(ZoneWriter(session_of(lake), REQUESTS, 1234), from_ms(START_MS))  # type: ignore[arg-type]
    for i in range(6, 9):
        buffer.put(line(i))
    committer.flush()  # refused or not, nothing may be lost, nothing moved
    committer.flush()
    table = pl.from_arrow(lake.open(REQUESTS).to_pyarrow_table())  # type: ignore[union-attr]
    assert isinstance(table, pl.DataFrame)
    assert sorted(table["request_id"].to_list()) == [f"req{i:08d}" for i in range(9)]
    assert mark_of(ZoneWriter(session_of(lake), REQUESTS, 1234), "") == START_MS
