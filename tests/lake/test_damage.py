"""Damage is what cannot be decoded: a failed read is retried, never set aside."""

from __future__ import annotations

import errno
import io
from datetime import timedelta
from typing import Any

import polars as pl
import pyarrow.fs as pafs
import pytest

from cdnlake.errors import StorageError, StorageUnavailableError
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone import damage
from cdnlake.lake.zone.damage import Undecodable, read_checked
from cdnlake.lake.zone.writer import ZoneWriter
from tests.lake.test_commit import BASE, rows
from tests.sessions import mark_of, session_of


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(damage, "FIRST_WAIT", 0.001)


class Flaky:
    """A lake's filesystem whose opening of a data file fails ``failures`` times (all
    with None) as a busy machine or store does; everything else goes through."""

    def __init__(self, real: pafs.FileSystem, failures: int | None, error: OSError) -> None:
        self.real, self.failures, self.error, self.refused = real, failures, error, 0

    def open_input_file(self, path: str) -> Any:
        if path.endswith(".parquet") and (self.failures is None or self.refused < self.failures):
            self.refused += 1
            raise self.error
        return self.real.open_input_file(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def parquet(n: int = 40_000) -> bytes:
    frame = pl.DataFrame({"request_id": [f"r{i:08d}x{i * 7919 % 10007}" for i in range(n)]})
    buffer = io.BytesIO()
    frame.write_parquet(buffer, compression="zstd")
    return buffer.getvalue()


def corrupt_page(data: bytes) -> bytes:
    broken = bytearray(data)
    broken[len(data) // 2 : len(data) // 2 + 4096] = bytes(4096)
    return bytes(broken)


def corrupt_footer(data: bytes) -> bytes:
    broken = bytearray(data)
    footer = int.from_bytes(data[-8:-4], "little")
    for i in range(len(data) - 8 - footer + 5, len(data) - 8 - footer + 40):
        broken[i] ^= 0x5A
    return bytes(broken)


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        (lambda d: d[:100], "magic"),  # ArrowInvalid
        (lambda d: b"", "0 bytes"),  # ArrowInvalid
        (corrupt_footer, "thrift"),  # OSError, like an I/O error
        (corrupt_page, "ZSTD"),  # OSError, likewise
    ],
)
def test_bytes_that_do_not_decode_are_damage(tmp_path, spoil, expected):
    (tmp_path / "f.parquet").write_bytes(spoil(parquet()))
    files = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    checked = read_checked(files, "f.parquet", ["request_id"], OSError("first"), "f.parquet")
    assert isinstance(checked, Undecodable) and expected in checked.reason


def test_a_read_that_fails_then_works_is_healthy(tmp_path):
    (tmp_path / "f.parquet").write_bytes(parquet(10))
    real = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    files = Flaky(real, 2, OSError(errno.EMFILE, "Too many open files"))
    checked = read_checked(files, "f.parquet", ["request_id"], OSError("first"), "f.parquet")
    assert not isinstance(checked, Undecodable) and checked.num_rows == 10


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.EMFILE, "Too many open files"),
        OSError(errno.EIO, "Input/output error"),
        OSError("AWS Error SLOW_DOWN during GetObject operation: Please reduce your request rate."),
    ],
)
def test_a_store_that_keeps_failing_stops_with_one_line_naming_the_file(tmp_path, error):
    (tmp_path / "f.parquet").write_bytes(parquet(10))
    real = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    with pytest.raises(StorageUnavailableError) as caught:
        read_checked(Flaky(real, None, error), "f.parquet", ["request_id"], error, "t/f.parquet")
    assert "t/f.parquet" in str(caught.value) and "nothing was set aside" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_file_is_no_damage(tmp_path):
    files = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    with pytest.raises(StorageError, match="not found in the lake's store"):
        read_checked(files, "gone.parquet", ["request_id"], OSError("first"), "gone.parquet")


def test_too_many_open_files_while_deduplicating_fails_the_commit_and_sets_nothing_aside(
    tmp_path, monkeypatch
):
    lake = Lake(str(tmp_path / "lake"), {})
    ZoneWriter(session_of(lake), REQUESTS, 7).commit(rows(0, 100, BASE), {"": 1})
    real = Lake.filesystem
    error = OSError(errno.EMFILE, "Too many open files")
    monkeypatch.setattr(Lake, "filesystem", lambda self: Flaky(real(self), None, error))
    writer = ZoneWriter(session_of(lake), REQUESTS, 7)  # a new process: nothing remembered
    with pytest.raises(StorageUnavailableError, match="Too many open files"):
        writer.commit(rows(50, 100, BASE + timedelta(milliseconds=50)), {"": 2})
    monkeypatch.undo()
    assert not (tmp_path / "lake" / "_quarantine").exists()
    table = lake.open(REQUESTS)
    assert table is not None and table.to_pyarrow_table().num_rows == 100  # nothing dropped
    assert mark_of(ZoneWriter(session_of(lake), REQUESTS, 7)) == 1  # nor moved
    # The store answers again: the same commit lands, each row once.
    written = ZoneWriter(session_of(lake), REQUESTS, 7).commit(rows(50, 100, BASE), {"": 2})
    assert (written.new, written.duplicates) == (50, 50)


def test_the_zone_is_rewound_before_a_damaged_file_is_moved(tmp_path, monkeypatch):
    """Whatever fails or is killed after a damaged file is moved (here: its removal from
    the table), the zone's progress already stands before the file's span, so the span is
    read again; and the commit that met the file writes nothing and says so."""
    from cdnlake.errors import DataError
    from cdnlake.lake.log.progress import to_ms
    from cdnlake.lake.log.table import LogTable

    monkeypatch.setattr(damage, "FIRST_WAIT", 0.01)
    lake = Lake(str(tmp_path / "lake"), {})
    far = BASE + timedelta(minutes=10)
    ZoneWriter(session_of(lake), REQUESTS, 7).commit(rows(0, 100, BASE), {"": to_ms(far)})
    table = lake.open(REQUESTS)
    assert table is not None
    (path,) = [uri for uri in table.file_uris() if "pull_zone_id=7" in uri]
    with open(path, "wb") as spoiled:
        spoiled.write(b"not parquet at all")

    clock = lambda: BASE + timedelta(hours=1)  # noqa: E731 (the span is still served)
    writer = ZoneWriter(
        session_of(lake), REQUESTS, 7, clock=clock
    )  # a new process: nothing remembered
    with pytest.raises(DataError, match="did not decode"):
        writer.commit(rows(50, 100, BASE), {"": to_ms(far + timedelta(minutes=1))})
    assert mark_of(ZoneWriter(session_of(lake), REQUESTS, 7)) <= to_ms(BASE)  # type: ignore[operator]
    assert list((tmp_path / "lake" / "_quarantine").rglob("*.parquet.*"))

    # Killed between the move and the file's removal from the table: the rewind stands all the same.
    ZoneWriter(session_of(lake), REQUESTS, 8).commit(rows(0, 100, BASE, tag="s"), {"": to_ms(far)})
    table = lake.open(REQUESTS)
    assert table is not None
    (path,) = [uri for uri in table.file_uris() if "pull_zone_id=8" in uri]
    with open(path, "wb") as spoiled:
        spoiled.write(b"not parquet at all")

    def killed(self: LogTable, *_: Any) -> None:
        raise RuntimeError("killed")

    monkeypatch.setattr(LogTable, "replace", killed)  # the removal from the table
    with pytest.raises(RuntimeError, match="killed"):
        ZoneWriter(session_of(lake), REQUESTS, 8, clock=clock).commit(
            rows(50, 100, BASE, tag="s"), {}
        )
    assert mark_of(ZoneWriter(session_of(lake), REQUESTS, 8)) <= to_ms(BASE)  # type: ignore[operator]


def test_a_file_set_aside_by_a_process_killed_before_the_repair_is_dropped_not_stuck(tmp_path):
    """Killed after the rewind and the move, before its removal from the table: the log names a file
    that is gone. The next commit and maintain drop that entry instead of failing on it."""
    import shutil

    from cdnlake.lake.upkeep.maintain import maintain
    from cdnlake.lake.zone.damage import QUARANTINE

    lake = Lake(str(tmp_path / "lake"), {})
    ZoneWriter(session_of(lake), REQUESTS, 9).commit(rows(0, 100, BASE), {"": 1})
    table = lake.open(REQUESTS)
    assert table is not None
    (first,) = table.file_uris()  # the file of BASE's rows
    ZoneWriter(session_of(lake), REQUESTS, 9).commit(
        rows(100, 100, BASE + timedelta(minutes=1)), {}
    )
    inside = first.split("/lake/requests/", 1)[1]
    target = tmp_path / "lake" / QUARANTINE / "requests" / f"{inside}.20261120T000000"
    target.parent.mkdir(parents=True)
    shutil.move(first, target)  # moved; its removal from the table never came

    written = ZoneWriter(session_of(lake), REQUESTS, 9).commit(rows(50, 100, BASE), {})
    assert written.new == 100  # the moved file's keys are no longer the table's
    table = lake.open(REQUESTS)
    assert table is not None and first not in table.file_uris()
    assert not any(t.damaged for t in maintain(session_of(lake), check_all=True).tables)


def test_the_check_reads_only_files_reaching_since_and_spans_come_from_the_log(tmp_path):
    """Maintain's nightly check chooses the files whose rows reach past ``since`` on the
    log's statistics (not a Python value per file of the table): a damaged file older
    than that is not read, one within is found, with its span as the log records it."""
    lake = Lake(str(tmp_path / "lake"), {})
    old = BASE - timedelta(days=5)
    ZoneWriter(session_of(lake), REQUESTS, 7).commit(rows(0, 100, old), {})
    ZoneWriter(session_of(lake), REQUESTS, 7).commit(rows(100, 100, BASE), {})
    ZoneWriter(session_of(lake), REQUESTS, 8).commit(
        rows(0, 30, BASE + timedelta(hours=1), tag="e"), {}
    )
    table = lake.open(REQUESTS)
    assert table is not None
    since = BASE - timedelta(days=1)
    reaching = damage.files_reaching(REQUESTS, table, since)
    assert sorted(a["partition.pull_zone_id"] for a in reaching) == [7, 8]
    assert all(a["max.ts"] >= since for a in reaching)
    assert len(damage.files_reaching(REQUESTS, table, None)) == 3
    for action in reaching:
        assert damage.file_time_range(REQUESTS, table, action["path"]) == (
            action["min.ts"],
            action["max.ts"],
        )
    assert damage.file_time_range(REQUESTS, table, "pull_zone_id=7/date=2026-11-20/x.parquet") == (
        None,
        None,
    )

    def path_on(day: str, zone: int) -> str:
        chosen = Lake.add_actions(
            REQUESTS, table, [("pull_zone_id", "=", zone), ("date", "=", day)]
        )
        return str(chosen[0]["path"])

    lake.write_file(f"requests/{path_on(old.date().isoformat(), 7)}", b"not parquet at all")
    within = path_on(BASE.date().isoformat(), 8)
    lake.write_file(f"requests/{within}", b"not parquet either")
    spans: list[tuple[int, Any, Any]] = []
    found = damage.unreadable_files(
        session_of(lake).log_table(REQUESTS),
        table,
        since,
        lambda zone, start, end, _why: spans.append((zone, start, end)),
    )
    assert [d.path for d in found] == [within]
    first, last = BASE + timedelta(hours=1), BASE + timedelta(hours=1, milliseconds=29)
    assert spans == [(8, first, last)] and (found[0].start, found[0].end) == (first, last)
