"""One process at a time per zone on this machine (an advisory ``flock``), for passes run
without a fleet lease; :func:`writers_held` holds every writer of the lake off at once
(``--vacuum-now``). It saves the rate budget and spares a pass a rewind's refusal;
correctness rests on Delta's commits and the zone's fence, not on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from cdnlake.errors import StopRequested, ZoneBusyError


@contextmanager
def zone_lock(
    locks: Path,
    kind: str,
    zone_id: int,
    *,
    wait: float = 0.0,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[None]:
    """Hold ``kind`` zone ``zone_id``; ZoneBusyError if another local process still has it
    after ``wait`` seconds (0: at once); StopRequested once ``stop`` turns true meanwhile."""
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / f"{kind}-{int(zone_id)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if stop():
                    raise StopRequested() from None
                if time.monotonic() >= deadline:
                    noun = "shield zone" if kind == "shield_events" else "pull zone"
                    held_by = _holder(fd)
                    raise ZoneBusyError(
                        f"{noun} {zone_id} is being ingested by another cdnlake process"
                        + (f" ({held_by})" if held_by else "")
                    ) from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)  # the holder named, for whoever finds the zone busy
        os.pwrite(fd, f"{socket.gethostname()}:{os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    """Who holds a lock, as its holder wrote it (``host:pid``), or ""."""
    try:
        return os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


@contextmanager
def writers_held(
    daemon_lock: Path,
    locks: Path,
    zones: Iterable[tuple[str, int]],
    *,
    who: str,
    wait: float,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[None]:
    """Hold every local writer of the lake off while the block runs: the storage root's
    daemon lock (``daemon_lock``: no daemon runs, none starts meanwhile; the lock names
    ``who`` holds it) and the lock of each ``(table, zone)`` (no ``ingest``, ``backfill``
    or ``import-v1`` of it runs), each waited for up to ``wait`` seconds. A daemon running
    is not waited for: :class:`ZoneBusyError` at once, naming it (host:pid, since when);
    a zone still held after ``wait``: :class:`ZoneBusyError` naming it; ``stop`` turning
    true meanwhile: :class:`StopRequested`."""
    daemon_lock.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as held:
        fd = os.open(daemon_lock, os.O_RDWR | os.O_CREAT, 0o644)
        held.callback(os.close, fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            running = _holder(fd) or "unknown"
            raise ZoneBusyError(
                f"a cdnlake daemon ({running}) writes this lake: stop it first"
            ) from None
        os.ftruncate(fd, 0)
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        os.pwrite(fd, f"{who} since {since}\n".encode(), 0)
        held.callback(os.ftruncate, fd, 0)
        for kind, zone_id in sorted(set(zones)):
            held.enter_context(zone_lock(locks, kind, zone_id, wait=wait, stop=stop))
        yield
