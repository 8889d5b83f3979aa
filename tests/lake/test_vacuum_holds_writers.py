"""``--vacuum-now`` holds off the writers no zone lock covers (review finding 10): a
re-read (``ingest --from/--to``), ``backfill``, ``forget`` and ``maintain`` hold the
writers' lock shared (:func:`cdnlake.lake.zone.lock.writing`), which the vacuum takes
exclusively. A vacuum waits for such a writer to end, or refuses in one line naming it;
a writer waits for a vacuum under way, or refuses naming it; nothing is lost.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from cdnlake.coordination.sole import lock_path
from cdnlake.errors import ZoneBusyError
from cdnlake.lake.zone.lock import WRITERS, writers_held, writing
from cdnlake.scheduler import wait_for
from tests.conftest import KEY, lake_frame, load_test_config, start_emulator, write_config

ZONE = 1234

# The CLI with a wait shortened (module, constant, seconds as argv[1..3]).
SHORT = """
import importlib, sys
setattr(importlib.import_module(sys.argv[1]), sys.argv[2], float(sys.argv[3]))
from cdnlake.cli.main import main
raise SystemExit(main(sys.argv[4:]))
"""
# The CLI whose re-read, once it holds the writers' lock, says so (argv[1] is touched)
# and goes on only once argv[2] exists: a writer caught in the middle, for as long as
# the test needs.
PAUSED = """
import pathlib, sys, time
from cdnlake.ingest.passes import Ingestor
ready, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
original = Ingestor.reread
def reread(self, *args, **kwargs):
    ready.touch()
    while not go.exists():
        time.sleep(0.05)
    return original(self, *args, **kwargs)
Ingestor.reread = reread
from cdnlake.cli.main import main
raise SystemExit(main(sys.argv[3:]))
"""
ENV = {**os.environ, "CDNLAKE_ACCESS_KEY": KEY}


def cli(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=300)
    return process.returncode, out, err


def test_writing_and_writers_held_name_each_other(tmp_path):
    work = tmp_path / "work"
    locks = work / "locks"
    stale = locks / WRITERS / "gone-1-dead"  # a killed writer's name: nobody holds it
    stale.parent.mkdir(parents=True)
    stale.write_text("edge-0:1 (backfill --zone 3) since then")
    in_flight, release = threading.Event(), threading.Event()

    def backfill() -> None:
        with writing(locks, "edge-1:11 (backfill --zone 7)", wait=1):
            in_flight.set()
            release.wait(20)

    writer = threading.Thread(target=backfill)
    writer.start()
    assert in_flight.wait(10)
    with (
        pytest.raises(ZoneBusyError) as busy,
        writers_held(lock_path(work), locks, [], who="me", wait=0.3),
    ):
        pass
    assert "edge-1:11 (backfill --zone 7)" in str(busy.value), busy.value
    assert "zone 3" not in str(busy.value)
    threading.Timer(0.5, release.set).start()  # the vacuum waits for it to end
    with writers_held(lock_path(work), locks, [], who="edge-2:22 (maintain --vacuum-now)", wait=20):
        assert not writer.is_alive()
        with (
            pytest.raises(ZoneBusyError, match=r"vacuumed \(edge-2:22 \(maintain --vacuum-now\)"),
            writing(locks, "late", wait=0.3),
        ):
            pass
    writer.join()
    with writing(locks, "after", wait=0):  # all let go
        pass
    assert [p.name for p in (locks / WRITERS).iterdir()] == ["gone-1-dead"]


def test_a_re_read_beside_vacuum_now_is_waited_for_or_named_and_loses_nothing(tmp_path):
    day = (datetime.now(UTC) - timedelta(days=1)).date()
    span = ("--from", f"{day}T05:00Z", "--to", f"{day}T06:00Z")
    emu = start_emulator(str(ZONE), rpm=2, now=None, frozen=False)
    try:
        path = write_config(tmp_path, emu, [(ZONE, "v2")])
        config = str(path)
        work = load_test_config(path).storage.work
        reread = ("--config", config, "ingest", "--zone", str(ZONE), *span)
        vacuum = ("--config", config, "maintain", "--vacuum-now")

        # A vacuum under way: the re-read waits for it, or (its wait cut short) refuses
        # naming it, storing nothing.
        with writers_held(
            lock_path(work), work / "locks", [], who="edge-9:99 (maintain --vacuum-now)", wait=5
        ):
            code, out, err = finished(
                cli(SHORT, "cdnlake.cli.lake_cmd", "WRITING_WAIT_SECONDS", "0.3", *reread)
            )
        assert code == 1, (out, err)
        (line,) = err.strip().splitlines()
        assert "vacuumed" in line and "edge-9:99 (maintain --vacuum-now)" in line, line
        assert lake_frame(path.parent / "data").height == 0

        # A re-read writing: the vacuum (its wait cut short) refuses naming it...
        ready, go = tmp_path / "ready", tmp_path / "go"
        writer = cli(PAUSED, str(ready), str(go), *reread)
        assert wait_for(ready.exists, 60), writer.stderr.read() if writer.poll() else ""
        code, out, err = finished(
            cli(SHORT, "cdnlake.cli.lake_cmd", "VACUUM_WAIT_SECONDS", "0.3", *vacuum)
        )
        assert code == 1, (out, err)
        (line,) = err.strip().splitlines()
        assert "refused" in line and f":{writer.pid} (ingest --zone {ZONE} --from/--to)" in line
        assert out == ""
        # ... or waits for it to end, holding every other writer off meanwhile.
        waiting = cli(SHORT, "cdnlake.cli.lake_cmd", "VACUUM_WAIT_SECONDS", "120", *vacuum)
        daemon_lock = lock_path(work)
        assert wait_for(
            lambda: "maintain --vacuum-now" in daemon_lock.read_text(errors="replace"), 60
        )
        assert waiting.poll() is None  # it waits for the re-read
        go.touch()
        code, out, err = finished(writer)
        assert code == 0, (out, err)
        assert "re-read of" in out and "ok" in out
        code, out, err = finished(waiting)
        assert code == 0, (out, err)
        assert "the old bytes have left storage (--vacuum-now)" in out

        # Nothing lost: the re-read's rows are there, once each, and read whole.
        rows = lake_frame(path.parent / "data")
        assert rows.height > 0 and rows["request_id"].n_unique() == rows.height
        assert rows.filter(pl.col("pull_zone_id") == ZONE).height == rows.height
    finally:
        emu.stop()
