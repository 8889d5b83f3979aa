"""``cdnlake maintain`` and the daemon's daily maintenance hold a zone's lease in a fleet.

A real PostgreSQL and a real Delta table. The daemon ``host:1`` owns zone 77 and has a pass
in flight while maintenance meets a damaged file of that zone: maintenance asks for the
lease (``hold=maintain_hold(...)``), does not get it within its wait, and leaves the file
in place (reported, exit 1) rather than rewind a zone another daemon is reading. It still
compacts what the damage does not touch (zone 78's day; before, it stopped at the table).
The daemon does not count that day's maintenance as done: its fleet job stays open, and a
later run (here once the pass ended) takes the lease, rewinds and sets the file aside.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from cdnlake import coordination
from cdnlake.cli.main import main
from cdnlake.config import Config, build_config
from cdnlake.coordination.postgres import PostgresFleet
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.upkeep import maintain as maintain_module
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.scheduler import Daemon, wait_for
from tests.conftest import make_client
from tests.lake.test_fencing import MIDNIGHT, ZONE, provider, seed, watermark
from tests.sessions import session_of

KEY = f"{REQUESTS.name}/{ZONE}"
OTHER = ZONE + 1  # a zone the damage does not touch
SPOILED = b"not parquet at all"


def config_of(root: Path, dsn: str) -> Config:
    raw = {
        "storage": {"root": str(root / "data")},
        "coordination": {"postgres_dsn_env": "PG_DSN"},
        "privacy": {"hash_key_env": "FLEET_KEY"},
        "schedule": {"poll_seconds": 1},
    }
    return build_config(raw, base_dir=root, env={"PG_DSN": dsn})


def files_of(lake: Lake, zone: int, day: str) -> int:
    table = lake.open(REQUESTS)
    assert table is not None
    return sum(f"pull_zone_id={zone}/date={day}/" in uri for uri in table.file_uris())


@pytest.fixture
def damaged_lake(tmp_path, postgres, monkeypatch):
    """Zone 77's first day damaged; zone 78's second day in four small files."""
    monkeypatch.setattr(coordination, "MAINTAIN_WAIT_SECONDS", 2.0)
    monkeypatch.setenv("PG_DSN", postgres.dsn)
    config = config_of(tmp_path, postgres.dsn)
    lake = Lake.from_config(config.storage)
    seed(lake)
    writer = ZoneWriter(session_of(lake), REQUESTS, OTHER)
    for i in range(4):
        start = MIDNIGHT + timedelta(minutes=i)
        writer.commit(provider(OTHER, start, start + timedelta(minutes=1)), {})
    table = lake.open(REQUESTS)
    assert table is not None
    damaged = sorted(uri for uri in table.file_uris() if f"{ZONE}/date=2026-11-19" in uri)[0]
    Path(damaged.removeprefix("file://")).write_bytes(SPOILED)
    return config, lake, Path(damaged.removeprefix("file://"))


def owner_of(config: Config, postgres) -> PostgresFleet:
    owner = PostgresFleet(postgres.dsn, config.storage.lake_location, "host:1",
                          lease_seconds=2.0, rate_window_seconds=0.0)  # fmt: skip
    owner.start([KEY], lambda key, wait: None)
    assert KEY in owner.leases
    return owner


@pytest.mark.timeout(180)
def test_the_cli_maintain_holds_the_lease_and_maintains_the_rest(
    damaged_lake, postgres, tmp_path, capsys
):
    config, lake, damaged = damaged_lake
    path = tmp_path / "config.toml"
    path.write_text(
        f'[storage]\nroot = "{tmp_path / "data"}"\n[coordination]\npostgres_dsn_env = "PG_DSN"\n'
        '[privacy]\nhash_key_env = "FLEET_KEY"\n'
        "[schedule]\npoll_seconds = 1\n"
    )
    before = watermark(lake)
    owner = owner_of(config, postgres)
    try:
        with owner.claim(KEY) as held:  # a pass in flight that outlasts maintain's wait
            assert held is not None
            code = main(["--config", str(path), "maintain", "--check-all"])
            out = capsys.readouterr().out
            assert code == 1, out
            assert "NOT set aside" in out and "held by host:1" in out, out
            assert damaged.read_bytes() == SPOILED  # not moved...
            assert watermark(lake) == before  # ...as its zone was not rewound
            assert not held.lost.is_set()
        # The rest of the table is maintained: zone 78's day compacted, a checkpoint.
        assert files_of(lake, OTHER, "2026-11-20") == 1
        assert list((tmp_path / "data").rglob("_delta_log/*.checkpoint.parquet"))
    finally:
        owner.stop()


def job_finished(postgres, fleet: str, job: str) -> object:
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT finished FROM cdnlake_fleet_jobs WHERE fleet = %s AND job = %s", (fleet, job)
        ).fetchone()
    assert row is not None, f"{job} never claimed"
    return row[0]


@pytest.mark.timeout(180)
def test_the_daemons_maintenance_holds_the_lease_and_leaves_its_job_open(
    damaged_lake, postgres, caplog, monkeypatch
):
    config, lake, damaged = damaged_lake
    # The daily run checks what the provider still serves: the seeded days count as such.
    monkeypatch.setattr(maintain_module, "RETENTION", timedelta(days=3650))
    day = MIDNIGHT.date()
    before = watermark(lake)
    owner = owner_of(config, postgres)
    daemon = Daemon(config, make_client(config), fleet=owner, catch_up=False)
    try:
        with owner.claim(KEY) as held, caplog.at_level(logging.INFO, "cdnlake.daemon"):
            assert held is not None
            daemon.maintain(day)
            assert damaged.read_bytes() == SPOILED
            assert watermark(lake) == before
            assert not held.lost.is_set()
        assert files_of(lake, OTHER, "2026-11-20") == 1  # the rest maintained
        # Not reported as done: an error, and the day's job open for a later run.
        assert daemon.maintain_runs == 0
        assert "lake maintained" not in caplog.text
        failed = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert failed and "left in place" in failed[-1].getMessage()
        assert job_finished(postgres, config.storage.lake_location, f"maintain/{day}") is None
        # The pass ended: the daemon's next compaction round runs the day's maintenance
        # again, which takes the lease and sets the file aside.
        daemon.compact_open_days()
        assert daemon.maintain_runs == 1
        assert not damaged.exists()  # set aside, its span claimed (past retention here)
        assert job_finished(postgres, config.storage.lake_location, f"maintain/{day}")
        assert wait_for(lambda: KEY in owner.leases, 30)  # let go to its owner
    finally:
        owner.stop()
