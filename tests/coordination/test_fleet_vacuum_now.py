"""``--vacuum-now`` in a fleet (issue #47): a daemon of a PostgreSQL fleet polls three v2
zones every 2 s; beside it ``cdnlake forget --ip ... --vacuum-now`` runs. It holds every
writer off for its duration: it asks for every zone's lease and takes each once the
daemon's pass in flight ends, erases, deletes the removed files and lets the leases go.
The daemon takes them back, its table state naming files the vacuum deleted, and carries
on: no pass fails twice for the same missing file, each zone's watermark in the log is the
daemon's latest, and every request it acknowledged, less the erased, is read once by
delta-rs and by delta-kernel.

A lease the vacuum cannot have (another holder keeps it, or PostgreSQL is away) is refused
in one line naming that holder (or the database), nothing erased or deleted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from cdnlake.coordination.postgres import MaintainHold, fleet_view
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.scheduler import wait_for
from tests.conftest import KEY, lake_frame, load_test_config, run_cli, start_emulator, write_config
from tests.lake.test_vacuum_beside_daemon import (
    ZONES,
    assert_nothing_lost,
    caught_up,
    more_passes,
    spawn_daemon,
    stop,
)

# The CLI, with the wait for each lease shortened from MAINTAIN_WAIT_SECONDS (120 s) to
# three lease times (6 s), so that a refusal comes within seconds.
SHORT_WAIT = """
import sys
import cdnlake.coordination
cdnlake.coordination.MAINTAIN_WAIT_SECONDS = 0.0
from cdnlake.cli.main import main
raise SystemExit(main(sys.argv[1:]))
"""
KEY_ENV = {"ERASE_KEY": "fleet-erasure-key-" + "e" * 32}  # every process of a fleet shares the key


def fleet_config(tmp_path: Path, emu, dsn: str) -> Path:
    path = write_config(
        tmp_path, emu, zones=[(z, "v2") for z in ZONES], page_size=2000, window_seconds=10
    )
    text = path.read_text().replace("poll_seconds = 1", "poll_seconds = 2")
    # Passes alone: no daily job is due before 23:59.
    text = text.replace("[schedule]\n", '[schedule]\nreport_at = "23:59"\nmaintain_at = "23:59"\n')
    path.write_text(
        text + '[coordination]\npostgres_dsn_env = "PG_DSN"\n'
        '[privacy]\nhash_key_env = "ERASE_KEY"\n'
    )
    return path


@pytest.mark.timeout(300)
def test_forget_vacuum_now_holds_the_fleets_leases_and_its_daemon_loses_nothing(
    tmp_path, postgres, monkeypatch
):
    monkeypatch.setenv("PG_DSN", postgres.dsn)
    for name, value in KEY_ENV.items():
        monkeypatch.setenv(name, value)
    emu = start_emulator(",".join(map(str, ZONES)), rpm=2, now=None, frozen=False)
    daemon = None
    try:
        path = fleet_config(tmp_path, emu, postgres.dsn)
        where = load_test_config(path)
        fleet = where.storage.lake_location
        launched = datetime.now(UTC)
        daemon = spawn_daemon(path, "fleet")
        assert wait_for(lambda: caught_up(where), 120), daemon.log.read_text()[-3000:]  # type: ignore[attr-defined]
        owners = fleet_view(postgres.dsn, fleet).owners
        assert set(owners) == {f"{REQUESTS.name}/{z}" for z in ZONES}, owners
        assert all(o.endswith(f":{daemon.pid}") for o in owners.values()), owners
        frame = lake_frame(where).filter(pl.col("pull_zone_id").is_in(ZONES))
        common = frame["remote_ip"].value_counts(sort=True)["remote_ip"].to_list()
        address_a, address_b = common[0], common[1]

        def vacuum_now_refused(*named: str) -> None:
            """Exit 1, one line naming each of ``named``, nothing erased or deleted."""
            refused = subprocess.run(
                [sys.executable, "-c", SHORT_WAIT, "--config", str(path), "forget", "--ip",
                 address_a, "--vacuum-now"],
                capture_output=True, text=True, timeout=120,
                env={**os.environ, **KEY_ENV, "CDNLAKE_ACCESS_KEY": KEY},
            )  # fmt: skip
            assert refused.returncode == 1, (refused.stdout, refused.stderr)
            (line,) = refused.stderr.strip().splitlines()
            assert "refused" in line and "nothing vacuumed" in line, line
            assert all(name in line for name in named), line
            assert refused.stdout == ""
            assert lake_frame(where).filter(pl.col("remote_ip") == address_a).height  # kept

        # Another holder keeps one zone's lease: refused, naming it (the lease is asked for
        # and not had within the wait, shortened here).
        blocker = MaintainHold(postgres.dsn, fleet, "blocker:77", lease_seconds=60, wait=60)
        with blocker(REQUESTS.name, ZONES[1]):
            vacuum_now_refused("blocker:77/maintain", f"{REQUESTS.name}/{ZONES[1]}")
        more_passes(daemon, 1)  # the daemon has its zones back

        # PostgreSQL away: no lease can be had, so no writer is known to be held off.
        postgres.stop()
        try:
            vacuum_now_refused("could not be asked for", "PostgreSQL")
        finally:
            postgres.start()
        more_passes(daemon, 1)  # back: the daemon takes its zones again

        # Held: the vacuum waits for each pass in flight, holds every lease, and runs.
        erasures = []
        for address in (address_a, address_b):
            began = datetime.now(UTC)
            done = run_cli(
                "--config", str(path), "forget", "--ip", address, "--vacuum-now",
                env={**KEY_ENV, "PG_DSN": postgres.dsn}, timeout=400,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert "the old bytes have left storage (--vacuum-now)" in done.stdout
            erasures.append((address, began, datetime.now(UTC)))
            # The daemon takes its zones back and carries on from the lake as it is now.
            more_passes(daemon)
        stop(daemon)
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        emu.stop()

    assert fleet_view(postgres.dsn, fleet).owners == {}  # every lease let go
    assert_nothing_lost(tmp_path, where, emu, launched, [daemon], erasures)
    assert (
        not lake_frame(where)
        .filter(pl.col("remote_ip").is_in([address_a, address_b]))
        .filter(pl.col("ts") < erasures[0][1])
        .height
    )
