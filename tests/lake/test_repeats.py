"""``maintain`` checks what deduplication assumes: a key is in a partition once."""

from __future__ import annotations

import logging
from datetime import timedelta

import polars as pl

from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.upkeep.maintain import maintain
from cdnlake.lake.zone.writer import ZoneWriter
from tests.conftest import run_cli
from tests.lake.test_commit import BASE, rows
from tests.lake.test_commit import storage as lake_storage
from tests.sessions import mark_of, session_of

storage = lake_storage  # the fixture: a config's storage, on local disk and on S3


def table_rows(lake: Lake) -> pl.DataFrame:
    table = lake.open(REQUESTS)
    assert table is not None
    frame = pl.from_arrow(table.to_pyarrow_table(columns=["pull_zone_id", "request_id", "ts"]))
    assert isinstance(frame, pl.DataFrame)
    return frame


def test_a_repeat_with_another_timestamp_is_found_reported_and_removed(storage, caplog):
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 7)
    writer.commit(rows(0, 100, BASE), {"": 1})
    writer.commit(rows(100, 100, BASE + timedelta(minutes=1)), {"": 2})
    ZoneWriter(session_of(lake), REQUESTS, 8).commit(
        rows(0, 50, BASE), {}
    )  # the same keys, another zone
    # The provider gave ten requests a second timestamp, an hour later: deduplication,
    # which looks for a repeat within a second of its ts, lets them in.
    again = rows(5, 10, BASE + timedelta(hours=1))
    assert writer.commit(again, {}).new == 10
    assert table_rows(lake).height == 260
    with caplog.at_level(logging.ERROR):
        report = maintain(session_of(lake), retention_hours=0)
    requests = next(t for t in report.tables if t.table == "requests")
    assert requests.repeats == 10
    assert "10 repeated row(s) removed" in requests.line()
    assert "REPEATED KEYS zone 7 2026-11-20: 10 row(s)" in requests.line()
    assert any("another row has" in r.getMessage() for r in caplog.records)
    stored = table_rows(lake)
    zone7 = stored.filter(pl.col("pull_zone_id") == 7)
    assert zone7.height == 200 and zone7["request_id"].n_unique() == 200  # one of each kept
    assert stored.filter(pl.col("pull_zone_id") == 8).height == 50  # another zone's: its own
    assert zone7["ts"].max() < BASE + timedelta(hours=1)  # the first one kept
    assert mark_of(ZoneWriter(session_of(lake), REQUESTS, 7)) == 2  # the zone's progress kept
    assert next(t for t in maintain(session_of(lake)).tables if t.table == "requests").repeats == 0


def test_the_cli_says_so(tmp_path):
    root = tmp_path / "data"
    config = tmp_path / "config.toml"
    config.write_text(f'[storage]\nroot = "{root}"\n[[zones]]\nid = 7\n')
    lake = Lake(str(root / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 7)
    writer.commit(rows(0, 20, BASE), {})
    writer.commit(rows(0, 3, BASE + timedelta(hours=2)), {})
    done = run_cli("--config", str(config), "maintain")
    assert done.returncode == 0, done.stderr
    assert "3 repeated row(s) removed; REPEATED KEYS zone 7 2026-11-20: 3 row(s)" in done.stdout
    assert "another row has" in done.stderr  # logged as an error, too


def test_the_daemons_metrics_count_the_repeats_maintain_removed(tmp_path):
    from prometheus_client import generate_latest

    from cdnlake.config import load_config
    from cdnlake.monitoring.metrics import DaemonMetrics

    config = tmp_path / "config.toml"
    config.write_text(f'[storage]\nroot = "{tmp_path / "data"}"\n[[zones]]\nid = 7\n')
    lake = Lake(str(tmp_path / "data" / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 7)
    writer.commit(rows(0, 20, BASE), {})
    writer.commit(rows(0, 3, BASE + timedelta(hours=2)), {})
    metrics = DaemonMetrics(load_config(config, env={}), watermarks=dict)
    metrics.observe_maintain(maintain(session_of(lake)))
    text = generate_latest(metrics.registry).decode()
    assert 'cdnlake_repeats_removed_total{table="requests"} 3.0' in text
