"""``--vacuum-now`` and the files it deletes: a writer whose snapshot names a file vacuumed
since chooses its files again and carries on (once; a file missing again is an error), and
``--vacuum-now`` runs only while no other process writes the lake: it holds every writer
off, or refuses in one line naming who writes."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdnlake.config import build_config
from cdnlake.coordination.sole import SoleDaemon, lock_path
from cdnlake.errors import DaemonRunningError, DataError, StorageError, ZoneBusyError
from cdnlake.lake.log.files import prepare
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.dedup import Dedup, Reads
from cdnlake.lake.zone.lock import writers_held, zone_lock
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.warehouse.db import Warehouse
from tests.conftest import run_cli
from tests.lake.test_commit import BASE, rows
from tests.sessions import session_of

ZONE = 7


@pytest.fixture
def storage(tmp_path, lake_kind, request):
    raw: dict = {"storage": {"root": str(tmp_path / "data")}}
    if lake_kind == "s3":
        server = request.getfixturevalue("s3_server")
        raw["storage"]["lake_uri"] = f"s3://{server.new_bucket()}/lake"
        raw["storage"]["s3"] = {"endpoint_url": server.url, "allow_http": True}
    return build_config(raw, base_dir=tmp_path, env={}).storage


def compact_and_vacuum(lake: Lake) -> list[str]:
    """Another process compacts the table and vacuums it at once: the small files are
    gone from storage, their rows in one new file."""
    table = DeltaTable(lake.table_uri(REQUESTS), storage_options=lake.storage_options)
    table.optimize.compact()
    return table.vacuum(0, dry_run=False, enforce_retention_duration=False)


def test_a_file_vacuumed_under_a_writer_is_chosen_again_and_the_pass_carries_on(storage):
    lake = Lake.from_config(storage)
    other = ZoneWriter(session_of(lake), REQUESTS, ZONE)
    other.commit(rows(0, 100, BASE), {})
    other.commit(rows(100, 100, BASE + timedelta(seconds=1)), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, ZONE)  # a process of its own
    real = writer.table.snapshot
    vacuumed: list[str] = []

    def snapshot_then_vacuum(*args, **kwargs):  # the interleaving, forced
        seen = real(*args, **kwargs)
        if not vacuumed:
            vacuumed.extend(compact_and_vacuum(lake))
        return seen

    writer.table.snapshot = snapshot_then_vacuum  # type: ignore[method-assign]
    # 150..199 are there (in the compacted file now), 200..249 are new.
    written = writer.commit(rows(150, 100, BASE + timedelta(seconds=1, milliseconds=50)), {})
    assert len([p for p in vacuumed if p.endswith(".parquet")]) == 2, vacuumed
    assert (written.new, written.duplicates) == (50, 50)
    # And the next commit reads the table as it is now, with nothing missing.
    again = writer.commit(rows(240, 20, BASE + timedelta(seconds=1, milliseconds=140)), {})
    assert (again.new, again.duplicates) == (10, 10)
    table = DeltaTable(lake.table_uri(REQUESTS), storage_options=lake.storage_options)
    ids = table.to_pyarrow_table(columns=["request_id"])["request_id"].to_pylist()
    assert sorted(ids) == [f"r{i:08d}" for i in range(260)]


def test_a_file_vacuumed_under_a_reader_is_said_once_then_read_as_the_table_is_now(storage):
    """A process's reader (:meth:`LakeSession.reader`: ``status``, ``/healthz``, the
    audit, the report's checks) whose state names files another process compacted and
    vacuumed away between its snapshot and its read: that read fails in one line, and the
    next brings the same state up to date (not reopened) and answers; it never fails twice
    for the files."""
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, ZONE)
    writer.commit(rows(0, 100, BASE), {})
    writer.commit(rows(100, 100, BASE + timedelta(seconds=1)), {})
    session = session_of(Lake(lake.uri, lake.storage_options))  # the reading process
    state = session.reader(REQUESTS)
    vacuumed: list[str] = []

    def reader_then_vacuum(spec):  # the interleaving, forced: the files go after the read
        table = session.reader(spec)
        if spec is REQUESTS and not vacuumed:
            vacuumed.extend(compact_and_vacuum(lake))
        return table

    warehouse = Warehouse(storage, session.lake, tables=reader_then_vacuum)

    def count() -> int:
        with warehouse.connect([REQUESTS.name]) as con:
            (found,) = con.execute("SELECT count(DISTINCT request_id) FROM requests").fetchone()
        return int(found)

    with pytest.raises(DataError, match=r"removed while the table was read.*run it again"):
        count()
    assert len([p for p in vacuumed if p.endswith(".parquet")]) == 2, vacuumed
    assert count() == 200  # and again: the state is the table as it is now
    assert count() == 200
    assert session.reader(REQUESTS) is state  # brought up to date, never opened anew


def test_a_file_missing_again_is_an_error_not_a_loop(tmp_path):
    lake = Lake(str(tmp_path / "lake"), {})
    ZoneWriter(session_of(lake), REQUESTS, ZONE).commit(rows(0, 100, BASE), {})
    ZoneWriter(session_of(lake), REQUESTS, ZONE).commit(rows(100, 100, BASE), {})
    day = [BASE.date().isoformat()]
    stale = Lake.add_actions(
        REQUESTS, lake.open(REQUESTS), [("pull_zone_id", "=", str(ZONE)), ("date", "in", day)]
    )
    compact_and_vacuum(lake)
    # A table state that keeps naming the gone files: the second miss is an error.
    door = session_of(lake).log_table(REQUESTS)
    dedup = Dedup(door, lambda *a: None, current=lambda zone, days: stale)
    frame = prepare(REQUESTS, ZONE, rows(50, 10, BASE + timedelta(milliseconds=50)))
    with pytest.raises(StorageError, match="not found in the lake's store"):
        dedup.new_rows(frame, stale, Reads())
    # Chosen again from the table as it is now (the default): the repeats are found.
    fresh = Dedup(door, lambda *a: None)
    new, damaged = fresh.new_rows(frame, stale, Reads())
    assert new.height == 0 and damaged == []


def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text('[storage]\nroot = "data"\n[[zones]]\nid = 7\n')
    return path


def test_vacuum_now_refuses_in_one_line_naming_the_daemon_that_writes(tmp_path):
    path = config_file(tmp_path)
    work = tmp_path / "data" / "work"
    daemon = SoleDaemon(work, "edge-7:4242")
    daemon.start([], lambda key, wait: None)
    try:
        for command in (
            ["forget", "--ip", "192.0.2.10", "--vacuum-now"],
            ["maintain", "--vacuum-now"],
            ["maintain", "--apply-privacy", "--vacuum-now"],
            ["maintain", "--retention-hours", "0"],  # as --vacuum-now: removed a moment ago
        ):
            done = run_cli("--config", str(path), *command)
            assert done.returncode == 1, (command, done.stdout, done.stderr)
            (line,) = done.stderr.strip().splitlines()
            assert "edge-7:4242" in line and "refused" in line and "--vacuum-now" in line, line
            assert done.stdout == ""  # nothing done
        # Without --vacuum-now, forget runs beside the daemon.
        assert run_cli("--config", str(path), "forget", "--ip", "192.0.2.10").returncode == 0
    finally:
        daemon.stop()
    done = run_cli("--config", str(path), "forget", "--ip", "192.0.2.10", "--vacuum-now")
    assert done.returncode == 0, done.stderr
    assert "the old bytes have left storage (--vacuum-now)" in done.stdout
    done = run_cli("--config", str(path), "maintain", "--retention-hours", "0")
    assert done.returncode == 0, done.stderr
    assert "the old bytes have left storage (--retention-hours 0)" in done.stdout


def test_vacuum_now_waits_for_a_pass_in_flight_then_holds_every_writer_off(tmp_path):
    work = tmp_path / "work"
    locks = work / "locks"
    zones = [(REQUESTS.name, 7), (REQUESTS.name, 8), ("shield_events", 9)]
    in_flight = threading.Event()
    release = threading.Event()

    def a_pass() -> None:  # another local process's pass of zone 8
        with zone_lock(locks, REQUESTS.name, 8):
            in_flight.set()
            release.wait(10)

    passing = threading.Thread(target=a_pass)
    passing.start()
    assert in_flight.wait(10)
    try:
        busy = r"pull zone 8 is being ingested .*\(.+:\d+\)"
        with (
            pytest.raises(ZoneBusyError, match=busy),
            writers_held(lock_path(work), locks, zones, who="me", wait=0.3),
        ):
            pass
    finally:
        threading.Timer(0.5, release.set).start()
    with writers_held(lock_path(work), locks, zones, who="host:1 (forget --vacuum-now)", wait=10):
        for table, zone in zones:  # no pass starts
            with pytest.raises(ZoneBusyError), zone_lock(locks, table, zone):
                pass
        with pytest.raises(DaemonRunningError, match=r"forget --vacuum-now"):  # no daemon
            SoleDaemon(work, "late:1").start([], lambda key, wait: None)
    passing.join()
    with zone_lock(locks, REQUESTS.name, 8):  # all let go
        daemon = SoleDaemon(work, "late:1")
        daemon.start([], lambda key, wait: None)
        daemon.stop()


def test_a_sole_writer_blocks_vacuum_now_of_another_zone_set_too(tmp_path):
    """A daemon running: refused at once, not after a wait."""
    work = tmp_path / "work"
    daemon = SoleDaemon(work, "edge-9:99")
    daemon.start([], lambda key, wait: None)
    try:
        with (
            pytest.raises(ZoneBusyError, match=r"edge-9:99"),
            writers_held(lock_path(work), work / "locks", [], who="me", wait=60),
        ):
            pass
    finally:
        daemon.stop()
