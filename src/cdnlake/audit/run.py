"""One audit: the provider's statistics of each zone and day, the lake's hourly counts
(``sql/internal/audit_hourly.sql`` on ``requests_hourly``), and a verdict per hour.

The caller reads the provider's statistics first, all of them: when they cannot be read,
the audit fails with that error before the lake is looked at, and no verdict is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

from cdnlake.audit.compare import HOUR, Counts, HourAudit, audit_hour
from cdnlake.audit.days import DayAudit, record, summarize
from cdnlake.client.statistics import StatisticsApi, ZoneStatistics
from cdnlake.config import Config
from cdnlake.lake.progress import day_start, from_ms
from cdnlake.lake.schema import INGEST_RUNS, REQUESTS
from cdnlake.lake.session import LakeSession
from cdnlake.lake.store import Lake
from cdnlake.retention import RETENTION
from cdnlake.sqlfiles import internal_sql
from cdnlake.warehouse.engine import open_session

DAY = timedelta(days=1)


def provider_counts(
    api: StatisticsApi, zones: Sequence[int], first: date, last: date
) -> dict[tuple[int, datetime], Counts]:
    """The provider's counts per (zone, hour): one statistics call per zone and day."""
    out: dict[tuple[int, datetime], Counts] = {}
    for zone in zones:
        day = first
        while day <= last:
            stats: ZoneStatistics = api.zone_hourly(zone, day_start(day), day_start(day) + DAY)
            for hour, c in stats.hours.items():
                out[(zone, hour)] = Counts(c.requests, c.errors_4xx, c.errors_5xx, c.bytes)
            day += DAY
    return out


def lake_counts(
    config: Config, zones: Sequence[int], first: date, last: date
) -> dict[tuple[int, datetime], Counts]:
    """The lake's counts per (zone, hour), from ``requests_hourly``."""
    with open_session(config, "duckdb", {"requests_hourly"}, days=(first, last)) as s:
        result = s.run(
            internal_sql("audit_hourly"), {"first": first, "last": last, "zones": list(zones)}
        )
    out: dict[tuple[int, datetime], Counts] = {}
    for zone, day, hour, requests, e4, e5, sent in result.rows:
        moment = day_start(day) + timedelta(hours=int(hour))
        out[(int(zone), moment)] = Counts(int(requests), int(e4), int(e5), int(sent))
    return out


def zone_watermarks(config: Config, zones: Sequence[int]) -> dict[int, datetime]:
    """Each zone's watermark: before it, ingestion has read everything the provider served."""
    # Read from the lake, not through ``cdnlake.status``: status is to show the last
    # audit, so it will import this stage, never the other way round.
    table = Lake.from_config(config.storage).open(REQUESTS)
    if table is None:
        return {}
    marks: dict[int, datetime] = {}
    for zone in zones:
        mark = from_ms(table.transaction_version(REQUESTS.app_id(zone)))
        if mark is not None:
            marks[zone] = mark
    return marks


def zone_starts(config: Config, zones: Sequence[int]) -> dict[int, datetime]:
    """Where cdnlake first read each zone: the earliest window of its pull-zone passes
    (re-reads included) in ``ingest_runs``, and never before what the provider still
    served when its first pass ran (a v1 pass's window starts at midnight, but the day's
    file holds only the retained part). An hour before it is not audited."""
    import pyarrow.dataset as ds

    lake = Lake.from_config(config.storage)
    table = lake.open(INGEST_RUNS)
    if table is None or not zones:
        return {}
    runs = lake.dataset(INGEST_RUNS, table, [(INGEST_RUNS.zone_column, "in", list(zones))])
    passes = (
        ds.field("window_from").is_valid()
        & ds.field("started").is_valid()
        & (ds.field("source") != "shield")
    )
    found = runs.to_table(columns=["zone", "window_from", "started"], filter=passes)
    firsts = found.group_by("zone").aggregate([("window_from", "min"), ("started", "min")])
    starts: dict[int, datetime] = {}
    columns = ("zone", "window_from_min", "started_min")
    for zone, window, started in zip(*(firsts[c].to_pylist() for c in columns), strict=True):
        starts[int(zone)] = max(_utc(window), _utc(started) - RETENTION)
    return starts


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def judge(
    config: Config,
    zones: Sequence[int],
    first: date,
    last: date,
    provider: dict[tuple[int, datetime], Counts],
    lake: dict[tuple[int, datetime], Counts],
    *,
    now: datetime,
    marks: dict[int, datetime] | None = None,
    starts: dict[int, datetime] | None = None,
) -> list[HourAudit]:
    """One row per zone and hour of the days ``first``..``last`` that has begun by ``now``."""
    lag = timedelta(seconds=config.ingest.lag_seconds)
    kept_from = config.retention.first_kept(now)
    rows: list[HourAudit] = []
    for zone in zones:
        hour = day_start(first)
        while hour < day_start(last) + DAY and hour <= now:
            rows.append(
                audit_hour(
                    zone,
                    hour,
                    provider.get((zone, hour), Counts()),
                    lake.get((zone, hour), Counts()),
                    tolerance=config.audit.tolerance,
                    now=now,
                    lag=lag,
                    watermark=(marks or {}).get(zone),
                    started=(starts or {}).get(zone),
                    kept_from=kept_from,
                )
            )
            hour += HOUR
    return rows


def audit(
    config: Config, api: StatisticsApi, zones: Sequence[int], first: date, last: date, now: datetime
) -> list[HourAudit]:
    """Every zone-hour of ``first``..``last`` judged: the provider's statistics first (an
    error there is raised before the lake is read, and no hour is judged)."""
    provider = provider_counts(api, zones, first, last)
    marks = zone_watermarks(config, zones)
    starts = zone_starts(config, zones)
    lake = lake_counts(config, zones, first, last)
    return judge(config, zones, first, last, provider, lake, now=now, marks=marks, starts=starts)


def keep(session: LakeSession, hours: Sequence[HourAudit], now: datetime) -> list[DayAudit]:
    """The whole days among ``hours`` summed and kept in ``audit_days``."""
    days = summarize(hours)
    if days:
        record(session, days, now)
    return days
