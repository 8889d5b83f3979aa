"""No log entry records a value of a personal column: every table is created with
``delta.dataSkippingStatsColumns`` (its non-personal columns), cdnlake's writer and
delta-rs's writes (append, compaction, MERGE) honour it, and ``cdnlake maintain`` gives it
to the tables of an older lake, so that erasure needs no surgery on the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from deltalake import DeltaTable, write_deltalake

from cdnlake.lake.log.files import prepare
from cdnlake.lake.log.schema import (
    ERASURES,
    PERSONAL_COLUMNS,
    REJECTED_LINES,
    REQUESTS,
    SHIELD_EVENTS,
    STATS_COLUMNS_PROPERTY,
    TABLES,
    TableSpec,
)
from cdnlake.lake.log.store import TABLE_CONFIGURATION, Lake
from cdnlake.lake.zone.writer import ZoneWriter
from tests.conftest import run_cli
from tests.lake.test_commit import BASE, rows
from tests.sessions import session_of

ZONE = 7
ADDRESS = "203.0.113.77"


def logged_stats(lake: Path, spec: TableSpec) -> list[dict[str, Any]]:
    """The statistics of every add action of every entry of the table's log."""
    found = []
    for entry in sorted((lake / spec.name / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if "add" in action and action["add"].get("stats"):
                found.append(json.loads(action["add"]["stats"]))
    return found


def measured(stats: list[dict[str, Any]]) -> set[str]:
    """The columns whose values the statistics name (smallest, largest)."""
    return {c for s in stats for part in ("minValues", "maxValues") for c in s.get(part, {})}


def personal_rows(first: int, n: int) -> pl.DataFrame:
    frame = rows(first, n, BASE).with_columns(
        pl.lit(ADDRESS).alias("remote_ip"),
        pl.lit("https://cdn.example.net/secret?token=x").alias("url"),
        pl.lit("/secret").alias("path"),
        pl.lit("curl/8 (someone)").alias("user_agent"),
        pl.lit("https://someone.example/").alias("referer"),
        pl.lit(200, pl.Int32).alias("status_code"),
    )
    return prepare(REQUESTS, ZONE, frame)


def test_every_table_is_created_without_statistics_of_a_personal_column(tmp_path):
    lake = Lake(str(tmp_path / "lake"), {})
    for spec in TABLES:
        table = lake.open_or_create(spec)
        configured = (table.metadata().configuration or {})[STATS_COLUMNS_PROPERTY]
        assert configured.split(",") == list(spec.stats_columns)
        assert not PERSONAL_COLUMNS & set(spec.stats_columns), spec.name
    assert "remote_ip" not in REQUESTS.stats_columns and "log" not in SHIELD_EVENTS.stats_columns
    assert "raw_line" not in REJECTED_LINES.stats_columns
    # an erasure's hours and days are the erased client's activity (pruned by expiry)
    assert not {"days", "hours_removed"} & set(ERASURES.stats_columns)


def test_neither_writer_records_a_personal_value_in_the_log(tmp_path):
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, ZONE)
    writer.commit(personal_rows(0, 50).drop("pull_zone_id", "date"), {})  # cdnlake's writer
    uri = lake.table_uri(REQUESTS)
    for first in (100, 200):  # delta-rs's writer: appends, then a compaction and a MERGE
        write_deltalake(uri, personal_rows(first, 50).to_arrow(), mode="append")
    table = DeltaTable(uri)
    assert table.optimize.compact()["numFilesRemoved"] >= 2
    source = personal_rows(300, 20).to_arrow()
    table.merge(
        source, "t.request_id = s.request_id", source_alias="s", target_alias="t"
    ).when_not_matched_insert_all().execute()
    stats = logged_stats(tmp_path / "lake", REQUESTS)
    assert len(stats) >= 5
    assert measured(stats) <= set(REQUESTS.stats_columns)
    assert "ts" in measured(stats) and "request_id" not in measured(stats)
    log_text = "".join(p.read_text() for p in (tmp_path / "lake/requests/_delta_log").glob("*"))
    assert ADDRESS not in log_text and "someone" not in log_text and "token=x" not in log_text
    assert len(DeltaTable(uri).to_pyarrow_table()) == 170


def test_maintain_gives_an_older_lake_the_setting(tmp_path):
    """A table of an older cdnlake records every column's statistics; once ``maintain``
    ran, what is written from then on records none of a personal column."""
    (tmp_path / "config.toml").write_text('[storage]\nroot = "data"\n[[zones]]\nid = 7\n')
    lake = tmp_path / "data" / "lake"
    uri = str(lake / REQUESTS.name)
    DeltaTable.create(
        uri,
        REQUESTS.delta_schema(),
        partition_by=REQUESTS.partition_by,
        configuration=TABLE_CONFIGURATION,  # as an older cdnlake made it
    )
    write_deltalake(uri, personal_rows(0, 30).to_arrow(), mode="append")
    assert "remote_ip" in measured(logged_stats(lake, REQUESTS))  # what the setting prevents
    before = len(logged_stats(lake, REQUESTS))

    done = run_cli("--config", str(tmp_path / "config.toml"), "maintain")
    assert done.returncode == 0, done.stderr
    table = DeltaTable(uri)
    configured = (table.metadata().configuration or {})[STATS_COLUMNS_PROPERTY]
    assert configured.split(",") == list(REQUESTS.stats_columns)
    write_deltalake(uri, personal_rows(100, 30).to_arrow(), mode="append")
    DeltaTable(uri).optimize.compact()
    after = logged_stats(lake, REQUESTS)[before:]
    assert after and measured(after) <= set(REQUESTS.stats_columns)
    # Running it again changes nothing (one metadata commit, once per lake).
    version = DeltaTable(uri).version()
    assert Lake(str(lake), {}).configure(REQUESTS) is False
    assert DeltaTable(uri).version() == version


def test_the_daemons_daily_maintenance_gives_an_older_lake_the_setting(tmp_path):
    """The daemon's daily maintenance (the job its scheduler runs), not only the CLI's
    ``maintain``, gives a table of an older cdnlake the setting (review finding 4)."""
    from cdnlake.scheduler import Daemon
    from tests.conftest import make_client
    from tests.lake.test_retention import config_at
    from tests.sessions import session_for

    config = config_at(tmp_path)
    uri = f"{config.storage.lake_location}/{REQUESTS.name}"
    DeltaTable.create(
        uri,
        REQUESTS.delta_schema(),
        partition_by=REQUESTS.partition_by,
        configuration=TABLE_CONFIGURATION,  # as an older cdnlake made it
    )
    assert STATS_COLUMNS_PROPERTY not in (DeltaTable(uri).metadata().configuration or {})
    with session_for(config) as session:
        daemon = Daemon(config, make_client(config), session=session, catch_up=False)
        daemon.maintain()
        assert daemon.maintain_runs == 1
    configured = (DeltaTable(uri).metadata().configuration or {})[STATS_COLUMNS_PROPERTY]
    assert configured.split(",") == list(REQUESTS.stats_columns)
