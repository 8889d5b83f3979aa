"""Without coordination: one daemon per storage root, held by an advisory ``flock``.

The lock file names its holder (``host:pid`` and since when), so that a second daemon
can say which one is running, and ``status`` can show it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from cdnlake.coordination.fleet import Hold, Turn, never
from cdnlake.errors import DaemonRunningError


def lock_path(work: Path) -> Path:
    return work / "locks" / "daemon.lock"


def holder(work: Path) -> str | None:
    """The running daemon on this root as ``host:pid (since ...)``, None if there is none.

    The lock itself says whether a daemon runs: a daemon that was killed, here or on
    another host or container sharing the root, left its name in the file but took its
    lock with it. (A pid test would be fooled by another host's pids, or a reused one.)
    """
    try:
        fd = os.open(lock_path(work), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: a daemon runs
            return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown"
        return None  # nobody holds it (the shared hold ends as the file closes)
    finally:
        os.close(fd)


def job_marker(work: Path, job: str) -> Path:
    """Where a sole daemon records a fleet job it did (``report/<day>``, ...)."""
    return work / "jobs" / f"{job}.done"


class SoleDaemon:
    """The daemon that owns every zone of its storage root, alone."""

    done_elsewhere = "already done on this storage root"

    def __init__(self, work: Path, daemon_id: str) -> None:
        self.work = work
        self.daemon_id = daemon_id
        self._fd: int | None = None
        self._never = threading.Event()  # a sole daemon's leases never lapse

    def start(
        self,
        zone_keys: list[str],
        on_acquired: Callable[[str, float], None],
        *,
        stopping: Callable[[], bool] = never,
        room: Callable[[], int] | None = None,
    ) -> None:
        """Hold the storage root (every zone is this daemon's, from the start)."""
        path = lock_path(self.work)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            running = holder(self.work) or "another process"
            raise DaemonRunningError(
                f"daemon: another cdnlake daemon ({running}) is running on storage root "
                f"{self.work.parent}; stop it first, or set coordination.postgres_dsn_env "
                "to run several"
            ) from None
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.daemon_id} since {since}\n".encode(), 0)
        self._fd = fd

    def more_room(self) -> None:
        """Nothing to take: every zone is held from the start."""

    @contextlib.contextmanager
    def claim(self, key: str) -> Iterator[Hold | None]:
        """Always held, ready at once, never lost."""
        yield Hold(0.0, self._never, None)

    @contextlib.contextmanager
    def fleet_job(self, job: str) -> Iterator[Turn]:
        """``MINE`` unless this root's daemon did ``job`` already (``DONE``: a restart
        after the day's report must not make it twice); done once the block ends without
        an exception. Never ``UNKNOWN``: the marker is on this root."""
        marker = job_marker(self.work, job)
        if marker.exists():
            yield Turn.DONE
            return
        yield Turn.MINE
        marker.parent.mkdir(parents=True, exist_ok=True)
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        marker.write_text(f"{self.daemon_id} at {since}\n")

    def stop(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None
