"""The provider's archive of a pull zone's logs (permanent log storage), as parts to import.

Pure logic, no I/O: what a listed file is (its day, writer and index by either naming
scheme), whether it is closed (it can grow no more), and the mark that records it imported.

The archive holds gzipped parts of v1 lines under ``pullzone-logs/<folder>/<YYYY>/<MM>/``:

- older scheme: ``<dd>_<part>.gzip``, parts of a day numbered from 1 (one writer);
- newer scheme: ``<dd>_<writer>-<index>-<8 hex>.gzip``, each writer's parts of a day
  numbered from 0 and uploaded side by side with other writers'.

A part is closed when it reaches a size or line limit, after about 120 minutes open, after
an hour without writes, or at midnight UTC. From the outside that is decided as:

- a later part of the same writer (or, older scheme, of the day) exists: the writer closed
  this one before it began the next (a limit reached, or open too long);
- its last change is more than an hour and ``SETTLE`` old: no write for an hour closes it
  (midnight closes a part too, but a record of the day that reaches a writer after
  midnight opens another part of that day, so the day's end proves nothing).

Any other part is *open*: it may still grow, and is left for a later run. Should a part
judged closed change all the same, its size or checksum differs from what its mark
recorded, so it is imported again (deduplication keeps each request once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

ROOT = "pullzone-logs"
IDLE = timedelta(hours=1)  # the provider closes a part after an hour without writes
SETTLE = timedelta(minutes=5)  # our clock and the storage zone's, and the upload itself
MARK_PREFIX = "archive"
# A part's mark (an application transaction committed with its last rows) holds its size;
# a part that proved damaged holds this bit and the number of its last whole line.
DAMAGED = 1 << 62

OLD_NAME = re.compile(r"^(?P<dd>\d{2})_(?P<part>\d+)\.gzip$")
NEW_NAME = re.compile(
    r"^(?P<dd>\d{2})_(?P<writer>[A-Za-z0-9]+)-(?P<index>\d+)-(?P<suffix>[0-9A-Fa-f]{8})\.gzip$"
)


@dataclass(frozen=True)
class Part:
    """One archived file of a zone: ``path`` is ``<YYYY>/<MM>/<name>`` under its folder."""

    path: str
    day: date
    size: int
    checksum: str  # lower-case hex SHA-256 as the listing gives it; "" when it gives none
    last_changed: datetime
    writer: str  # the writer id; "" for the older scheme (one writer a day)
    index: int  # the writer's part number that day (older scheme: from 1)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def mark(self) -> str:
        """The app-id part of its mark (``cdnlake/requests/<zone>/<mark>``): its path and
        checksum, so that a part replaced by other content is a part of its own."""
        return f"{MARK_PREFIX}/{self.path}/{self.checksum or '-'}"

    def imported(self, version: int | None) -> bool:
        """Whether its mark (``version``, None where there is none) records it as it is
        listed now: whole, or damaged (see :func:`damaged_line`)."""
        if version is None:
            return False
        return version == self.size or bool(version & DAMAGED)


def damaged_line(version: int | None) -> int | None:
    """For a part recorded damaged, its last whole line; else None."""
    if version is None or not version & DAMAGED:
        return None
    return version & ~DAMAGED


def parse_name(year: int, month: int, name: str) -> tuple[date, str, int] | None:
    """(day, writer, index) of a part's file name in the month's folder; None for a file
    that is no part (by neither naming scheme, or a day the month does not have)."""
    found = NEW_NAME.match(name)
    if found is not None:
        writer, index = found["writer"], int(found["index"])
    else:
        found = OLD_NAME.match(name)
        if found is None:
            return None
        writer, index = "", int(found["part"])
    try:
        return date(year, month, int(found["dd"])), writer, index
    except ValueError:
        return None


def closed_parts(parts: list[Part], now: datetime) -> tuple[list[Part], list[Part]]:
    """(closed, open) of the parts listed (see the module's docstring for the rule)."""
    last: dict[tuple[date, str], int] = {}
    for part in parts:
        key = (part.day, part.writer)
        last[key] = max(last.get(key, part.index), part.index)
    closed, still_open = [], []
    for part in parts:
        if part.index < last[(part.day, part.writer)] or now - part.last_changed > IDLE + SETTLE:
            closed.append(part)
        else:
            still_open.append(part)
    return closed, still_open


def months(first: date, last: date) -> list[tuple[int, int]]:
    """The (year, month) folders that hold the days ``first``..``last``."""
    out = []
    year, month = first.year, first.month
    while (year, month) <= (last.year, last.month):
        out.append((year, month))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return out
