"""Rows are grouped by UTC hour the same way whether they arrive in time order or not."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta

import polars as pl

from cdnlake.lake.writer import hour_parts


def _frame(moments: list[datetime]) -> pl.DataFrame:
    return pl.DataFrame(
        {"ts": moments, "n": list(range(len(moments)))},
        schema={"ts": pl.Datetime("ms", "UTC"), "n": pl.Int64},
    )


def _grouped(frame: pl.DataFrame) -> dict[tuple[date, int], list[int]]:
    out: dict[tuple[date, int], list[int]] = {}
    for key, part in hour_parts(frame):
        out.setdefault(key, []).extend(part["n"].to_list())
    return {k: sorted(v) for k, v in out.items()}


def test_sorted_runs_and_hashing_agree_across_midnight():
    rng = random.Random(3)
    start = datetime(2026, 11, 19, 22, 30, tzinfo=UTC)
    moments = sorted(start + timedelta(seconds=rng.randint(0, 4 * 3600)) for _ in range(2000))
    in_order = _grouped(_frame(moments))
    shuffled = moments[:]
    rng.shuffle(shuffled)
    by_hash = _grouped(_frame(shuffled))
    expected = {(m.date(), m.hour) for m in moments}
    assert set(in_order) == expected == set(by_hash)
    assert (date(2026, 11, 20), 0) in in_order
    assert sum(map(len, in_order.values())) == sum(map(len, by_hash.values())) == 2000
    # Same rows per hour either way (n is the row's position in its own frame).
    moments_in = {k: sorted(moments[i] for i in v) for k, v in in_order.items()}
    moments_hash = {k: sorted(shuffled[i] for i in v) for k, v in by_hash.items()}
    assert moments_in == moments_hash


def test_sorted_runs_come_out_in_file_order():
    start = datetime(2026, 11, 20, 5, tzinfo=UTC)
    frame = _frame([start + timedelta(minutes=m) for m in range(0, 180, 7)])
    parts = list(hour_parts(frame))
    assert [key for key, _ in parts] == [(date(2026, 11, 20), h) for h in (5, 6, 7)]
    assert pl.concat([p for _, p in parts]).equals(frame)
