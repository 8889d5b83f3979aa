"""Slices and comparisons (issue 50): a report of a slice of the traffic, and its changes
against the previous period or a week before, checked against DuckDB computing the same
figures straight from the same rows (not through sql/)."""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime, timedelta
from typing import Any

import duckdb
import polars as pl
import pytest

from cdnlake.errors import UsageError
from cdnlake.lake.log.schema import REQUEST_SCHEMA, REQUESTS, polars_schema
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.reports.build import collect, write_reports
from cdnlake.reports.compare import compared_period
from cdnlake.warehouse.named import Slice
from tests.conftest import run_cli
from tests.fixture_lake import fixture_config
from tests.sessions import session_for, session_of

FIRST, LAST = date(2026, 11, 7), date(2026, 11, 21)
HOSTS = ["a.example", "b.example", "img.example"]
PATHS = ["/", "/img/logo.png", "/img/hero.jpg", "/api/items", "/api/cart", "/docs/guide"]
COUNTRIES = ["DE", "US", "FR", None]
CODES = [200, 200, 200, 304, 404, 500, 503]
STATUSES = ["HIT", "HIT", "MISS", "EXPIRED", "BYPASS"]
HITS = ("HIT", "STALE", "UPDATING", "REVALIDATED")


def traffic() -> pl.DataFrame:
    """Two zones' requests over two weeks, every field varied (seeded: the same each run)."""
    rng = random.Random(50)
    rows: list[dict[str, Any]] = []
    day = FIRST
    while day <= LAST:
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        for i in range(rng.randint(60, 140)):
            host, path = rng.choice(HOSTS), rng.choice(PATHS)
            rows.append(
                {
                    "pull_zone_id": rng.choice([1, 1, 2]),
                    "ts": start + timedelta(seconds=rng.randrange(86_400)),
                    "request_id": f"s-{day}-{i}",
                    "cache_status": rng.choice(STATUSES),
                    "status_code": rng.choice(CODES),
                    "bytes_sent": rng.randint(100, 50_000),
                    "edge_location": "DE",
                    "scheme": "https",
                    "host": host,
                    "path": path,
                    "url": f"https://{host}{path}",
                    "remote_ip": f"192.0.2.{rng.randrange(40)}",
                    "country_code": rng.choice(COUNTRIES),
                    "user_agent": "curl/8.11.0",
                    "source": "v2",
                }
            )
        day += timedelta(days=1)
    frame = pl.DataFrame(rows).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    schema = polars_schema(REQUEST_SCHEMA)
    return pl.DataFrame(
        {n: frame[n].cast(t) if n in frame.columns else pl.Series(n, [None] * frame.height, t)
         for n, t in schema.items()}
    ).with_columns(frame["pull_zone_id"].cast(pl.Int64))  # fmt: skip


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("slices")
    config = fixture_config(root)
    rows = traffic()
    session = session_of(Lake.from_config(config.storage))
    for (zone,), part in rows.partition_by(["pull_zone_id"], as_dict=True).items():
        ZoneWriter(session, REQUESTS, int(zone)).commit(part.select(list(REQUEST_SCHEMA)), {})
    con = duckdb.connect()
    con.register("rows", rows.to_arrow())
    return config, con


WHERE = """
WHERE CAST(ts AS DATE) BETWEEN $first AND $last
  AND ($host IS NULL OR host = $host)
  AND ($prefix IS NULL OR starts_with(path, $prefix))
  AND ($country IS NULL OR coalesce(country_code, '-') = $country)
  AND ($class IS NULL OR CAST(status_code // 100 AS VARCHAR) || 'xx' = $class)
  AND ($cache IS NULL OR cache_status = $cache)
"""


def truth(con, sql: str, piece: Slice, first: date, last: date) -> list[tuple[Any, ...]]:
    """``sql`` (reading ``sliced``) over the rows of the slice and days, by DuckDB alone."""
    p = piece.params()
    params = {
        "first": first,
        "last": last,
        "host": p.get("host"),
        "prefix": p.get("path_prefix"),
        "country": p.get("country"),
        "class": p.get("status_class"),
        "cache": p.get("cache_status"),
    }
    return con.execute(f"WITH sliced AS (SELECT * FROM rows {WHERE}) {sql}", params).fetchall()


def headline(con, piece: Slice, first: date, last: date) -> dict[str, float | None]:
    requests, sent, hits, hit_bytes, e4, e5 = truth(
        con,
        "SELECT count(*), coalesce(sum(bytes_sent), 0),"
        f" count(*) FILTER (WHERE cache_status IN {HITS}),"
        f" coalesce(sum(bytes_sent) FILTER (WHERE cache_status IN {HITS}), 0),"
        " count(*) FILTER (WHERE status_code BETWEEN 400 AND 499),"
        " count(*) FILTER (WHERE status_code BETWEEN 500 AND 599) FROM sliced",
        piece,
        first,
        last,
    )[0]
    pct = lambda n, d: round(100.0 * n / d, 2) if d else None  # noqa: E731
    return {
        "requests": requests,
        "bytes": sent,
        "request_hit_ratio_pct": pct(hits, requests),
        "byte_hit_ratio_pct": pct(hit_bytes, sent),
        "rate_4xx_pct": pct(e4, requests),
        "rate_5xx_pct": pct(e5, requests),
    }


def near(got: Any, want: Any, within: float = 0.011) -> bool:
    """Equal, or both rounded to 2 places from the same value (each engine its own way)."""
    if got is None or want is None:
        return got is want
    return abs(float(got) - float(want)) <= within


def change(now: Any, before: Any, pct: bool) -> float | None:
    if now is None or before is None:
        return None
    if pct:
        return round(now - before, 2)
    return round(100.0 * (now - before) / before, 2) if before else None


SLICES = [
    Slice(),
    Slice.parse(host="B.example"),
    Slice.parse(path_prefix="/img/"),
    Slice.parse(country="de"),
    Slice.parse(country="-"),
    Slice.parse(status_class="5XX"),
    Slice.parse(cache_status="miss"),
    Slice.parse(host="a.example", path_prefix="/api/", status_class="2xx", cache_status="HIT"),
]


@pytest.mark.parametrize("piece", SLICES, ids=lambda s: s.slug() or "all")
def test_a_daily_reports_slice_and_its_changes_are_duckdbs_over_the_same_rows(lake, piece):
    config, con = lake
    for how in ("previous", "week"):
        data = collect(config, LAST, piece=piece, compare=how, session=session_for(config))
        before, _ = compared_period(LAST, None, how)
        now, then = headline(con, piece, LAST, LAST), headline(con, piece, before, before)
        got = {**data.sections["overview"].first(), **data.sections["hit_ratio"].first()}
        assert (got["requests"], got["bytes"]) == (now["requests"], now["bytes"])
        assert near(got["request_hit_ratio_pct"], now["request_hit_ratio_pct"])
        assert near(got["byte_hit_ratio_pct"], now["byte_hit_ratio_pct"])
        assert near(got["requests_change_pct"], change(now["requests"], then["requests"], False))
        assert near(
            got["request_hit_ratio_pct_change_pp"],
            change(now["request_hit_ratio_pct"], then["request_hit_ratio_pct"], True),
            0.02,  # a difference of two rounded figures
        )
        # By hour (from requests_hourly, or the rows when sliced by host, path or country).
        hours = truth(con, "SELECT hour(ts), count(*) FROM sliced GROUP BY 1 ORDER BY 1",
                      piece, LAST, LAST)  # fmt: skip
        errors = data.sections["errors_by_hour"]
        assert [(r[0], r[1]) for r in errors.rows] == hours
        old = dict(truth(con, "SELECT hour(ts), count(*) FROM sliced GROUP BY 1", piece,
                         before, before))  # fmt: skip
        at = errors.columns.index("requests_change_pct")
        wanted = [change(n, old.get(h), False) for h, n in hours]
        assert all(near(r[at], w) for r, w in zip(errors.rows, wanted, strict=True))
        # Status codes, countries and the top paths of the slice, with their changes.
        codes = truth(con, "SELECT status_code, count(*) FROM sliced GROUP BY 1 ORDER BY 1",
                      piece, LAST, LAST)  # fmt: skip
        assert [(r[0], r[2]) for r in data.sections["status_codes"].rows] == codes
        countries = {
            c: n
            for c, n in truth(con, "SELECT coalesce(country_code, '-'), count(*) FROM sliced "
                              "GROUP BY 1", piece, LAST, LAST)
        }  # fmt: skip
        table = data.sections["countries"].records()
        assert {r["country_code"]: r["requests"] for r in table} == countries
        paths = truth(con, "SELECT host, path, count(*) AS n FROM sliced GROUP BY 1, 2 "
                      "ORDER BY n DESC, host, path LIMIT 10", piece, LAST, LAST)  # fmt: skip
        old_paths = {
            (h, p): n
            for h, p, n in truth(con, "SELECT host, path, count(*) FROM sliced GROUP BY 1, 2",
                                 piece, before, before)
        }  # fmt: skip
        top = data.sections["top_paths_by_requests"].records()
        assert [(r["host"], r["path"], r["requests"]) for r in top] == paths
        wanted = [change(n, old_paths.get((h, p)), False) for h, p, n in paths]
        assert all(near(r["requests_change_pct"], w) for r, w in zip(top, wanted, strict=True))
        # Sliced by a status class, the other class's error paths are none by definition.
        if piece.status_class == "5xx":
            assert "top_4xx_paths" not in data.sections and "top_5xx_paths" in data.sections


@pytest.mark.parametrize("how", ["previous", "week"])
def test_a_range_reports_slice_and_changes_are_duckdbs(lake, how):
    config, con = lake
    piece = Slice.parse(host="a.example", cache_status="MISS")
    first, last = date(2026, 11, 18), LAST
    data = collect(config, first, end=last, piece=piece, compare=how, session=session_for(config))
    b_first, b_last = compared_period(first, last, how)
    assert (b_first, b_last) == (
        (date(2026, 11, 14), date(2026, 11, 17)) if how == "previous" else
        (date(2026, 11, 11), date(2026, 11, 14))
    )  # fmt: skip
    now, then = headline(con, piece, first, last), headline(con, piece, b_first, b_last)
    got = data.sections["period_overview"].first()
    for metric, value in now.items():
        assert near(got[metric], value), metric
        unit = "_change_pp" if metric.endswith("pct") else "_change_pct"
        assert near(got[metric + unit], change(value, then[metric], metric.endswith("pct")), 0.02)
    days = truth(con, "SELECT CAST(ts AS DATE), count(*) FROM sliced GROUP BY 1 ORDER BY 1",
                 piece, first, last)  # fmt: skip
    old = truth(con, "SELECT CAST(ts AS DATE), count(*) FROM sliced GROUP BY 1 ORDER BY 1",
                piece, b_first, b_last)  # fmt: skip
    trend = data.sections["daily_trend"].records()
    assert [(r["date"], r["requests"]) for r in trend] == days
    # Day by day by place: the range's first day against the compared period's first.
    wanted = [change(n, o[1], False) for (_, n), o in zip(days, old, strict=True)]
    assert all(near(r["requests_change_pct"], w) for r, w in zip(trend, wanted, strict=True))
    # The daily report's newer sections are in the range report too.
    for name in ("ai_crawler", "top_miss_paths_by_bytes", "status_classes", "countries"):
        assert name in data.sections, name
    miss = truth(con, "SELECT host, path, sum(bytes_sent) AS b FROM sliced GROUP BY 1, 2 "
                 "ORDER BY b DESC, host, path LIMIT 10", piece, first, last)  # fmt: skip
    got_miss = data.sections["top_miss_paths_by_bytes"].records()
    assert [(r["host"], r["path"], r["miss_bytes"]) for r in got_miss] == miss


def test_the_slice_is_in_the_files_names_and_titles(lake, tmp_path):
    config, _ = lake
    piece = Slice.parse(host="a.example", path_prefix="/img/", status_class="5xx")
    paths = write_reports(
        config, LAST, piece=piece, compare="week", out=tmp_path, session=session_for(config)
    )
    stem = "report-all-host-a.example_path-img_5xx-2026-11-21-vs-week"
    assert {p.name for p in paths} >= {f"{stem}.html", f"{stem}.json", f"{stem}.md"}
    md = (tmp_path / f"{stem}.md").read_text()
    assert md.startswith("# CDN daily report, 2026-11-21 (UTC), all pull zones, host a.example")
    assert "Compared with 2026-11-14 (week)" in md
    doc = json.loads((tmp_path / f"{stem}.json").read_text())
    assert doc["slice"] == {"host": "a.example", "path_prefix": "/img/", "status_class": "5xx"}
    assert doc["compare"] == {"with": "week", "date": "2026-11-14", "to_date": "2026-11-14"}
    html = (tmp_path / f"{stem}.html").read_text()
    assert "Slice: host a.example, paths /img/*, 5xx responses" in html


def test_bad_slices_are_one_line_each():
    for kwargs, words in [
        ({"path_prefix": "img/"}, "--path-prefix: expected a path starting with /"),
        ({"status_class": "6xx"}, "--status-class: expected a status class"),
        ({"country": "Germany"}, "--country: expected a two-letter country code"),
        ({"host": "a b"}, "--host: expected a host name"),
        ({"cache_status": "hit'"}, "--cache-status: expected a cache status"),
    ]:
        with pytest.raises(UsageError, match=words):
            Slice.parse(**kwargs)


def config_file(config, tmp_path) -> str:
    """The fixture lake's config as a file, for the command line."""
    path = tmp_path / "cdnlake.toml"
    zones = "".join(f"[[zones]]\nid = {z.id}\n" for z in config.zones)
    path.write_text(f'[storage]\nroot = "{config.storage.root}"\n{zones}')
    return str(path)


def test_sql_query_takes_the_slice_and_binds_it(lake, tmp_path):
    config, con = lake
    cli = [
        "--config",
        config_file(config, tmp_path),
        "sql",
        "--query",
        "status_codes",
        "--format",
        "json",
    ]
    r = run_cli(*cli, "--param", f"day={LAST}", "--host", "A.example", "--country", "us")
    assert r.returncode == 0, r.stderr
    want = truth(con, "SELECT status_code, count(*) FROM sliced GROUP BY 1 ORDER BY 1",
                 Slice.parse(host="a.example", country="US"), LAST, LAST)  # fmt: skip
    assert [(row["status_code"], row["requests"]) for row in json.loads(r.stdout)] == want
    # A value that would be SQL is a value: no row has it, nothing is run.
    r = run_cli(*cli, "--param", f"day={LAST}", "--path-prefix", "/' OR 1=1 --")
    assert r.returncode == 0 and json.loads(r.stdout) == []
    r = run_cli(*cli, "--param", f"day={LAST}", "--param", "host=a.example", "--host", "a.example")
    assert r.returncode == 2 and "--param host and --host: give one of them" in r.stderr
    r = run_cli("--config", cli[1], "sql", "SELECT 1", "--host", "a.example")
    assert r.returncode == 2 and "--host goes with --query NAME" in r.stderr
    r = run_cli(*cli[:4], "top_error_paths", "--param", f"day={LAST}", "--status-class", "2xx")
    assert r.returncode == 2 and "must be one of 4xx, 5xx" in r.stderr
    # A range of days where the query takes one: day, or from_day and to_day.
    r = run_cli(*cli, "--param", "from_day=2026-11-20", "--param", f"to_day={LAST}")
    assert r.returncode == 0, r.stderr
    r = run_cli(*cli)
    assert r.returncode == 2 and "--param day: required" in r.stderr


def test_report_cli_takes_slice_and_compare(lake, tmp_path):
    config, _ = lake
    path = config_file(config, tmp_path)
    r = run_cli(
        "--config", path, "report", "--date", str(LAST), "--format", "json",
        "--out", str(tmp_path), "--cache-status", "miss", "--compare", "previous",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "report-all-miss-2026-11-21-vs-previous.json").exists()
    r = run_cli("--config", path, "report", "--date", str(LAST), "--compare", "year")
    assert r.returncode == 2 and "--compare" in r.stderr


def test_the_shells_run_takes_the_slice(lake, tmp_path):
    import os
    import sys

    import pexpect

    config, con = lake
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "TERM": "dumb"}
    shell = pexpect.spawn(
        sys.executable,
        ["-m", "cdnlake", "--config", config_file(config, tmp_path), "sql", "--format", "csv"],
        env=env,
        encoding="utf-8",
        timeout=60,
    )
    try:
        shell.expect_exact("cdnlake> ")
        shell.sendline(f".run status_codes day={LAST} host=b.example status_class=4xx")
        shell.expect_exact("cdnlake> ")
        lines = str(shell.before).replace("\r", "").splitlines()
        got = [tuple(line.split(",")[:3:2]) for line in lines if line[:1].isdigit()]
        want = truth(con, "SELECT status_code, count(*) FROM sliced GROUP BY 1 ORDER BY 1",
                     Slice.parse(host="b.example", status_class="4xx"), LAST, LAST)  # fmt: skip
        assert got == [(str(c), str(n)) for c, n in want] and want
        shell.sendeof()
        shell.expect(pexpect.EOF)
    finally:
        shell.close()
