"""One process at a time per zone on this machine (an advisory ``flock``), for passes run
without a fleet lease (in a fleet the lease keeps them apart, and a lock left by a stalled
holder on a shared storage root must not keep the lease's owner busy).
:func:`writers_held` holds every writer of the lake off at once (``--vacuum-now``).

This saves the rate budget from two local processes polling one zone, and spares a pass
in flight the refusal a rewind by ``maintain`` would cause (``maintain`` waits for it).
Correctness does not rest on it: Delta's commit protocol keeps every request once, and
the zone's fence its progress, even when processes on different machines write one zone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from cdnlake.errors import StopRequested, ZoneBusyError

# ``<locks>/writers.lock``, held shared by each writer no zone lock covers (:func:`writing`),
# exclusively by :func:`writers_held`; ``<locks>/writers/``: those writers' names.
WRITERS = "writers"


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
    after ``wait`` seconds (0: at once); StopRequested once ``stop`` turns true meanwhile.

    A caller that waits queues for its turn first (:func:`_turn`): while it waits, a pass
    that would start finds the zone busy, so it waits for the pass in flight only, never
    for a daemon that takes the lock again the moment it lets go."""
    locks.mkdir(parents=True, exist_ok=True)
    noun = "shield zone" if kind == "shield_events" else "pull zone"
    name = f"{kind}-{int(zone_id)}"
    deadline = time.monotonic() + wait
    fd = _open(locks / f"{name}.lock")
    try:
        with _turn(locks / f"{name}.turn", f"{noun} {zone_id}", wait, stop):
            if not _take(fd, fcntl.LOCK_EX, max(0.0, deadline - time.monotonic()), stop):
                raise _busy(fd, f"{noun} {zone_id} is being ingested by another cdnlake process")
        _name_me(fd)  # for whoever finds the zone busy
        yield
    finally:
        os.close(fd)


@contextmanager
def _turn(path: Path, zone: str, wait: float, stop: Callable[[], bool]) -> Iterator[None]:
    """The zone's queue, held while its lock is asked for: taken exclusively by a caller
    that waits (one waiter at a time, up to ``wait`` seconds), shared and at once by one
    that does not, which finds the zone busy while someone waits for it."""
    fd = _open(path)
    try:
        if not _take(fd, fcntl.LOCK_EX if wait > 0 else fcntl.LOCK_SH, wait, stop):
            raise _busy(fd, f"{zone} is waited for by another cdnlake process")
        if wait > 0:
            _name_me(fd)  # for a pass that finds the zone busy
        try:
            yield
        finally:
            if wait > 0:
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)


@contextmanager
def writing(
    locks: Path, who: str, *, wait: float, stop: Callable[[], bool] = lambda: False
) -> Iterator[None]:
    """A writer of the lake that no zone lock covers (``backfill``, a re-read, ``forget``,
    ``maintain``) while the block runs: the writers' lock held shared (:func:`writers_held`
    takes it exclusively), ``who`` in a file of its own under ``<locks>/writers/`` for a
    vacuum to name. A vacuum under way is waited for up to ``wait`` seconds, then
    :class:`ZoneBusyError` naming it; ``stop`` turning true: :class:`StopRequested`."""
    locks.mkdir(parents=True, exist_ok=True)
    fd = _open(locks / f"{WRITERS}.lock")
    try:
        if not _take(fd, fcntl.LOCK_SH, wait, stop):
            raise ZoneBusyError(
                f"the lake is being vacuumed ({_holder(fd) or 'another cdnlake process'}): "
                "run this again once it ends"
            )
        (locks / WRITERS).mkdir(exist_ok=True)
        mine = locks / WRITERS / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        named = _open(mine)
        try:
            fcntl.flock(named, fcntl.LOCK_EX)
            _name_me(named, _since(who))
            yield
        finally:
            mine.unlink(missing_ok=True)
            os.close(named)
    finally:
        os.close(fd)


def _writers(locks: Path) -> list[str]:
    """The names of the writers holding the writers' lock (:func:`writing`) now."""
    found = []
    for path in sorted((locks / WRITERS).glob("*")):
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue  # it just ended
        try:
            if _take(fd, fcntl.LOCK_SH, 0.0, lambda: False):
                continue  # left by a killed writer: nobody holds it
            found.append(_holder(fd) or path.name)
        finally:
            os.close(fd)
    return found


def _take(fd: int, how: int, wait: float, stop: Callable[[], bool]) -> bool:
    """``flock(fd, how)``, waited for up to ``wait`` seconds: whether it was had;
    :class:`StopRequested` once ``stop`` turns true meanwhile."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if stop():
                raise StopRequested() from None
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def _since(who: str) -> str:
    return f"{who} since {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def _name_me(fd: int, name: str = "") -> None:
    """``name`` (else this process's host:pid) in a lock file it holds, for :func:`_holder`."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, (name or f"{socket.gethostname()}:{os.getpid()}").encode(), 0)


def _busy(fd: int, what: str) -> ZoneBusyError:
    """``what``, with the holder a lock file names where it names one."""
    held_by = _holder(fd)
    return ZoneBusyError(what + (f" ({held_by})" if held_by else ""))


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
    daemon lock (a daemon running is not waited for) and the writers' lock (:func:`writing`),
    both naming ``who``, then each ``(table, zone)``'s, waited for up to ``wait`` seconds.
    One still held: :class:`ZoneBusyError` naming its holder; ``stop`` turning true
    meanwhile: :class:`StopRequested`."""
    daemon_lock.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as held:
        fd = _open(daemon_lock)
        held.callback(os.close, fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            running = _holder(fd) or "unknown"
            raise ZoneBusyError(
                f"a cdnlake daemon ({running}) writes this lake: stop it first"
            ) from None
        _name_me(fd, _since(who) + "\n")
        held.callback(os.ftruncate, fd, 0)
        locks.mkdir(parents=True, exist_ok=True)
        writers = _open(locks / f"{WRITERS}.lock")
        held.callback(os.close, writers)
        if not _take(writers, fcntl.LOCK_EX, wait, stop):
            named = ", ".join(_writers(locks)) or "another cdnlake process"
            raise ZoneBusyError(f"the lake is being written by {named}")
        _name_me(writers, _since(who))  # the vacuum named, for a writer that finds it
        held.callback(os.ftruncate, writers, 0)
        for kind, zone_id in sorted(set(zones)):
            held.enter_context(zone_lock(locks, kind, zone_id, wait=wait, stop=stop))
        yield
