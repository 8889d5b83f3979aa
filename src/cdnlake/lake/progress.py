"""A zone's progress, kept as Delta application transactions in its table.

Two per zone and table, both committed with the rows they cover:

- the watermark (app id ``cdnlake/<table>/<zone>``): epoch milliseconds before which
  every record of the zone is in the table; 0 while rows exist but no pass has run;
- the day cursor (``cdnlake/<table>/<zone>/days``): the first UTC day whose file or
  event log is not finished, and the lines already taken from it, as one integer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # status reads progress without loading the writer (and polars)
    from cdnlake.lake.commit import ZoneWriter

WATERMARK = ""
DAYS = "days"
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


def rewind(writer: ZoneWriter, start: datetime) -> None:
    """Make the zone's next pass read again from ``start`` (damaged files set aside)."""
    progress: dict[str, int] = {}
    watermark = from_ms(writer.progress(WATERMARK))
    if watermark is None or start < watermark:
        progress[WATERMARK] = to_ms(start)
    cursor = DayCursor.decode(writer.progress(DAYS))
    if cursor is not None and cursor.day > start.date():
        progress[DAYS] = DayCursor(start.date()).encode()
    if progress:
        writer.commit(writer.empty(), progress)
