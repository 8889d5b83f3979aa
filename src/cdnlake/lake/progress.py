"""A zone's progress, kept as Delta application transactions in its table.

Up to five per zone and table (its *marks*), committed with the rows they cover:

- the watermark (app id ``cdnlake/<table>/<zone>``): epoch milliseconds before which
  every record of the zone is in the table; 0 while rows exist but no pass has run;
- the day cursor (``cdnlake/<table>/<zone>/days``): the first UTC day whose file or
  event log is not finished, and the lines already taken from it, as one integer;
- the fresh end (``cdnlake/<table>/<zone>/fresh``, v2 only): epoch milliseconds where the
  zone's last read of the span beyond the watermark ended (see
  :mod:`cdnlake.ingest.v2_source`). It promises nothing: the watermark's read covers the
  same span again once it is stable; it only spares reading the fresh tail twice;
- the fence (``cdnlake/<table>/<zone>/fence``): who may move the progress. A writer takes
  the table's token when it is made (a pass, under its zone lock or lease); each of its
  commits re-reads the table first and is refused (:class:`FencedError`, no retry, nothing
  written) if the token moved on since. Two things move it, each by a commit of progress
  alone: a **rewind** adds one, so a pass in flight cannot commit a watermark past the span
  just set aside; a **new holder** of a fleet's lease sets the high bits to its lease's
  generation (``holder << HOLDER_SHIFT``), so a daemon whose lease lapsed cannot commit
  again, not even in a new pass, until it takes the lease anew. Since every commit of a
  zone also carries the zone's app ids, a fence moved between a commit's re-read and its
  write makes Delta refuse the commit as concurrent, and the retry sees the new token;
- the erasure mark (``cdnlake/<table>/<zone>/erased``): epoch milliseconds of the last
  erasure (``cdnlake forget``) that concerns the zone. A writer that sees it newer than the
  erasures it holds reads them again before it stores a row (:mod:`cdnlake.lake.erasures`),
  so a pass in flight while an erasure lands never stores the erased rows again.

Outside a rewind a commit never moves the watermark back: it keeps the later of the
table's and its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

WATERMARK = ""
DAYS = "days"
FRESH = "fresh"
FENCE = "fence"
ERASED = "erased"
MARKS = (WATERMARK, DAYS, FRESH, FENCE, ERASED)
HOLDER_SHIFT = 24  # fence token = holder generation << HOLDER_SHIFT | rewinds since
EPOCH = date(1970, 1, 1)


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def from_ms(ms: int | None) -> datetime | None:
    """A watermark version as an instant; 0 is a zone with rows but no watermark yet."""
    return None if not ms else datetime.fromtimestamp(ms / 1000, tz=UTC)


def day_start(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


@dataclass(frozen=True)
class DayCursor:
    day: date
    lines: int = 0

    def encode(self) -> int:
        return ((self.day - EPOCH).days << 32) | self.lines

    @classmethod
    def decode(cls, version: int | None) -> DayCursor | None:
        if version is None or version < (1 << 32):
            return None
        return cls(EPOCH + timedelta(days=version >> 32), version & 0xFFFFFFFF)


def holder_of(token: int) -> int:
    """The lease generation that set a fence token (0: no fleet holder ever took it)."""
    return token >> HOLDER_SHIFT


def taken_by(holder: int) -> int:
    """The fence token of a new holder's first commit."""
    return holder << HOLDER_SHIFT


Versions = Callable[[str], int | None]  # the table's current version of a mark
# What a rewind outside a pass holds in a fleet (``maintain``: the zone's lease): (table,
# zone id) -> a context whose value is the lease's generation, the rewind's fence token.
ZoneHold = Callable[[str, int], contextlib.AbstractContextManager[int | None]]


class Rewinder(Protocol):
    """What a rewind needs of a zone's writer (``lake.zone.ZoneWriter``), named here so
    that progress, which ``status`` reads without polars, imports no writer."""

    def rewind(self, plan: Callable[[Versions], dict[str, int]]) -> None: ...


def rewind(writer: Rewinder, start: datetime) -> None:
    """Make the zone's next pass read again from ``start`` (damaged files set aside), and
    advance the fence: a pass in flight cannot commit over the span any more.

    Always allowed, whatever the writer's token: it only moves progress back.
    """

    def back(current: Versions) -> dict[str, int]:
        progress: dict[str, int] = {}
        watermark = from_ms(current(WATERMARK))
        if watermark is None or start < watermark:
            progress[WATERMARK] = to_ms(start)
        fresh = current(FRESH)
        if fresh and fresh > to_ms(start):  # the fresh read, too, starts over there
            progress[FRESH] = to_ms(start)
        cursor = DayCursor.decode(current(DAYS))
        if cursor is not None and cursor.day >= start.date() and cursor != DayCursor(start.date()):
            progress[DAYS] = DayCursor(start.date()).encode()  # that day's file from line 1
        return progress

    writer.rewind(back)
