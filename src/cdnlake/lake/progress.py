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

Three more marks say under which ``[privacy]`` setting (:class:`cdnlake.privacy.Setting`,
as its code) the zone's rows were stored, for ``status`` and ``maintain --apply-privacy``:

- ``cdnlake/<table>/<zone>/privacy``: the setting of the zone's latest commit of rows;
- ``.../privacy_mixed``: epoch milliseconds of the last change of setting whose older rows
  no rewrite has brought to the new one since (0 or absent: none);
- ``.../privacy_before``: the setting those older rows were stored under.

A zone with rows but none of them was written before ``[privacy]`` existed: as received.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

from cdnlake.privacy import Setting

WATERMARK = ""
DAYS = "days"
FRESH = "fresh"
FENCE = "fence"
PRIVACY = "privacy"
PRIVACY_MIXED = "privacy_mixed"
PRIVACY_BEFORE = "privacy_before"
ERASED = "erased"
MARKS = (WATERMARK, DAYS, FRESH, FENCE, PRIVACY, PRIVACY_MIXED, PRIVACY_BEFORE, ERASED)
# The code of the setting every lake stored under before [privacy]: addresses kept, no
# query parameter removed (cdnlake.privacy.KEEP_ALL).
LEGACY_PRIVACY = 0
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


def privacy_marks(current: Versions, setting: int, now_ms: int) -> dict[str, int]:
    """The privacy marks of a commit of rows stored under ``setting`` (a setting's code),
    given the zone's marks before it: a change of setting over rows already stored makes
    the zone mixed from now on, until a rewrite (``maintain --apply-privacy``) clears it."""
    stored = current(PRIVACY)
    if stored is None and current(WATERMARK) is not None:
        stored = LEGACY_PRIVACY  # rows committed before [privacy] existed
    marks = {PRIVACY: setting}
    if stored is not None and stored != setting:
        marks[PRIVACY_MIXED] = now_ms
        if not current(PRIVACY_MIXED):
            marks[PRIVACY_BEFORE] = stored
    return marks


def privacy_applied(wanted: Setting, current: Versions) -> dict[str, int]:
    """The marks of a rewrite that brought every stored row of the zone to ``wanted``,
    given the zone's marks before it: rows that held networks (``truncate``) hashed under
    ``hash`` hold keyed hashes of networks, and the marks say so (mixed, where newer rows
    hold hashes of addresses)."""
    after = [wanted.hashing(stored) for stored in stored_settings(current)] or [wanted]
    if len(set(after)) == 1:
        return {PRIVACY: after[0].code(), PRIVACY_MIXED: 0, PRIVACY_BEFORE: 0}
    return {
        PRIVACY: after[0].code(),
        PRIVACY_MIXED: current(PRIVACY_MIXED) or 0,
        PRIVACY_BEFORE: after[1].code(),
    }


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


def stored_settings(versions: Versions) -> list[Setting]:
    """The settings a zone's rows were stored under, as its marks say (the latest first;
    rows from before ``[privacy]`` existed: kept as received); [] for a zone without rows."""
    latest = versions(PRIVACY)
    if latest is None:
        return [] if versions(WATERMARK) is None else [Setting.decode(LEGACY_PRIVACY)]
    found = [Setting.decode(latest)]
    before = versions(PRIVACY_BEFORE)
    if versions(PRIVACY_MIXED) and before is not None:
        found.append(Setting.decode(before))
    return found


def describe_stored(versions: Versions) -> str:
    """A zone's stored setting for ``status``: ``truncate /24 /64``, or mixed with the
    date up to which older rows were stored under the other one."""
    settings = stored_settings(versions)
    if not settings:
        return "no rows"
    text = settings[0].describe()
    if len(settings) > 1:
        until = from_ms(versions(PRIVACY_MIXED))
        day = f" until {until:%Y-%m-%d %H:%M}Z" if until else ""
        text += f"; mixed: older rows {settings[1].describe()}{day}"
    return text
