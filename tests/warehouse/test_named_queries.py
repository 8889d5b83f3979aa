"""Each named query on real DuckDB over fixture partitions; expected rows in a fixture file."""

from __future__ import annotations

import json

import pytest

from cdnlake.errors import UsageError
from cdnlake.warehouse.db import Warehouse
from cdnlake.warehouse.named import get_named, list_named
from cdnlake.warehouse.output import plain
from tests.fixture_lake import FIXTURES, build_fixture_lake

CASES = json.loads((FIXTURES / "named_queries.json").read_text())


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    config = build_fixture_lake(tmp_path_factory.mktemp("lake"))
    return Warehouse(config.storage)


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=lambda c: c["query"] + ":" + ",".join(f"{k}={v}" for k, v in c["params"].items()),
)
def test_named_query_matches_fixture(warehouse, case):
    query = get_named(case["query"])
    with warehouse.connect() as con:
        cursor = con.execute(query.sql, query.bind(case["params"]))
        columns = [d[0] for d in cursor.description]
        rows = [plain(list(r)) for r in cursor.fetchall()]
    assert columns == case["columns"]
    assert rows == case["rows"]


def test_every_named_query_has_a_case_and_a_header():
    covered = {c["query"] for c in CASES}
    for q in list_named():
        assert q.name in covered, f"{q.name} has no fixture case"
        assert q.answers, f"{q.name} has no '-- answers:' header"
        assert any(p.name == "day" for p in q.params)
        body = "\n".join(line for line in q.sql.splitlines() if not line.startswith("--"))
        assert "{" not in body, "values are bound, never formatted in"


def test_bad_parameter_values_are_usage_errors():
    with pytest.raises(UsageError, match="day"):
        get_named("hit_ratio").bind({})
    with pytest.raises(UsageError, match="expected DATE"):
        get_named("hit_ratio").bind({"day": "20-11-2026"})
    with pytest.raises(UsageError, match="no such parameter"):
        get_named("hit_ratio").bind({"day": "2026-11-20", "dimension": "hour"})
    with pytest.raises(UsageError, match="no named query"):
        get_named("nope")


def test_sql_injection_through_a_parameter_is_just_a_value(warehouse):
    query = get_named("hit_ratio")
    with warehouse.connect() as con:
        rows = con.execute(
            query.sql, query.bind({"day": "2026-11-20", "hit_statuses": "HIT') OR 1=1 --"})
        ).fetchall()
    assert rows[0][1] == 0  # no status is literally that string
