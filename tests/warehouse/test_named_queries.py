"""Each named query on real DuckDB and on a real Spark Connect server (Sail) over the same
fixture lake; the expected rows, one file for both engines, in tests/fixtures."""

from __future__ import annotations

import json
from datetime import date, timedelta

import msgspec
import pytest

from cdnlake.errors import UsageError
from cdnlake.warehouse.engine import open_session
from cdnlake.warehouse.named import get_named, list_named
from cdnlake.warehouse.output import plain
from tests.fixture_lake import FIXTURES, build_fixture_lake

CASES = json.loads((FIXTURES / "named_queries.json").read_text())


@pytest.fixture(scope="module")
def fixture_config(tmp_path_factory):
    return build_fixture_lake(tmp_path_factory.mktemp("lake"))


@pytest.fixture(scope="module", params=["duckdb", "spark"])
def session(request, fixture_config):
    config = fixture_config
    if request.param == "spark":
        remote = request.getfixturevalue("sail").remote
        config = msgspec.structs.replace(
            config, engine=msgspec.structs.replace(config.engine, spark_remote=remote)
        )
    with open_session(config, request.param) as session:
        yield session


def same_rows(got: list[list[object]], want: list[list[object]]) -> bool:
    """Equal, floats within 1e-6 (the engines round the same values in their own way)."""
    if len(got) != len(want):
        return False
    for row, expected in zip(got, want, strict=True):
        for a, b in zip(row, expected, strict=True):
            if isinstance(a, float) or isinstance(b, float):
                if a is None or b is None or abs(float(a) - float(b)) > 1e-6:  # type: ignore[arg-type]
                    return False
            elif a != b:
                return False
    return True


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=lambda c: c["query"] + ":" + ",".join(f"{k}={v}" for k, v in c["params"].items()),
)
def test_named_query_matches_fixture(session, case):
    query = get_named(case["query"])
    result = session.run_named(query, query.bind(case["params"]))
    rows = [plain(list(r)) for r in result.rows]
    assert result.columns == case["columns"]
    assert same_rows(rows, case["rows"]), rows


def test_every_named_query_has_a_case_and_a_header():
    covered = {c["query"] for c in CASES}
    for q in list_named():
        assert q.name in covered, f"{q.name} has no fixture case"
        assert q.answers, f"{q.name} has no '-- answers:' header"
        assert any(p.name in ("day", "from_day") for p in q.params)
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


def test_sql_injection_through_a_parameter_is_just_a_value(session):
    query = get_named("hit_ratio")
    rows = session.run_named(
        query, query.bind({"day": "2026-11-20", "hit_statuses": "HIT') OR 1=1 --"})
    ).rows
    assert rows[0][1] == 0  # no status is literally that string


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if "day" in c["params"]],
    ids=lambda c: c["query"] + ":" + ",".join(f"{k}={v}" for k, v in c["params"].items()),
)
def test_a_report_session_answers_its_days_the_same(fixture_config, case):
    """A report's session computes requests_hourly once, for its days only: every daily
    query over it gives the rows it gives over the live relation."""
    day = date.fromisoformat(case["params"]["day"])
    with open_session(fixture_config, days=(day - timedelta(days=1), day)) as session:
        query = get_named(case["query"])
        result = session.run_named(query, query.bind(case["params"]))
    assert result.columns == case["columns"]
    assert same_rows([plain(list(r)) for r in result.rows], case["rows"])


# $CDNLAKE_SQL_DIR: the user's own named queries, added to the shipped ones.


def _cli_config(tmp_path, lake_config):
    path = tmp_path / "config.toml"
    path.write_text(f'[storage]\nroot = "{lake_config.storage.root}"\n[[zones]]\nid = 1\n')
    return path


def test_a_folder_of_ones_own_queries_adds_to_the_shipped_ones(tmp_path, fixture_config):
    from tests.conftest import run_cli

    mine = tmp_path / "my-queries"
    mine.mkdir()
    (mine / "my_misses.sql").write_text(
        "-- answers: How many misses were there on a day?\n"
        "-- param: day DATE   UTC day\n"
        "SELECT count(*) AS misses FROM requests WHERE date = $day AND cache_status = 'MISS'\n"
    )
    env = {"CDNLAKE_SQL_DIR": str(mine)}
    cfg = str(_cli_config(tmp_path, fixture_config))
    listing = run_cli("sql", "--list", env=env)
    assert listing.returncode == 0, listing.stderr
    assert "my_misses  day:DATE" in listing.stdout
    assert "hit_ratio_by" in listing.stdout  # the shipped ones are still there
    mine_run = run_cli(
        "--config", cfg, "sql", "--query", "my_misses", "--param", "day=2026-11-20",
        "--format", "json", env=env,
    )  # fmt: skip
    assert mine_run.returncode == 0, mine_run.stderr
    assert set(json.loads(mine_run.stdout)[0]) == {"misses"}
    shipped = run_cli(
        "--config", cfg, "sql", "--query", "hit_ratio", "--param", "day=2026-11-20",
        "--param", "zone=1", "--format", "json", env=env,
    )  # fmt: skip
    assert shipped.returncode == 0, shipped.stderr
    assert json.loads(shipped.stdout)[0]["request_hit_ratio_pct"] == 37.5
    # The statements cdnlake runs itself are never taken from the user's folder.
    hourly = run_cli(
        "--config", cfg, "sql", "SELECT sum(requests) AS n FROM requests_hourly",
        "--format", "json", env=env,
    )  # fmt: skip
    assert hourly.returncode == 0, hourly.stderr
    assert json.loads(hourly.stdout)[0]["n"] > 0


def test_a_folder_of_ones_own_queries_that_is_missing_is_one_line_exit_2(tmp_path):
    from tests.conftest import run_cli

    for where in (tmp_path / "nowhere", tmp_path / "a-file.sql"):
        if where.name.endswith(".sql"):
            where.write_text("SELECT 1\n")
        r = run_cli("sql", "--list", env={"CDNLAKE_SQL_DIR": str(where)})
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines() == [
            f"cdnlake: error: CDNLAKE_SQL_DIR: {where} "
            + ("is not a folder" if where.exists() else "does not exist")
            + " (it names a folder of your own named queries, *.sql, added to the shipped ones)"
        ], r.stderr
    bad = tmp_path / "bad-names"
    bad.mkdir()
    (bad / "Top-Paths.sql").write_text("SELECT 1\n")
    r = run_cli("sql", "--list", env={"CDNLAKE_SQL_DIR": str(bad)})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Top-Paths.sql is not a usable query name" in r.stderr
