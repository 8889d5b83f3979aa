"""Issue 31, a newcomer's first hour: one line where a traceback was, and no silent wrongs.

Each case runs the CLI as a user does (a subprocess on a real lake)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import pytest

from tests.cli.test_loud_cli import fixture_config, one_line_error
from tests.conftest import KEY, run_cli, start_emulator, write_config
from tests.sessions import session_for


def root_config(tmp_path: Path, root: Path, extra: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'[storage]\nroot = "{root}"\n[[zones]]\nid = 1\n' + extra)
    return path


@pytest.mark.parametrize(
    "args",
    [["ingest"], ["daemon"], ["import-v1", "--zone", "1", "LOG"]],
    ids=["ingest", "daemon", "import-v1"],
)
def test_a_storage_root_that_cannot_be_written_is_one_line(tmp_path, args):
    log = tmp_path / "day.log"
    log.write_text("")
    args = [str(log) if a == "LOG" else a for a in args]
    nowhere = Path("/proc/cdnlake-nowhere/data")  # not even root can make a folder there
    cfg = root_config(tmp_path, nowhere)
    result = run_cli("--config", str(cfg), *args, timeout=60)
    one_line_error(result, f"storage.root: cannot create or write to {nowhere}")
    if os.geteuid() != 0:  # root writes anywhere else
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        cfg = root_config(tmp_path, locked)
        result = run_cli("--config", str(cfg), *args, timeout=60)
        one_line_error(result, f"storage.root: cannot create or write to {locked}")


def test_a_damaged_lake_file_is_named_in_one_line(tmp_path):
    cfg = fixture_config(tmp_path)
    damaged = sorted((tmp_path / "root" / "lake" / "requests").rglob("*.parquet"))[0]
    damaged.write_bytes(damaged.read_bytes()[:100])  # cut short: no footer
    for args in (
        ["sql", "SELECT count(*) FROM requests"],
        ["report", "--date", "2026-11-20", "--out", str(tmp_path / "out")],
    ):
        result = run_cli("--config", str(cfg), *args)
        one_line_error(result, f"lake file {damaged} cannot be read", code=1)
        assert "cdnlake maintain --check-all" in result.stderr


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        (["zone=9999"], "--param zone: pull zone 9999 is not configured (configured: 1, 2)"),
        (["top_n=-5"], "--param top_n: expected INTEGER (a whole number >= 1), got '-5'"),
        (["top_n=0"], "--param top_n: expected INTEGER (a whole number >= 1)"),
    ],
)
def test_named_query_values_out_of_range_are_refused(tmp_path, params, needle):
    cfg = fixture_config(tmp_path)
    query = "top_paths" if params[0].startswith("top_n") else "hit_ratio"
    args = ["sql", "--query", query, "--param", "day=2026-11-20"]
    for p in params:
        args += ["--param", p]
    one_line_error(run_cli("--config", str(cfg), *args), needle)


def test_a_range_upside_down_is_refused(tmp_path):
    cfg = fixture_config(tmp_path)
    result = run_cli(
        "--config", str(cfg), "sql", "--query", "daily_trend",
        "--param", "from_day=2026-11-20", "--param", "to_day=2026-11-19",
    )  # fmt: skip
    one_line_error(result, "--param from_day: 2026-11-20 is after to_day 2026-11-19")


def test_an_empty_gz_file_fails_the_import(tmp_path):
    cfg = fixture_config(tmp_path)
    empty = tmp_path / "2026-11-20.log.gz"
    empty.write_bytes(b"")
    whole = tmp_path / "quiet.log.gz"
    whole.write_bytes(gzip.compress(b""))  # a day without traffic: a real, empty gzip file
    result = run_cli("--config", str(cfg), "import-v1", "--zone", "1", str(empty), str(whole))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{empty}: 0 lines" in result.stdout and "FAILED" in result.stdout
    assert "empty (0 bytes)" in result.stdout and "1 file(s) FAILED" in result.stdout
    assert f"{whole}: 0 lines, 0 new rows, 0 duplicates dropped, 0 rejected - ok" in result.stdout
    rejected = run_cli(
        "--config", str(cfg), "sql", "SELECT kind, file FROM rejected_lines", "--format", "json"
    )
    assert json.loads(rejected.stdout) == [{"kind": "damaged file", "file": str(empty)}]


def test_migrate_lake_on_an_empty_root_says_there_is_nothing(tmp_path):
    cfg = root_config(tmp_path, tmp_path / "fresh")
    result = run_cli("--config", str(cfg), "migrate-lake")
    assert result.returncode == 0, result.stderr
    assert "there is no lake at" in result.stdout and "Delta already" not in result.stdout
    lake = fixture_config(tmp_path)
    assert "is Delta already" in run_cli("--config", str(lake), "migrate-lake").stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sql", "SELECT 1", "--limit", "-1"], "--limit: expected a whole number of rows >= 0"),
        (["maintain", "--retention-hours", "-1"], "expected a whole number of hours >= 0"),
        (["status", "--max-lag", "-1"], "expected a whole number of seconds >= 0"),
    ],
)
def test_numbers_are_named_in_their_unit(tmp_path, args, needle):
    cfg = fixture_config(tmp_path)
    one_line_error(run_cli("--config", str(cfg), *args), needle)


def test_null_is_written_one_way(tmp_path):
    cfg = fixture_config(tmp_path)
    query = "SELECT NULL AS a, [NULL, 1] AS b, {'x': NULL, 'y': 'q'} AS c, MAP {1: NULL} AS m"
    out = run_cli("--config", str(cfg), "sql", query).stdout
    assert "None" not in out, out
    assert "│ NULL │ [NULL, 1] │ {x: NULL, y: q} │ {1: NULL} │" in out


def test_show_tables_lists_the_lake_relations_only(tmp_path):
    cfg = fixture_config(tmp_path)
    shown = run_cli("--config", str(cfg), "sql", "SHOW TABLES", "--format", "json")
    names = [row["name"] for row in json.loads(shown.stdout)]
    assert names == [
        "archive_parts", "audit_days", "erasures", "ingest_gaps", "ingest_runs", "rejected_lines",
        "requests", "requests_hourly", "shield_events",
    ]  # fmt: skip
    # what the views are built on still works underneath
    hourly = run_cli(
        "--config", str(cfg), "sql", "SELECT sum(requests) AS n FROM requests_hourly",
        "--format", "json",
    )  # fmt: skip
    assert json.loads(hourly.stdout) == [{"n": 12}]


def test_a_format_named_twice_is_written_and_printed_once(tmp_path):
    cfg = fixture_config(tmp_path)
    out = tmp_path / "out"
    result = run_cli(
        "--config", str(cfg), "report", "--date", "2026-11-20", "--format", "html,html",
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [str(out / "report-all-2026-11-20.html")]


def test_markdown_alone_is_printed(tmp_path):
    cfg = fixture_config(tmp_path)
    out = tmp_path / "out"
    result = run_cli(
        "--config", str(cfg), "report", "--date", "2026-11-20", "--format", "md",
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    written = out / "report-all-2026-11-20.md"
    assert result.stdout == written.read_text()
    assert result.stdout.startswith("# CDN daily report, 2026-11-20")
    assert result.stderr.strip() == f"cdnlake: wrote {written}"


def test_json_counts_are_whole_numbers_and_buckets_are_named(tmp_path):
    cfg = fixture_config(tmp_path)
    out = tmp_path / "out"
    run_cli(
        "--config", str(cfg), "report", "--date", "2026-11-20", "--format", "json,md",
        "--out", str(out),
    )  # fmt: skip
    report = json.loads((out / "report-all-2026-11-20.json").read_text())
    rows = {r["metric"]: r for r in report["sections"]["day_over_day"]["rows"]}
    for metric in ("requests", "bytes"):
        assert isinstance(rows[metric]["today"], int), rows[metric]
        assert isinstance(rows[metric]["previous_day"], int), rows[metric]
    assert rows["requests"]["today"] == 10
    assert report["partial_days"] == {}
    markdown = (out / "report-all-2026-11-20.md").read_text()
    assert "Bucket" not in markdown
    assert "| Edge location | Requests |" in markdown and "| Hour (UTC) | Requests |" in markdown


def test_a_range_without_data_speaks_of_a_period(tmp_path):
    from cdnlake.reports.build import write_reports
    from tests.fixture_lake import build_fixture_lake

    config = build_fixture_lake(tmp_path / "root")
    out = tmp_path / "out"
    write_reports(
        config,
        date(2026, 10, 1),
        end=date(2026, 10, 3),
        formats=("md", "html"),
        out=out,
        session=session_for(config),
    )
    markdown = (out / "report-all-2026-10-01--2026-10-03.md").read_text()
    assert "No traffic was recorded for this period." in markdown and "this day" not in markdown
    html = (out / "report-all-2026-10-01--2026-10-03.html").read_text()
    assert "this day" not in html and "percentage points" not in html  # no changes shown


def test_a_report_of_days_outside_the_lake_says_so(tmp_path):
    """Not an empty report and exit 0: one line naming the days the lake holds."""
    cfg = fixture_config(tmp_path)
    out = tmp_path / "out"
    for days in (["--from", "2026-10-01", "--to", "2026-10-03"], ["--date", "2020-01-01"]):
        result = run_cli("--config", str(cfg), "report", *days, "--out", str(out))
        one_line_error(result, "is outside what the lake holds (2026-11-")
    assert not out.exists()
    empty = tmp_path / "empty.toml"
    empty.write_text(f'[storage]\nroot = "{tmp_path / "nothing"}"\n[[zones]]\nid = 1\n')
    result = run_cli("--config", str(empty), "report", "--date", "2026-11-20")
    one_line_error(result, "the lake holds no requests yet")


def test_a_report_names_its_folder_and_formats_in_a_line(tmp_path):
    cfg = fixture_config(tmp_path)
    out = tmp_path / "out"
    result = run_cli("--config", str(cfg), "report", "--date", "2026-11-20", "--out", str(out))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    written = sorted(out.iterdir())
    assert len(written) > 10 and len(lines) == 1, lines
    assert lines[0].startswith(f"wrote {len(written)} files to {out}: report-all-2026-11-20 ")
    assert ".html" in lines[0] and "--verbose" in lines[0]
    verbose = run_cli(
        "--config", str(cfg), "report", "--date", "2026-11-20", "--out", str(out), "--verbose"
    )
    assert sorted(verbose.stdout.split()) == sorted(str(p) for p in written)


def test_partial_days_are_said_wherever_their_figures_appear(tmp_path):
    """Today is still running, and the lake's first day starts when its first window did."""
    emu = start_emulator("1234", rpm=5, now=None, frozen=False)
    try:
        cfg = write_config(tmp_path, emu, zones=[(1234, "v2")])
        assert run_cli("--config", str(cfg), "ingest").returncode == 0
    finally:
        emu.stop()
    runs = run_cli("--config", str(cfg), "sql", "SELECT min(window_from) AS f FROM ingest_runs",
                   "--format", "json")  # fmt: skip
    first = datetime.fromisoformat(json.loads(runs.stdout)[0]["f"].replace("Z", "+00:00"))
    today = datetime.now(UTC).date()
    if first.date() == today or first.time() < time(0, 2):
        pytest.skip("the clock is too near midnight for a partial first day")
    out = tmp_path / "out"

    def report(*args: str) -> None:
        result = run_cli(
            "--config", str(cfg), "report", *args, "--format", "json,md,html", "--out", str(out)
        )
        assert result.returncode == 0, result.stderr

    report("--date", str(today))
    stem = out / f"report-all-{today}"
    data = json.loads(stem.with_suffix(".json").read_text())
    assert data["partial_days"][str(today)].startswith("the day is still running")
    running = f"{today} is a partial day (the day is still running, figures up to "
    assert running in stem.with_suffix(".html").read_text()
    assert md_plain(stem.with_suffix(".md").read_text()).count(running) == 1
    html = stem.with_suffix(".html").read_text()
    assert "vs day before (a partial day)" in html and "This day (partial)" in html

    second = first.date() + timedelta(days=1)
    report("--date", str(second))
    stem = out / f"report-all-{second}"
    data = json.loads(stem.with_suffix(".json").read_text())
    held = f"the lake holds zone 1234 from {first:%H:%M} UTC on"
    assert data["partial_days"] == {str(first.date()): held}
    assert f"The day before, {first.date()}, is a partial day ({held})" in md_plain(
        stem.with_suffix(".md").read_text()
    )
    assert "Day before (partial)" in stem.with_suffix(".html").read_text()

    report("--from", str(first.date()), "--to", str(today))
    data = json.loads((out / f"report-all-{first.date()}--{today}.json").read_text())
    trend = {r["date"]: r["partial"] for r in data["sections"]["daily_trend"]["rows"]}
    assert trend[str(first.date())] and trend[str(today)] and not trend[str(second)]
    # and in the charts themselves: both days hatched in each of the four, with a key
    html = (out / f"report-all-{first.date()}--{today}.html").read_text()
    assert html.count('<rect class="partial-band"') == 2 * 4
    assert html.count(f"partial day: {first.date():%m-%d}, {today:%m-%d}<") == 4


def md_plain(markdown: str) -> str:
    return markdown.replace("\\", "")


def test_status_names_the_lake_it_looked_at(tmp_path):
    cfg = root_config(tmp_path, tmp_path / "elsewhere")
    result = run_cli("--config", str(cfg), "status")
    assert result.returncode == 1 and "never ingested" in result.stdout
    where = tmp_path / "elsewhere" / "lake"
    assert f"never ingested into the lake at {where}: zone 1 (storage.root" in result.stdout


_WITHOUT = """
import sys
sys.modules[sys.argv[1]] = None  # as if the extra were not installed
from cdnlake.cli.main import main
raise SystemExit(main(sys.argv[2:]))
"""


def test_a_missing_extra_is_named(tmp_path):
    cfg = fixture_config(tmp_path, '[engine]\nspark_remote = "sc://127.0.0.1:1"\n')
    for args in (["sql", "SELECT 1"], ["report", "--date", "2026-11-20"]):
        result = subprocess.run(
            [sys.executable, "-c", _WITHOUT, "sqlglot", "--config", str(cfg), *args,
             "--engine", "spark"],
            capture_output=True, text=True, timeout=120, env={**_env(), "CDNLAKE_ACCESS_KEY": KEY},
        )  # fmt: skip
        one_line_error(result, "pip install 'cdnlake[spark]'")
        assert "sqlglot" in result.stderr


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def test_the_demo_names_a_command_that_runs(tmp_path, monkeypatch):
    from cdnlake.cli.demo_cmd import command_name

    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    script = venv_bin / "cdnlake"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # as `make demo` runs it: not on PATH
    monkeypatch.setattr(sys, "argv", [".venv/bin/cdnlake", "demo"])
    assert command_name() == ".venv/bin/cdnlake"
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")  # an activated venv
    assert command_name() == "cdnlake"
    monkeypatch.setattr(sys, "argv", ["/x/cdnlake/__main__.py", "demo"])  # python -m cdnlake
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    assert command_name() == ".venv/bin/cdnlake"  # the script beside the interpreter
    script.unlink()
    assert command_name() == ".venv/bin/python -m cdnlake"


def test_shield_event_logs_take_the_day_as_every_command_does(tmp_path):
    emu = start_emulator("1234")
    try:
        path = tmp_path / "config.toml"
        path.write_text(f'[api]\nbase_url = "{emu.url}"\n')
        day = emu.clock.now().date()
        results = [
            run_cli("--config", str(path), "api", "shield", "event-logs", "--zone", "5001",
                    "--date", text)
            for text in (day.isoformat(), day.strftime("%m-%d-%Y"))
        ]  # fmt: skip
    finally:
        emu.stop()
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert json.loads(results[0].stdout) == json.loads(results[1].stdout)
