"""Partial days: a day whose figures cover less than the whole of it.

Today is one until it ends; so is a zone's first day in the lake when the first window
cdnlake asked the provider for began after midnight (the provider's retention cut the
morning off), and a day ``[retention]`` expired (its rows removed). A report says so
wherever such a day's figures appear.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdnlake.lake.zone.session import LakeSession


def partial_days(
    runs: list[tuple[Any, ...]],
    days: tuple[date, date],
    now: datetime,
    marks: list[datetime] | None = None,
    kept_from: date | None = None,
) -> dict[date, str]:
    """The days of ``days`` (first, last) that cover less than a whole day: today (still
    running; ``marks``, the zones' watermarks, say how far its figures reach) and a zone's
    first day in the lake when its first window began after midnight. ``runs``: (zone,
    start of its first window) per zone. ``kept_from``: the first day ``[retention]``
    keeps; a day before it is *expired* (its rows were removed), never short or missing."""
    first, last = days
    partial: dict[date, str] = {}
    day = first
    while kept_from is not None and day <= last and day < kept_from:
        partial[day] = f"expired: [retention] keeps the days from {kept_from} on"
        day += timedelta(days=1)
    for zone, first_from in runs:
        if first_from is None:
            continue
        start = _as_datetime(first_from)
        if start.date() in partial:
            continue
        if first <= start.date() <= last and start - _midnight(start) > timedelta(minutes=1):
            partial.setdefault(
                start.date(), f"the lake holds zone {zone} from {start:%H:%M} UTC on"
            )
    today = now.date()
    if first <= today <= last:
        reached = [m for m in marks or [] if m.date() == today]
        upto = f", figures up to {min(reached):%H:%M} UTC" if reached else ""
        partial[today] = f"the day is still running{upto}"
    return partial


def watermarks(session: LakeSession, zones: list[int]) -> list[datetime]:
    """How far the zones' requests reach (their watermarks in the session's table)."""
    from cdnlake.lake.log.progress import from_ms
    from cdnlake.lake.log.schema import REQUESTS

    table = session.reader(REQUESTS)
    if table is None:
        return []
    marks = (from_ms(table.transaction_version(REQUESTS.app_id(z))) for z in zones)
    return [m for m in marks if m is not None]


def _as_datetime(value: Any) -> datetime:
    if isinstance(value, str):  # an engine that hands instants over as text
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert isinstance(value, datetime)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def as_date(value: Any) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value)[:10])


def _midnight(instant: datetime) -> datetime:
    return instant.replace(hour=0, minute=0, second=0, microsecond=0)
