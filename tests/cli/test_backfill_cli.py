"""``cdnlake backfill`` over HTTP against the emulator's storage zone: a month backfilled
then joined by the API, both naming schemes and two writers, a part that closes while a
backfill runs, a cut part, a wrong password, Ctrl-C and a rerun, the daemon's pickup."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from cdnlake.config import Secret, load_config
from cdnlake.emulator import Emulator, Faults
from cdnlake.emulator.archive import ArchiveLimits
from tests.conftest import (
    FAST_RETRY,
    KEY,
    NOW,
    ingest_all,
    lake_frame,
    lake_ids,
    load_test_config,
    make_client,
    start_emulator,
    truth_ids,
)
from tests.sessions import session_for

ZONE = 1234
PASSWORD = "storage-ro-key"
DAY = timedelta(days=1)


def archived_emulator(days: int, *, legacy: int = 2, **extra: object) -> Emulator:
    """Zone 1234 archived for ``days`` before NOW (the first ``legacy`` in the older naming
    scheme), a few requests an hour, a part per writer and day."""
    extra.setdefault("archive_limits", ArchiveLimits(max_open_seconds=86400, idle_seconds=86400))
    return start_emulator(
        "1234:archived", rpm=0.1, archive_days=days, archive_legacy_days=legacy, **extra
    )


def archive_config(tmp_path: Path, emu: Emulator, *, archive_seconds: int = 900) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f"""[api]
base_url = "{emu.url}"
video_url = "{emu.url}"
logging_url = "{emu.url}"
timeout_seconds = 10
retry_attempts = 4
retry_max_seconds = 5
[storage]
root = "data"
[ingest]
lag_seconds = 300
page_size = 2000
requests_per_window = 1000
[schedule]
poll_seconds = 1
archive_seconds = {archive_seconds}
[[zones]]
id = {ZONE}
name = "www"
[zones.archive]
storage_zone = "cdnlake-archive"
folder = "zone-{ZONE}"
password_env = "ARCHIVE_PASSWORD"
url = "{emu.storage_url}"
"""
    )
    return path


def cli(config: Path, *args: str, password: str = PASSWORD) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CDNLAKE_ACCESS_KEY": KEY, "ARCHIVE_PASSWORD": password}
    return subprocess.run(
        [sys.executable, "-m", "cdnlake", "--config", str(config), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def archived_ids(emu: Emulator, start: datetime, end: datetime) -> set[str]:
    """What the archive holds of ``[start, end)``: every request the provider served."""
    return truth_ids(emu, ZONE, start, end)


def assert_once(config: Path | object) -> list[str]:
    ids = lake_ids(config, ZONE)  # type: ignore[arg-type]
    repeated = [i for i, n in Counter(ids).items() if n > 1]
    assert not repeated, f"{len(repeated)} request ids stored twice"
    return ids


def test_a_month_backfilled_then_joined_by_the_api(tmp_path):
    emu = archived_emulator(30, legacy=28)  # a part a day, then two writers
    try:
        path = archive_config(tmp_path, emu)
        done = cli(path, "backfill", "--zone", str(ZONE))
        assert done.returncode == 0, done.stderr
        first_day = (NOW - 30 * DAY).date()
        start = datetime(first_day.year, first_day.month, first_day.day, tzinfo=UTC)
        assert "31 day(s)" in done.stdout and "0 open" not in done.stderr
        # One line per part on a pipe; the older scheme, then two writers side by side.
        lines = [line for line in done.stdout.splitlines() if ".gzip:" in line]
        assert any("_1.gzip:" in line for line in lines)
        assert any("_100-0-" in line for line in lines) and any("_101-0-" in line for line in lines)
        # The API joins: the last three days come again, each request once.
        config = load_test_config(path)
        results = ingest_all(config, emu)
        assert all(r.ok for r in results), [r.error for r in results]
        ids = assert_once(config)
        assert archived_ids(emu, start, NOW - timedelta(minutes=10)) <= set(ids)
        runs = lake_frame(config, "ingest_runs")
        assert runs.filter(pl.col("source") == "v2")["duplicates_dropped"].sum() > 0

        # A backfilled day past the API's retention is audited against the statistics.
        old = (NOW - 10 * DAY).date().isoformat()
        audited = cli(path, "audit", "--date", old, "--format", "csv")
        assert audited.returncode == 0, audited.stdout + audited.stderr
        assert audited.stdout.count(",ok,") == 24, audited.stdout

        # The report takes the backfilled day whole: its first part reads it from midnight.
        first_report = cli(
            path,
            "report",
            "--date",
            first_day.isoformat(),
            "--format",
            "json",
            "--out",
            str(tmp_path / "reports"),
        )
        assert first_report.returncode == 0, first_report.stderr
        (written,) = (tmp_path / "reports").glob("*.json")
        payload = json.loads(written.read_text())
        assert payload["partial_days"] == {}

        # status: the days the archive holds, all imported.
        shown = cli(path, "status")
        assert f"archive: zone {ZONE} 31 day(s)" in shown.stdout
        assert "31 imported" in shown.stdout

        # A rerun reads nothing again.
        again = cli(path, "backfill", "--zone", str(ZONE))
        assert again.returncode == 0 and ".gzip:" not in again.stdout
        assert "0 part(s) imported now" in again.stdout
    finally:
        emu.stop()


def test_two_writers_of_one_hour_and_the_older_scheme(tmp_path):
    emu = archived_emulator(4)
    try:
        path = archive_config(tmp_path, emu)
        day = (NOW - 2 * DAY).date()
        done = cli(
            path, "backfill", "--zone", str(ZONE), "--from", str(day - DAY), "--to", str(day)
        )
        assert done.returncode == 0, done.stderr
        parts = lake_frame(load_test_config(path), "archive_parts")
        names = sorted(p.rsplit("/", 1)[1] for p in parts["path"].to_list())
        assert names[0] == f"{(day - DAY):%d}_1.gzip"  # the older scheme
        writers = {n.split("_")[1].split("-")[0] for n in names if n.startswith(f"{day:%d}_")}
        assert writers == {"100", "101"}
        frame = lake_frame(load_test_config(path))
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        assert set(frame["request_id"]) == archived_ids(emu, start - DAY, start + DAY)
        assert_once(path.parent / "data")
    finally:
        emu.stop()


def test_a_part_closed_while_a_backfill_ran(tmp_path):
    """Listed open (it may grow), left; it grows and closes while the run imports the
    rest; the next run imports it whole, once."""
    from cdnlake.client.storage import StorageZoneClient
    from cdnlake.ingest.archive_client import StorageZoneArchive
    from cdnlake.ingest.backfill import Backfill

    emu = archived_emulator(2, frozen=True)
    try:
        config = load_test_config(archive_config(tmp_path, emu))
        zone = config.zones[0]
        client = StorageZoneClient(
            make_client(config, retry=FAST_RETRY),
            "cdnlake-archive",
            Secret(PASSWORD),
            password_env="ARCHIVE_PASSWORD",
            base_url=emu.storage_url,
        )
        store = StorageZoneArchive(client)
        with session_for(config) as session:
            job = Backfill(config, session, store, zone, clock=emu.clock.now)
            listing = job.listing()
            assert listing.open, "today's parts are open"
            # They grow until midnight closes them; an hour later they are seen closed.
            emu.clock.advance(12 * 3600 + 70 * 60)
            first = job.run(listing)
            assert first.ok
            later = job.listing()
            assert {p.path for p in later.todo} >= {p.path for p in listing.open}
            second = job.run(later)
            assert second.ok and second.rows > 0
        ids = assert_once(config)
        today = NOW.date()
        start = datetime(today.year, today.month, today.day, tzinfo=UTC) - 2 * DAY
        assert archived_ids(emu, start, NOW) <= set(ids)
    finally:
        emu.stop()


def test_a_cut_part_is_loud_and_keeps_what_it_held(tmp_path):
    day = (NOW - DAY).date()  # in the newer naming scheme
    emu = archived_emulator(3, faults=Faults(archive_cut=f"zone-{ZONE}/*/{day:%d}_101-*"))
    try:
        path = archive_config(tmp_path, emu)
        done = cli(path, "backfill", "--zone", str(ZONE))
        assert done.returncode == 1
        assert "damaged" in done.stderr and "FAILED" in done.stdout
        config = load_test_config(path)
        assert_once(config)
        rejected = lake_frame(config, "rejected_lines")
        failed = sum(".gzip:" in line and "FAILED" in line for line in done.stdout.splitlines())
        assert rejected.filter(pl.col("kind") == "damaged file").height == failed >= 1
        # The other parts are all in; the rerun reads nothing again and stays loud.
        again = cli(path, "backfill", "--zone", str(ZONE))
        assert again.returncode == 1 and ".gzip:" not in again.stdout
        assert f"{day:%d}_101-0-" in again.stderr and "damaged after line" in again.stderr
        shown = cli(path, "status")
        assert f"DAMAGED part(s): {day}" in shown.stdout
    finally:
        emu.stop()


def test_a_wrong_password_is_one_line_and_exit_2(tmp_path):
    emu = archived_emulator(1)
    try:
        path = archive_config(tmp_path, emu)
        done = cli(path, "backfill", "--zone", str(ZONE), password="not-the-password")
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "ARCHIVE_PASSWORD" in lines[0] and "refused" in lines[0]
        assert "not-the-password" not in done.stderr + done.stdout
        unset = subprocess.run(
            [sys.executable, "-m", "cdnlake", "--config", str(path), "backfill", "--zone", "1234"],
            capture_output=True,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "ARCHIVE_PASSWORD"},
        )
        assert unset.returncode == 2 and "ARCHIVE_PASSWORD is not set" in unset.stderr
        # A mistyped folder lists as empty: one line naming the key, not "0 days" and 0.
        path.write_text(path.read_text().replace(f'folder = "zone-{ZONE}"', 'folder = "zone"'))
        mistyped = cli(path, "backfill", "--zone", str(ZONE))
        assert mistyped.returncode == 2, mistyped.stdout + mistyped.stderr
        lines = mistyped.stderr.strip().splitlines()
        assert len(lines) == 1 and "zones[0].archive.folder" in lines[0], lines
    finally:
        emu.stop()


def test_ctrl_c_then_a_rerun_finishes_exactly_once(tmp_path):
    # Many small parts (a writer's part closes at 15 lines), so the run is still going
    # when its first part's line comes.
    emu = archived_emulator(3, archive_limits=ArchiveLimits(max_lines=15, idle_seconds=86400))
    try:
        path = archive_config(tmp_path, emu)
        env = {**os.environ, "CDNLAKE_ACCESS_KEY": KEY, "ARCHIVE_PASSWORD": PASSWORD}
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdnlake", "--config", str(path), "backfill", "--zone", "1234"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:  # readiness: the first parts' lines
            seen.append(line)
            if sum(".gzip:" in s for s in seen) >= 2:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 1, err
        assert "interrupted" in err or "SIGINT" in err
        whole = sum(".gzip:" in s and "- ok" in s for s in seen + out.splitlines())
        again = cli(path, "backfill", "--zone", str(ZONE))
        assert again.returncode == 0, again.stderr
        before = re.search(r"(\d+) imported before, (\d+) to import", again.stdout)
        assert before is not None and int(before[1]) >= whole >= 2 and int(before[2]) > 0
        ids = assert_once(path.parent / "data")
        today = NOW.date()
        start = datetime(today.year, today.month, today.day, tzinfo=UTC) - 3 * DAY
        assert set(ids) == archived_ids(emu, start, NOW + timedelta(minutes=10))
    finally:
        emu.stop()


@pytest.mark.timeout(120)
def test_the_daemon_picks_up_closed_parts(tmp_path):
    emu = archived_emulator(2)
    try:
        path = archive_config(tmp_path, emu, archive_seconds=1)
        env = {**os.environ, "CDNLAKE_ACCESS_KEY": KEY, "ARCHIVE_PASSWORD": PASSWORD}
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdnlake", "--config", str(path), "daemon"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert proc.stderr is not None
            for line in proc.stderr:  # readiness: the archive job's own line
                if f"zone {ZONE}: archive:" in line:
                    break
            else:
                pytest.fail("the daemon never ran its archive job")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
        config = load_test_config(path)
        parts = lake_frame(config, "archive_parts")
        assert parts.height and set(parts["state"]) == {"imported"}
        assert_once(config)
        today = NOW.date()
        start = datetime(today.year, today.month, today.day, tzinfo=UTC) - 2 * DAY
        assert archived_ids(emu, start, start + DAY) <= set(lake_ids(config, ZONE))
    finally:
        emu.stop()


class _Fleet:
    """A fleet that holds the zone here (under lease generation ``generation``) or not."""

    def __init__(self, generation: int | None) -> None:
        self.generation = generation

    @contextlib.contextmanager
    def claim(self, key: str):  # type: ignore[no-untyped-def]
        from cdnlake.coordination.fleet import Hold

        yield None if self.generation is None else Hold(0.0, threading.Event(), self.generation)


def test_the_archive_job_runs_only_where_the_zone_is_held_and_is_fenced(tmp_path):
    """Within the fleet's assignment: a daemon that does not hold the zone imports nothing;
    the one that does commits under its lease's generation, so a stale holder's commits are
    refused as a pass's would be."""
    from cdnlake.lake.log.progress import FENCE, holder_of
    from cdnlake.lake.log.schema import REQUESTS
    from cdnlake.scheduler import Daemon

    emu = archived_emulator(2)
    try:
        env = {"CDNLAKE_ACCESS_KEY": KEY, "ARCHIVE_PASSWORD": PASSWORD}
        config = load_config(archive_config(tmp_path, emu), env=env)
        zone = config.zones[0]
        api = make_client(config, retry=FAST_RETRY)
        with session_for(config) as session:
            elsewhere = Daemon(config, api, fleet=_Fleet(None), session=session, catch_up=False)
            assert elsewhere.pick_up_archive(zone) is None
            assert lake_ids(config, ZONE) == []
            here = Daemon(config, api, fleet=_Fleet(3), session=session, catch_up=False)
            result = here.pick_up_archive(zone)
            assert result is not None and result.ok and result.rows > 0
            fence = session.log_table(REQUESTS).snapshot(ZONE).mark(FENCE)
            assert fence is not None and holder_of(fence) == 3
            stale = Daemon(config, api, fleet=_Fleet(2), session=session, catch_up=False)
            emu.clock.advance(2 * 86400)  # new parts close; the stale holder may not commit them
            refused = stale.pick_up_archive(zone)
            assert refused is not None and refused.failed and not refused.rows
            assert all("taken by another holder" in (p.result.error or "") for p in refused.failed)
        assert_once(config)
        parts = lake_frame(config, "archive_parts")
        assert "closed" in set(parts["state"])  # listed, refused: left for the holder
    finally:
        emu.stop()


def test_the_progress_moves_only_forward_and_never_past_the_end():
    """The bar's bytes: a part counted by its lines at the bytes a line of the parts read
    before, never more than its size (a part that packs more lines a byte would push the
    bar past it, then back as it ends), nor made heavier by a part that failed unread."""
    from cdnlake.cli.backfill_cmd import _Pace
    from cdnlake.ingest.archive_parts import Part
    from cdnlake.ingest.backfill import Listing
    from cdnlake.ingest.result import ZoneResult

    def part(name: str, size: int) -> Part:
        return Part(f"2026/11/{name}", NOW.date(), size, "", NOW, "100", 0)

    parts = [part("a", 1000), part("b", 1000), part("c", 1000), part("d", 1000)]
    pace = _Pace()
    pace.listed(Listing(closed=parts, todo=list(parts)))
    seen: list[float] = []

    def step(p: Part, lines: int, *, done: bool = False) -> None:
        result = ZoneResult(ZONE, "archive")
        result.lines = lines
        if done:
            pace.finished(p, result)
        else:
            pace.reading(p, result)
        seen.append(pace.bytes_done())
        left = pace.left()
        assert left is None or left >= 0, pace.line()

    step(parts[0], 0, done=True)  # its download failed: no line read
    step(parts[1], 10)
    step(parts[1], 10, done=True)  # 100 bytes a line
    step(parts[2], 50)  # 5000 bytes at that pace: more than the part
    step(parts[2], 50, done=True)
    step(parts[3], 5)
    step(parts[3], 5, done=True)
    assert seen == sorted(seen), seen
    assert max(seen) <= 4000 and seen[-1] == 4000


def test_the_progress_ends_whole_when_another_run_took_a_part():
    from cdnlake.cli.backfill_cmd import _Pace
    from cdnlake.ingest.archive_parts import Part
    from cdnlake.ingest.backfill import Listing
    from cdnlake.ingest.result import ZoneResult

    parts = [Part(f"2026/11/{n}", NOW.date(), 1000, "", NOW, "100", 0) for n in "ab"]
    pace = _Pace()
    pace.listed(Listing(closed=parts, todo=list(parts)))
    pace.skipped(parts[0])  # the daemon's archive job imported it meanwhile
    result = ZoneResult(ZONE, "archive")
    result.lines = 10
    pace.finished(parts[1], result)
    assert pace.bytes_done() == pace.total_bytes == 1000
    assert pace.line().startswith("1/1 parts"), pace.line()


def test_backfill_says_what_it_does_from_its_first_line(tmp_path):
    """Listing a year of month folders takes seconds: the first line says so at once."""
    emu = archived_emulator(1)
    try:
        path = archive_config(tmp_path, emu)
        done = cli(path, "backfill", "--zone", str(ZONE))
        assert done.returncode == 0, done.stderr
        first = done.stdout.splitlines()[0]
        assert first == (
            f"backfill: zone {ZONE}: listing its archive in storage zone cdnlake-archive "
            "(every day it holds)..."
        ), done.stdout
    finally:
        emu.stop()
