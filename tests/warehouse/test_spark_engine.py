"""``--engine spark``: the whole report and ``sql`` through a real Spark Connect server
(Sail) over the same Delta lake as DuckDB, on local disk and on S3 (moto)."""

from __future__ import annotations

import json
import time
from datetime import date

import pytest

from cdnlake.reports.build import collect
from tests.conftest import (
    free_port,
    ingest_all,
    load_test_config,
    run_cli,
    start_emulator,
    write_config,
)
from tests.sessions import session_for
from tests.warehouse.test_named_queries import same_rows

DAY = date(2026, 11, 19)


@pytest.fixture
def spark_lake(tmp_path, lake_kind, sail):
    """A lake with two days of three zones, and a config whose engine is the Sail server."""
    s3 = sail.s3 if lake_kind == "s3" else None
    emu = start_emulator("1234:extended,1235:v1,1236", rpm=4)
    try:
        path = write_config(tmp_path, emu, s3=s3)
        path.write_text(path.read_text() + f'[engine]\nspark_remote = "{sail.remote}"\n')
        config = load_test_config(path)
        assert all(r.ok for r in ingest_all(config, emu))
    finally:
        emu.stop()
    return path, config


def same_records(got: list[dict[str, object]], want: list[dict[str, object]]) -> bool:
    """JSON rows alike: same keys in order, floats within 1e-6."""
    if [list(r) for r in got] != [list(r) for r in want]:
        return False
    return same_rows([list(r.values()) for r in got], [list(r.values()) for r in want])


def test_the_whole_report_is_the_same_on_both_engines(spark_lake):
    _, config = spark_lake
    duck = collect(config, DAY, session=session_for(config))
    spark = collect(config, DAY, engine="spark", session=session_for(config))
    assert duck.sections.keys() == spark.sections.keys()
    assert not duck.empty
    for name, table in duck.sections.items():
        other = spark.sections[name]
        assert table.columns == other.columns, name
        assert same_rows([list(r) for r in other.rows], [list(r) for r in table.rows]), name


def test_sql_and_report_from_the_command_line(spark_lake, tmp_path):
    path, _ = spark_lake
    base = ("--config", str(path))
    duck = run_cli(*base, "sql", "SELECT count(*) AS n FROM requests", "--format", "json")
    spark = run_cli(
        *base, "sql", "--engine", "spark", "SELECT count(*) AS n FROM requests", "--format", "json"
    )
    assert duck.returncode == spark.returncode == 0, spark.stderr
    assert json.loads(duck.stdout) == json.loads(spark.stdout)
    assert json.loads(spark.stdout)[0]["n"] > 0

    named = ("--query", "zones_overview", "--param", f"day={DAY}", "--format", "json")
    duck = run_cli(*base, "sql", *named)
    spark = run_cli(*base, "sql", "--engine", "spark", *named)
    assert spark.returncode == 0, spark.stderr
    assert same_records(json.loads(spark.stdout), json.loads(duck.stdout))

    reports = {}
    for engine in ("duckdb", "spark"):
        out = tmp_path / engine
        r = run_cli(
            *base,
            "report",
            "--date",
            str(DAY),
            "--engine",
            engine,
            "--format",
            "json,html",
            "--out",
            str(out),
        )
        assert r.returncode == 0, r.stderr
        assert (out / f"report-all-{DAY}.html").exists()
        reports[engine] = json.loads((out / f"report-all-{DAY}.json").read_text())
    duck_sections, spark_sections = reports["duckdb"]["sections"], reports["spark"]["sections"]
    assert duck_sections.keys() == spark_sections.keys()
    for key, section in duck_sections.items():
        # Every section has rows (the emulator sends AI crawlers too).
        assert section["rows"], key
        assert same_records(spark_sections[key]["rows"], section["rows"]), key

    # Spark's own dialect for ad-hoc SQL; a mistake is one line, exit 2.
    r = run_cli(*base, "sql", "--engine", "spark", "SELECT nope FROM requests")
    assert r.returncode == 2 and r.stderr.startswith("cdnlake: error: sql: ")
    assert len(r.stderr.strip().splitlines()) == 1


def test_an_unreachable_spark_endpoint_is_one_line_and_exit_1(tmp_path):
    emu = start_emulator("1234")
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2")])
        dead = f"sc://127.0.0.1:{free_port()}"
        secret = ";token=dapi-sekrit"  # a Databricks-style token never shows
        path.write_text(path.read_text() + f'[engine]\nspark_remote = "{dead}/{secret}"\n')
        started = time.monotonic()
        r = run_cli("--config", str(path), "sql", "--engine", "spark", "SELECT 1")
        assert time.monotonic() - started < 60
        assert r.returncode == 1
        assert r.stderr.strip() == (
            f"cdnlake: error: engine: cannot reach Spark Connect at {dead}: Connection refused"
        )
        ingest_all(load_test_config(path), emu)  # DAY in the lake: only the engine is away
        r = run_cli("--config", str(path), "report", "--engine", "spark", "--date", str(DAY))
        assert r.returncode == 1 and "cannot reach Spark Connect" in r.stderr
        assert "sekrit" not in r.stderr
    finally:
        emu.stop()


def test_spark_without_an_address_is_a_configuration_error(tmp_path):
    emu = start_emulator("1234")
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2")])
        r = run_cli("--config", str(path), "sql", "--engine", "spark", "SELECT 1")
        assert r.returncode == 2
        assert r.stderr.startswith("cdnlake: error: engine.spark_remote: not set")
        bad = path.read_text() + '[engine]\nspark_remote = "http://x:1"\n'
        path.write_text(bad)
        r = run_cli("--config", str(path), "sql", "SELECT 1")
        assert r.returncode == 2 and "engine.spark_remote: expected sc://host:port" in r.stderr
    finally:
        emu.stop()
