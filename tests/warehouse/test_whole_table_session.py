"""A session over all of ``requests`` (``cdnlake sql``, named queries) defines its view without
reading each file's footer: files whose log statistics name every column are read with the
table's schema, the others (older than a column) united by name, that column NULL in them;
a filter on zone or day still reads only those partitions."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, date, datetime, time, timedelta

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable, write_deltalake

from cdnlake.errors import DataError
from cdnlake.lake.log.schema import REQUEST_SCHEMA, REQUESTS, conform
from cdnlake.lake.log.store import TABLE_CONFIGURATION, Lake
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.warehouse.db import DuckDBSession, Warehouse, damaged_file, data_files
from tests.conftest import run_cli
from tests.lake.test_commit import BASE, rows
from tests.lake.test_rollups import config_for
from tests.sessions import session_of

OLD = BASE - timedelta(days=2)
# The column an older cdnlake did not have (any of them would do).
OLD_REQUESTS = dataclasses.replace(
    REQUESTS, columns={k: v for k, v in REQUEST_SCHEMA.items() if k != "asn_organization"}
)


def written(spec, zone: int, frame: pl.DataFrame) -> pl.DataFrame:
    """``frame``'s rows with their partition values, for ``write_deltalake`` (delta-rs names
    every column in a file's statistics, as in the files ``maintain`` compacts)."""
    with_partitions = frame.with_columns(
        pl.lit(zone, pl.Int64).alias("pull_zone_id"), pl.col("ts").dt.date().alias("date")
    )
    return conform(with_partitions, spec.schema)


def full_files_lake(lake: Lake, zone: int, days: list[date]) -> None:
    """One file per day of ``zone``, with a null count of every column (as cdnlake's
    writer, which every commit and compaction of ``requests`` goes through, writes them)."""
    writer = ZoneWriter(session_of(lake), REQUESTS, zone)
    for day in days:
        frame = rows(0, 10, datetime.combine(day, time(), UTC))
        writer.commit(frame.with_columns(pl.lit("AS1").alias("asn_organization")), {})


def test_files_older_than_a_column_read_it_as_null_through_cdnlake_sql(tmp_path, request):
    path, config = config_for(tmp_path, "local", request)
    lake = Lake.from_config(config.storage)
    # A lake of an older cdnlake: its files have no asn_organization.
    old = DeltaTable.create(  # as an older cdnlake made it: no dataSkippingStatsColumns
        lake.table_uri(OLD_REQUESTS),
        OLD_REQUESTS.delta_schema(),
        partition_by=OLD_REQUESTS.partition_by,
        configuration=TABLE_CONFIGURATION,
    )
    frame = rows(0, 3, OLD).with_columns(pl.lit("AS1").alias("asn_organization"))
    write_deltalake(
        old,
        written(OLD_REQUESTS, 1234, frame),
        mode="append",
        partition_by=["pull_zone_id", "date"],
    )
    # Today's cdnlake: the table gains the column; a compacted file and a pass's file,
    # each with every column named in its statistics.
    full_files_lake(lake, 1234, [BASE.date() - timedelta(days=1)])
    ZoneWriter(session_of(lake), REQUESTS, 1234).commit(
        rows(100, 2, BASE).with_columns(pl.lit("AS2").alias("asn_organization")), {}
    )
    table = lake.open(REQUESTS)
    assert table is not None
    with duckdb.connect() as con:
        complete, partial = data_files(con, REQUESTS, table, lake.table_uri(REQUESTS))
    assert len(complete) == 2 and len(partial) == 1  # both ways of reading are used

    result = run_cli(
        "--config",
        str(path),
        "sql",
        "SELECT date, asn_organization, count(*) AS n FROM requests GROUP BY ALL ORDER BY ALL",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"date": str(OLD.date()), "asn_organization": None, "n": 3},
        {"date": str(BASE.date() - timedelta(days=1)), "asn_organization": "AS1", "n": 10},
        {"date": str(BASE.date()), "asn_organization": "AS2", "n": 2},
    ]


def test_a_whole_table_session_opens_no_file_a_filter_leaves_out(tmp_path, request):
    _, config = config_for(tmp_path, "local", request)
    lake = Lake.from_config(config.storage)
    days = [BASE.date() - timedelta(days=n) for n in (3, 2, 1, 0)]
    full_files_lake(lake, 1234, days)
    full_files_lake(lake, 99, days[:1])
    table = lake.open(REQUESTS)
    assert table is not None
    on_old = Lake.add_actions(
        REQUESTS, table, [("pull_zone_id", "=", 1234), ("date", "=", days[0])]
    )
    (old_file,) = [action["path"] for action in on_old]
    # The file no longer reads: a session that opened it (its footer, its rows) would fail.
    lake.write_file(f"requests/{old_file}", b"not parquet at all")

    with Warehouse(config.storage).connect(["requests"]) as con:
        session = DuckDBSession(con)
        one_day = session.run(
            "SELECT count(*) FROM requests WHERE date = $day", {"day": days[2]}
        ).rows
        other_zone = session.run(
            "SELECT count(*) FROM requests WHERE pull_zone_id = 99 AND date = $day",
            {"day": days[0]},
        ).rows
        assert (one_day, other_zone) == ([(10,)], [(10,)])
        with pytest.raises(DataError, match=f"lake file .*{old_file}.* cannot be read"):
            session.run("SELECT count(*) FROM requests")
    damaged = f"lake file .*{old_file}.* cannot be read"
    with (
        pytest.raises(DataError, match=damaged),
        Warehouse(config.storage).connect(["requests"]) as con,
    ):
        con.execute("SELECT count(*) FROM requests").fetchall()  # as `status` queries


def damage_listed(lake: Lake, index: int) -> str:
    """Damage the file a whole-table session lists at ``index`` (the first is the one
    DuckDB opens to bind the view; the others are opened by the queries): its path."""
    table = lake.open(REQUESTS)
    assert table is not None
    with duckdb.connect() as con:
        complete, _ = data_files(con, REQUESTS, table, lake.table_uri(REQUESTS))
    assert len(complete) > 1
    path = complete[index].removeprefix(lake.table_uri(REQUESTS) + "/")
    lake.write_file(f"requests/{path}", b"not parquet at all")
    return path


@pytest.mark.parametrize("index", [0, -1])
def test_a_damaged_file_met_while_a_session_is_set_up_is_one_line(tmp_path, request, index):
    """A damaged file met before any query (the first listed, bound at set-up; any other,
    read by the report's hourly rollups, computed at set-up): a one-line DataError naming
    it and what sets it aside, and the same from `cdnlake report`, never a traceback."""
    path, config = config_for(tmp_path, "local", request)
    lake = Lake.from_config(config.storage)
    days = [BASE.date() - timedelta(days=n) for n in (1, 0)]
    full_files_lake(lake, 1234, days)
    damaged_path = damage_listed(lake, index)
    damaged = f"lake file .*{damaged_path}.* cannot be read .*maintain --check-all"
    with (
        pytest.raises(DataError, match=damaged),
        Warehouse(config.storage).connect(["requests_hourly"], days=(days[0], days[1])),
    ):
        pass
    day = next(d for d in days if d.isoformat() in damaged_path)
    result = run_cli("--config", str(path), "report", "--date", day.isoformat())
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "cannot be read" in result.stderr and damaged_path in result.stderr


@pytest.mark.parametrize(
    ("error", "advice"),
    [
        (
            duckdb.InvalidInputException(
                "Invalid Input Error: No magic bytes found at end of file '/lake/a.parquet'"
            ),
            "maintain --check-all",
        ),
        (
            duckdb.IOException('IO Error: No files found that match the pattern "/lake/a.parquet"'),
            "removed while the table was read",
        ),
        (
            duckdb.IOException('IO Error: Cannot open file "/lake/a.parquet": Permission denied'),
            "permissions",
        ),
    ],
)
def test_only_damaged_bytes_send_the_user_to_maintain(error, advice):
    """A file gone (a compaction while a long report read) or unreadable for permissions is
    not damage: `maintain --check-all` would find it sound, so it is not what the user is
    told to run."""
    found = damaged_file(error)
    assert found is not None and "/lake/a.parquet" in str(found)
    assert advice in str(found)
    if advice != "maintain --check-all":
        assert "maintain" not in str(found)
