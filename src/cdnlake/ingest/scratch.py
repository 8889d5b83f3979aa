"""Raw log files a killed process left in ``<work>/downloads``.

A v1 day file, a re-read's file or a copy of standard input is removed once read, but a
process killed meanwhile (SIGKILL, a power cut) leaves it there, whole raw lines with the
clients' addresses and URL tokens, and no later run has its name. They are never the only
copy (the provider or the operator's file has it), so ``cdnlake forget`` removes those
older than a day: a read in flight is never that old.
"""

from __future__ import annotations

import time
from pathlib import Path

DOWNLOADS = "downloads"
STALE_SECONDS = 24 * 3600


def remove_stale_downloads(work: Path, now: float | None = None) -> int:
    """Remove the files under ``<work>/downloads`` last written over a day before ``now``
    (epoch seconds); how many."""
    now = time.time() if now is None else now
    removed = 0
    for path in sorted((work / DOWNLOADS).rglob("*")):
        try:
            if path.is_file() and now - path.stat().st_mtime > STALE_SECONDS:
                path.unlink()
                removed += 1
        except FileNotFoundError:  # its reader finished meanwhile
            continue
    return removed
