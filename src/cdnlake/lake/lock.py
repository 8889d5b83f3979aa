"""One process at a time per zone on this machine (an advisory ``flock``), for passes run
without a fleet lease (in a fleet the lease keeps them apart, and a lock left by a stalled
holder on a shared storage root must not keep the lease's owner busy).

This saves the rate budget from two local processes polling one zone, and spares a pass
in flight the refusal a rewind by ``maintain`` would cause (``maintain`` waits for it).
Correctness does not rest on it: Delta's commit protocol keeps every request once, and
the zone's fence its progress, even when processes on different machines write one zone.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cdnlake.errors import ZoneBusyError


@contextmanager
def zone_lock(locks: Path, kind: str, zone_id: int, *, wait: float = 0.0) -> Iterator[None]:
    """Hold ``kind`` zone ``zone_id``; ZoneBusyError if another local process still has it
    after ``wait`` seconds (0: at once)."""
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / f"{kind}-{int(zone_id)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    noun = "shield zone" if kind == "shield_events" else "pull zone"
                    raise ZoneBusyError(
                        f"{noun} {zone_id} is being ingested by another cdnlake process"
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)
