"""Finding damaged lake files and setting them aside (never deleting them).

Our own writes cannot leave a damaged file (every change is an atomic rename), but disks,
copies and people can. A file whose Parquet footer does not read is moved to
``<lake>/quarantine/...`` with a timestamp, out of every reader's glob, and the hour it
held is reported so that ingestion can read it again while the provider still has it.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq

from cdnlake.lake.layout import zone_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DamagedFile:
    path: Path
    moved_to: Path
    day: date
    hour: int
    reason: str

    @property
    def start(self) -> datetime:
        return datetime(self.day.year, self.day.month, self.day.day, self.hour, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(hours=1)


def quarantine(lake: Path, path: Path, reason: str) -> DamagedFile:
    relative = path.relative_to(lake)
    target = lake / "quarantine" / relative.parent / f"{path.name}.{int(time.time() * 1000)}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, target)
    day = date.fromisoformat(path.parent.name.removeprefix("date="))
    hour = int(path.stem.removeprefix("part-"))
    log.error("lake file %s is damaged (%s); moved to %s", path, reason, target)
    return DamagedFile(path, target, day, hour, reason)


def scan_zone(lake: Path, zone_id: int, table: str = "requests") -> list[DamagedFile]:
    """Check every file of a zone by reading its Parquet footer; quarantine the bad ones."""
    damaged = []
    root = zone_dir(lake, zone_id, table)
    for path in sorted(root.glob("date=*/part-*.parquet")):
        try:
            pq.ParquetFile(path).metadata  # noqa: B018 - reading the footer is the check
        except Exception as exc:  # pyarrow raises several kinds for a broken file
            damaged.append(quarantine(lake, path, f"{type(exc).__name__}: {exc}"))
    return damaged
