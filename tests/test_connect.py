"""`cdnlake.connect()`: a DuckDB connection with every relation, for notebooks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import cdnlake
from cdnlake.errors import NoLakeError
from cdnlake.warehouse.relations import RELATIONS
from tests.cli.test_sql_cli import setup


def test_connect_reads_the_config_from_cdnlake_config(tmp_path, monkeypatch):
    cfg = setup(tmp_path)
    monkeypatch.setenv("CDNLAKE_CONFIG", str(cfg))
    monkeypatch.chdir(tmp_path / "root")  # no ./config.toml here: $CDNLAKE_CONFIG is read
    con = cdnlake.connect()  # returned, not a context: usable until closed
    try:
        views = {name for (name,) in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        assert set(RELATIONS) <= views
        assert con.execute("SELECT count(*) FROM requests").fetchall() == [(12,)]
        frame = con.sql(
            "SELECT pull_zone_id, count(*) AS n FROM requests GROUP BY 1 ORDER BY 1"
        ).pl()
        assert frame["pull_zone_id"].to_list() == [1, 2] and frame["n"].sum() == 12
        assert con.execute("SELECT count(*) FROM ingest_runs").fetchall() == [(0,)]
        assert con.execute("SELECT current_setting('TimeZone')").fetchall() == [("UTC",)]
    finally:
        con.close()


def test_connect_with_a_path_and_without_a_lake(tmp_path, monkeypatch):
    cfg = setup(tmp_path)
    monkeypatch.delenv("CDNLAKE_CONFIG", raising=False)
    with cdnlake.connect(cfg) as con:
        assert con.execute("SELECT count(DISTINCT request_id) FROM requests").fetchall() == [(12,)]
    empty = tmp_path / "empty.toml"
    empty.write_text(f'[storage]\nroot = "{tmp_path / "nothing"}"\n[[zones]]\nid = 1\n')
    with pytest.raises(NoLakeError, match=f"no lake at {tmp_path / 'nothing' / 'lake'}"):
        cdnlake.connect(str(empty))


def test_import_cdnlake_stays_cheap():
    code = (
        "import json, sys, cdnlake; "
        "print(json.dumps([m for m in ('duckdb', 'deltalake', 'polars', 'pyarrow') "
        "if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == []
