"""Choosing a table's files by partition: the right files, at a cost that follows them."""

from __future__ import annotations

import dataclasses
import json
import time
import tracemalloc
from datetime import UTC, date, datetime, timedelta

import polars as pl
import pytest
from deltalake import write_deltalake
from deltalake.transaction import AddAction

from cdnlake.lake.log.schema import INGEST_RUNS, REQUESTS, RUN_SCHEMA, polars_schema
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.warehouse.db import Warehouse
from tests.lake.test_commit import storage as lake_storage
from tests.sessions import session_of

FIRST = date(2026, 9, 1)


def log_only_lake(tmp_path, zones: int, days: int) -> Lake:
    """A ``requests`` table whose log names one file per zone and day (``zones`` x
    ``days`` files, committed at once). The files themselves are never written: choosing
    them reads the log alone."""
    lake = Lake(str(tmp_path / "lake"), {})
    table = lake.open_or_create(REQUESTS)
    actions = []
    for d in range(days):
        day = FIRST + timedelta(days=d)
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        end = start + timedelta(hours=23)
        stats = json.dumps(
            {
                "numRecords": 10,
                "minValues": {"ts": start.strftime("%Y-%m-%dT%H:%M:%S.000Z")},
                "maxValues": {"ts": end.strftime("%Y-%m-%dT%H:%M:%S.000Z")},
                "nullCount": {"ts": 0},
            }
        )
        for zone in range(1, zones + 1):
            actions.append(
                AddAction(
                    path=f"pull_zone_id={zone}/date={day}/part-{zone}-{d}.parquet",
                    size=100,
                    partition_values={"pull_zone_id": str(zone), "date": day.isoformat()},
                    modification_time=int(time.time() * 1000),
                    data_change=True,
                    stats=stats,
                )
            )
    table.create_write_transaction(
        actions, mode="append", schema=table.schema(), partition_by=REQUESTS.partition_by
    )
    return lake


def test_partitions_choose_their_files(tmp_path):
    lake = log_only_lake(tmp_path, zones=5, days=4)
    table = lake.open(REQUESTS)
    assert table is not None
    day = FIRST + timedelta(days=2)
    chosen = lake.add_actions(
        REQUESTS,
        table,
        [("pull_zone_id", "=", "3"), ("date", "in", [day.isoformat()])],
        stats=("num_records", "max.no_such_column"),
    )
    assert [a["path"] for a in chosen] == [f"pull_zone_id=3/date={day}/part-3-2.parquet"]
    (action,) = chosen
    assert action["partition.pull_zone_id"] == 3
    assert action["partition.date"] == day
    assert action["num_records"] == 10
    assert action["max.no_such_column"] is None  # asked for, absent from the log
    assert action["min.ts"] == datetime(day.year, day.month, day.day, tzinfo=UTC)
    # Several values, numbers or text alike; a value no file has chooses nothing.
    several = lake.add_actions(REQUESTS, table, [("pull_zone_id", "in", [2, "4", 99])])
    assert sorted({a["partition.pull_zone_id"] for a in several}) == [2, 4]
    assert len(several) == 2 * 4
    by_day = lake.add_actions(REQUESTS, table, [("date", "=", FIRST.isoformat())])
    assert sorted(a["partition.pull_zone_id"] for a in by_day) == [1, 2, 3, 4, 5]
    assert lake.add_actions(REQUESTS, table, [("pull_zone_id", "=", "99")]) == []
    # No condition: every file.
    assert len(lake.add_actions(REQUESTS, table)) == 5 * 4


@pytest.mark.parametrize("kind", ["date", "zone"])
def test_values_as_python_objects_choose_too(tmp_path, kind):
    lake = log_only_lake(tmp_path, zones=2, days=2)
    table = lake.open(REQUESTS)
    assert table is not None
    condition = ("date", "=", FIRST) if kind == "date" else ("pull_zone_id", "=", 2)
    assert len(lake.add_actions(REQUESTS, table, [condition])) == 2


def test_a_table_partitioned_by_zone_alone(tmp_path):
    """``ingest_runs`` has no date partition: its zone column chooses alone."""
    lake = Lake(str(tmp_path / "lake"), {})
    table = lake.open_or_create(INGEST_RUNS)
    assert lake.add_actions(INGEST_RUNS, table, [("zone", "in", ["1"])]) == []
    actions = [
        AddAction(
            path=f"zone={zone}/part-{zone}.parquet",
            size=100,
            partition_values={"zone": str(zone)},
            modification_time=int(time.time() * 1000),
            data_change=True,
            stats=json.dumps({"numRecords": 1}),
        )
        for zone in (1, 2, 3)
    ]
    table.create_write_transaction(
        actions, mode="append", schema=table.schema(), partition_by=["zone"]
    )
    table.update_incremental()
    chosen = lake.add_actions(
        INGEST_RUNS, table, [("zone", "in", ["1", "3"])], stats=("max.finished",)
    )
    assert sorted(a["path"] for a in chosen) == ["zone=1/part-1.parquet", "zone=3/part-3.parquet"]
    assert all(a["max.finished"] is None for a in chosen)  # no statistics in this log


def test_choosing_a_zone_days_files_makes_python_values_for_those_alone(tmp_path):
    """On a log of 20,000 files, the Python memory that choosing one zone-day's file takes
    stays far below one value per file of the table (the paths alone are ~2 MB)."""
    lake = log_only_lake(tmp_path, zones=200, days=100)
    table = lake.open(REQUESTS)
    assert table is not None
    day = FIRST + timedelta(days=50)
    wanted = [("pull_zone_id", "=", "7"), ("date", "in", [day.isoformat()])]
    lake.add_actions(REQUESTS, table, wanted)  # (imports done)
    tracemalloc.start()
    try:
        chosen = lake.add_actions(REQUESTS, table, wanted)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [a["path"] for a in chosen] == [f"pull_zone_id=7/date={day}/part-7-50.parquet"]
    assert peak < 400_000, f"{peak:,} bytes of Python objects to choose 1 file of 20,000"


storage = lake_storage  # the fixture: a config's storage, on local disk and on S3


def test_an_ingest_runs_table_of_an_older_cdnlake_reads_and_gains_the_new_column(storage):
    """A lake written before ``rows_read`` existed: its runs read (the column NULL), and
    the next run recorded adds the column (Delta schema evolution) beside the old rows."""
    lake = Lake.from_config(storage)
    old_columns = {k: v for k, v in RUN_SCHEMA.items() if k != "rows_read"}
    old_spec = dataclasses.replace(INGEST_RUNS, columns=old_columns)
    old_row = {**run_row("old"), "zone": 1}
    del old_row["rows_read"]
    write_deltalake(
        lake.open_or_create(old_spec),
        pl.DataFrame([old_row], schema=polars_schema(old_spec.schema)),
        mode="append",
        partition_by=old_spec.partition_by,
    )

    def runs() -> list[tuple]:
        with Warehouse(storage).connect(["ingest_runs"]) as con:
            return con.execute(
                "SELECT run_id, rows, rows_read FROM ingest_runs ORDER BY 1"
            ).fetchall()

    assert runs() == [("old", 5, None)]
    Bookkeeping(session_of(lake)).record_run(1, run_row("new"))
    assert runs() == [("new", 5, 9), ("old", 5, None)]
    table = lake.open(INGEST_RUNS)
    assert table is not None
    assert [f.name for f in table.schema().fields] == list(INGEST_RUNS.schema)
    Bookkeeping(session_of(lake)).record_run(1, run_row("newer"))  # evolved once: plain appends now
    assert len(runs()) == 3


def run_row(run_id: str) -> dict:
    at = datetime(2026, 11, 20, tzinfo=UTC)
    return {
        "run_id": run_id,
        "source": "v2",
        "started": at,
        "finished": at,
        "window_from": at,
        "window_to": at,
        "pages": 1,
        "rows": 5,
        "duplicates_dropped": 4,
        "rejected": 0,
        "rate_limited": 0,
        "retries": 0,
        "server_errors": 0,
        "transport_errors": 0,
        "outcome": "ok",
        "error": None,
        "daemon": "test:1",
        "rows_read": 9,
    }
