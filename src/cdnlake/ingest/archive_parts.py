"""The provider's archive of a pull zone's logs (permanent log storage), as parts to import.

Pure logic, no I/O: what a listed file is (its day, writer and index by either naming
scheme), whether it is closed (it can grow no more), and whether what ``archive_parts``
recorded of it says it is done.

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
judged closed change all the same, its size or checksum (its last change, where the
listing gives no checksum) differs from what ``archive_parts`` recorded, so it is imported
again (deduplication keeps each request once).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

ROOT = "pullzone-logs"
IDLE = timedelta(hours=1)  # the provider closes a part after an hour without writes
SETTLE = timedelta(minutes=5)  # our clock and the storage zone's, and the upload itself
DONE = ("imported", "damaged")  # the states of ``archive_parts`` that need no other import

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

    def done(self, recorded: Recorded | None) -> bool:
        """Whether ``archive_parts`` (``recorded``, None where it has no row) says this
        very copy was imported, whole or damaged: the same size and checksum, and where
        the listing gives no checksum, the same last change (another copy of a damaged
        part is read again, with a checksum or without)."""
        return (
            recorded is not None
            and recorded.state in DONE
            and recorded.size == self.size
            and recorded.checksum == self.checksum
            and (bool(self.checksum) or recorded.last_changed == self.last_changed)
        )


@dataclass(frozen=True)
class Recorded:
    """What ``archive_parts`` holds of a part: the copy it last saw (size, checksum, last
    change), its state, and the lines its import read (a damaged part's last whole line)."""

    size: int | None
    checksum: str | None
    last_changed: datetime | None
    state: str | None
    lines: int | None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Recorded:
        return cls(row["size"], row["checksum"], row["last_changed"], row["state"], row["lines"])


RECORDED = ("size", "checksum", "last_changed", "state", "lines")  # the columns it reads


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
