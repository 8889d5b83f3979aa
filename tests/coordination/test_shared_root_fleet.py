"""Two daemons of a PostgreSQL fleet on ONE storage root: the first is SIGSTOPped mid-pass
(a commit prepared, its zone lock held) past its lease; the second takes the zone.

The lease and the zone's fence token already keep the two apart; the local zone lock
(a ``flock`` under ``<root>/work/locks``) must not: the sleeping daemon still holds it,
and before, the new owner's passes were all ``busy`` until the sleeper woke.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from cdnlake.coordination.postgres import fleet_view
from cdnlake.scheduler import wait_for
from tests.conftest import KEY, lake_frame, load_test_config, start_emulator, write_config
from tests.coordination.test_fenced_daemon import HOOKED_DAEMON

ZONE = 4201
POLL = 2  # lease time


def spawn(config: Path, log: Path, *hook: str) -> subprocess.Popen[str]:
    command = ["-c", HOOKED_DAEMON, *hook] if hook else ["-m", "cdnlake"]
    proc = subprocess.Popen(
        [sys.executable, *command, "--config", str(config), "daemon"],
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),
        text=True,
    )
    proc.log = log  # type: ignore[attr-defined]
    return proc


def log_of(proc: subprocess.Popen[str]) -> str:
    return proc.log.read_text()  # type: ignore[attr-defined]


@pytest.mark.timeout(180)
def test_a_sleeping_daemons_zone_lock_does_not_keep_the_new_owner_busy(
    tmp_path, postgres, monkeypatch
):
    monkeypatch.setenv("PG_DSN", postgres.dsn)
    emu = start_emulator(str(ZONE), rpm=2, now=None, frozen=False)
    procs: list[subprocess.Popen[str]] = []
    try:
        path = write_config(tmp_path, emu, zones=[(ZONE, "v2")], page_size=1000, window_seconds=2)
        text = path.read_text().replace("poll_seconds = 1", f"poll_seconds = {POLL}")
        # Passes alone: no daily job is due before 23:59, so none is caught up at start.
        text = text.replace("[schedule]\n", '[schedule]\nreport_at = "23:59"\n')
        text = text.replace("[schedule]\n", '[schedule]\nmaintain_at = "23:59"\n')
        path.write_text(
            text
            + '[coordination]\npostgres_dsn_env = "PG_DSN"\n[privacy]\nhash_key_env = "FLEET_KEY"\n'
        )
        config = load_test_config(path)
        key = f"requests/{ZONE}"
        arm, go = tmp_path / "arm", tmp_path / "go"

        def runs_of(proc: subprocess.Popen[str]) -> pl.DataFrame:
            frame = lake_frame(config, "ingest_runs").filter(pl.col("zone") == ZONE)
            return frame.filter(pl.col("daemon").str.ends_with(f":{proc.pid}"))

        a = spawn(path, tmp_path / "a.log", str(arm), str(go))
        procs.append(a)
        assert wait_for(lambda: runs_of(a).height >= 1, 120), log_of(a)
        arm.touch()  # A's next commit waits, prepared, inside its pass (zone lock held)
        assert wait_for(lambda: "PREPARED" in log_of(a), 60), log_of(a)
        a.send_signal(signal.SIGSTOP)

        # A's lease lapses; B, on the same storage root, takes the zone: its passes are ok.
        assert wait_for(
            lambda: key not in fleet_view(postgres.dsn, config.storage.lake_location).owners, 30
        )
        b = spawn(path, tmp_path / "b.log")
        procs.append(b)
        assert wait_for(lambda: runs_of(b).height >= 2, 60), log_of(b)
        outcomes = runs_of(b)["outcome"].to_list()
        assert set(outcomes) == {"ok"}, (outcomes, runs_of(b)["error"].to_list())
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=30) == 0, log_of(b)
        assert "Traceback" not in log_of(b)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
        emu.stop()
