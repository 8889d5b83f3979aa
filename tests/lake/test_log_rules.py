"""Delta's rules on the exactly-once tables' log, under the interleavings that broke them:
a writer a few versions behind meets a checkpoint whose earlier entries are gone, a
checkpoint thread finishes after another process wrote a newer one, an entry is empty or
torn, and a commit is acknowledged only once it is on disk."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdnlake.errors import StorageError
from cdnlake.lake.log import delta_log
from cdnlake.lake.log.delta_log import TableLog, TornEntry, write_checkpoint
from cdnlake.lake.log.progress import WATERMARK
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.writer import ZoneWriter
from tests.lake.test_commit import BASE, rows, storage  # noqa: F401
from tests.sessions import session_of


def _log_names(lake: Lake) -> list[str]:
    import pyarrow.fs as pafs

    found = lake.filesystem().get_file_info(pafs.FileSelector(f"{REQUESTS.name}/_delta_log"))
    return sorted(info.base_name for info in found)


def _pointer(lake: Lake) -> int:
    with lake.filesystem().open_input_stream(f"{REQUESTS.name}/_delta_log/_last_checkpoint") as f:
        return int(json.loads(f.read())["version"])


def _drop_entries_before(lake: Lake, version: int) -> None:
    """What the old ``forget --vacuum-now`` did: every entry older than a checkpoint
    written that moment deleted, seconds old or not."""
    for name in _log_names(lake):
        head = name.split(".", 1)[0]
        if head.isdigit() and int(head) < version and name.endswith(".json"):
            lake.delete_file(f"{REQUESTS.name}/_delta_log/{name}")


@pytest.mark.parametrize("entries_gone", [True, False], ids=["entries-gone", "entries-kept"])
def test_a_writer_behind_a_newer_checkpoint_never_commits_below_it(storage, entries_gone):  # noqa: F811
    lake = Lake.from_config(storage)
    stale = ZoneWriter(session_of(lake), REQUESTS, 1)  # its process's state: version 0
    stale.commit(rows(0, 10, BASE), {WATERMARK: 100})
    behind = stale.table.snapshot(1).version
    other = Lake(lake.uri, lake.storage_options)  # another process commits on
    writer = ZoneWriter(session_of(other), REQUESTS, 2)
    for i in range(5):
        writer.commit(rows(100 + 10 * i, 10, BASE + timedelta(hours=1 + i), tag="o"), {})
    newest = DeltaTable(lake.table_uri(REQUESTS), storage_options=lake.storage_options)
    newest.create_checkpoint()
    if entries_gone:
        _drop_entries_before(lake, newest.version())
    # The stale writer's next entry would be behind + 1: a name that is free again where
    # the entries were deleted. Its commit must land after the checkpoint instead.
    landed = stale.commit(rows(10, 10, BASE + timedelta(minutes=5)), {WATERMARK: 200})
    assert landed.after is not None and landed.after.version == newest.version() + 1 > behind + 1
    table = DeltaTable(lake.table_uri(REQUESTS), storage_options=lake.storage_options)
    assert table.version() == newest.version() + 1
    assert table.transaction_version(REQUESTS.app_id(1)) == 200  # its watermark is read
    ids = table.to_pyarrow_table(columns=["request_id"]).column("request_id").to_pylist()
    assert len(ids) == len(set(ids)) == 70
    assert {f"r{i:08d}" for i in range(20)} <= set(ids)


def test_a_late_checkpoint_never_moves_the_pointer_back(storage):  # noqa: F811
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    for i in range(4):
        writer.commit(rows(10 * i, 10, BASE + timedelta(hours=i)), {})
    newest = writer.table.snapshot(1).version
    assert write_checkpoint(lake, REQUESTS, newest) is not None
    assert _pointer(lake) == newest
    # A checkpoint thread that wanted version 1 finishes now: nothing is written.
    assert write_checkpoint(lake, REQUESTS, 1) is None
    assert _pointer(lake) == newest
    assert "00000000000000000001.checkpoint.parquet" not in _log_names(lake)


def test_a_checkpoint_racing_a_newer_one_points_at_the_newest(storage, monkeypatch):  # noqa: F811
    """The thread read the pointer before another process's newer checkpoint landed, and
    delta-rs then points ``_last_checkpoint`` at its own older one: it is set back."""
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    for i in range(4):
        writer.commit(rows(10 * i, 10, BASE + timedelta(hours=i)), {})
    real = DeltaTable.create_checkpoint

    def meanwhile(table: DeltaTable) -> None:  # the newer checkpoint lands first
        newer = DeltaTable(lake.table_uri(REQUESTS), storage_options=lake.storage_options)
        real(newer)
        real(table)

    newest = writer.table.snapshot(1).version
    monkeypatch.setattr(DeltaTable, "create_checkpoint", meanwhile)
    assert write_checkpoint(lake, REQUESTS, 1) is not None
    assert _pointer(lake) == newest
    monkeypatch.undo()
    fresh = DeltaTable(lake.table_uri(REQUESTS), storage_options=lake.storage_options)
    assert fresh.version() == newest
    assert TableLog(Lake(lake.uri, lake.storage_options), REQUESTS).version == newest


@pytest.mark.parametrize("text", ["", "\n", '{"commitInfo":{"timestamp":1}}\n{"add":{"pa'])
def test_an_empty_or_torn_entry_is_said_never_an_empty_commit(storage, text):  # noqa: F811
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    writer.commit(rows(0, 10, BASE), {WATERMARK: 1})
    version = writer.table.snapshot(1).version
    log = TableLog(Lake(lake.uri, lake.storage_options), REQUESTS)  # another process's
    lake.write_file(f"{REQUESTS.name}/_delta_log/{version + 1:020d}.json", text.encode())
    with pytest.raises(StorageError, match=f"log entry {version + 1} is (empty|torn)"):
        writer.commit(rows(10, 10, BASE + timedelta(hours=1)), {WATERMARK: 2})
    with pytest.raises(TornEntry, match=f"log entry {version + 1}"):
        log.advance()
    assert log.version == version  # never past it


def test_a_local_commit_is_on_disk_before_it_is_acknowledged(tmp_path, monkeypatch):
    """Every data file a commit names, its log entry and their folders are fsynced before
    the commit returns."""
    from cdnlake.config import build_config

    config = build_config({"storage": {"root": str(tmp_path / "data")}}, base_dir=tmp_path, env={})
    lake = Lake.from_config(config.storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    writer.commit(rows(0, 5, BASE), {})  # the table and its folders exist
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    landed = writer.commit(rows(5, 5, BASE + timedelta(days=1)), {WATERMARK: 9})
    assert landed.after is not None
    root = Path(lake.local or "").resolve()
    log_folder = root / REQUESTS.name / "_delta_log"
    entry = log_folder / f"{landed.after.version:020d}.json"
    text = entry.read_text()
    files = [json.loads(line)["add"]["path"] for line in text.splitlines() if '"add"' in line]
    assert files
    for path in files:
        data = root / REQUESTS.name / path
        assert any(s == str(data) for s in synced), f"{path} not fsynced"
        assert str(data.parent) in synced  # its name, in a folder made for it
        assert str(data.parent.parent) in synced
    assert any(s.startswith(str(log_folder / f".{entry.name}.")) for s in synced)  # its bytes
    assert str(log_folder) in synced  # and its name


def test_the_checkpoint_check_costs_a_commit_one_read(storage, monkeypatch):  # noqa: F811
    """The pointer is read once per attempt, before the entry is put."""
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    writer.commit(rows(0, 5, BASE), {})
    reads: list[int] = []
    real = delta_log._Entries.last_checkpoint

    def counted(self: delta_log._Entries) -> int:
        reads.append(1)
        return real(self)

    monkeypatch.setattr(delta_log._Entries, "last_checkpoint", counted)
    writer.commit(rows(5, 5, BASE + timedelta(hours=1)), {})
    assert len(reads) == 1
