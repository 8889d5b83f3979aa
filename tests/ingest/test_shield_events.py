"""Shield event logs land in the lake once per logId, across repeated runs and new events."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from cdnlake.client import ShieldApi
from cdnlake.config import build_config
from cdnlake.emulator import Faults
from cdnlake.emulator.http import json_response
from cdnlake.emulator.state import is_bad_record
from cdnlake.ingest.passes import ingest_shield_zone
from cdnlake.ingest.shield import DAYS_BACK
from cdnlake.status import zone_statuses
from cdnlake.warehouse.db import Warehouse
from tests.conftest import KEY, lake_frame, make_client, start_emulator
from tests.sessions import session_for


def shield_config(tmp_path, emu):
    raw = {
        "api": {"base_url": emu.url, "logging_url": emu.url, "video_url": emu.url},
        "storage": {"root": str(tmp_path / "data")},
        "shield_zones": [{"id": 5001}],
    }
    return build_config(raw, base_dir=tmp_path, env={"CDNLAKE_ACCESS_KEY": KEY})


def lake_events(config) -> list[str]:
    return lake_frame(config, "shield_events")["log_id"].to_list()


def test_event_logs_exactly_once_across_runs(tmp_path):
    emu = start_emulator("1234")
    try:
        config = shield_config(tmp_path, emu)
        shield = ShieldApi(make_client(config))
        zone = config.shield_zones[0]
        first = ingest_shield_zone(config, shield, zone, session_for(config), clock=emu.clock.now)
        assert first.ok and first.rows > 0 and first.pages >= 3
        ids = lake_events(config)
        assert len(ids) == len(set(ids)) == first.rows
        again = ingest_shield_zone(config, shield, zone, session_for(config), clock=emu.clock.now)
        assert again.ok and again.rows == 0
        assert sorted(lake_events(config)) == sorted(ids)
        # Later in the day more events have happened: only those are added.
        emu.clock.advance(6 * 3600)
        later = ingest_shield_zone(config, shield, zone, session_for(config), clock=emu.clock.now)
        assert later.ok and later.rows > 0 and later.duplicates > 0
        now_ids = lake_events(config)
        assert len(now_ids) == len(set(now_ids))
        expected = set()
        for back in range(3):
            day = (emu.clock.now() - timedelta(days=back)).replace(
                hour=0, minute=0, second=0, microsecond=0
            )
            expected |= {e["logId"] for e in emu.management.day_events(5001, day)}
        assert set(now_ids) == expected
        with Warehouse(config.storage).connect() as con:
            rows = con.execute(
                "SELECT count(*), count(DISTINCT log_id), min(shield_zone_id), "
                "count(*) FILTER (WHERE rule_id IS NULL OR severity IS NULL) FROM shield_events"
            ).fetchone()
            runs = con.execute(
                "SELECT count(*) FROM ingest_runs WHERE source = 'shield'"
            ).fetchone()
        assert rows == (len(now_ids), len(now_ids), 5001, 0)
        assert runs[0] == 3
    finally:
        emu.stop()


def test_unknown_shield_zone_fails_alone(tmp_path):
    emu = start_emulator("1234")
    try:
        config = shield_config(tmp_path, emu)
        from cdnlake.config import ShieldZoneConfig

        result = ingest_shield_zone(
            config,
            ShieldApi(make_client(config)),
            ShieldZoneConfig(4040),
            session_for(config),
            clock=emu.clock.now,
        )
        assert result.outcome == "failed" and "NotFound" in result.error
    finally:
        emu.stop()


def test_an_event_that_does_not_decode_is_rejected_once_and_its_day_goes_on(tmp_path):
    """A spoiled event (a timestamp that is text) is kept in rejected_lines by its logId,
    once across passes; the other events of its page are stored and the pass is ok."""
    emu = start_emulator("1234", faults=Faults(bad_record_rate=0.05))
    try:
        config = shield_config(tmp_path, emu)
        shield = ShieldApi(make_client(config))
        zone = config.shield_zones[0]
        for _ in range(2):
            result = ingest_shield_zone(
                config, shield, zone, session_for(config), clock=emu.clock.now
            )
            assert result.ok, result.error
        expected = set()
        for back in range(3):
            day = (emu.clock.now() - timedelta(days=back)).replace(
                hour=0, minute=0, second=0, microsecond=0
            )
            expected |= {e["logId"] for e in emu.management.day_events(5001, day)}
        bad = {log_id for log_id in expected if is_bad_record(log_id, 0.05)}
        assert bad and set(lake_events(config)) == expected - bad
        with Warehouse(config.storage).connect() as con:
            rows = con.execute(
                "SELECT request_id, kind, reason, source FROM rejected_lines"
            ).fetchall()
        assert sorted(r[0] for r in rows) == sorted(bad)  # each once, after two passes
        assert {r[1:] for r in rows} == {
            (
                "undecodable event",
                "event does not decode: Expected `int`, got `str` - at `$.timestamp`",
                "shield",
            )
        }
    finally:
        emu.stop()


def test_a_pass_failing_on_its_second_day_keeps_the_watermark_at_that_days_start(tmp_path):
    """The watermark moves only with days read whole: a pass that fails on its second
    day leaves the zone's lag showing that its data stops where that day starts."""
    emu = start_emulator("1234")
    try:
        config = shield_config(tmp_path, emu)
        zone = config.shield_zones[0]
        now = emu.clock.now()
        second = now.date() - timedelta(days=DAYS_BACK - 1)
        original = emu.dispatch

        def refuse_second_day(req):
            if req.path.startswith(f"/shield/event-logs/5001/{second:%m-%d-%Y}"):
                return json_response(400, {"statusCode": 400, "message": "refused"})
            return original(req)

        emu.dispatch = refuse_second_day
        shield = ShieldApi(make_client(config))
        failed = ingest_shield_zone(config, shield, zone, session_for(config), clock=emu.clock.now)
        assert failed.outcome == "failed" and failed.rows > 0  # the first day is stored
        second_start = datetime.combine(second, time(), UTC)
        assert failed.reached == second_start
        (status,) = zone_statuses(config, session_for(config), now=now)
        assert status.watermark == second_start
        assert status.lag_seconds == (now - second_start).total_seconds()

        emu.dispatch = original
        again = ingest_shield_zone(config, shield, zone, session_for(config), clock=emu.clock.now)
        assert again.ok and again.reached == now
    finally:
        emu.stop()
