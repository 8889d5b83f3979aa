"""StagedMerge: sealed hours merge early, late rows still land once, failures lose nothing."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from cdnlake.errors import StorageError
from cdnlake.lake.layout import hour_file
from cdnlake.lake.writer import StagedMerge, is_ordered, read_lake_file

ZONE = 1234
DAY = date(2026, 11, 20)
START = datetime(2026, 11, 20, tzinfo=UTC)


def rows(hour: int, ids: range, *, minute: int = 0) -> pl.DataFrame:
    moments = [START + timedelta(hours=hour, minutes=minute, seconds=i % 3000) for i in ids]
    return pl.DataFrame(
        {"ts": moments, "request_id": [f"r{i:06d}" for i in ids]},
        schema={"ts": pl.Datetime("ms", "UTC"), "request_id": pl.String},
    )


def lake_rows(lake: Path, hour: int) -> pl.DataFrame:
    return read_lake_file(hour_file(lake, ZONE, DAY, hour), ["ts", "request_id"])


def new_merge(tmp_path: Path, **kwargs) -> StagedMerge:
    return StagedMerge(tmp_path / "lake", ZONE, tmp_path / "staging", **kwargs)


def test_an_hour_is_merged_as_soon_as_a_later_hour_arrives(tmp_path):
    merge = new_merge(tmp_path)
    merge.add(rows(0, range(0, 500)))
    merge.add(rows(0, range(500, 900), minute=30))
    assert merge.pending_keys() == [(DAY, 0)]
    merge.add(rows(1, range(900, 1000)))
    assert merge.pending_keys() == [(DAY, 1)]  # hour 0 went to the background merge
    result = merge.commit()
    assert (result.rows_in, result.rows_new, result.duplicates) == (1000, 1000, 0)
    assert len(result.files_written) == 2
    assert lake_rows(tmp_path / "lake", 0).height == 900
    assert lake_rows(tmp_path / "lake", 1).height == 100


def test_late_rows_for_a_sealed_hour_are_merged_again_without_duplicates(tmp_path):
    merge = new_merge(tmp_path)
    merge.add(rows(0, range(0, 100)))
    merge.add(rows(2, range(100, 200)))  # seals hour 0
    merge.add(rows(0, range(50, 150), minute=5))  # 50 repeats, 50 new, after the seal
    result = merge.commit()
    assert (result.rows_in, result.rows_new, result.duplicates) == (300, 250, 50)
    hour0 = lake_rows(tmp_path / "lake", 0)
    assert hour0["request_id"].n_unique() == hour0.height == 150
    assert is_ordered(hour0, "request_id")


def test_a_failure_after_sealing_reports_what_reached_the_lake(tmp_path):
    merge = new_merge(tmp_path)
    merge.add(rows(0, range(0, 100)))
    merge.add(rows(1, range(100, 130)))  # seals hour 0; hour 1 is still pending
    written = merge.discard()  # the caller failed before commit
    assert (written.rows_in, written.rows_new) == (100, 100)
    assert lake_rows(tmp_path / "lake", 0).height == 100
    assert not hour_file(tmp_path / "lake", ZONE, DAY, 1).exists()
    assert merge.discard().rows_new == 0  # nothing is reported twice


def test_a_background_merge_that_fails_fails_the_commit(tmp_path):
    lake = tmp_path / "lake"
    blocker = hour_file(lake, ZONE, DAY, 0).parent
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the day's folder should be")
    merge = new_merge(tmp_path)
    merge.add(rows(0, range(0, 10)))
    merge.add(rows(1, range(10, 20)))  # hour 0 fails in the background
    with pytest.raises(StorageError, match=r"cannot write lake file .*part-00\.parquet"):
        merge.commit()
    assert merge.discard().rows_new == 0


def spy_on_streaming(monkeypatch) -> list[bool]:
    """Record, per large hour, whether it was streamed (True) or merged in memory."""
    streamed: list[bool] = []
    real = StagedMerge._stream_new_hour

    def spy(self, *args):
        result = real(self, *args)
        streamed.append(result is not None)
        return result

    monkeypatch.setattr(StagedMerge, "_stream_new_hour", spy)
    return streamed


def test_large_hours_wait_instead_of_piling_up_and_stream_from_staging(tmp_path, monkeypatch):
    streamed = spy_on_streaming(monkeypatch)
    merge = new_merge(tmp_path, spill_rows=50)
    for hour in range(6):
        merge.add(rows(hour, range(hour * 100, hour * 100 + 60)))
        merge.add(rows(hour, range(hour * 100 + 60, hour * 100 + 100), minute=20))
        assert sum(n for _, n in merge._sealed) <= merge.spill_rows
    assert merge.commit().rows_new == 600
    assert streamed == [True] * 6
    for hour in range(6):  # each hour was spilled, then streamed: whole, in order, unique
        want = [f"r{i:06d}" for i in range(hour * 100, hour * 100 + 100)]
        assert lake_rows(tmp_path / "lake", hour)["request_id"].to_list() == want


def test_a_large_hour_with_repeats_is_deduplicated_and_sorted(tmp_path, monkeypatch):
    streamed = spy_on_streaming(monkeypatch)
    merge = new_merge(tmp_path, spill_rows=50)
    merge.add(rows(0, range(0, 80), minute=10))
    merge.add(rows(0, range(0, 80)))  # the same ids again, and earlier in time
    merge.add(rows(1, range(80, 90)))
    result = merge.commit()
    assert (result.rows_in, result.rows_new, result.duplicates) == (170, 90, 80)
    assert streamed[0] is False  # repeats: merged in memory instead
    hour0 = lake_rows(tmp_path / "lake", 0)
    assert hour0.height == 80 and is_ordered(hour0, "request_id")


def test_order_check_looks_at_ids_only_where_times_tie():
    tied = pl.DataFrame(
        {"ts": [START, START, START + timedelta(seconds=1)], "request_id": ["b", "a", "c"]},
        schema={"ts": pl.Datetime("ms", "UTC"), "request_id": pl.String},
    )
    assert not is_ordered(tied, "request_id")
    assert is_ordered(tied.sort("ts", "request_id"), "request_id")
    assert is_ordered(tied.slice(1), "request_id")  # "a" then a later "c"
    assert not is_ordered(tied.reverse(), "request_id")
