"""A session of some days (a report's) defines ``requests`` and ``requests_hourly`` over the
files of those days alone, chosen on the Delta log: a lake of many days and zones costs
it no more, and a file of another day is never opened."""

from __future__ import annotations

from datetime import timedelta

import duckdb
import pytest

from cdnlake.errors import DataError
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.warehouse.db import Warehouse
from tests.lake.test_commit import BASE, rows
from tests.lake.test_rollups import config_for
from tests.sessions import session_of


def test_a_session_of_some_days_opens_no_file_of_another_day(tmp_path, lake_kind, request):
    _, config = config_for(tmp_path, lake_kind, request)
    lake = Lake.from_config(config.storage)
    old, day = BASE - timedelta(days=3), BASE
    ZoneWriter(session_of(lake), REQUESTS, 1234).commit(rows(0, 100, old), {})
    ZoneWriter(session_of(lake), REQUESTS, 1234).commit(rows(100, 60, day), {})
    ZoneWriter(session_of(lake), REQUESTS, 1234).commit(rows(200, 40, day - timedelta(hours=2)), {})
    table = lake.open(REQUESTS)
    assert table is not None
    on_old = Lake.add_actions(REQUESTS, table, [("date", "=", old.date().isoformat())])
    (old_file,) = [action["path"] for action in on_old]
    # Another day's file no longer reads: were it opened, the session would fail.
    lake.write_file(f"requests/{old_file}", b"not parquet at all")

    warehouse = Warehouse(config.storage)
    days = (day.date() - timedelta(days=1), day.date())
    with warehouse.connect(["requests", "requests_hourly"], days=days) as con:
        by_day = "SELECT date, {} FROM {} GROUP BY date ORDER BY date"
        rows_by_day = con.execute(by_day.format("count(*)", "requests")).fetchall()
        hourly_by_day = con.execute(by_day.format("sum(requests)", "requests_hourly")).fetchall()
    assert rows_by_day == [(day.date() - timedelta(days=1), 40), (day.date(), 60)]
    assert hourly_by_day == rows_by_day
    # Every day (as `cdnlake sql` asks): the damaged file is met.
    with pytest.raises((DataError, duckdb.Error)), warehouse.connect(["requests"]) as con:
        con.execute("SELECT count(*) FROM requests").fetchall()
