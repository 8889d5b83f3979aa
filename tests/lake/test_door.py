"""One door for every change to ``requests``: compaction, apply-privacy and a damaged
file's removal are shares of the table's committer, under its one rule, racing passes.

Each race is forced at the instant it matters (a hook in the planning or the preparation
runs the other writer to its end), with a second session standing for another process.
A compaction carries no progress: a pass landing between its reading and its commit
stays, with its watermark; two compactions of the same files: one lands, the other takes
its files back. Before the door, these commits were delta-rs's own (``optimize``,
``create_write_transaction``, ``repair``), conflict-checked apart from the passes.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl

from cdnlake.lake.log.progress import WATERMARK
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.personal import apply_privacy as apply_privacy_module
from cdnlake.lake.personal.apply_privacy import apply_privacy
from cdnlake.lake.upkeep.maintain import compact
from cdnlake.lake.zone import damage
from cdnlake.lake.zone import writer as zone_module
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.privacy import PrivacyPolicy
from tests.lake.test_commit import BASE, rows
from tests.sessions import session_of

ZONE = 7
DAY = BASE.date().isoformat()
MINUTE = timedelta(minutes=1)


def seeded(tmp_path: Path, commits: int = 4) -> Lake:
    """``commits`` passes of a minute each (100 rows, the watermark at their minute)."""
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, ZONE)
    for i in range(commits):
        writer.commit(rows(i * 100, 100, BASE + i * MINUTE), {WATERMARK: i + 1})
    return lake


def another_process(tmp_path: Path, privacy: PrivacyPolicy | None = None) -> LakeSession:
    lake = Lake(str(tmp_path / "lake"), {})
    return LakeSession(lake, privacy) if privacy else session_of(lake)


def stored(lake: Lake) -> pl.DataFrame:
    table = lake.open(REQUESTS)
    assert table is not None
    frame = pl.from_arrow(table.to_pyarrow_table(columns=["request_id", "remote_ip"]))
    assert isinstance(frame, pl.DataFrame)
    return frame


def files_of(lake: Lake) -> set[str]:
    table = lake.open(REQUESTS)
    assert table is not None
    return {str(a["path"]) for a in lake.add_actions(REQUESTS, table, None)}


def watermark(lake: Lake) -> int | None:
    table = lake.open(REQUESTS)
    assert table is not None
    return table.transaction_version(REQUESTS.app_id(ZONE))


def entries(tmp_path: Path) -> list[list[dict[str, Any]]]:
    folder = tmp_path / "lake" / "requests" / "_delta_log"
    return [
        [json.loads(line) for line in path.read_text().splitlines() if line]
        for path in sorted(folder.glob("*.json"))
    ]


def removing_entries(tmp_path: Path) -> list[list[dict[str, Any]]]:
    """The log entries that remove files, each checked to be the door's: written by
    cdnlake's own writer, carrying no progress."""
    found = [e for e in entries(tmp_path) if any("remove" in line for line in e)]
    for entry in found:
        (info,) = [line["commitInfo"] for line in entry if "commitInfo" in line]
        assert str(info.get("engineInfo", "")).startswith("cdnlake-"), info
        assert not [line for line in entry if "txn" in line], "a removal carried progress"
    return found


def unnamed_files(tmp_path: Path) -> set[str]:
    """Data files in the table's folder that no log entry ever named."""
    folder = tmp_path / "lake" / "requests"
    named = {line["add"]["path"] for e in entries(tmp_path) for line in e if "add" in line}
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*.parquet")}
    return on_disk - named


def compact_day(session: LakeSession, choose: Any = None) -> tuple[int, int] | None:
    table = session.lake.open(REQUESTS)
    assert table is not None
    return compact(session, REQUESTS, table, ZONE, DAY, choose or (lambda actions: actions))


def test_a_pass_landing_while_a_compaction_plans_stays_with_its_watermark(tmp_path):
    lake = seeded(tmp_path)
    before = files_of(lake)
    plans: list[int] = []
    passed: set[str] = set()

    def choose(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        plans.append(len(actions))
        if len(plans) == 1:  # the compaction has read the table: a pass lands now
            other = another_process(tmp_path)
            written = ZoneWriter(other, REQUESTS, ZONE).commit(
                rows(350, 100, BASE + 3 * MINUTE + timedelta(milliseconds=50)), {WATERMARK: 9}
            )
            assert (written.new, written.duplicates) == (50, 50)
            passed.update(files_of(other.lake) - before)
        return actions

    assert compact_day(session_of(lake), choose) == (4, 0)
    assert plans == [4], "the compaction went back: a pass's progress touched it"
    frame = stored(lake)
    assert frame.height == frame["request_id"].n_unique() == 450
    assert watermark(lake) == 9  # the pass's own
    files = files_of(lake)
    assert len(passed) == 1 and passed <= files and not files & before
    assert len(files) == 2  # the compacted day and the pass's file
    (entry,) = removing_entries(tmp_path)
    # Delta's OPTIMIZE: the same rows, rearranged (a stream reader skips it)
    assert entry[0]["commitInfo"]["operation"] == "OPTIMIZE"
    changes = [line[k]["dataChange"] for line in entry for k in ("add", "remove") if k in line]
    assert len(changes) == 5 and not any(changes)
    assert not unnamed_files(tmp_path)


def test_a_compaction_landing_while_a_pass_prepares_leaves_the_pass_to_land(tmp_path, monkeypatch):
    lake = seeded(tmp_path)
    real = zone_module.write_files
    compacted: list[tuple[int, int] | None] = []

    def write_files(*args: Any) -> Any:
        if not compacted:  # the pass has read the day's files: a compaction lands now
            compacted.append(compact_day(another_process(tmp_path)))
        return real(*args)

    monkeypatch.setattr(zone_module, "write_files", write_files)
    again: list[int] = []
    monkeypatch.setattr(ZoneWriter, "_again", lambda self, attempt: again.append(1))
    written = ZoneWriter(session_of(lake), REQUESTS, ZONE).commit(
        rows(350, 100, BASE + 3 * MINUTE + timedelta(milliseconds=50)), {WATERMARK: 9}
    )
    assert compacted == [(4, 0)]
    assert (written.new, written.duplicates) == (50, 50)
    assert not again, "the pass went back: a compaction carries no progress"
    frame = stored(lake)
    assert frame.height == frame["request_id"].n_unique() == 450
    assert watermark(lake) == 9
    assert len(files_of(lake)) == 2
    assert len(removing_entries(tmp_path)) == 1


def test_two_compactions_of_the_same_files_one_lands_the_other_takes_its_files_back(tmp_path):
    lake = seeded(tmp_path)
    plans: list[int] = []
    other: list[tuple[int, int] | None] = []

    def choose(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        plans.append(len(actions))
        if not other:  # both have read the same four files: the other one lands first
            other.append(compact_day(another_process(tmp_path)))
        return actions

    assert compact_day(session_of(lake), choose) is None  # lost, planned again: nothing left
    assert other == [(4, 0)]
    assert plans == [4, 1]
    frame = stored(lake)
    assert frame.height == frame["request_id"].n_unique() == 400
    assert watermark(lake) == 4
    assert len(files_of(lake)) == 1
    assert len(removing_entries(tmp_path)) == 1
    assert not unnamed_files(tmp_path), "the loser's file was left behind"


def test_apply_privacy_racing_a_pass_rewrites_the_old_rows_and_keeps_the_pass(
    tmp_path, monkeypatch
):
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, ZONE)  # stored as received (keep)
    for i in range(3):
        addresses = rows(i * 100, 100, BASE + i * MINUTE).with_columns(
            pl.lit(f"192.0.2.{i + 10}").alias("remote_ip")
        )
        writer.commit(addresses, {WATERMARK: i + 1})
    truncate = PrivacyPolicy("truncate")
    real = apply_privacy_module._refuse_hashes
    raced: list[int] = []

    def refuse_hashes(policy: PrivacyPolicy, frame: pl.DataFrame) -> None:
        real(policy, frame)
        if not raced:  # the rewrite has read the day: a pass (the new setting) lands now
            pass_rows = rows(300, 100, BASE + 3 * MINUTE).with_columns(
                pl.lit("198.51.100.7").alias("remote_ip")
            )
            other = another_process(tmp_path, truncate)
            raced.append(ZoneWriter(other, REQUESTS, ZONE).commit(pass_rows, {WATERMARK: 9}).new)

    monkeypatch.setattr(apply_privacy_module, "_refuse_hashes", refuse_hashes)
    report = apply_privacy(LakeSession(lake, truncate), [ZONE])
    assert raced == [100]
    (outcome,) = report.zones
    assert (outcome.error, outcome.partitions, outcome.rows) == (None, 1, 300)
    frame = stored(lake)
    assert frame.height == frame["request_id"].n_unique() == 400
    assert set(frame["remote_ip"]) == {"192.0.2.0", "198.51.100.0"}
    assert watermark(lake) == 9  # the pass's
    assert len(files_of(lake)) == 2  # the rewritten day and the pass's file
    (entry,) = removing_entries(tmp_path)  # values changed: a data change
    assert all(line[k]["dataChange"] for line in entry for k in ("add", "remove") if k in line)
    assert not unnamed_files(tmp_path)


def test_a_damaged_file_leaves_the_table_through_the_door_while_a_pass_lands(tmp_path):
    lake = seeded(tmp_path, commits=2)
    table = lake.open(REQUESTS)
    assert table is not None
    victim = sorted(files_of(lake))[0]
    (tmp_path / "lake" / "requests" / victim).write_bytes(b"not parquet at all")
    before = files_of(lake)
    rewound: list[int] = []

    def before_move(zone: int, *_: Any) -> None:  # (the zone's rewind) and a pass meanwhile
        rewound.append(zone)
        other = another_process(tmp_path)
        ZoneWriter(other, REQUESTS, ZONE).commit(rows(500, 100, BASE + 5 * MINUTE), {})

    door = session_of(lake).log_table(REQUESTS)
    found = damage.unreadable_files(door, table, None, before_move)
    assert [d.path for d in found] == [victim] and rewound == [ZONE]
    files = files_of(lake)
    assert victim not in files
    assert len(files) == 2 and len(files - before) == 1  # the other file, and the pass's
    (entry,) = removing_entries(tmp_path)
    assert [line["remove"]["path"] for line in entry if "remove" in line] == [victim]
    assert not [line for line in entry if "add" in line]
    assert stored(lake).height == 200
    # Found again (a process killed before the removal sees it set aside): nothing twice.
    damage.drop(door, [victim])
    assert len(removing_entries(tmp_path)) == 1


def test_one_group_removes_a_file_once(tmp_path):
    """Two shares removing one file, queued together: one lands, the other goes back."""
    from cdnlake.lake.log.delta_log import Removal
    from cdnlake.lake.log.table import AGAIN, Prepared

    lake = seeded(tmp_path, commits=2)
    door = session_of(lake).log_table(REQUESTS)
    version = door.snapshot(ZONE).version
    (path, *_) = sorted(files_of(lake))
    partition = {"pull_zone_id": str(ZONE), "date": DAY}
    shares = [Prepared(ZONE, version, [], [], [Removal(path, partition)]) for _ in range(2)]
    outcomes = [f.result() for f in door.committer.submit(shares, patient=False)]
    assert outcomes == [version + 1, AGAIN]
    assert len(files_of(lake)) == 1
