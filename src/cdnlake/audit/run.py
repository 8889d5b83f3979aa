"""One audit: the provider's statistics of each zone and day, the lake's hourly counts
(``sql/internal/audit_hourly.sql`` on ``requests_hourly``), and a verdict per hour.

The caller reads the provider's statistics first, all of them: when they cannot be read,
the audit fails with that error before the lake is looked at, and no verdict is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

from cdnlake.audit.compare import HOUR, Counts, HourAudit, audit_hour
from cdnlake.audit.days import DayAudit, record, summarize
from cdnlake.client.statistics import StatisticsApi, ZoneStatistics
from cdnlake.config import Config
from cdnlake.errors import StorageError, first_line
from cdnlake.lake.log.progress import day_start, from_ms
from cdnlake.lake.log.schema import INGEST_RUNS, REQUESTS
from cdnlake.lake.zone.session import LakeSession
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


def erased_counts(
    session: LakeSession, zones: Sequence[int], first: date, last: date
) -> dict[tuple[int, datetime], int]:
    """The requests erasures removed per (zone, hour), from ``erasures.hours_removed``
    (an erasure of every zone counts every zone's in its row of zone 0, one of some
    zones each zone's in its own row), and those the erasure filter held back when a
    later pass read them (``erased_requests``, kind "held": each request once)."""
    import json

    from cdnlake.lake.log.schema import ERASURES
    from cdnlake.lake.zone.erasures import EVERY_ZONE

    lake = session.lake
    table = session.reader(ERASURES)
    if table is None or not zones:
        return {}
    try:
        found = lake.dataset(ERASURES, table).to_table(columns=["zone", "hours_removed"])
    except OSError as exc:
        raise StorageError(f"cannot read erasures: {first_line(exc)}") from None
    wanted = set(zones)
    out: dict[tuple[int, datetime], int] = {}
    for row_zone, text in zip(*(found[c].to_pylist() for c in found.column_names), strict=True):
        for zone_text, hours in (json.loads(text) if text else {}).items():
            zone = int(zone_text)
            if zone not in wanted or (int(row_zone) not in (EVERY_ZONE, zone)):
                continue
            for hour_text, count in hours.items():
                hour = datetime.strptime(hour_text, "%Y-%m-%dT%H").replace(tzinfo=UTC)
                if first <= hour.date() <= last:
                    out[(zone, hour)] = out.get((zone, hour), 0) + int(count)
    for key, count in _held_back(session, zones, first, last).items():
        out[key] = out.get(key, 0) + count
    return out


def _held_back(
    session: LakeSession, zones: Sequence[int], first: date, last: date
) -> dict[tuple[int, datetime], int]:
    """The requests the erasure filter held back per (zone, hour), from ``erased_requests``."""
    import polars as pl

    from cdnlake.lake.log.schema import ERASED_REQUESTS

    table = session.reader(ERASED_REQUESTS)
    if table is None:
        return {}
    partitions = [("zone", "in", [str(z) for z in zones])]
    try:
        found = session.lake.dataset(ERASED_REQUESTS, table, partitions).to_table(
            columns=["zone", "ts", "kind"]
        )
    except OSError as exc:
        raise StorageError(f"cannot read erased_requests: {first_line(exc)}") from None
    rows = pl.from_arrow(found)
    assert isinstance(rows, pl.DataFrame)
    hours = (
        rows.filter(pl.col("kind") == "held")
        .with_columns(pl.col("ts").dt.truncate("1h").alias("hour"))
        .filter(pl.col("hour").dt.date().is_between(first, last))
        .group_by("zone", "hour")
        .len()
    )
    return {
        (int(zone), hour.astimezone(UTC)): int(count) for zone, hour, count in hours.iter_rows()
    }


def zone_watermarks(session: LakeSession, zones: Sequence[int]) -> dict[int, datetime]:
    """Each zone's watermark: before it, ingestion has read everything the provider served."""
    # Read from the lake, not through ``cdnlake.status``: status is to show the last
    # audit, so it will import this stage, never the other way round.
    table = session.reader(REQUESTS)
    if table is None:
        return {}
    marks: dict[int, datetime] = {}
    for zone in zones:
        mark = from_ms(table.transaction_version(REQUESTS.app_id(zone)))
        if mark is not None:
            marks[zone] = mark
    return marks


def zone_starts(session: LakeSession, zones: Sequence[int]) -> dict[int, datetime]:
    """Where cdnlake first read each zone: the earliest window of its pull-zone passes
    (re-reads included) in ``ingest_runs``, and never before what the provider still
    served when its first pass ran (a v1 pass's window starts at midnight, but the day's
    file holds only the retained part). An hour before it is not audited."""
    import pyarrow.dataset as ds

    lake = session.lake
    table = session.reader(INGEST_RUNS) if zones else None
    if table is None:
        return {}
    runs = lake.dataset(INGEST_RUNS, table, [(INGEST_RUNS.zone_column, "in", list(zones))])
    passes = (
        ds.field("window_from").is_valid()
        & ds.field("started").is_valid()
        & (ds.field("source") != "shield")
    )
    found = runs.to_table(columns=["zone", "window_from", "started", "source"], filter=passes)
    windows: dict[int, datetime] = {}
    firsts: dict[int, datetime] = {}
    archived: dict[int, datetime] = {}
    for zone, window, started, source in zip(
        *(found[c].to_pylist() for c in ("zone", "window_from", "started", "source")),
        strict=True,
    ):
        zone, window, started = int(zone), _utc(window), _utc(started)
        if source == "archive":  # an archived part holds its day, however old
            archived[zone] = min(archived.get(zone, window), window)
        else:
            windows[zone] = min(windows.get(zone, window), window)
            firsts[zone] = min(firsts.get(zone, started), started)
    starts = {zone: max(windows[zone], firsts[zone] - RETENTION) for zone in windows}
    for zone, window in archived.items():
        starts[zone] = min(starts.get(zone, window), window)
    return starts


def archived_days(
    session: LakeSession, zones: Sequence[int], first: date, last: date, now: datetime
) -> dict[int, set[date]]:
    """Per zone, the days of ``first``..``last`` whose archived parts (``archive_parts``)
    are all imported or damaged, none open or left, and that ended more than the
    provider's idle close before ``now`` (no late part of the day can come): read whole
    from the archive, as a watermark past them would say of the API's passes."""
    from cdnlake.ingest.archive_parts import IDLE, SETTLE
    from cdnlake.lake.log.schema import ARCHIVE_PARTS

    lake = session.lake
    table = session.reader(ARCHIVE_PARTS) if zones else None
    if table is None:
        return {}
    found = lake.dataset(
        ARCHIVE_PARTS, table, [(ARCHIVE_PARTS.zone_column, "in", [str(z) for z in zones])]
    ).to_table(columns=["zone", "day", "state"])
    days: dict[tuple[int, date], bool] = {}
    for zone, day, state in zip(
        *(found[c].to_pylist() for c in ("zone", "day", "state")), strict=True
    ):
        if first <= day <= last and day_start(day) + DAY + IDLE + SETTLE <= now:
            whole = state in ("imported", "damaged")
            days[(int(zone), day)] = days.get((int(zone), day), True) and whole
    out: dict[int, set[date]] = {}
    for (zone, day), whole in days.items():
        if whole:
            out.setdefault(zone, set()).add(day)
    return out


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
    archived: dict[int, set[date]] | None = None,
    erased: dict[tuple[int, datetime], int] | None = None,
) -> list[HourAudit]:
    """One row per zone and hour of the days ``first``..``last`` that has begun by ``now``.
    ``archived``: each zone's days read whole from its archive (:func:`archived_days`),
    judged as if the zone's watermark had passed them. ``erased``: the requests erasures
    removed per zone and hour (:func:`erased_counts`): explained, never short."""
    lag = timedelta(seconds=config.ingest.lag_seconds)
    with_archive = {z.id for z in config.zones if z.archive is not None}
    kept_from = config.retention.first_kept(now)
    rows: list[HourAudit] = []
    for zone in zones:
        hour = day_start(first)
        while hour < day_start(last) + DAY and hour <= now:
            judged = audit_hour(
                zone,
                hour,
                provider.get((zone, hour), Counts()),
                lake.get((zone, hour), Counts()),
                tolerance=config.audit.tolerance,
                now=now,
                lag=lag,
                watermark=_read_past(hour, (marks or {}).get(zone), (archived or {}).get(zone)),
                started=(starts or {}).get(zone),
                kept_from=kept_from,
                erased=(erased or {}).get((zone, hour), 0),
            )
            if judged.failed and zone in with_archive and hour + RETENTION <= now:
                day = f"{hour:%Y-%m-%d}"
                judged = replace(
                    judged,
                    advice=f"{judged.advice}; the zone's archive may hold it: "
                    f"`cdnlake backfill --zone {zone} --from {day} --to {day}`",
                )
            rows.append(judged)
            hour += HOUR
    return rows


def audit(
    config: Config,
    session: LakeSession,
    api: StatisticsApi,
    zones: Sequence[int],
    first: date,
    last: date,
    now: datetime,
) -> list[HourAudit]:
    """Every zone-hour of ``first``..``last`` judged: the provider's statistics first (an
    error there is raised before the lake is read, and no hour is judged). The lake's
    marks, runs and archived parts are read from the session's tables."""
    provider = provider_counts(api, zones, first, last)
    marks = zone_watermarks(session, zones)
    starts = zone_starts(session, zones)
    archived = archived_days(session, zones, first, last, now)
    lake = lake_counts(config, zones, first, last)
    erased = erased_counts(session, zones, first, last)
    return judge(
        config,
        zones,
        first,
        last,
        provider,
        lake,
        now=now,
        marks=marks,
        starts=starts,
        archived=archived,
        erased=erased,
    )


def _read_past(
    hour: datetime, watermark: datetime | None, days: set[date] | None
) -> datetime | None:
    """The watermark an hour is judged against: past the hour's day where the archive gave
    that day whole."""
    if days and hour.date() in days:
        end = day_start(hour.date()) + DAY
        return end if watermark is None else max(watermark, end)
    return watermark


def keep(session: LakeSession, hours: Sequence[HourAudit], now: datetime) -> list[DayAudit]:
    """The whole days among ``hours`` summed and kept in ``audit_days``."""
    days = summarize(hours)
    if days:
        record(session, days, now)
    return days
