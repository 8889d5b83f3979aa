"""`cdnlake sql`: free SQL, named queries, three output formats, clear errors."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

from cdnlake.warehouse.relations import RELATIONS
from tests.conftest import KEY, run_cli
from tests.fixture_lake import build_fixture_lake


def setup(tmp_path):
    config = build_fixture_lake(tmp_path / "root")
    path = tmp_path / "config.toml"
    path.write_text(
        f'[storage]\nroot = "{config.storage.root}"\n[[zones]]\nid = 1\n[[zones]]\nid = 2\n'
    )
    return path


def test_formats(tmp_path):
    cfg = setup(tmp_path)
    q = "SELECT request_id, user_agent FROM requests WHERE request_id IN ('r06','r07') ORDER BY 1"
    as_json = json.loads(run_cli("--config", str(cfg), "sql", q, "--format", "json").stdout)
    assert as_json == [
        {"request_id": "r06", "user_agent": "<script>alert('ua')</script>"},
        {"request_id": "r07", "user_agent": "=cmd('/C calc')"},
    ]
    rows = list(
        csv.reader(io.StringIO(run_cli("--config", str(cfg), "sql", q, "--format", "csv").stdout))
    )
    assert rows[0] == ["request_id", "user_agent"]
    assert rows[2][1] == "'=cmd('/C calc')"  # formula defused for spreadsheets
    table = run_cli("--config", str(cfg), "sql", q).stdout
    assert "r06" in table and "(2 rows)" in table


def test_named_query_and_list(tmp_path):
    cfg = setup(tmp_path)
    r = run_cli(
        "--config",
        str(cfg),
        "sql",
        "--query",
        "hit_ratio",
        "--param",
        "day=2026-11-20",
        "--param",
        "zone=1",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["request_hit_ratio_pct"] == 37.5
    listing = run_cli("sql", "--list").stdout
    assert "hit_ratio_by" in listing and "--param dimension=<VARCHAR>" in listing


def test_errors_are_one_line_exit_2(tmp_path):
    cfg = setup(tmp_path)
    for args, needle in [
        (["sql", "SELEKT 1"], "syntax"),
        (["sql", "--query", "hit_ratio"], "--param day"),
        (["sql", "--query", "hit_ratio", "--param", "day=yesterday"], "expected DATE"),
        (["sql", "SELECT 1", "--file", "x.sql"], "not both"),
        (["sql", "--query", "hit_ratio", "--file", "x.sql"], "--query NAME"),
        (["sql", "--file", str(tmp_path / "missing.sql")], "cannot read"),
        (["sql", "--file", str(tmp_path)], "cannot read"),
        (["sql", "-- only a comment;"], "no SQL statement"),
        (["sql", "SELECT * FROM nope"], "nope"),
    ]:
        r = run_cli("--config", str(cfg), *args)
        assert r.returncode == 2, (args, r.stderr)
        assert needle.lower() in r.stderr.lower() and len(r.stderr.strip().splitlines()) == 1


def run_with_stdin(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdnlake", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
        timeout=120,
    )


def test_sql_from_a_file_and_standard_input(tmp_path):
    cfg = setup(tmp_path)
    script = tmp_path / "q.sql"
    script.write_text(
        "CREATE TEMP VIEW misses AS SELECT * FROM requests WHERE cache_status = 'MISS';\n"
        "/* the last statement's result is printed; it needs no ; */\n"
        "SELECT count(*) AS n FROM misses"
    )
    r = run_cli("--config", str(cfg), "sql", "--file", str(script), "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "n" and r.stdout.splitlines()[1].isdigit()
    piped = run_with_stdin(
        "--config", str(cfg), "sql", "-", "--format", "csv", stdin=script.read_text()
    )
    assert piped.returncode == 0 and piped.stdout == r.stdout, piped.stderr
    empty = run_with_stdin("--config", str(cfg), "sql", stdin="  \n")
    assert empty.returncode == 2
    assert empty.stderr == "cdnlake: error: sql: no SQL statement in standard input\n"


def test_a_root_without_a_lake_is_an_error_naming_it(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[storage]\nroot = "{tmp_path / "nothing"}"\n[[zones]]\nid = 1\n')
    for args in (
        ["sql", "SELECT count(*) FROM requests"],
        ["sql", "--query", "hit_ratio", "--param", "day=2026-11-20"],
        ["sql", "SELECT count(*) FROM ingest_runs; SELECT 1"],
    ):
        r = run_cli("--config", str(cfg), *args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert r.stdout == ""
        lake = tmp_path / "nothing" / "lake"
        assert r.stderr.startswith(f"cdnlake: error: no lake at {lake}: "), r.stderr
        assert len(r.stderr.splitlines()) == 1
    # SQL that reads no relation of the lake needs none.
    r = run_cli("--config", str(cfg), "sql", "SELECT 1 AS one", "--format", "csv")
    assert r.returncode == 0 and r.stdout == "one\n1\n", r.stderr


def test_a_lake_holding_only_some_tables_is_a_lake(tmp_path):
    """A lake with `requests` alone answers `ingest_runs` with no rows, not an error."""
    cfg = setup(tmp_path)
    r = run_cli(
        "--config", str(cfg), "sql", "SELECT count(*) AS n FROM audit_days", "--format", "csv"
    )
    assert r.returncode == 0 and r.stdout == "n\n0\n", r.stderr


def test_help_names_every_relation():
    text = run_cli("sql", "--help").stdout
    described = text.split("positional arguments")[0]
    for name in RELATIONS:
        assert name in described, name
    assert "audit_days" in described and "requests_hourly" in described
