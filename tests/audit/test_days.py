"""A day's verdict from its hours: only whole days (no hour pending) are kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cdnlake.audit.compare import Counts, HourAudit
from cdnlake.audit.days import summarize, unkept

DAY = datetime(2026, 11, 23, tzinfo=UTC)


def hours(zone: int, verdicts: dict[int, str], lake: int = 10) -> list[HourAudit]:
    out = []
    for h in range(24):
        verdict = verdicts.get(h, "ok")
        held = 0 if verdict == "missing" else (lake if verdict != "short" else 5)
        out.append(
            HourAudit(zone, DAY + timedelta(hours=h), Counts(10), Counts(held), verdict)  # type: ignore[arg-type]
        )
    return out


def test_a_whole_day_sums_its_hours_and_names_the_short_ones() -> None:
    (day,) = summarize(hours(1234, {5: "missing", 9: "short"}))
    assert (day.zone_id, day.day, day.verdict) == (1234, DAY.date(), "short")
    assert (day.provider_requests, day.lake_requests, day.hours_short) == (240, 225, 2)
    assert day.detail == "05:00 missing, 09:00 short"
    assert day.ratio == 225 / 240


def test_a_day_with_an_hour_pending_or_missing_hours_is_not_kept() -> None:
    assert summarize(hours(1234, {23: "pending"})) == []
    assert summarize(hours(1234, {})[:12]) == []
    (ok,) = summarize(hours(1235, {}))
    assert ok.verdict == "ok" and ok.ratio == 1.0 and ok.detail == ""


def test_a_day_not_kept_says_why() -> None:
    behind = hours(1234, {h: "pending" for h in range(20, 24)})
    assert summarize(behind) == []
    ((zone, day, why),) = unkept(behind)
    assert (zone, day) == (1234, DAY.date()) and "4 hour(s) pending from 20:00" in why
    assert unkept(hours(1234, {})) == []
