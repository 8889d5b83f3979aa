"""A zone's progress, kept as Delta application transactions (its *marks*, app id
``cdnlake/<table>/<zone>[/<mark>]``) committed with the rows they cover:

- the watermark (no suffix): epoch ms before which every record of the zone is stored;
- ``days``: the first UTC day not finished, and the lines taken from it, as one integer;
- ``fresh`` (v2): where the last read beyond the watermark ended; it only spares reading
  the fresh tail twice (:mod:`cdnlake.ingest.v2_source`);
- ``fence``: who may move the progress. A rewind adds one; a fleet's new holder sets the
  high bits to its lease's generation (``holder << HOLDER_SHIFT``). A commit prepared under
  an older token is refused (:class:`FencedError`);
- ``erased``: epoch ms of the last erasure concerning the zone; a writer that sees it new
  reads the erasures again before it stores a row (:mod:`cdnlake.lake.zone.erasures`);
- ``privacy``, ``privacy_mixed``, ``privacy_before``: the ``[privacy]`` setting
  (:class:`cdnlake.privacy.Setting`) of the latest rows, when a change left older rows
  under another, and which; none: stored as received.

Outside a rewind a commit never moves the watermark back.
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
