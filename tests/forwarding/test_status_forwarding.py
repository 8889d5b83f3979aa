"""``status`` shows each zone's freshest row and whether its log forwarding is live, from the
Delta log's file statistics alone; end to end, with a daemon receiving the emulator's push."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from cdnlake.cli.status_cmd import _forwarding
from cdnlake.config import build_config
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.scheduler import wait_for
from cdnlake.status import FORWARDING_DELAY_SECONDS, LIVE_SECONDS, live_seconds, zone_statuses
from tests.conftest import free_port, lake_frame, load_test_config, run_cli, start_emulator
from tests.forwarding.test_daemon import daemon_config
from tests.lake.test_commit import rows
from tests.sessions import session_for, session_of
from tests.test_scheduler import spawn_daemon, stop, wait_for_line


def lake_config(tmp_path: Path, listen: str) -> object:
    return build_config(
        {
            "storage": {"root": str(tmp_path)},
            "forwarding": {"listen": listen, "flush_seconds": 5},
            "zones": [{"id": z, "source": "v2"} for z in (1, 2, 3)],
        },
        base_dir=tmp_path,
        env={},
    )


def test_freshest_row_and_forwarding_come_from_the_log(tmp_path):
    config = lake_config(tmp_path, "127.0.0.1:6514")
    lake = Lake.from_config(config.storage)  # type: ignore[attr-defined]
    now = datetime.now(UTC).replace(microsecond=0)
    one, two, three = (ZoneWriter(session_of(lake), REQUESTS, z) for z in (1, 2, 3))
    one.commit(rows(0, 10, now - timedelta(minutes=10), "a"), {"": 1})  # a pass
    forwarded = rows(0, 5, now - timedelta(seconds=20), "f")
    one.commit(forwarded.with_columns(pl.lit("forwarded").alias("source")), {})
    after = datetime.now(UTC)
    one.commit(rows(0, 3, now - timedelta(minutes=5), "b"), {"": 2})  # a later pass, older rows
    two.commit(rows(0, 10, now - timedelta(minutes=3), "c"), {"": 1})  # never forwarded
    three.commit(rows(0, 4, now - timedelta(days=5), "d"), {"": 1})  # nothing recent at all

    got = {s.zone_id: s for s in zone_statuses(config, session_for(config), now=after)}  # type: ignore[arg-type]
    full = lake_frame(config).group_by("pull_zone_id").agg(pl.col("ts").max())
    newest = {z: ts.replace(tzinfo=UTC) for z, ts in full.iter_rows()}
    for zone in (1, 2, 3):
        assert got[zone].freshest_row == newest[zone], zone
    assert got[1].freshest_row == now - timedelta(seconds=20) + timedelta(milliseconds=4)
    assert got[1].forwarding == "live"
    # The request time of its newest forwarded row (not when it was committed).
    assert got[1].forwarded_at == now - timedelta(seconds=20) + timedelta(milliseconds=4)
    assert got[2].forwarding == "silent" and got[2].forwarded_at is None  # listening, no line
    assert got[3].freshest_age_seconds is not None and got[3].freshest_age_seconds > 4 * 86400

    window = live_seconds(config.forwarding)  # type: ignore[attr-defined]
    assert window == LIVE_SECONDS + 5 + FORWARDING_DELAY_SECONDS
    later = now - timedelta(seconds=20) + timedelta(seconds=window + 1)
    got = {s.zone_id: s for s in zone_statuses(config, session_for(config), now=later)}  # type: ignore[arg-type]
    assert got[1].forwarding == "silent"
    assert got[1].forwarded_at is not None and got[1].forwarded_at <= after

    unset = lake_config(tmp_path, "")
    got = {s.zone_id: s for s in zone_statuses(unset, session_for(unset), now=after)}  # type: ignore[arg-type]
    assert got[1].forwarding == "live"  # another daemon of the fleet receives it
    assert got[2].forwarding == "not configured"


def test_status_shows_forwarding_live_then_silent_with_a_daemon(tmp_path):
    emu = start_emulator("1234:extended", rpm=600, now=None, frozen=False)
    try:
        port = free_port()
        path = daemon_config(tmp_path, emu, f"127.0.0.1:{port}", flush=0.5)
        proc = spawn_daemon(path)
        try:
            wait_for_line(proc, f"forwarding: receiving tcp syslog on 127.0.0.1:{port}")
            wait_for_line(proc, "daemon started")
            cli = ["--config", str(path)]
            r = run_cli(*cli, "status", "--format", "json")
            before = {s["zone_id"]: s for s in json.loads(r.stdout)}
            assert before[1234]["forwarding"] == "silent"  # listening, nothing yet
            assert before[1234]["forwarded_at"] is None
            target = ["--host", "127.0.0.1", "--port", str(port), "--protocol", "tcp"]
            r = run_cli(*cli, "api", "pullzone", "set-forwarding", "--zone", "1234", *target)
            assert r.returncode == 0, r.stderr

            def live() -> bool:
                r = run_cli(*cli, "status", "--wide")
                return "live, last line" in r.stdout

            assert wait_for(live, 120, step=0.5), run_cli(*cli, "status", "--wide").stdout
            r = run_cli(*cli, "status", "--format", "json")
            (zone,) = json.loads(r.stdout)
            assert zone["forwarding"] == "live"
            assert zone["forwarded_age_seconds"] <= LIVE_SECONDS + 0.5 + FORWARDING_DELAY_SECONDS
            assert zone["freshest_age_seconds"] < LIVE_SECONDS  # the pushed rows are seconds old
            r = run_cli(*cli, "api", "pullzone", "set-forwarding", "--zone", "1234", "--disable")
            assert r.returncode == 0, r.stderr
        finally:
            code, _, err = stop(proc)
        assert code == 0, err
    finally:
        emu.stop()
    config = load_test_config(path)
    lake = lake_frame(config)
    forwarded = lake.filter(pl.col("source") == "forwarded")
    assert forwarded.height > 0
    statuses = zone_statuses(config, session_for(config))
    (zone_status,) = statuses
    assert zone_status.freshest_row == lake["ts"].max().replace(tzinfo=UTC)
    assert zone_status.forwarded_at is not None
    later = zone_status.forwarded_at + timedelta(seconds=live_seconds(config.forwarding) + 1)
    (quiet,) = zone_statuses(config, session_for(config), now=later)
    assert quiet.forwarding == "silent" and quiet.forwarded_at == zone_status.forwarded_at
    assert _forwarding(quiet) == f"silent since {quiet.forwarded_at:%Y-%m-%d %H:%M:%S}Z"


def test_a_compaction_does_not_make_a_silent_forwarding_look_live(tmp_path, monkeypatch):
    """The daemon's daytime compaction rewrites a zone's forwarded-only files five minutes
    after its forwarding stopped: the zone stays silent, ``forwarded_at`` unchanged.
    Before, the compacted file's commit time was taken as its last forwarded line."""
    import time as real_time
    from types import SimpleNamespace

    from cdnlake.lake.log import delta_log as delta_log_module
    from cdnlake.lake.log import files as files_module
    from cdnlake.lake.upkeep import maintain as maintain_module
    from cdnlake.lake.upkeep.maintain import OpenDays

    monkeypatch.setattr(maintain_module, "OPEN_DAY_FILES", 5)
    config = lake_config(tmp_path, "127.0.0.1:6514")
    lake = Lake.from_config(config.storage)  # type: ignore[attr-defined]
    now = datetime.now(UTC).replace(microsecond=0)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    for i in range(8):  # forwarding stored everything: files of forwarded rows alone
        batch = rows(0, 5, now - timedelta(minutes=2) + timedelta(seconds=i), f"f{i}")
        writer.commit(batch.with_columns(pl.lit("forwarded").alias("source")), {})
    later = now + timedelta(minutes=5)  # forwarding stopped; five minutes on
    (before,) = [s for s in zone_statuses(config, session_for(config), now=later) if s.zone_id == 1]  # type: ignore[arg-type]
    assert before.forwarding == "silent" and before.forwarded_at is not None
    # The compaction runs at that later time (its commit's clock five minutes on).
    fake = SimpleNamespace(time=lambda: real_time.time() + 290, sleep=real_time.sleep)
    monkeypatch.setattr(files_module, "time", fake)
    monkeypatch.setattr(delta_log_module, "time", fake)  # the commit's entry, through the door
    assert OpenDays(session_of(lake)).compact(REQUESTS, [1], now.date()) == 8
    (after,) = [s for s in zone_statuses(config, session_for(config), now=later) if s.zone_id == 1]  # type: ignore[arg-type]
    assert after.forwarding == "silent"  # no line came since it stopped
    assert after.forwarded_at == before.forwarded_at
