"""`cdnlake ingest --zone ID --from --to`: a past span read again, the zone's progress left
where its passes put it. End to end with the audit: the emulator loses an hour, the audit
finds it (exit 1), the hour is served again and re-read, and the audit passes (exit 0)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import polars as pl

from cdnlake.emulator import Faults
from cdnlake.lake.log.progress import DAYS, FENCE, FRESH, WATERMARK
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.scheduler import Daemon, wait_for
from tests.conftest import (
    lake_frame,
    lake_of,
    load_test_config,
    make_client,
    run_cli,
    spawn_cli,
    start_emulator,
    write_config,
)


def progress(config: Path, zone: int) -> dict[str, int | None]:
    table = lake_of(config.parent / "data").open(REQUESTS)
    return {
        part: table.transaction_version(REQUESTS.app_id(zone, part))
        for part in (WATERMARK, DAYS, FRESH, FENCE)
    }


def hour_rows(config: Path, zone: int, hour: datetime) -> pl.DataFrame:
    frame = lake_frame(config.parent / "data")
    return frame.filter(
        (pl.col("pull_zone_id") == zone)
        & (pl.col("ts") >= hour)
        & (pl.col("ts") < hour + timedelta(hours=1))
    )


def audit(config: Path, day: str, zone: str) -> tuple[int, list[dict[str, object]]]:
    r = run_cli("--config", str(config), "audit", "--format", "json", "--date", day, "--zone", zone)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else []


def test_a_lost_hour_is_found_re_read_and_then_passes(tmp_path: Path) -> None:
    day = (datetime.now(UTC) - timedelta(days=1)).date()
    hour = datetime(day.year, day.month, day.day, 5, tzinfo=UTC)
    emu = start_emulator(
        "1234,1235:v1",
        rpm=2,
        now=None,
        frozen=False,
        faults=Faults(lose_hours=f"1234@{day}T05,1235@{day}T05"),
    )
    try:
        config = write_config(tmp_path, emu, [(1234, "v2"), (1235, "v1")])
        first = run_cli("--config", str(config), "ingest", timeout=300)
        assert first.returncode == 0, first.stdout + first.stderr
        for zone in (1234, 1235):
            code, rows = audit(config, str(day), str(zone))
            assert code == 1
            lost = [r for r in rows if r["verdict"] in ("short", "missing")]
            assert [r["hour"] for r in lost] == [f"{day}T05:00Z"]
            command = f"cdnlake ingest --zone {zone} --from {day}T05:00Z --to {day}T06:00Z"
            assert command in str(lost[0]["advice"])
            table = run_cli(
                "--config", str(config), "audit", "--date", str(day), "--zone", str(zone)
            )
            assert command in table.stdout
            assert hour_rows(config, zone, hour).height == 0

        # The provider serves the hour again; each zone reads it again.
        httpx.post(f"{emu.url}/_emulator/faults", json={"lose_hours": ""}).raise_for_status()
        for zone in (1234, 1235):
            before = progress(config, zone)
            r = run_cli(
                "--config", str(config), "ingest", "--zone", str(zone),
                "--from", f"{day}T05:00Z", "--to", f"{day}T06:00Z",
            )  # fmt: skip
            assert r.returncode == 0, r.stdout + r.stderr
            span = f"{day} 05:00:00Z..{day} 06:00:00Z"
            assert f"re-read of {span} ok (watermark unchanged)" in r.stdout
            assert progress(config, zone) == before  # no progress moved, no fence either
            rows = hour_rows(config, zone, hour)
            assert rows.height > 0 and rows["request_id"].n_unique() == rows.height
            code, verdicts = audit(config, str(day), str(zone))
            assert code == 0, verdicts
            assert {v["verdict"] for v in verdicts} == {"ok"}
            # Read again once more: nothing new, nothing doubled.
            again = run_cli(
                "--config", str(config), "ingest", "--zone", str(zone),
                "--from", f"{day}T05:00Z", "--to", f"{day}T06:00Z",
            )  # fmt: skip
            assert again.returncode == 0 and f" 0 rows, {rows.height} duplicates" in again.stdout
            assert hour_rows(config, zone, hour).height == rows.height
        runs = lake_frame(config.parent / "data", "ingest_runs")
        assert set(runs["source"].to_list()) >= {"v2-reread", "v1-reread"}
    finally:
        emu.stop()


def test_a_re_read_beside_a_running_daemon_moves_no_progress_and_doubles_nothing(
    tmp_path: Path,
) -> None:
    """A daemon polls the zone every second while the span is read again: the re-read
    takes no zone lock, so the daemon's passes of the zone go on beside it (ok, never
    busy); it stores the lost hour once, and the daemon's watermark goes on from where its
    own passes put it (never set by the re-read)."""
    day = (datetime.now(UTC) - timedelta(days=1)).date()
    hour = datetime(day.year, day.month, day.day, 5, tzinfo=UTC)
    emu = start_emulator(
        "1234", rpm=5, now=None, frozen=False, faults=Faults(lose_hours=f"1234@{day}T05")
    )
    try:
        path = write_config(
            tmp_path, emu, [(1234, "v2")], lag_seconds=2, overlap_seconds=5, page_size=50
        )
        config = load_test_config(path)
        daemon = Daemon(config, make_client(config), catch_up=False)
        daemon.start()
        try:
            assert wait_for(lambda: daemon.zone_passes.get(1234, 0) >= 1, 300, step=0.1)
            # Every answer takes a second from now on: the re-read's pages (a dozen) take
            # longer than a pass of the daemon, so a pass begins while the re-read runs.
            slow = {"lose_hours": "", "slow_rate": 1.0, "slow_seconds": 1.0}
            httpx.post(f"{emu.url}/_emulator/faults", json=slow).raise_for_status()
            passes = daemon.zone_passes[1234]
            proc = spawn_cli(
                "--config", str(path), "ingest", "--zone", "1234",
                "--from", f"{day}T04:30Z", "--to", f"{day}T06:30Z",
            )  # fmt: skip
            assert proc.wait(timeout=300) == 0
            # The daemon's passes went on beside it and after it.
            assert wait_for(lambda: daemon.zone_passes[1234] >= passes + 2, 120, step=0.1)
        finally:
            assert daemon.stop()
        frame = lake_frame(path.parent / "data")
        assert frame["request_id"].n_unique() == frame.height  # nothing doubled
        assert hour_rows(path, 1234, hour).height > 0
        code, rows = audit(path, str(day), "1234")
        assert code == 0, [r for r in rows if r["verdict"] != "ok"]
        # Every commit's watermark is the previous one's or later, and no re-read commit
        # set one of its own: each commit of rows inside the re-read span (the re-read's
        # alone: the daemon's passes are long past it) carries the watermark before it.
        table = lake_of(path.parent / "data").open(REQUESTS)
        marks = _watermark_history(table)
        values = [wm for _, wm in marks]
        assert values == sorted(values)
        reread_commits = [i for i, (adds_hour, _) in enumerate(marks) if adds_hour]
        assert reread_commits
        for i in reread_commits:
            assert i > 0 and marks[i][1] == marks[i - 1][1]
        runs = lake_frame(path.parent / "data", "ingest_runs")
        mine = runs.filter(pl.col("source") == "v2-reread")
        assert mine.height == 1 and mine["outcome"].to_list() == ["ok"]
        daemon_runs = runs.filter(pl.col("source") == "v2")
        # none busy (the pass in flight when the daemon stopped ends "stopped")
        assert set(daemon_runs["outcome"].to_list()) <= {"ok", "stopped"}
        assert "ok" in daemon_runs["outcome"].to_list()
        # Some of them began while the re-read ran.
        (started, finished) = mine.select("started", "finished").row(0)
        beside = daemon_runs.filter((pl.col("started") > started) & (pl.col("started") < finished))
        assert beside.height >= 1, (started, finished, daemon_runs.select("started", "finished"))
    finally:
        emu.stop()


def _watermark_history(table: object) -> list[tuple[bool, int]]:
    """For each commit that set the zone's watermark, in order: whether it added rows of
    the lost hour (a file wholly inside 05:00..06:00 yesterday: only the re-read stores
    rows there), and the watermark it set."""
    from deltalake import DeltaTable

    assert isinstance(table, DeltaTable)
    log = Path(table.table_uri.removeprefix("file://")) / "_delta_log"
    day = (datetime.now(UTC) - timedelta(days=1)).date()
    lo = datetime(day.year, day.month, day.day, 5, tzinfo=UTC)
    hi = lo + timedelta(hours=1)
    out: list[tuple[bool, int]] = []
    for entry in sorted(log.glob("*.json")):
        mark = None
        adds_span = False
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            txn = action.get("txn")
            if txn and txn["appId"] == REQUESTS.app_id(1234):
                mark = int(txn["version"])
            add = action.get("add")
            if add and add.get("stats"):
                stats = json.loads(add["stats"])
                low = stats.get("minValues", {}).get("ts")
                high = stats.get("maxValues", {}).get("ts")
                if low and high and lo <= _instant(low) and _instant(high) < hi:
                    adds_span = True
        if mark is not None:
            out.append((adds_span, mark))
    return out


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_bad_re_read_usage_is_one_line_exit_2(tmp_path: Path) -> None:
    emu = start_emulator("1234,1235", now=None, frozen=False)
    try:
        config = str(write_config(tmp_path, emu, [(1234, "v2"), (1235, "v2")]))
        now = datetime.now(UTC)
        old = (now - timedelta(days=3, hours=1)).strftime("%Y-%m-%dT%H:%MZ")
        soon = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%MZ")
        later = (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%MZ")
        cases = {
            ("--from", soon, "--to", later): "no --zone",
            ("--zone", "1234", "--zone", "1235", "--from", soon, "--to", later): "one --zone",
            ("--zone", "1234", "--from", soon): "go together",
            ("--zone", "1234", "--from", "noon", "--to", soon): "expected a time",
            ("--zone", "1234", "--from", old, "--to", soon): "retention",
            ("--zone", "1234", "--from", soon, "--to", later): "in the future",
            ("--zone", "1234", "--from", soon, "--to", soon): "not before --to",
            ("--zone", "999", "--from", soon, "--to", soon): "not configured",
            ("--zone", "1234", "--from", "0001-01-01T00:00+01:00", "--to", soon): "years 1",
            ("--zone", "1234", "--from", soon, "--to", "9999-12-31T23:00-05:00"): "years 1",
        }
        for args, needle in cases.items():
            r = run_cli("--config", config, "ingest", *args)
            assert r.returncode == 2, (args, r.stdout, r.stderr)
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and r.stdout == "", (args, r.stderr)
            if needle != "no --zone":
                assert needle in lines[0], (args, lines)
            else:
                assert "exactly one zone" in lines[0]
        assert not (tmp_path / "data" / "lake" / "requests").exists()  # nothing was read
    finally:
        emu.stop()


def test_a_failed_or_fenced_re_read_says_so_and_to_run_it_again() -> None:
    """Not a pass's words ("reached", "the next pass reads from"): what the re-read did."""
    from cdnlake.errors import FencedError, TransportError
    from cdnlake.ingest.result import ZoneResult, classify
    from cdnlake.lake.zone.writer import ZoneWriter

    start = datetime(2026, 11, 23, 5, tzinfo=UTC)
    span = "2026-11-23 05:00:00Z..2026-11-23 06:00:00Z"

    def ended(exc: Exception | None, rows: int = 0) -> str:
        result = ZoneResult(
            1234, "v2-reread", window_from=start, window_to=start + timedelta(hours=1)
        )
        result.rows = rows
        result.outcome, result.error = classify(exc)
        return result.summary()

    failed = ended(TransportError("the provider did not answer"))
    assert failed.startswith(f"zone 1234 [v2-reread] re-read of {span} failed: ")
    assert (
        "the provider did not answer; nothing was stored (watermark unchanged): run it again"
        in failed
    )
    assert "reached" not in failed

    writer = object.__new__(ZoneWriter)  # the refusal's own text, as a commit raises it
    writer.zone_id, writer.spec = 1234, REQUESTS
    fenced = ended(writer._fenced(), rows=10)
    assert "the next pass" not in fenced and "reached" not in fenced
    assert "what was stored before it stays (watermark unchanged): run it again" in fenced
    assert f"re-read of {span} failed: FencedError: zone 1234: its requests progress was" in fenced
    assert isinstance(writer._fenced(), FencedError)

    ok = ended(None)
    assert ok.startswith(f"zone 1234 [v2-reread] re-read of {span} ok (watermark unchanged): ")
