"""A backfill run's own scratch folder under ``<work>/archive/<zone>/``.

Two runs of one zone may overlap (``cdnlake backfill`` beside the daemon's archive job):
each downloads into a folder of its own, locked (``flock``) for as long as it runs, so that
neither deletes nor appends to the other's download. A folder whose lock nobody holds is
what a killed run left: the next run of the zone removes it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = ".lock"
UNLOCKED_SECONDS = 3600.0  # a run's folder without its lock yet: a killed run's, when older


@contextmanager
def run_folder(zone_dir: Path) -> Iterator[Path]:
    """A new folder of this run's, removed as it ends; what killed runs left removed first."""
    zone_dir.mkdir(parents=True, exist_ok=True)
    _sweep(zone_dir)
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=zone_dir))
    # Locked before it is named LOCK: a sweep never finds this run's lock free.
    fd, name = tempfile.mkstemp(prefix=".locking-", dir=folder)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(name, folder / LOCK)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def _sweep(zone_dir: Path) -> None:
    for entry in zone_dir.iterdir():
        if not entry.is_dir():  # a download of an earlier version's layout
            entry.unlink(missing_ok=True)
            continue
        try:
            fd = os.open(entry / LOCK, os.O_RDONLY)
        except FileNotFoundError:  # being made this instant, or killed before its lock
            if time.time() - entry.stat().st_mtime > UNLOCKED_SECONDS:
                shutil.rmtree(entry, ignore_errors=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a run in progress
        else:
            shutil.rmtree(entry, ignore_errors=True)
        finally:
            os.close(fd)
