"""One process at a time per zone on this machine (an advisory ``flock``).

This saves the rate budget from two local processes polling one zone; correctness does
not rest on it: Delta's commit protocol keeps every request once even when two processes
on different machines write one zone.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cdnlake.errors import ZoneBusyError


@contextmanager
def zone_lock(locks: Path, kind: str, zone_id: int) -> Iterator[None]:
    """Hold ``kind`` zone ``zone_id``; ZoneBusyError if another local process has it."""
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / f"{kind}-{int(zone_id)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            noun = "shield zone" if kind == "shield_events" else "pull zone"
            raise ZoneBusyError(
                f"{noun} {zone_id} is being ingested by another cdnlake process"
            ) from None
        yield
    finally:
        os.close(fd)
