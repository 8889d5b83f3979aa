"""Rollups (requests_hourly) always equal a full scan of requests: fresh, stale after late
records, re-imported, after a crash, compacted, local and on S3."""

from __future__ import annotations

import signal
from datetime import date, timedelta

import polars as pl

from cdnlake.ingest.local_import import import_v1_files
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.upkeep import rollups
from cdnlake.lake.upkeep.maintain import maintain
from cdnlake.lake.upkeep.rollups import ROLLUP
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.scheduler import wait_for
from cdnlake.warehouse.db import Warehouse
from cdnlake.warehouse.named import get_named
from tests.bench.bench import make_v1_file
from tests.conftest import (
    NOW,
    cli_heavy_modules,
    lake_frame,
    load_test_config,
    s3_lake_lines,
    spawn_cli,
)
from tests.sessions import session_for, session_of

FULL_SCAN = """
SELECT pull_zone_id, date, CAST(hour(ts) AS INTEGER) AS hour, cache_status, status_code,
       count(*) AS requests, coalesce(sum(bytes_sent), 0) AS bytes
FROM requests GROUP BY ALL
"""
HOURLY = (
    "SELECT pull_zone_id, date, hour, cache_status, status_code, requests, bytes "
    "FROM requests_hourly"
)


def config_for(tmp_path, lake_kind, request):
    lines = ["[storage]", f'root = "{tmp_path / "data"}"']
    if lake_kind == "s3":
        lines += s3_lake_lines(request.getfixturevalue("s3_server"))
    lines += ["[[zones]]", "id = 1234"]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path, load_test_config(path)


def same_as_full_scan(config) -> tuple[int, int]:
    """requests_hourly equals a full scan; (rows, how many came from rollups)."""
    with Warehouse(config.storage).connect() as con:
        want = con.execute(f"SELECT * FROM ({FULL_SCAN}) ORDER BY ALL").fetchall()
        got = con.execute(f"SELECT * FROM ({HOURLY}) ORDER BY ALL").fetchall()
        rolled = con.execute("SELECT count(*) FROM cdnlake_internal._fresh").fetchone()[0]
        trend = get_named("daily_trend")
        params = trend.bind({"from_day": "2026-01-01", "to_day": "2027-01-01"})
        by_rollup = con.execute(trend.sql, params).fetchall()
        by_rows = con.execute(
            trend.sql.replace("FROM requests_hourly", f"FROM ({FULL_SCAN}) AS rows"), params
        ).fetchall()
    assert got == want
    assert by_rollup == by_rows  # the range report's figures, both ways
    return len(got), int(rolled)


def late_rows(config, day: date, n: int) -> pl.DataFrame:
    """``n`` new requests in an old partition, as a late record would arrive."""
    frame = lake_frame(config).filter(pl.col("date") == day).head(n)
    return frame.with_columns(
        (pl.col("request_id") + "-late").alias("request_id"),
        pl.lit("MISS").alias("cache_status"),
    ).drop("pull_zone_id")


def test_rollups_equal_a_full_scan_through_everything(tmp_path, lake_kind, request):
    path, config = config_for(tmp_path, lake_kind, request)
    day_file = make_v1_file(tmp_path / "day.log", 20_000, seed=5)
    result = import_v1_files(config, session_for(config), [day_file], 1234)
    assert result.rows == 20_000
    lake = Lake.from_config(config.storage)
    rows, rolled = same_as_full_scan(config)
    assert rows > 0 and rolled == 0  # nothing rolled up yet: all computed from rows

    assert rollups.refresh(session_of(lake)) >= 1
    assert rollups.refresh(session_of(lake)) == 0  # idempotent
    _, rolled = same_as_full_scan(config)
    assert rolled >= 1

    # Late records land in an old partition: its rollup is stale, the rows count.
    day = lake_frame(config)["date"].min()
    ZoneWriter(session_of(lake), REQUESTS, 1234).commit(late_rows(config, day, 50), {})
    _, rolled_after = same_as_full_scan(config)
    assert rolled_after == rolled - 1
    # A re-import changes nothing; maintain compacts and rolls up again.
    assert import_v1_files(config, session_for(config), [day_file], 1234).rows == 0
    report = maintain(session_of(lake), retention_hours=0)
    assert any(t.table == ROLLUP.name and t.rolled_up >= 1 for t in report.tables)
    same_as_full_scan(config)

    # A crash in the middle of an import of another day: whatever it committed counts.
    other = make_v1_file(tmp_path / "next.log", 200_000, seed=6, day=NOW.date() - timedelta(1))
    proc = spawn_cli("--config", str(path), "import-v1", str(other), "--zone", "1234")
    version = lake.open(REQUESTS).version()
    assert wait_for(lambda: lake.open(REQUESTS).version() > version or proc.poll() is not None, 120)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    same_as_full_scan(config)
    rollups.refresh(session_of(lake))
    same_as_full_scan(config)


def test_sql_on_requests_hourly_loads_neither_pandas_nor_pyarrow(tmp_path, request):
    """A session hands DuckDB the fresh partitions as bound lists: a registered Arrow
    table would load pyarrow, and DuckDB would load pandas to look at it (together
    more than a third of a second of every ``sql`` and ``report`` process)."""
    path, config = config_for(tmp_path, "local", request)
    import_v1_files(
        config, session_for(config), [make_v1_file(tmp_path / "day.log", 2_000, seed=9)], 1234
    )
    assert rollups.refresh(session_for(config)) >= 1
    _, rolled = same_as_full_scan(config)
    assert rolled >= 1

    query = "SELECT sum(requests) FROM requests_hourly"
    proc, heavy = cli_heavy_modules("--config", str(path), "sql", query, "--format", "csv")
    assert proc.stdout.splitlines()[-1] == "2000", proc.stdout + proc.stderr
    assert "pandas" not in heavy and "pyarrow" not in heavy


def test_the_partitions_asked_for_are_those_of_all_partitions(tmp_path):
    """Rollups and a report's session ask for some zones or days: chosen on the log, the
    same files and fingerprints as those partitions among all of them."""
    from tests.lake.test_commit import BASE, rows

    lake = Lake(str(tmp_path / "lake"), {})
    for zone in (1, 2, 3):
        for back in (0, 1, 2):
            at = BASE - timedelta(days=back) + timedelta(hours=zone)
            ZoneWriter(session_of(lake), REQUESTS, zone).commit(
                rows(0, 10 * zone, at, tag=f"z{zone}"), {}
            )
    ZoneWriter(session_of(lake), REQUESTS, 2).commit(rows(0, 5, BASE, tag="late"), {})  # two files
    table = lake.open(REQUESTS)
    assert table is not None
    every = rollups.partitions(table)
    assert len(every.files) == 9 and len(every.files[(2, BASE.date())]) == 2
    # what maintain compacts: the partitions of more than one file, counted in Arrow
    from cdnlake.lake.upkeep.maintain import partitions_of_many_files

    assert partitions_of_many_files(REQUESTS, table, None) == [(2, BASE.date(), 2)]
    assert partitions_of_many_files(REQUESTS, table, [1, 3]) == []
    assert partitions_of_many_files(REQUESTS, table, [2]) == [(2, BASE.date(), 2)]
    days = [BASE.date(), BASE.date() - timedelta(days=2)]
    for zones, on in (([2], None), (None, days), ([1, 3], days[:1]), ([4], None)):
        some = rollups.partitions(table, zones, on)
        expected = {
            key: sorted(files)
            for key, files in every.files.items()
            if (zones is None or key[0] in zones) and (on is None or key[1] in on)
        }
        assert {key: sorted(files) for key, files in some.files.items()} == expected
        assert some.fingerprints() == {key: every.fingerprint(key) for key in expected}
