"""Audited days: the hours of a zone's day summed to one verdict, kept in the lake.

A day is kept once all of its hours are judged (none pending: closed, past
``lag_seconds`` and behind the zone's watermark), in ``audit_days`` (one row per zone and
day, MERGEd on the day: a day audited again, after a re-read, replaces its row). The
daemon's daily audit also audits again each of the two days before that is short or not
kept yet while the provider still serves all of it (:func:`due`), so a day that was
pending, or short and read again since, is corrected. ``status`` shows each zone's last
audited day, ``/metrics`` the days' ratios (``cdnlake_completeness_ratio``), the daily
report the day's audit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cdnlake.audit.compare import HourAudit
from cdnlake.errors import StorageError
from cdnlake.lake.log.schema import AUDIT_DAYS
from cdnlake.retention import RETENTION

if TYPE_CHECKING:
    from cdnlake.lake.zone.session import LakeSession


@dataclass(frozen=True)
class DayAudit:
    zone_id: int
    day: date
    verdict: str  # ok or short
    provider_requests: int
    lake_requests: int
    hours_short: int
    detail: str = ""
    audited_at: datetime | None = None
    erased_requests: int = 0  # removed by cdnlake forget: explained, never short

    @property
    def ratio(self) -> float:
        """The lake's requests, and those erased, over the provider's (1.0 for a day the
        provider counted none of)."""
        if self.provider_requests == 0:
            return 1.0
        return (self.lake_requests + self.erased_requests) / self.provider_requests

    def line(self) -> str:
        text = f"zone {self.zone_id} {self.day}: {self.verdict}, ratio {self.ratio:.6f}"
        if self.erased_requests:
            text += f", {self.erased_requests} request(s) erased by cdnlake forget"
        return text + (f" ({self.detail})" if self.detail else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "day": self.day.isoformat(),
            "verdict": self.verdict,
            "ratio": round(self.ratio, 6),
            "provider_requests": self.provider_requests,
            "lake_requests": self.lake_requests,
            "erased_requests": self.erased_requests,
            "hours_short": self.hours_short,
            "detail": self.detail,
            "audited_at": self.audited_at.isoformat() if self.audited_at else None,
        }


def summarize(hours: Sequence[HourAudit]) -> list[DayAudit]:
    """One :class:`DayAudit` per zone and day whose every hour is judged (none pending:
    a day still open is not a day's verdict yet)."""
    by_day: dict[tuple[int, date], list[HourAudit]] = {}
    for h in hours:
        by_day.setdefault((h.zone_id, h.hour.date()), []).append(h)
    out = []
    for (zone, day), judged in sorted(by_day.items()):
        if len(judged) < 24 or any(h.verdict in ("pending", "before", "expired") for h in judged):
            continue  # not whole, or not all of it read by cdnlake: no day's verdict
        failed = [h for h in judged if h.failed]
        out.append(
            DayAudit(
                zone_id=zone,
                day=day,
                verdict="short" if failed else "ok",
                provider_requests=sum(h.provider.requests for h in judged),
                lake_requests=sum(h.lake.requests for h in judged),
                hours_short=len(failed),
                detail=", ".join(f"{h.hour:%H:%M} {h.verdict}" for h in failed),
                erased_requests=sum(h.erased for h in judged),
            )
        )
    return out


def unkept(hours: Sequence[HourAudit]) -> list[tuple[int, date, str]]:
    """The zone-days among ``hours`` that :func:`summarize` cannot keep yet, each with
    why (its first pending hour and what that hour waits for)."""
    by_day: dict[tuple[int, date], list[HourAudit]] = {}
    for h in hours:
        by_day.setdefault((h.zone_id, h.hour.date()), []).append(h)
    out = []
    for (zone, day), judged in sorted(by_day.items()):
        before = [h for h in judged if h.verdict == "before"]
        waiting = [h for h in judged if h.verdict == "pending"]
        expired = [h for h in judged if h.verdict == "expired"]
        if expired:
            out.append((zone, day, f"expired: {expired[0].advice}"))
        elif before:
            out.append((zone, day, f"{len(before)} hour(s) {before[0].advice}"))
        elif waiting:
            first = waiting[0]
            why = first.advice or "not closed, or inside lag_seconds: records may still arrive"
            out.append(
                (zone, day, f"{len(waiting)} hour(s) pending from {first.hour:%H:%M}: {why}")
            )
        elif len(judged) < 24:
            out.append((zone, day, f"only {len(judged)} of its hours have begun"))
    return out


def due(
    session: LakeSession, zones: Sequence[int], day: date, now: datetime, back: int = 2
) -> dict[date, list[int]]:
    """What the daily audit of ``day`` audits: ``day`` for every zone, and each of the
    ``back`` days before it for the zones whose audit of it is short or not kept yet,
    while the provider still serves the whole day (its first hour within retention)."""
    out = {day: list(zones)}
    kept = {(d.zone_id, d.day): d.verdict for d in audited(session, zones, day - timedelta(back))}
    for k in range(1, back + 1):
        earlier = day - timedelta(days=k)
        start = datetime(earlier.year, earlier.month, earlier.day, tzinfo=UTC)
        if start + RETENTION <= now:
            continue
        todo = [z for z in zones if kept.get((z, earlier)) != "ok"]
        if todo:
            out[earlier] = todo
    return out


def record(session: LakeSession, days: Sequence[DayAudit], audited_at: datetime) -> None:
    """Keep each day's audit in ``audit_days`` (a day audited before is replaced)."""
    from cdnlake.lake.zone.bookkeeping import Bookkeeping  # polars: not for ``status``

    book = Bookkeeping(session)
    zones = sorted({d.zone_id for d in days})
    for zone in zones:
        rows = [
            {
                "day": d.day,
                "audited_at": audited_at,
                "verdict": d.verdict,
                "provider_requests": d.provider_requests,
                "lake_requests": d.lake_requests,
                "hours_short": d.hours_short,
                "detail": d.detail,
                "erased_requests": d.erased_requests,
            }
            for d in days
            if d.zone_id == zone
        ]
        book.record_audit_days(zone, rows)


def audited(
    session: LakeSession, zones: Sequence[int], since: date | None = None
) -> list[DayAudit]:
    """The audited days of ``zones`` (from ``since`` on), by zone and day, from the
    session's state of ``audit_days``."""
    lake = session.lake
    table = session.reader(AUDIT_DAYS) if zones else None
    if table is None:
        return []
    import pyarrow.dataset as ds

    where = ds.field("day") >= since if since is not None else None
    try:
        dataset = lake.dataset(AUDIT_DAYS, table, [("zone", "in", [str(z) for z in zones])])
        rows = dataset.to_table(filter=where).to_pylist()
    except OSError as exc:
        raise StorageError(f"cannot read audit_days: {exc}") from None
    return sorted((from_row(r) for r in rows), key=lambda d: (d.zone_id, d.day))


def from_row(r: dict[str, Any]) -> DayAudit:
    """A row of ``audit_days`` (its ``zone`` column, or ``pull_zone_id``)."""
    return DayAudit(
        zone_id=int(r["zone"] if "zone" in r else r["pull_zone_id"]),
        day=r["day"],
        verdict=r["verdict"],
        provider_requests=int(r["provider_requests"] or 0),
        lake_requests=int(r["lake_requests"] or 0),
        hours_short=int(r["hours_short"] or 0),
        detail=r["detail"] or "",
        audited_at=r["audited_at"],
        erased_requests=int(r.get("erased_requests") or 0),
    )


def day_audits(session: LakeSession, zones: Sequence[int], day: date) -> dict[int, DayAudit]:
    """The audits of ``day``, by zone (zones not audited for it are absent)."""
    return {d.zone_id: d for d in audited(session, zones, day) if d.day == day}


def recent_ratios(
    session: LakeSession, zones: Sequence[int], today: date, days: int = 7
) -> list[DayAudit]:
    """The audited days of the last ``days`` days, for ``cdnlake_completeness_ratio``."""
    return audited(session, zones, today - timedelta(days=days))
