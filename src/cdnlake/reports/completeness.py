"""The daily report's completeness: each zone's audit of the day (``audit_days``), or
"not audited yet", beside the day's figures. Requests ``cdnlake forget`` removed are
counted apart (``erased_requests``): explained, never short."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from cdnlake.audit.days import day_audits
from cdnlake.config import Config
from cdnlake.lake.zone.session import LakeSession
from cdnlake.reports.data import Table

NOT_AUDITED = "not audited yet"
EXPIRED = "expired"  # a day [retention] removed: its rows are gone, its audit moot
COLUMNS = [
    "pull_zone_id",
    "verdict",
    "ratio",
    "completeness_pct",
    "provider_requests",
    "lake_requests",
    "erased_requests",
    "hours_short",
    "short_hours",
    "audited_at",
]
TITLE = "Completeness (the lake against the provider's statistics)"


def completeness(
    config: Config,
    session: LakeSession,
    day: date,
    zones: list[int],
    now: datetime | None = None,
) -> Table:
    """One row per zone: the day's audit (ratio, verdict, ...), ``not audited yet``, or
    ``expired`` for a day ``[retention]`` removed."""
    kept_from = config.retention.first_kept(now or datetime.now(UTC))
    if kept_from is not None and day < kept_from:
        gone: list[tuple[Any, ...]] = [
            (zone, EXPIRED, *([None] * (len(COLUMNS) - 2))) for zone in zones
        ]
        return Table(TITLE, list(COLUMNS), gone)
    audits = day_audits(session, zones, day)
    rows: list[tuple[Any, ...]] = []
    for zone in zones:
        a = audits.get(zone)
        if a is None:
            rows.append((zone, NOT_AUDITED, *([None] * (len(COLUMNS) - 2))))
            continue
        rows.append(
            (
                zone,
                a.verdict,
                round(a.ratio, 6),
                round(100.0 * a.ratio, 4),
                a.provider_requests,
                a.lake_requests,
                a.erased_requests,
                a.hours_short,
                a.detail or None,
                a.audited_at,
            )
        )
    return Table(TITLE, list(COLUMNS), rows)


def headline(table: Table) -> tuple[str, str]:
    """The report's completeness card: (value, note)."""
    if table.rows and all(r["verdict"] == EXPIRED for r in table.records()):
        return EXPIRED, "the day was removed by [retention] requests_days"
    audited = [r for r in table.records() if r["verdict"] not in (NOT_AUDITED, EXPIRED)]
    if not audited:
        return NOT_AUDITED, "run `cdnlake audit` (the daemon audits after midnight)"
    provider = sum(int(r["provider_requests"] or 0) for r in audited)
    lake = sum(int(r["lake_requests"] or 0) + int(r["erased_requests"] or 0) for r in audited)
    value = f"{100.0 * lake / provider:.2f} %" if provider else "100.00 %"
    short = [str(r["pull_zone_id"]) for r in audited if r["verdict"] != "ok"]
    note = f"short: zone {', '.join(short)}" if short else "ok"
    missing = len(table.rows) - len(audited)
    if missing:
        note += f"; {missing} zone(s) {NOT_AUDITED}"
    return value, note
