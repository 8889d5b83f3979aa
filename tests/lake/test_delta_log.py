"""The exactly-once tables' own Delta log (``lake/log/delta_log.py``): the state advanced from
each new entry agrees with delta-rs's, whoever wrote the entry (our writers, another
process, delta-rs's DELETE, MERGE or ``maintain``'s compaction); put-if-absent lets one
writer of many have each version; the protocol guard refuses what cdnlake does not
honour; checkpoints land at the interval and readers open the table from them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable, TableFeatures, Transaction

from cdnlake.errors import StorageError
from cdnlake.lake.log import delta_log
from cdnlake.lake.log.delta_log import TableLog, entry
from cdnlake.lake.log.progress import WATERMARK
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.upkeep import maintain as maintain_module
from cdnlake.lake.upkeep.maintain import OpenDays
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.scheduler import wait_for
from tests.lake.test_commit import BASE, rows, storage  # noqa: F401
from tests.sessions import mark_of, session_of

DAY = BASE.date().isoformat()
NEXT_DAY = (BASE + timedelta(days=1)).date().isoformat()


def delta_rs(lake: Lake) -> DeltaTable:
    table = lake.open(REQUESTS)
    assert table is not None
    return table


def as_delta_rs_has_it(lake: Lake, zone: int, day: str) -> dict[str, Any]:
    """A zone-day's files by path, with their ``ts`` statistics, as delta-rs reads them."""
    partition = [("pull_zone_id", "=", str(zone)), ("date", "=", day)]
    return {
        a["path"]: (a.get("min.ts"), a.get("max.ts"), a.get("null_count.ts"))
        for a in lake.add_actions(REQUESTS, delta_rs(lake), partition)
    }


def as_we_have_it(lake: Lake, zone: int, day: str) -> dict[str, Any]:
    files = session_of(lake).log_table(REQUESTS).snapshot(zone, files=True, days=[day]).files
    assert files is not None
    return {f["path"]: (f["min.ts"], f["max.ts"], f["null_count.ts"]) for f in files}


def agrees(lake: Lake, zones: list[int], days: list[str]) -> None:
    """Our state of the table is delta-rs's: version, files of each zone-day, progress."""
    shared = session_of(lake).log_table(REQUESTS)
    table = delta_rs(lake)
    for zone in zones:
        snapshot = shared.snapshot(zone)
        assert snapshot.version == table.version()
        assert snapshot.mark(WATERMARK) == table.transaction_version(REQUESTS.app_id(zone))
        for day in days:
            assert as_we_have_it(lake, zone, day) == as_delta_rs_has_it(lake, zone, day)


def test_the_state_follows_entries_written_by_another_process(storage):  # noqa: F811
    lake = Lake.from_config(storage)
    other = Lake(lake.uri, lake.storage_options)  # another process: its own state
    ZoneWriter(session_of(lake), REQUESTS, 1).commit(rows(0, 20, BASE), {WATERMARK: 5})
    loaded = TableLog(Lake(lake.uri, lake.storage_options), REQUESTS).version
    for zone in (1, 2):
        writer = ZoneWriter(session_of(other), REQUESTS, zone)
        writer.commit(rows(100, 30, BASE + timedelta(hours=1), tag=f"z{zone}"), {WATERMARK: 7})
        writer.commit(rows(200, 30, BASE + timedelta(days=1)), {WATERMARK: 9})
    agrees(lake, [1, 2], [DAY, NEXT_DAY])
    assert session_of(lake).log_table(REQUESTS).snapshot(1).version == loaded + 4  # entry by entry
    # And a state loaded afresh is the same, statistics included.
    fresh = TableLog(Lake(lake.uri, lake.storage_options), REQUESTS)
    ours = session_of(lake).log_table(REQUESTS)._log
    for zone in (1, 2):
        key = lambda f: f["path"]  # noqa: E731
        assert sorted(fresh.files(zone, [DAY]), key=key) == sorted(ours.files(zone, [DAY]), key=key)


def test_removes_from_delta_rs_compaction_delete_and_merge_are_followed(tmp_path, monkeypatch):
    monkeypatch.setattr(maintain_module, "OPEN_DAY_FILES", 3)
    lake = Lake(str(tmp_path / "lake"), {})
    other = Lake(lake.uri, {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    for chunk in range(6):  # six small files of one zone-day
        writer.commit(rows(10 * chunk, 10, BASE + timedelta(minutes=chunk)), {})
    ZoneWriter(session_of(lake), REQUESTS, 2).commit(rows(0, 10, BASE, tag="two"), {})
    assert len(as_we_have_it(lake, 1, DAY)) == 6
    # maintain's compaction elsewhere: removes and one add, no app transaction
    assert OpenDays(session_of(other)).compact(REQUESTS, [1], BASE.date()) > 0
    agrees(lake, [1, 2], [DAY])
    assert len(as_we_have_it(lake, 1, DAY)) == 1
    # delta-rs's DELETE (as a damaged file set aside) and a MERGE
    delta_rs(other).delete(f"pull_zone_id = 2 AND date = '{DAY}'")
    agrees(lake, [1, 2], [DAY])
    assert as_we_have_it(lake, 2, DAY) == {}
    source = rows(55, 10, BASE + timedelta(minutes=5)).with_columns(
        pl.lit(1, pl.Int64).alias("pull_zone_id"), pl.lit(BASE.date()).alias("date")
    )
    (
        delta_rs(other)
        .merge(source.to_arrow(), "t.request_id = s.request_id", "s", "t")
        .when_not_matched_insert_all()
        .execute()
    )
    agrees(lake, [1, 2], [DAY])
    # the writer's deduplication reads the state: the merged rows are repeats
    again = writer.commit(rows(55, 10, BASE + timedelta(minutes=5)), {})
    assert (again.new, again.duplicates) == (0, 10)


def test_a_metadata_change_is_reloaded_and_sends_waiting_parts_back(tmp_path):
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    writer.commit(rows(0, 10, BASE), {})
    table = session_of(lake).log_table(REQUESTS)._log
    before = table.version
    delta_rs(Lake(lake.uri, {})).alter.set_table_properties({"delta.checkpointInterval": "7"})
    learned = table.advance()
    assert [(x.version, x.apps) for x in learned] == [(before + 1, None)]  # every zone touched
    assert table.checkpoint_interval == 7 and table.version == before + 1
    assert writer.commit(rows(5, 10, BASE), {}).new == 5


def test_two_writers_racing_for_one_version_one_has_it(tmp_path):
    """Put-if-absent: the loser learns the winner's entry, nothing of its own written."""
    lake = Lake(str(tmp_path / "lake"), {})
    ZoneWriter(session_of(lake), REQUESTS, 1).commit(rows(0, 1, BASE), {})
    first = TableLog(Lake(lake.uri, {}), REQUESTS)
    second = TableLog(Lake(lake.uri, {}), REQUESTS)
    app = REQUESTS.app_id(9)
    won = first.commit([], [Transaction(app, 1, 0)])
    lost = second.commit([], [Transaction(app, 2, 0)])
    assert won is not None and lost is None
    assert [(x.version, x.apps) for x in second.advance()] == [(won.version, {app: 1})]
    assert second.app(app) == 1 == delta_rs(lake).transaction_version(app)
    # the losing temporary file does not stay behind
    assert not list((tmp_path / "lake" / "requests" / "_delta_log").glob(".*tmp"))


def test_threads_of_two_processes_keep_each_row_once(storage):  # noqa: F811
    """Two lake objects (two processes' states), four zones each on threads of their own,
    all racing for each next version: every version written once, no row lost or doubled,
    each zone's watermark its last commit's."""
    lake = Lake.from_config(storage)
    lakes = [lake, Lake(lake.uri, lake.storage_options)]
    errors: list[BaseException] = []

    def zone(which: Lake, z: int) -> None:
        try:
            writer = ZoneWriter(session_of(which), REQUESTS, z)
            for chunk in range(6):
                at = BASE + timedelta(seconds=chunk)
                writer.commit(rows(10 * chunk, 10, at, tag=f"z{z}-"), {WATERMARK: chunk})
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=zone, args=(lakes[z % 2], z)) for z in (1, 2, 3, 4, 5, 6, 7, 8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors, errors
    table = delta_rs(lake)
    frame = pl.from_arrow(table.to_pyarrow_table(columns=["pull_zone_id", "request_id"]))
    assert isinstance(frame, pl.DataFrame)
    assert frame.height == frame["request_id"].n_unique() == 8 * 60
    assert all(table.transaction_version(REQUESTS.app_id(z)) == 5 for z in range(1, 9))
    history = table.history()
    assert len(history) == table.version() + 1  # no version missing, none twice
    agrees(lake, list(range(1, 9)), [DAY])


TWICE = """
import sys
from datetime import timedelta
sys.path.insert(0, {root!r})
from cdnlake.errors import ZoneBusyError
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from tests.lake.test_commit import BASE, rows
from tests.sessions import mark_of, session_of
lake = Lake({uri!r}, {{}})
writers = [ZoneWriter(session_of(lake), REQUESTS, z) for z in (1, 2)]
for chunk in range(15):
    for z, writer in enumerate(writers, 1):
        new = rows(10 * chunk, 10, BASE + timedelta(seconds=chunk), tag=f"z{{z}}-")
        for _attempt in range(20):  # outpaced by the other process: as the next pass would
            try:
                writer.commit(new, {{}})
                break
            except ZoneBusyError:
                continue
        else:
            raise SystemExit("outpaced 20 times in a row")
"""


def test_two_processes_writing_the_same_rows_keep_each_once(tmp_path):
    uri = str(tmp_path / "lake")
    root = str(Path(__file__).resolve().parents[2])
    ZoneWriter(session_of(Lake(uri, {})), REQUESTS, 1)  # the table exists before both start
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([f"{root}/src", root])}
    code = TWICE.format(root=root, uri=uri)
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    assert [proc.wait(300) for proc in procs] == [0, 0]
    lake = Lake(uri, {})
    table = delta_rs(lake)
    frame = pl.from_arrow(table.to_pyarrow_table(columns=["request_id"]))
    assert isinstance(frame, pl.DataFrame)
    assert frame.height == frame["request_id"].n_unique() == 2 * 150
    assert len(table.history()) == table.version() + 1


def test_an_unknown_writer_feature_refuses_every_commit(tmp_path):
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    writer.commit(rows(0, 10, BASE), {})
    delta_rs(Lake(lake.uri, {})).alter.add_feature(
        TableFeatures.ChangeDataFeed, allow_protocol_versions_increase=True
    )
    before = delta_rs(lake).version()
    with pytest.raises(StorageError) as refused:
        writer.commit(rows(10, 10, BASE), {})
    message = str(refused.value)
    assert "\n" not in message and lake.table_uri(REQUESTS) in message
    assert "changeDataFeed" in message, message
    assert delta_rs(lake).version() == before  # nothing written


def test_a_checkpoint_at_the_interval_is_what_readers_open(tmp_path):
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    delta_rs(Lake(lake.uri, {})).alter.set_table_properties({"delta.checkpointInterval": "5"})
    for chunk in range(6):
        writer.commit(rows(10 * chunk, 10, BASE + timedelta(seconds=chunk)), {WATERMARK: chunk})
    folder = tmp_path / "lake" / "requests" / "_delta_log"
    assert wait_for(lambda: (folder / "_last_checkpoint").exists(), 60)  # off the commit path
    mark = json.loads((folder / "_last_checkpoint").read_text())
    assert mark["version"] % 5 == 0 and mark["version"] > 1
    checkpoint = folder / f"{mark['version']:020d}.checkpoint.parquet"
    ((adds,),) = duckdb.sql(f"select count(*) from '{checkpoint}' where add is not null").fetchall()
    assert adds == mark["version"] - 1  # one file per commit of ours (1: the interval set)
    # The entries up to the checkpoint gone (log cleanup): readers start from it.
    for version in range(mark["version"] + 1):
        (folder / f"{version:020d}.json").unlink()
    table = DeltaTable(lake.table_uri(REQUESTS))
    assert table.to_pyarrow_table(columns=["request_id"]).num_rows == 60
    assert table.transaction_version(REQUESTS.app_id(1)) == 5


def test_a_log_cleaned_up_past_a_stale_state_is_reloaded(tmp_path, monkeypatch):
    """A process whose state is older than the log's cleanup never waits for an entry
    that is gone: the last checkpoint says so, and the state is loaded again."""
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    writer.commit(rows(0, 10, BASE), {WATERMARK: 1})
    other = Lake(lake.uri, {})
    delta_rs(other).alter.set_table_properties({"delta.checkpointInterval": "3"})
    elsewhere = ZoneWriter(session_of(other), REQUESTS, 1)
    for chunk in range(1, 5):
        elsewhere.commit(rows(10 * chunk, 10, BASE), {WATERMARK: 1 + chunk})
    folder = tmp_path / "lake" / "requests" / "_delta_log"
    mark = json.loads((folder / "_last_checkpoint").read_text())["version"]
    for version in range(mark + 1):
        (folder / f"{version:020d}.json").unlink()
    monkeypatch.setattr(delta_log, "STALE_SECONDS", 0.0)
    assert mark_of(writer, WATERMARK) == 5
    written = writer.commit(rows(0, 60, BASE), {})
    assert (written.new, written.duplicates) == (10, 50)


def test_an_entry_is_written_as_delta_rs_writes_one():
    """Adds only: an ``appendOnly`` table's writer removes nothing (the comment on the
    writer's protocol says so, and the entry has no way to)."""
    from deltalake.transaction import AddAction

    add = AddAction("pull_zone_id=1/date=2026-11-20/a b.parquet", 10, {"date": "x"}, 5, True, "{}")
    lines = [
        json.loads(line) for line in entry(REQUESTS, [add], [Transaction("app", 3, 4)]).splitlines()
    ]
    info = lines[0]["commitInfo"]
    assert info["operation"] == "WRITE" and info["operationParameters"]["mode"] == "Append"
    assert info["clientVersion"].startswith("cdnlake-")
    assert lines[1]["add"]["path"] == "pull_zone_id=1/date=2026-11-20/a%20b.parquet"
    assert set(lines[1]["add"]) == {
        "path",
        "partitionValues",
        "size",
        "modificationTime",
        "dataChange",
        "stats",
    }
    assert lines[2] == {"txn": {"appId": "app", "version": 3, "lastUpdated": 4}}
    assert len(lines) == 3


def test_a_slow_checkpoint_holds_up_no_commit(tmp_path, monkeypatch):
    """The commit landing on a checkpoint version leaves the checkpoint to a thread of its
    own: commits after it land while it is being written (on a slow store it took 38 s,
    every zone of the daemon unpolled meanwhile)."""
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    delta_rs(Lake(lake.uri, {})).alter.set_table_properties({"delta.checkpointInterval": "3"})
    started, release = threading.Event(), threading.Event()
    checkpoint = DeltaTable.create_checkpoint

    def slow(table: DeltaTable) -> None:
        started.set()
        assert release.wait(120)
        checkpoint(table)

    monkeypatch.setattr(DeltaTable, "create_checkpoint", slow)
    chunk = 0
    while not started.is_set():  # up to the commit that lands on the interval
        chunk += 1
        writer.commit(rows(10 * chunk, 10, BASE + timedelta(seconds=chunk)), {WATERMARK: chunk})
    for more in range(chunk + 1, chunk + 6):  # the checkpoint still being written
        written = writer.commit(rows(10 * more, 10, BASE + timedelta(seconds=more)), {})
        assert written.new == 10
    assert not (tmp_path / "lake" / "requests" / "_delta_log" / "_last_checkpoint").exists()
    release.set()
    session_of(lake).close()  # a checkpoint under way is finished before the process ends
    assert (tmp_path / "lake" / "requests" / "_delta_log" / "_last_checkpoint").exists()


@pytest.mark.parametrize("answer", ["exists", "error"])
def test_a_commit_whose_answer_was_lost_is_known_as_ours(storage, answer):  # noqa: F811
    """The entry landed but its writer heard "exists" (the store's retry after a lost
    answer) or an error: the commit's own txnId, read back, says it landed. Its rows are
    new, not their own duplicates, and nothing is written twice."""
    lake = Lake(storage.lake_location, storage.storage_options())
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    table_log = session_of(lake).log_table(REQUESTS)._log
    assert table_log is not None
    put = table_log._entries.put_if_absent

    def lost_answer(version: int, text: str) -> bool:
        assert put(version, text)
        if answer == "error":
            raise OSError("connection reset while reading the answer")
        return False

    table_log._entries.put_if_absent = lost_answer  # type: ignore[method-assign]
    written = writer.commit(rows(0, 20, BASE), {WATERMARK: 5})
    assert (written.new, written.duplicates) == (20, 0)
    table_log._entries.put_if_absent = put  # type: ignore[method-assign]
    assert delta_rs(lake).version() == table_log.version
    assert writer.commit(rows(0, 20, BASE), {}).new == 0
    frame = pl.from_arrow(delta_rs(lake).to_pyarrow_table(columns=["request_id"]))
    assert isinstance(frame, pl.DataFrame) and frame.height == 20


def test_a_lost_answer_whose_entry_does_not_read_back_keeps_its_files(tmp_path, monkeypatch):
    """The entry landed, the store's retry answered "exists", and reading the entry back
    failed too: whether it was ours cannot be told, so the commit fails and its files stay
    (before, it counted as another writer's, and the files the table names were deleted)."""
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    writer.commit(rows(0, 10, BASE), {WATERMARK: 1})
    entries = delta_log._Entries
    put, read = entries.put_if_absent, entries.read
    state = {"lose": True, "fail_read": False}

    def lost(self: Any, version: int, text: str) -> bool:
        landed = put(self, version, text)
        if state["lose"]:
            state["lose"], state["fail_read"] = False, True
            return False  # it landed; the store's retry was refused as "exists"
        return landed

    def unread(self: Any, version: int) -> str | None:
        if state["fail_read"]:
            state["fail_read"] = False
            raise OSError("503 Slow Down")
        return read(self, version)  # type: ignore[no-any-return]

    monkeypatch.setattr(entries, "put_if_absent", lost)
    monkeypatch.setattr(entries, "read", unread)
    with pytest.raises(StorageError, match="cannot be told"):
        writer.commit(rows(10, 20, BASE), {WATERMARK: 2})
    monkeypatch.undo()
    table = delta_rs(Lake(lake.uri, {}))
    root = tmp_path / "lake" / "requests"
    named = [uri.split("/lake/requests/", 1)[1] for uri in table.file_uris()]
    assert all((root / path).exists() for path in named), "a file the log names was deleted"
    assert table.to_pyarrow_table(columns=["request_id"]).num_rows == 30  # it did land
