"""status reads no more than it shows: its figures against a full scan of the same lake."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
from deltalake import write_deltalake

from cdnlake.config import build_config
from cdnlake.lake.log.progress import to_ms
from cdnlake.lake.log.schema import INGEST_GAPS, REQUESTS, polars_schema
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.status import zone_statuses
from cdnlake.warehouse.db import Warehouse
from tests.conftest import cli_heavy_modules
from tests.lake.test_commit import rows
from tests.sessions import session_for, session_of

DAY = datetime(2026, 11, 20, tzinfo=UTC)


def run(finished: datetime, outcome: str = "ok", source: str = "v2") -> dict:
    return {
        "run_id": f"{source}-{finished.isoformat()}",
        "source": source,
        "started": finished - timedelta(seconds=1),
        "finished": finished,
        "outcome": outcome,
        "error": None if outcome == "ok" else "boom",
        "rejected": 0,
    }


def test_status_figures_equal_a_full_scan_recent_or_not(tmp_path):
    config = build_config(
        {
            "storage": {"root": str(tmp_path)},
            "zones": [{"id": 1, "source": "v2"}, {"id": 2, "source": "v2"}],
            "shield_zones": [{"id": 1}],
        },
        base_dir=tmp_path,
        env={},
    )
    lake = Lake.from_config(config.storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    writer.commit(rows(0, 30, DAY + timedelta(hours=1), "a"), {"": to_ms(DAY)})
    writer.commit(rows(0, 12, DAY - timedelta(hours=2), "b"), {})  # the day before
    writer.commit(rows(0, 5, DAY + timedelta(hours=2), "c"), {"": to_ms(DAY) + 1})
    books = Bookkeeping(session_of(lake))
    # Pull zone 1's newest run is older than shield zone 1's newest (same partition,
    # another numbering); zone 2 has one failed run, in an older file.
    books.record_run(2, run(DAY - timedelta(hours=30), "failed"))
    for minutes in (0, 10, 20):
        books.record_run(1, run(DAY + timedelta(minutes=minutes)))
    books.record_run(1, run(DAY + timedelta(minutes=30), source="shield"))

    for now in (DAY + timedelta(hours=3), DAY + timedelta(days=3, hours=3)):  # recent, then old
        got = {
            (s.zone_id, s.source): s for s in zone_statuses(config, session_for(config), now=now)
        }
        assert got[(1, "v2")].last_finished == DAY + timedelta(minutes=20)
        assert got[(1, "shield")].last_finished == DAY + timedelta(minutes=30)
        assert got[(2, "v2")].last_outcome == "failed"
        assert got[(1, "v2")].watermark == DAY + timedelta(milliseconds=1)

    got = {
        (s.zone_id, s.source): s
        for s in zone_statuses(config, session_for(config), now=DAY + timedelta(hours=3))
    }
    with Warehouse(config.storage).connect(["requests"]) as con:
        (today,) = con.execute(
            "SELECT count(*) FROM requests WHERE date = $d AND pull_zone_id = 1", {"d": DAY.date()}
        ).fetchone()
    assert got[(1, "v2")].rows_today == today == 35
    assert got[(2, "v2")].rows_today == 0


def test_status_loads_neither_polars_nor_pyarrow(tmp_path):
    """``status`` reads the log, the application transactions and the runs with
    deltalake and DuckDB alone: polars and pyarrow would more than double the start-up
    that a monitoring probe pays every time it asks."""
    (tmp_path / "config.toml").write_text(
        f'[storage]\nroot = "{tmp_path}"\n[[zones]]\nid = 1\nsource = "v2"\n'
    )
    config = build_config(
        {"storage": {"root": str(tmp_path)}, "zones": [{"id": 1, "source": "v2"}]},
        base_dir=tmp_path,
        env={},
    )
    lake = Lake.from_config(config.storage)
    ZoneWriter(session_of(lake), REQUESTS, 1).commit(rows(0, 10, DAY, "a"), {"": to_ms(DAY)})
    Bookkeeping(session_of(lake)).record_run(1, run(DAY))

    args = ["--config", str(tmp_path / "config.toml"), "status", "--format", "json"]
    proc, heavy = cli_heavy_modules(*args)
    assert '"zone_id": 1' in proc.stdout, proc.stderr
    assert heavy == []


def test_status_counts_the_union_of_gap_spans(tmp_path):
    """Gaps that overlap or touch (written by an earlier version, which appended one at
    every pass of an outage, or by two writers at once) are one loss, counted once."""
    config = build_config(
        {
            "storage": {"root": str(tmp_path)},
            "zones": [{"id": 1, "source": "v2"}],
            "shield_zones": [{"id": 1}],
        },
        base_dir=tmp_path,
        env={},
    )
    lake = Lake.from_config(config.storage)
    hour = timedelta(hours=1)
    spans = [(0, 2, "v2"), (1, 3, "v2"), (3, 4, "v1"), (10, 11, "maintain"), (0, 1, "shield")]
    rows = [
        {
            "zone": 1,
            "gap_from": DAY + start * hour,
            "gap_to": DAY + end * hour,
            "reason": "lost",
            "detected_at": DAY + 12 * hour,
            "run_id": f"run-{n}",
            "source": source,
        }
        for n, (start, end, source) in enumerate(spans)
    ]
    frame = pl.DataFrame(rows, schema=polars_schema(INGEST_GAPS.schema))
    write_deltalake(lake.open_or_create(INGEST_GAPS), frame, mode="append", partition_by=["zone"])
    got = {
        s.source: s for s in zone_statuses(config, session_for(config), now=DAY + timedelta(days=1))
    }
    assert (got["v2"].gaps_7d, got["v2"].lost_seconds_7d) == (2, 5 * 3600)
    assert (got["shield"].gaps_7d, got["shield"].lost_seconds_7d) == (1, 3600)


def test_a_freshest_row_from_the_future_is_not_healthy(tmp_path):
    """A row stamped 2030 (stored before such records were refused): the zone is unhealthy,
    its problem says so, rather than a negative age shown as healthy."""
    config = build_config(
        {"storage": {"root": str(tmp_path)}, "zones": [{"id": 1, "source": "v2"}]},
        base_dir=tmp_path,
        env={},
    )
    lake = Lake.from_config(config.storage)
    now = DAY + timedelta(minutes=10)
    # no file in the days around now: the freshest row is looked for in every file
    old = DAY - timedelta(days=3)
    ZoneWriter(session_of(lake), REQUESTS, 1).commit(rows(0, 3, old, "a"), {"": to_ms(now)})
    Bookkeeping(session_of(lake)).record_run(1, run(DAY + timedelta(minutes=5)))
    (fine,) = zone_statuses(config, session_for(config), now=now)
    assert fine.healthy, fine.problem
    ZoneWriter(session_of(lake), REQUESTS, 1).commit(
        rows(0, 1, datetime(2030, 1, 1, tzinfo=UTC), "z"), {}
    )
    (status,) = zone_statuses(config, session_for(config), now=now)
    assert not status.healthy
    assert status.problem is not None and "in the future" in status.problem, status.problem


def test_status_and_healthz_read_the_sessions_tables_not_a_fresh_snapshot(tmp_path, monkeypatch):
    """``/healthz`` every 10 s, ``status``, the metrics' completeness and the audit's
    reads: each table is opened once for the process's session, then brought up to date
    (what another process committed since is seen), never opened anew."""
    from cdnlake.audit.run import archived_days, zone_starts, zone_watermarks
    from cdnlake.status import completeness, health

    config = build_config(
        {
            "storage": {"root": str(tmp_path)},
            "zones": [{"id": 1, "source": "v2"}],
            "shield_zones": [{"id": 1}],
        },
        base_dir=tmp_path,
        env={},
    )
    writer_lake = Lake.from_config(config.storage)  # another process: the daemon's passes
    writer = ZoneWriter(session_of(writer_lake), REQUESTS, 1)
    writer.commit(rows(0, 30, DAY + timedelta(hours=1), "a"), {"": to_ms(DAY)})
    books = Bookkeeping(session_of(writer_lake))
    books.record_run(1, run(DAY + timedelta(minutes=5)))
    books.record_audit_days(
        1,
        [
            {
                "day": DAY.date(),
                "verdict": "ok",
                "provider_requests": 30,
                "lake_requests": 30,
                "hours_short": 0,
                "detail": "",
                "audited_at": DAY + timedelta(days=1),
            }
        ],
    )

    session = session_for(config)
    opened: list[str] = []
    real_open = Lake.open

    def counted(self, spec):
        if self is session.lake:
            opened.append(spec.name)
        return real_open(self, spec)

    monkeypatch.setattr(Lake, "open", counted)
    body, _ = health(config, session)
    first = sorted(opened)
    assert "requests" in first and "ingest_runs" in first and "audit_days" in first
    assert body[0]["watermark"] == DAY.isoformat()
    for step in range(1, 4):  # the daemon moves on; /healthz asks again
        writer.commit(
            rows(0, 3, DAY + timedelta(hours=1 + step), f"n{step}"),
            {"": to_ms(DAY + timedelta(minutes=step))},
        )
        body, _ = health(config, session)
        assert body[0]["watermark"] == (DAY + timedelta(minutes=step)).isoformat()
        completeness(config, session)
        zone_watermarks(session, [1])
        zone_starts(session, [1])
        archived_days(session, [1], DAY.date(), DAY.date(), DAY + timedelta(days=2))
    # Not one table opened anew (one never written, such as ingest_gaps here, is
    # looked for again: it may have been created since).
    again = [name for name in opened[len(first) :] if name in ("requests", "ingest_runs")]
    assert again + [name for name in opened if name == "audit_days"][1:] == [], opened
