"""Daily reports: every format from the same queries, hostile text inert, empty days honest."""

from __future__ import annotations

import csv
import json
import re
from datetime import date

import pytest

from cdnlake.reports.build import AGENT_SECTIONS, SECTIONS, write_reports
from tests.conftest import run_cli
from tests.fixture_lake import build_fixture_lake
from tests.sessions import session_for, session_of

DAY = date(2026, 11, 20)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("r")
    config = build_fixture_lake(root)
    paths = write_reports(config, DAY, session=session_for(config))
    return config, {p.name: p for p in paths}


def test_files_are_named_by_zone_and_date(written):
    _, files = written
    assert "report-all-2026-11-20.html" in files
    assert "report-all-2026-11-20.json" in files
    assert "report-all-2026-11-20.md" in files
    assert "report-all-2026-11-20.hit_ratio.csv" in files
    # user_agents is read once and written as its browser, system and crawler families;
    # completeness (the day's audit) comes from the lake's audit_days, not a named query;
    # the status classes are the status codes, grouped; clients (how addresses were
    # stored) comes from the zones' [privacy] marks
    csvs = [f for f in files if f.endswith(".csv")]
    assert len(csvs) == len(SECTIONS) - 1 + len(AGENT_SECTIONS) + 3
    assert "report-all-2026-11-20.completeness.csv" in files
    assert "report-all-2026-11-20.status_classes.csv" in files
    assert "report-all-2026-11-20.ai_crawler.csv" in files
    assert "report-all-2026-11-20.clients.csv" in files


def test_formats_agree_with_each_other_and_with_sql(written):
    _, files = written
    doc = json.loads(files["report-all-2026-11-20.json"].read_text())
    hit = doc["sections"]["hit_ratio"]["rows"][0]
    assert (hit["request_hit_ratio_pct"], hit["byte_hit_ratio_pct"]) == (40.0, 54.79)
    rows = list(csv.DictReader(open(files["report-all-2026-11-20.hit_ratio.csv"])))
    assert rows[0]["request_hit_ratio_pct"] == "40.0" and rows[0]["byte_hit_ratio_pct"] == "54.79"
    md = files["report-all-2026-11-20.md"].read_text()
    assert "| 40.00 % |" in md and "| 54.79 % |" in md  # the hit_ratio row, same figures
    html = files["report-all-2026-11-20.html"].read_text()
    assert "40.00 %" in html and "54.79 %" in html
    assert "HIT, REVALIDATED, STALE, UPDATING" in html  # says what counted as a hit


def test_html_is_self_contained_and_hostile_text_is_inert(written):
    _, files = written
    html = files["report-all-2026-11-20.html"].read_text()
    assert "<script" not in html.lower()
    assert "onerror=" not in html.replace("onerror=alert(1)&gt;", "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


def test_csv_defuses_formulas(written):
    _, files = written
    cells = [
        c for f in files.values() if f.suffix == ".csv" for row in csv.reader(open(f)) for c in row
    ]
    assert any("HYPERLINK" in c for c in cells)
    for c in cells:
        assert not c.startswith(("=", "@")), c
        assert not (len(c) > 1 and c[0] in "+-" and not re.fullmatch(r"-?[\d.]+", c)), c


def test_markdown_escapes_everything(written):
    _, files = written
    md = files["report-all-2026-11-20.md"].read_text()
    assert "<script>" not in md and "\\<script\\>" in md
    assert "Mozilla" not in md or "\\|" in md
    widths: list[int] = []
    for line in [*md.splitlines(), ""]:
        if line.startswith("|"):
            widths.append(len(re.findall(r"(?<!\\)\|", line)))
        elif widths:
            assert len(set(widths)) == 1, "a stranger's text broke a table's columns"
            widths = []


def test_empty_day_is_an_honest_empty_report(tmp_path):
    config = build_fixture_lake(tmp_path)
    paths = write_reports(
        config, date(2026, 11, 15), formats=("html", "json", "md"), session=session_for(config)
    )
    doc = json.loads(next(p for p in paths if p.suffix == ".json").read_text())
    assert doc["empty"] is True
    assert doc["sections"]["overview"]["rows"][0]["requests"] == 0
    html = next(p for p in paths if p.suffix == ".html").read_text()
    assert "No traffic was recorded for this day" in html


def test_report_cli(tmp_path):
    config = build_fixture_lake(tmp_path / "root")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[storage]\nroot = "{config.storage.root}"\n[[zones]]\nid = 1\n[[zones]]\nid = 2\n'
    )
    out = tmp_path / "out"
    r = run_cli(
        "--config",
        str(cfg),
        "report",
        "--date",
        "2026-11-20",
        "--zone",
        "1",
        "--format",
        "html,json",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "report-zone-1-2026-11-20.html",
        "report-zone-1-2026-11-20.json",
    ]
    for args, needle in [
        (["report", "--date", "2026-13-01"], "YYYY-MM-DD"),
        (["report", "--date", "2999-01-01"], "future"),
        (["report", "--zone", "77"], "77"),
        (["report", "--format", "pdf", "--date", "2026-11-20"], "pdf"),
    ]:
        bad = run_cli("--config", str(cfg), *args)
        assert bad.returncode == 2 and needle in bad.stderr, (args, bad.stderr)


def test_every_text_field_hostile_at_once(tmp_path):
    """One day whose every text field is an attack: all exports stay inert and well-formed."""
    import polars as pl

    from cdnlake.lake.log.schema import REQUEST_SCHEMA, REQUESTS
    from cdnlake.lake.log.store import Lake
    from cdnlake.lake.zone.writer import ZoneWriter
    from tests.fixture_lake import fixture_config

    evil = '<script>alert(1)</script>=HYPERLINK("x")|`|\n\r'
    config = fixture_config(tmp_path, zones=(7,))
    row = {name: evil for name, dtype in REQUEST_SCHEMA.items() if dtype == "string"}
    row.update(ts=None, status_code=500, bytes_sent=10, body_bytes_sent=None, asn=None)
    frame = pl.DataFrame([row]).with_columns(
        pl.lit("2026-11-20T01:00:00").str.to_datetime(time_unit="ms", time_zone="UTC").alias("ts")
    )
    writer = ZoneWriter(session_of(Lake.from_config(config.storage)), REQUESTS, 7)
    writer.commit(frame.select(list(REQUEST_SCHEMA)), {})
    paths = write_reports(config, DAY, session=session_for(config))
    html = next(p for p in paths if p.suffix == ".html").read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "No traffic was recorded" not in html
    for f in (p for p in paths if p.suffix == ".csv"):
        for line in csv.reader(open(f)):
            assert not any(c.startswith(("=", "@", "+", "-")) and len(c) > 1 for c in line)
    md = next(p for p in paths if p.suffix == ".md").read_text()
    assert "<script>" not in md
    doc = json.loads(next(p for p in paths if p.suffix == ".json").read_text())
    mix = doc["sections"]["cache_status_mix"]["rows"]
    assert mix[0]["cache_status"] == evil  # stored and exported unchanged, as data


def test_json_carries_the_panels_and_rate_changes_in_points(written):
    _, files = written
    doc = json.loads(files["report-all-2026-11-20.json"].read_text())
    assert doc["top_paths"]["by_requests"][0] == {
        "host": "a.example",
        "path": "/x",
        "requests": 3,
        "bytes": 6000,
        "misses": 0,
        "share_pct": 30.0,
    }
    assert [r["path"] for r in doc["top_paths"]["by_misses"]] == ["/y", "/z"]
    assert doc["top_referers"][0] == {"referer_host": "(direct)", "requests": 7, "pct": 70.0}
    agents = doc["user_agents"]
    assert set(agents) == {"browser", "os", "tool", "crawler", "ai_crawler"}
    assert {r["tool"] for r in agents["tool"]} >= {"curl"}  # a tool, not a browser
    assert "curl" not in {r["browser"] for r in agents["browser"]}
    assert sum(r["requests"] for kind in ("browser", "tool", "crawler") for r in agents[kind]) == 10
    assert doc["countries"][0]["country_code"] in ("DE", "US")
    changes = {r["metric"]: r for r in doc["sections"]["day_over_day"]["rows"]}
    # 5xx: 0 % the day before, 30 % this day: +30 points, no relative change.
    assert changes["rate_5xx_pct"]["change_pp"] == 30.0
    assert changes["rate_5xx_pct"]["change_pct"] is None
    assert changes["requests"]["change_pct"] == 400.0 and changes["requests"]["change_pp"] is None


def test_range_report_from_the_command_line(tmp_path):
    config = build_fixture_lake(tmp_path / "root")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[storage]\nroot = "{config.storage.root}"\n[[zones]]\nid = 1\n')
    out = tmp_path / "out"
    args = ("--config", str(cfg), "report", "--from", "2026-11-19", "--to", "2026-11-20")
    r = run_cli(*args, "--format", "json,html,md,csv", "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "report-all-2026-11-19--2026-11-20.json").read_text())
    trend = doc["sections"]["daily_trend"]["rows"]
    assert [(t["date"], t["requests"]) for t in trend] == [("2026-11-19", 2), ("2026-11-20", 10)]
    assert doc["sections"]["period_overview"]["rows"][0]["requests"] == 12
    html = (out / "report-all-2026-11-19--2026-11-20.html").read_text()
    assert "2026-11-19 to 2026-11-20" in re.sub(r"<[^>]+>", "", html)  # the title, as read
    assert 'id="chart-requests"' in html
    for bad, needle in [
        (["--from", "2026-11-20"], "go together"),
        (["--from", "2026-11-20", "--to", "2026-11-19"], "after"),
        (["--date", "2026-11-20", "--from", "2026-11-19", "--to", "2026-11-20"], "not both"),
        (["--from", "2026-11-19", "--to", "2999-01-01"], "future"),
    ]:
        r = run_cli("--config", str(cfg), "report", *bad)
        assert r.returncode == 2 and needle in r.stderr, (bad, r.stderr)
