"""Failures stay local; a watermark past retention reads what is left and records the gap."""

from __future__ import annotations

from datetime import timedelta

from cdnlake.emulator import Faults
from cdnlake.ingest.passes import Ingestor
from cdnlake.lake.log.progress import to_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.monitoring.metrics import DaemonMetrics
from cdnlake.retention import RETENTION, oldest_served
from cdnlake.status import zone_statuses
from cdnlake.warehouse.db import Warehouse
from tests.conftest import (
    NOW,
    lake_ids,
    lake_of,
    load_test_config,
    logging_client,
    run_cli,
    start_emulator,
    truth_ids,
    write_config,
)
from tests.sessions import session_for, session_of


def test_disabled_and_forbidden_zones_beside_healthy_ones(tmp_path):
    emu = start_emulator("1234,1240:disabled,1241:suspended")
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2"), (1240, "v2"), (1241, "v1")])
        config = load_test_config(path)
        results = {
            r.zone_id: r
            for r in Ingestor(
                config, logging_client(config), session_for(config), clock=emu.clock.now
            ).run(config.zones)
        }
        assert results[1234].ok
        assert results[1240].outcome == "failed" and "logging_disabled" in results[1240].error
        assert results[1241].outcome == "failed" and "Forbidden" in results[1241].error
        assert lake_ids(config.storage.root, 1234)
        with Warehouse(config.storage).connect() as con:
            outcomes = dict(con.execute("SELECT pull_zone_id, outcome FROM ingest_runs").fetchall())
        assert outcomes == {1234: "ok", 1240: "failed", 1241: "failed"}
    finally:
        emu.stop()


def test_cli_exit_code_is_1_when_one_zone_fails(tmp_path):
    emu = start_emulator("1234,1240:disabled", now=None, frozen=False)
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2"), (1240, "v2")])
        result = run_cli("--config", str(path), "ingest")
        assert result.returncode == 1, result.stderr
        assert "zone 1234 [v2] ok" in result.stdout
        assert "zone 1240 [v2] failed" in result.stdout and "logging_disabled" in result.stdout
        assert "Traceback" not in result.stderr
    finally:
        emu.stop()


def test_watermark_older_than_retention_records_a_gap(tmp_path):
    emu = start_emulator("1234,1235")
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2"), (1235, "v1")])
        config = load_test_config(path)
        old = NOW - timedelta(days=5)
        for zid in (1234, 1235):  # the daemon was down for days
            writer = ZoneWriter(session_of(lake_of(config)), REQUESTS, zid)
            writer.commit(writer.empty(), {"": to_ms(old)})
        requested = []
        original = emu.dispatch

        def spy(req):
            requested.append((req.path, req.query))
            return original(req)

        emu.dispatch = spy
        results = Ingestor(
            config, logging_client(config), session_for(config), clock=emu.clock.now
        ).run(config.zones)
        assert all(r.ok for r in results)
        for r in results:
            assert len(r.gaps) == 1 and r.gaps[0].gap_from == old
            assert "past retention" in r.gaps[0].reason
        # Never asked for anything past retention.
        for _path, q in requested:
            if "from" in q:
                assert q["from"][0] >= (NOW - RETENTION).isoformat().replace("+00:00", "")
        assert not any(
            r for r in requested if r[0].startswith(f"/{(NOW - timedelta(days=4)):%m-%d-%y}")
        )
        start = oldest_served(NOW)
        assert set(lake_ids(config.storage.root, 1234)) == truth_ids(emu, 1234, start, NOW)
        with Warehouse(config.storage).connect() as con:
            gaps = con.execute(
                "SELECT pull_zone_id, gap_from, reason FROM ingest_gaps ORDER BY 1"
            ).fetchall()
        assert [g[0] for g in gaps] == [1234, 1235]
    finally:
        emu.stop()


def test_an_outage_over_several_passes_extends_its_one_gap(tmp_path):
    """The provider answers nothing for hours while the zone's watermark is past
    retention: every pass claims the loss up to its own retention edge, and the zone keeps
    one gap whose end moves on; status and the metrics count each lost second once."""
    emu = start_emulator("1234", faults=Faults(error_rate=1.0))
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")]))
        old = NOW - timedelta(days=5)
        writer = ZoneWriter(session_of(lake_of(config)), REQUESTS, 1234)
        writer.commit(writer.empty(), {"": to_ms(old)})
        metrics = DaemonMetrics(config)
        ends = []
        for _ in range(3):
            (result,) = Ingestor(
                config, logging_client(config), session_for(config), clock=emu.clock.now
            ).run(config.zones)
            assert result.outcome == "failed"
            metrics.observe(result)
            ends.append(result.gaps[0].gap_to)
            emu.clock.advance(3600)
        assert ends[0] < ends[1] < ends[2]
        with Warehouse(config.storage).connect() as con:
            gaps = con.execute("SELECT pull_zone_id, gap_from, gap_to FROM ingest_gaps").fetchall()
        assert gaps == [(1234, old, ends[-1])]
        lost = (ends[-1] - old).total_seconds()
        counted = metrics.registry.get_sample_value(
            "cdnlake_gap_seconds_total", {"zone": "1234", "source": "v2"}
        )
        assert counted == lost
        (status,) = zone_statuses(config, session_for(config), now=emu.clock.now())
        assert (status.gaps_7d, status.lost_seconds_7d) == (1, lost)
    finally:
        emu.stop()
