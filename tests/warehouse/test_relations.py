"""A session defines the relations its SQL names, and only those."""

from __future__ import annotations

import duckdb
import pytest

from cdnlake.warehouse.relations import RELATIONS, relations_named


def test_relations_named_finds_the_relations_a_query_reads():
    sql = (
        "SELECT sum(requests) FROM Requests r, ingest_runs "
        "WHERE r.date = $day AND run_id IN (SELECT run_id FROM rejected_lines)"
    )
    assert relations_named(sql) == {"requests", "ingest_runs", "rejected_lines"}
    # a column or a CTE of a relation's name is not the relation
    assert relations_named("SELECT requests FROM requests_hourly") == {"requests_hourly"}
    assert relations_named("WITH requests AS (SELECT 1) SELECT * FROM requests") == set()
    assert relations_named("SHOW TABLES") == set()
    # what the parser cannot read: every relation
    assert relations_named("SELEC oops") is None
    assert relations_named("SELECT 1; SELECT 2") is None


def test_every_named_query_reads_only_lake_relations():
    from cdnlake.warehouse.named import list_named

    for query in list_named():
        found = relations_named(query.sql)
        assert found and found <= set(RELATIONS), query.name


def test_a_session_defines_only_the_relations_asked_for(tmp_path):
    from cdnlake.config import build_config
    from cdnlake.warehouse.db import Warehouse

    config = build_config({"storage": {"root": str(tmp_path)}}, base_dir=tmp_path, env={})
    warehouse = Warehouse(config.storage)
    with warehouse.connect(["ingest_runs", "requests_hourly"]) as con:
        assert con.execute("SELECT count(*) FROM ingest_runs").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM requests_hourly").fetchone() == (0,)
        with pytest.raises(duckdb.CatalogException):
            con.execute("SELECT count(*) FROM shield_events")
    with warehouse.connect() as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        assert set(RELATIONS) <= views
