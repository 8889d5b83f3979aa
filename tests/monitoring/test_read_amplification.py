"""Records read against records stored: in ``ingest_runs`` and as cdnlake_read_amplification."""

from __future__ import annotations

import math

import polars as pl

from cdnlake.config import build_config
from cdnlake.ingest.passes import Ingestor
from cdnlake.ingest.result import ZoneResult
from cdnlake.monitoring.metrics import AMPLIFICATION_PASSES, DaemonMetrics
from tests.conftest import lake_frame, load_test_config, logging_client, start_emulator
from tests.conftest import write_config as write_emulator_config
from tests.sessions import session_for


def result(read: int, new: int, rejected: int = 0, zone: int = 1) -> ZoneResult:
    """A pass that read ``read`` records (``rejected`` of them refused) and stored ``new``."""
    return ZoneResult(zone, "v2", parsed=read - rejected, rejected=rejected, rows=new)


def amplification(metrics: DaemonMetrics, zone: int = 1) -> float | None:
    labels = {"zone": str(zone), "source": "v2"}
    return metrics.registry.get_sample_value("cdnlake_read_amplification", labels)


def test_the_ratio_is_over_the_last_passes(tmp_path):
    config = build_config(
        {"storage": {"root": str(tmp_path)}, "zones": [{"id": 1}, {"id": 2}]},
        base_dir=tmp_path,
        env={},
    )
    metrics = DaemonMetrics(config)
    assert amplification(metrics) is None  # nothing read yet: no ratio
    metrics.observe(result(read=960, new=60, rejected=10))  # rejected records were read too
    assert amplification(metrics) == 16.0
    metrics.observe(result(read=120, new=60))
    assert amplification(metrics) == (960 + 120) / 120
    for _ in range(AMPLIFICATION_PASSES):  # the first passes leave the window
        metrics.observe(result(read=100, new=50))
    assert amplification(metrics) == 2.0
    assert amplification(metrics, zone=2) is None  # another zone's passes are its own
    for _ in range(AMPLIFICATION_PASSES):  # read again, nothing new: no finite ratio
        metrics.observe(result(read=30, new=0))
    assert amplification(metrics) == math.inf
    read_total = metrics.registry.get_sample_value(
        "cdnlake_records_read_total", {"zone": "1", "source": "v2"}
    )
    assert read_total == 960 + 120 + 100 * AMPLIFICATION_PASSES + 30 * AMPLIFICATION_PASSES


def test_ingest_runs_records_the_records_read_and_the_new_ones(tmp_path):
    """A second pass a minute later reads the stable span again (all repeats: its fresh
    read stored them) and the minute's new records: its run says so, and the metric follows
    both passes."""
    emu = start_emulator("1234", rpm=20)
    try:
        config = load_test_config(write_emulator_config(tmp_path, emu, zones=[(1234, "v2")]))
        ingestor = Ingestor(
            config, logging_client(config), session_for(config), clock=emu.clock.now
        )
        metrics = DaemonMetrics(config)
        first = ingestor.run(config.zones)[0]
        emu.clock.advance(60)
        second = ingestor.run(config.zones)[0]
        for done in (first, second):
            metrics.observe(done)
    finally:
        emu.stop()
    assert first.ok and second.ok
    runs = lake_frame(config, "ingest_runs").sort("started")
    rows = runs.select("rows", "rows_read", "duplicates_dropped", "rejected").rows()
    assert rows[0][1] == first.parsed + first.rejected > 0
    assert rows[0][0] == first.rows > 0
    assert rows[1][1] == second.parsed + second.rejected > rows[1][0] == second.rows
    assert rows[1][2] == second.duplicates > 0  # read again: the stable span
    assert runs["rows_read"].dtype == pl.Int64
    expected = (rows[0][1] + rows[1][1]) / (first.rows + second.rows)
    assert amplification(metrics, zone=1234) == expected
