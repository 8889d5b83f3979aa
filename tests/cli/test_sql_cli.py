"""`cdnlake sql`: free SQL, named queries, three output formats, clear errors."""

from __future__ import annotations

import csv
import io
import json

from tests.conftest import run_cli
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
        (["sql"], "give either"),
        (["sql", "SELECT * FROM nope"], "nope"),
    ]:
        r = run_cli("--config", str(cfg), *args)
        assert r.returncode == 2, (args, r.stderr)
        assert needle.lower() in r.stderr.lower() and len(r.stderr.strip().splitlines()) == 1
