"""A daemon SIGSTOPped past its lease, with a commit prepared, while another takes its zone
and a span of the zone is set aside and rewound; then SIGCONTed.

Two ``cdnlake daemon`` processes, as on two machines: each its own work folder (zone locks),
one lake on S3 (moto), one PostgreSQL. Daemon A runs with a hook that holds its next commit
just after the commit re-read the table (the moment a stall or a SIGSTOP hurts most); the
test SIGSTOPs it there. B takes the zone once A's lease lapsed and ingests; B stops; a day
of the zone is set aside and the zone rewound to it (what ``maintain`` does with a damaged
file); A is SIGCONTed. A's prepared commit is refused (before the fence it committed the
watermark it had computed, over the set-aside day, which was never read again); A takes the
zone anew and reads the day again: nothing lost, nothing doubled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from cdnlake.coordination.postgres import fleet_view
from cdnlake.lake.log.progress import day_start, from_ms, rewind
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.scheduler import wait_for
from tests.conftest import (
    KEY,
    lake_frame,
    lake_of,
    load_test_config,
    start_emulator,
    truth_ids,
    write_config,
)
from tests.sessions import session_of

ZONE = 4101
POLL = 2  # lease time

# Daemon A: `cdnlake daemon`, but once ARM exists, its next commit attempt says PREPARED
# (after re-reading the table and checking its token) and waits there for GO.
HOOKED_DAEMON = """
import pathlib, sys, time
from cdnlake.lake.zone import writer as zone

arm, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
write_files = zone.write_files

def held(lake, spec, frame):
    if arm.exists() and not go.exists():
        print("PREPARED", file=sys.stderr, flush=True)
        while not go.exists():
            time.sleep(0.05)
    return write_files(lake, spec, frame)

zone.write_files = held
from cdnlake.cli.main import main
raise SystemExit(main(sys.argv[3:]))
"""


def spawn(config: Path, *hook: str) -> subprocess.Popen[str]:
    log = open(config.parent / "daemon.log", "w")
    command = ["-c", HOOKED_DAEMON, *hook] if hook else ["-m", "cdnlake"]
    proc = subprocess.Popen(
        [sys.executable, *command, "--config", str(config), "daemon"],
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
    )
    proc.log = config.parent / "daemon.log"  # type: ignore[attr-defined]
    return proc


def log_of(proc: subprocess.Popen[str]) -> str:
    return proc.log.read_text()  # type: ignore[attr-defined]


@pytest.mark.timeout(300)
def test_a_stale_daemon_woken_after_a_takeover_and_a_rewind_commits_nothing(
    tmp_path, postgres, s3_server, monkeypatch
):
    monkeypatch.setenv("PG_DSN", postgres.dsn)
    emu = start_emulator(str(ZONE), rpm=2, rate=(30, 10.0), now=None, frozen=False)
    procs: list[subprocess.Popen[str]] = []
    try:
        (tmp_path / "a").mkdir()
        path_a = write_config(
            tmp_path / "a",
            emu,
            zones=[(ZONE, "v2")],
            s3=s3_server,
            page_size=1000,
            requests_per_window=30,
            window_seconds=10,
            max_window_seconds=43200,
        )
        text = path_a.read_text().replace("poll_seconds = 1", f"poll_seconds = {POLL}")
        path_a.write_text(
            text
            + '[coordination]\npostgres_dsn_env = "PG_DSN"\n[privacy]\nhash_key_env = "FLEET_KEY"\n'
        )
        (tmp_path / "b").mkdir()
        path_b = tmp_path / "b" / "config.toml"  # another machine: its own work folder
        path_b.write_text(path_a.read_text())
        config = load_test_config(path_a)
        lake = lake_of(config)
        fleet = config.storage.lake_location
        key = f"requests/{ZONE}"
        arm, go = tmp_path / "arm", tmp_path / "go"

        def runs() -> pl.DataFrame:
            return lake_frame(config, "ingest_runs").filter(pl.col("zone") == ZONE)

        def runs_of(proc: subprocess.Popen[str]) -> pl.DataFrame:
            frame = runs()
            return frame.filter(pl.col("daemon").str.ends_with(f":{proc.pid}"))

        def watermark() -> datetime | None:
            table = lake.open(REQUESTS)
            app = REQUESTS.app_id(ZONE)
            return None if table is None else from_ms(table.transaction_version(app))

        a = spawn(path_a, str(arm), str(go))
        procs.append(a)
        assert wait_for(lambda: runs_of(a).height >= 1, 120), log_of(a)
        arm.touch()  # A's next commit waits, prepared
        assert wait_for(lambda: "PREPARED" in log_of(a), 60), log_of(a)
        a.send_signal(signal.SIGSTOP)
        go.touch()  # (so that it goes on at once when it wakes)

        # A's lease lapses; B takes the zone and ingests, then stops.
        assert wait_for(lambda: key not in fleet_view(postgres.dsn, fleet).owners, 30)
        b = spawn(path_b)
        procs.append(b)
        assert wait_for(lambda: runs_of(b).filter(pl.col("outcome") == "ok").height >= 1, 120), (
            log_of(b)
        )
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=30) == 0, log_of(b)

        # Yesterday of the zone is set aside (as a damaged file is) and the zone rewound.
        day = (datetime.now(UTC) - timedelta(days=1)).date()
        table = lake.open(REQUESTS)
        table.delete(f"pull_zone_id = {ZONE} AND date = '{day.isoformat()}'")
        rewind(ZoneWriter(session_of(lake), REQUESTS, ZONE), day_start(day))
        assert watermark() == day_start(day)
        ids = set(lake_frame(config).filter(pl.col("pull_zone_id") == ZONE)["request_id"])
        assert not truth_ids(emu, ZONE, day_start(day), day_start(day) + timedelta(days=1)) & ids

        # A wakes: its prepared commit is refused; it takes the zone anew, reads the day again.
        woke = datetime.now(UTC)
        a.send_signal(signal.SIGCONT)
        assert wait_for(
            lambda: (mark := watermark()) is not None and mark >= woke - timedelta(seconds=300),
            120,
        ), log_of(a)
        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=30) == 0, log_of(a)
        assert "Traceback" not in log_of(a)

        got = lake_frame(config).filter(pl.col("pull_zone_id") == ZONE)["request_id"].to_list()
        assert len(got) == len(set(got)), "a request was stored twice"
        end = watermark()
        assert end is not None
        start = runs()["window_from"].min()
        missing = truth_ids(emu, ZONE, start, end, at=emu.clock.now()) - set(got)
        assert not missing, f"{len(missing)} requests missing, the set-aside day never read again"
        # The prepared commit was refused, said so, and A's pass failed on it.
        stale = runs_of(a).filter(pl.col("error").str.contains("rewound or the zone taken"))
        assert stale["outcome"].to_list() == ["failed"], runs_of(a)
        assert "rewound or the zone taken" in log_of(a)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
        emu.stop()
