"""``[retention]``: ``maintain`` removes expired days as Delta removes, through the zone's
fenced commit, and vacuums their files once ``vacuum_hours`` have passed.

Real Delta tables and real commits of :class:`ZoneWriter`. The commit that expires a zone's
days carries the zone's progress unchanged: a pass committing while it is prepared
makes it prepare again, and the watermark is never moved back (tested with a pass landing
between the expiry's preparation and its commit, and with passes committing on a thread
throughout).
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from cdnlake.config import Config, build_config
from cdnlake.errors import ConfigError
from cdnlake.lake.log.progress import WATERMARK, to_ms
from cdnlake.lake.log.schema import INGEST_RUNS, REQUESTS
from cdnlake.lake.upkeep import rewrite as rewrite_module
from cdnlake.lake.upkeep.maintain import maintain
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter
from tests.conftest import make_client
from tests.lake.test_fencing import provider, stored_ids, watermark
from tests.sessions import session_for

ZONE = 77
NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)


def config_at(root: Path, **retention: int) -> Config:
    raw = {"storage": {"root": str(root / "data")}, "retention": retention}
    return build_config(raw, base_dir=root, env={})


def seed_days(session: LakeSession, first: int, last: int, zone: int = ZONE) -> ZoneWriter:
    """Two minutes of requests at 10:00 of each day of November ``first``..``last``."""
    writer = ZoneWriter(session, REQUESTS, zone)
    for day in range(first, last + 1):
        start = datetime(2026, 11, day, 10, tzinfo=UTC)
        end = start + timedelta(minutes=2)
        writer.commit(provider(zone, start, end), {WATERMARK: to_ms(end)})
    return writer


def days_held(session: LakeSession, zone: int = ZONE) -> set[date]:
    table = session.lake.open(REQUESTS)
    assert table is not None
    frame = pl.from_arrow(table.to_pyarrow_table(columns=["pull_zone_id", "date"]))
    assert isinstance(frame, pl.DataFrame)
    return set(frame.filter(pl.col("pull_zone_id") == zone)["date"].to_list())


def data_files_on_disk(root: Path, day: str) -> list[Path]:
    return list((root / "data" / "lake" / "requests").glob(f"*/date={day}/*.parquet"))


def watermarks_in_log(root: Path, zone: int = ZONE) -> list[int]:
    """The zone's watermark in every log entry that carries it, in version order."""
    app = REQUESTS.app_id(zone)
    found = []
    for path in sorted((root / "data" / "lake" / "requests" / "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            txn = json.loads(line).get("txn") if line else None
            if txn and txn["appId"] == app:
                found.append(int(txn["version"]))
    return found


def test_expired_days_leave_as_delta_removes_and_their_files_at_the_vacuum(tmp_path):
    config = config_at(tmp_path, requests_days=3, vacuum_hours=168)
    with session_for(config) as session:
        seed_days(session, 20, 26)
        before = watermark(session.lake, ZONE)
        report = maintain(session, retention=config.retention, now=NOW)
        line = next(t.line() for t in report.tables if t.table == "requests")
        assert "4 day partition(s) expired" in line
        assert days_held(session) == {date(2026, 11, d) for d in (24, 25, 26)}
        assert watermark(session.lake, ZONE) == before  # progress kept, not moved
        assert len(set(stored_ids(session.lake))) == 3 * 120
        # Removed, not deleted: readers of older versions still find them for a week.
        assert data_files_on_disk(tmp_path, "2026-11-20")
        maintain(session, retention=config.retention, retention_hours=0, now=NOW)
        assert not data_files_on_disk(tmp_path, "2026-11-20")
        assert data_files_on_disk(tmp_path, "2026-11-24")
    versions = watermarks_in_log(tmp_path)
    assert versions == sorted(versions), "a watermark went back"


def test_a_pass_landing_while_days_expire_keeps_its_rows_and_progress(tmp_path, monkeypatch):
    """A pass commits after the expiry prepared its commit: the expiry is sent back and
    prepared again, and lands without moving the pass's watermark back."""
    config = config_at(tmp_path, requests_days=3)
    with session_for(config) as session:
        seed_days(session, 20, 26)
        late_start = datetime(2026, 11, 27, 11, tzinfo=UTC)
        late_end = late_start + timedelta(minutes=5)
        prepare = rewrite_module.Rewriter._prepare
        landed: list[int] = []

        def prepared_then_a_pass(self, *args, **kwargs):
            attempt = prepare(self, *args, **kwargs)
            if not landed:  # another process's pass lands now, before the expiry commits
                with session_for(config) as other:
                    writer = ZoneWriter(other, REQUESTS, ZONE)
                    writer.commit(
                        provider(ZONE, late_start, late_end), {WATERMARK: to_ms(late_end)}
                    )
                landed.append(1)
            return attempt

        monkeypatch.setattr(rewrite_module.Rewriter, "_prepare", prepared_then_a_pass)
        maintain(session, retention=config.retention, now=NOW)
        assert landed
        assert watermark(session.lake, ZONE) == late_end
        assert days_held(session) == {date(2026, 11, d) for d in (24, 25, 26, 27)}
        ids = stored_ids(session.lake)
        assert len(ids) == len(set(ids)) == 3 * 120 + 300
    versions = watermarks_in_log(tmp_path)
    assert versions == sorted(versions), "a watermark went back"


def test_expiry_while_passes_commit_on_a_thread(tmp_path):
    """Passes of the zone commit the whole time maintain expires its days: every row of
    the kept days once, the watermark only ever forward."""
    config = config_at(tmp_path, requests_days=3)
    with session_for(config) as session:
        seed_days(session, 20, 26)
        stop = threading.Event()
        committed: list[datetime] = []

        def passes() -> None:
            with session_for(config) as other:
                writer = ZoneWriter(other, REQUESTS, ZONE)
                start = datetime(2026, 11, 27, 8, tzinfo=UTC)
                while not stop.is_set() and len(committed) < 40:
                    end = start + timedelta(seconds=30)
                    writer.commit(provider(ZONE, start, end), {WATERMARK: to_ms(end)})
                    committed.append(end)
                    start = end

        thread = threading.Thread(target=passes)
        thread.start()
        try:
            while len(committed) < 2:
                thread.join(0.01)
            maintain(session, retention=config.retention, now=NOW)
        finally:
            stop.set()
            thread.join()
        assert watermark(session.lake, ZONE) == committed[-1]
        assert min(days_held(session)) == date(2026, 11, 24)
        ids = stored_ids(session.lake)
        assert len(ids) == len(set(ids)) == 3 * 120 + 30 * len(committed)
    versions = watermarks_in_log(tmp_path)
    assert versions == sorted(versions), "a watermark went back"


def test_bookkeeping_rows_expire_by_their_time(tmp_path):
    config = config_at(tmp_path, bookkeeping_days=5)
    with session_for(config) as session:
        book = Bookkeeping(session)
        for day in (10, 20, 25):
            started = datetime(2026, 11, day, 3, tzinfo=UTC)
            book.record_run(ZONE, {"run_id": f"run-{day}", "started": started, "outcome": "ok"})
        report = maintain(session, retention=config.retention, now=NOW)
        line = next(t.line() for t in report.tables if t.table == "ingest_runs")
        assert "2 row(s) expired" in line
        table = session.lake.open(INGEST_RUNS)
        assert table is not None
        assert table.to_pyarrow_table(columns=["run_id"])["run_id"].to_pylist() == ["run-25"]


def test_nothing_expires_at_zero_days(tmp_path):
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed_days(session, 1, 3)
        maintain(session, retention=config.retention, now=NOW)
        assert len(days_held(session)) == 3


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("requests_days", 2, "retention.requests_days: must be 0 (keep forever) or at least 3"),
        ("bookkeeping_days", 1, "retention.bookkeeping_days: must be 0"),
        ("vacuum_hours", 0, "retention.vacuum_hours: must be at least 1"),
        ("requests_days", "a", "retention.requests_days: expected integer"),
        ("kept_days", 3, "retention.kept_days: unknown key"),
    ],
)
def test_bad_retention_values_are_one_line_naming_the_key(tmp_path, key, value, words):
    with pytest.raises(ConfigError) as caught:
        build_config({"retention": {key: value}}, base_dir=tmp_path, env={})
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_daemons_daily_maintenance_expires_too(tmp_path):
    from cdnlake.scheduler import Daemon

    config = config_at(tmp_path, requests_days=3)
    today = datetime.now(UTC).date()
    with session_for(config) as session:
        writer = ZoneWriter(session, REQUESTS, ZONE)
        for back in (10, 2):
            start = datetime(today.year, today.month, today.day, 1, tzinfo=UTC) - timedelta(
                days=back
            )
            end = start + timedelta(minutes=1)
            writer.commit(provider(ZONE, start, end), {WATERMARK: to_ms(end)})
        api = make_client(config)  # never called: maintenance asks nothing of the provider
        daemon = Daemon(config, api, session=session, catch_up=False)
        daemon.maintain()
        assert daemon.maintain_runs == 1
        assert days_held(session) == {today - timedelta(days=2)}
