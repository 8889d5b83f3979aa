"""`cdnlake top` on a pipe and with --once: one snapshot, as a table or JSON, whose numbers
are DuckDB's over the same rows of the lake; only the files whose statistics overlap the
window are read."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

import cdnlake
from tests.conftest import run_cli, s3_lake_lines

ZONES = (1234, 1235)
HOSTS = ("cdn.example.com", "img.example.com", "static.example.com")
PATHS = ("/a.js", "/b.css", "/video/1.mp4", "/[bold]x[/bold].js", "/index.html")
CACHE = ("HIT", "HIT", "MISS", "EXPIRED", "STALE", "BYPASS", "-")
STATUSES = (200, 200, 200, 206, 304, 404, 403, 500, 503)
COUNTRIES = ("DE", "FR", "US", "-")
AGENTS = ("curl/8", "Mozilla/5.0 (X11)", "-", "Googlebot/2.1")


def v1_lines(zone: int, start_ms: int, end_ms: int, n: int, tag: str, seed: int) -> list[str]:
    """``n`` v1 lines of ``zone`` stamped in ``[start_ms, end_ms)``."""
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        ts = rnd.randrange(start_ms, end_ms)
        url = f"https://{rnd.choice(HOSTS)}{rnd.choice(PATHS)}"
        lines.append(
            "|".join(
                [
                    rnd.choice(CACHE),
                    str(rnd.choice(STATUSES)),
                    str(ts),
                    str(rnd.randrange(100, 100_000)),
                    str(zone),
                    f"198.51.100.{rnd.randrange(0, 40)}",
                    "-",
                    url,
                    "FR",
                    rnd.choice(AGENTS),
                    f"{tag}-{zone}-{i:06d}",
                    rnd.choice(COUNTRIES),
                ]
            )
        )
    return lines


def write_config(tmp_path: Path, storage: list[str] | None = None) -> Path:
    path = tmp_path / "config.toml"
    zones = "".join(f"[[zones]]\nid = {z}\n" for z in ZONES)
    more = "".join(f"{line}\n" for line in storage or [])
    path.write_text(f'[storage]\nroot = "{tmp_path / "data"}"\n{more}{zones}')
    return path


def import_lines(config: Path, zone: int, lines: list[str], tmp_path: Path, name: str) -> None:
    source = tmp_path / f"{name}-{zone}.log"
    source.write_text("\n".join(lines) + "\n")
    r = run_cli("--config", str(config), "import-v1", str(source), "--zone", str(zone))
    assert r.returncode == 0, r.stderr


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return fill(write_config(tmp_path), tmp_path)


def fill(config: Path, tmp_path: Path) -> Path:
    """Two imports into each zone: one of the last four minutes (a 5m window overlaps it),
    one from 50 to 10 minutes ago (only the 1h window does)."""
    now = int(time.time() * 1000)
    for seed, zone in enumerate(ZONES):
        recent = v1_lines(zone, now - 240_000, now - 30_000, 400 + 100 * seed, "new", seed)
        older = v1_lines(zone, now - 3_000_000, now - 600_000, 900, "old", 10 + seed)
        import_lines(config, zone, older, tmp_path, "older")
        import_lines(config, zone, recent, tmp_path, "recent")
    return config


def top_json(config: Path, *args: str) -> dict:
    r = run_cli("--config", str(config), "top", "--once", "--format", "json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


MEASURES = """
    count(*) AS requests, coalesce(sum(bytes_sent), 0) AS bytes,
    count(*) FILTER (WHERE NOT coalesce(list_contains($hits, cache_status), false)) AS misses,
    count(*) FILTER (WHERE status_code >= 400) AS errors
"""
COLUMNS = {
    "path": "path",
    "host": "host",
    "country": "country_code",
    "status": "CAST(status_code AS VARCHAR)",
    "cache": "cache_status",
    "agent": "user_agent",
    "client": "remote_ip",
}
HITS = ["HIT", "STALE", "UPDATING", "REVALIDATED"]


def check_against_duckdb(config: Path, snap: dict, zones: list[int]) -> None:
    """Every figure and every dimension's keys of ``snap`` as DuckDB finds them in the
    lake's ``requests`` over the snapshot's window."""
    con = cdnlake.connect(config)
    try:
        where = "ts >= $start AND ts < $end AND list_contains($zones, pull_zone_id)"
        params = {"start": snap["from"], "end": snap["to"], "zones": zones, "hits": HITS}
        (requests, size, hits, e4, e5, newest) = con.execute(
            f"""SELECT count(*), coalesce(sum(bytes_sent), 0),
                       count(*) FILTER (WHERE list_contains($hits, cache_status)),
                       count(*) FILTER (WHERE status_code BETWEEN 400 AND 499),
                       count(*) FILTER (WHERE status_code >= 500), max(ts)
                FROM requests WHERE {where}""",
            params,
        ).fetchone()
        assert requests > 0
        assert (snap["requests"], snap["bytes"], snap["hits"]) == (requests, size, hits)
        assert (snap["responses_4xx"], snap["responses_5xx"]) == (e4, e5)
        seconds = {"1m": 60, "5m": 300, "1h": 3600}[snap["window"]]
        assert snap["requests_per_second"] == pytest.approx(requests / seconds)
        assert snap["hit_ratio"] == pytest.approx(hits / requests)
        assert snap["ratio_5xx"] == pytest.approx(e5 / requests)
        assert sum(snap["series"]["requests_per_second"]) * seconds / 30 == pytest.approx(requests)
        assert snap["newest_row"] == newest.isoformat()
        assert snap["newest_source"] == "v1"
        sort = snap["sort"]
        for dimension, column in COLUMNS.items():
            rows = con.execute(
                f"""SELECT {column} AS key, {MEASURES} FROM requests WHERE {where}
                    GROUP BY ALL ORDER BY {sort} DESC, requests DESC, key NULLS LAST LIMIT 10""",
                params,
            ).fetchall()
            expected = [dict(zip(["key", *SORT_COLUMNS], row, strict=True)) for row in rows]
            assert snap["top"][dimension] == expected, dimension
    finally:
        con.close()


SORT_COLUMNS = ("requests", "bytes", "misses", "errors")


def test_once_as_json_holds_duckdbs_numbers_over_the_window(lake):
    snap = top_json(lake, "--window", "5m")
    assert snap["zones"] == list(ZONES) and snap["window"] == "5m"
    check_against_duckdb(lake, snap, list(ZONES))
    # The older files' statistics end before the window: they are listed, not read.
    assert 0 < snap["files_read"] < snap["files_listed"]

    for sort in ("bytes", "misses", "errors"):
        snap = top_json(lake, "--window", "1h", "--zone", "1235", "--sort", sort)
        assert snap["zones"] == [1235] and snap["sort"] == sort
        check_against_duckdb(lake, snap, [1235])
        assert snap["files_read"] == snap["files_listed"]


def test_once_on_an_s3_lake(tmp_path, s3_server):
    """On S3 the chosen files are read as an Arrow dataset: the same numbers."""
    config = fill(write_config(tmp_path, s3_lake_lines(s3_server)), tmp_path)
    for window in ("5m", "1h"):
        snap = top_json(config, "--window", window, "--sort", "misses")
        check_against_duckdb(config, snap, list(ZONES))
    assert snap["files_read"] > 0
    assert not (tmp_path / "data" / "lake").exists()


def test_a_file_outside_the_window_is_never_opened(lake):
    """The older imports' files, damaged: the 5m window reads on, the 1h one names one."""
    snap = top_json(lake, "--window", "5m")
    older = top_json(lake, "--window", "1h")["files_read"] - snap["files_read"]
    assert older > 0
    data = Path(str(lake).removesuffix("config.toml")) / "data" / "lake" / "requests"
    files = sorted(data.rglob("*.parquet"), key=lambda f: f.stat().st_mtime)
    for path in files[:1]:  # the first import: rows 50 to 10 minutes old
        path.write_bytes(b"not parquet at all")
    after = top_json(lake, "--window", "5m")
    assert after["requests"] == snap["requests"]
    r = run_cli("--config", str(lake), "top", "--once", "--window", "1h")
    assert r.returncode == 1
    assert "cannot be read" in r.stderr and "Traceback" not in r.stderr


def test_a_pipe_gets_one_snapshot_as_tables(lake):
    r = run_cli("--config", str(lake), "top", "--window", "1h", "--sort", "errors")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "window 1h" in out and "sort errors" in out
    for title in (
        "paths by errors",
        "hosts by errors",
        "countries by errors",
        "status codes by errors",
        "cache statuses by errors",
        "user agents by errors",
        "clients by errors",
    ):
        assert title in out
    for figure in ("requests/s", "bytes/s", "hit ratio", "4xx", "5xx"):
        assert figure in out
    assert "newest row" in out and "v1, zone" in out
    assert "/[bold]x[/bold].js" in out  # data shown as it is, no markup read
    assert "\x1b[" not in out  # no terminal codes on a pipe


def test_bad_input_is_one_line(tmp_path, lake):
    for args, says in (
        (["--zone", "999"], "pull zone 999 is not configured"),
        (["--interval", "0"], "--interval: expected seconds from 0.1 to 3600"),
        (["--window", "2m"], "--window: invalid choice"),
        (["--sort", "size"], "--sort: invalid choice"),
    ):
        r = run_cli("--config", str(lake), "top", "--once", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_cli("--config", str(write_config(empty)), "top", "--once")
    assert r.returncode == 1
    assert "no requests in the lake" in r.stderr and "Traceback" not in r.stderr
    assert not (empty / "data" / "lake" / "requests").exists()  # top writes nothing
