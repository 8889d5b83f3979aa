"""Health of each zone: watermark, freshness, last run, today's rows, recent gaps.

Pull zones first, then shield zones (source "shield"), whose rows are WAF events. The
freshest row of a zone and whether its log forwarding is live come from the Delta log's
file statistics alone: the newest ``ts`` of its files, and the newest ``ts`` of its files
whose rows all came by forwarding (the request time of its last forwarded line; a
compaction rewriting those files keeps it, where a commit time would not).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import duckdb
from deltalake import DeltaTable

from cdnlake.audit.days import from_row
from cdnlake.config import FUTURE_TOLERANCE_SECONDS, Config, ForwardingConfig
from cdnlake.coordination import lease_key, lease_keys
from cdnlake.lake.log.progress import WATERMARK, describe_stored, from_ms, stored_settings
from cdnlake.lake.log.schema import (
    ARCHIVE_PARTS,
    AUDIT_DAYS,
    INGEST_GAPS,
    INGEST_RUNS,
    REQUESTS,
    SHIELD_EVENTS,
    TableSpec,
)
from cdnlake.lake.log.store import Lake, add_actions_table, held_zones
from cdnlake.lake.zone.session import LakeSession
from cdnlake.privacy import Setting, configured_setting
from cdnlake.sqlfiles import internal_sql
from cdnlake.warehouse.db import Warehouse

GAP_LOOKBACK = timedelta(days=7)
# Runs files read first for each zone's newest run: those that end this recently.
RUN_LOOKBACK = timedelta(days=1)
# The date partitions whose files' statistics give a zone's freshest row and its newest
# forwarded commit: yesterday, today and tomorrow (a clock ahead). A zone with no file in
# them is looked up in all of its files (for its freshest row only).
FRESH_DAYS = (-1, 0, 1)
# Forwarding is "live" while the zone's newest forwarded row is at most this many seconds
# old, plus ``flush_seconds`` (how long the receiver holds lines before a commit) and
# FORWARDING_DELAY_SECONDS (the provider sends a line 10 to 30 s after its request).
LIVE_SECONDS = 60.0
FORWARDING_DELAY_SECONDS = 30.0


@dataclass
class ZoneStatus:
    zone_id: int
    name: str
    source: str
    watermark: datetime | None
    lag_seconds: float | None
    last_finished: datetime | None
    last_outcome: str | None
    last_error: str | None
    last_rejected: int  # lines or records the last run rejected
    rows_today: int
    gaps_7d: int
    lost_seconds_7d: float
    healthy: bool
    problem: str | None
    owner: str | None = None  # the daemon holding the zone now (host:pid)
    freshest_row: datetime | None = None  # the newest ts the lake holds for the zone
    freshest_age_seconds: float | None = None
    forwarding: str | None = None  # pull zones: "live", "silent" or "not configured"
    forwarded_at: datetime | None = None  # the request time of its newest forwarded row
    forwarded_age_seconds: float | None = None
    # The zone's last audited day (``cdnlake audit``, the daemon's daily audit): day,
    # verdict, ratio, ...; None for a zone never audited (and for shield zones).
    last_audit: dict[str, Any] | None = None
    # The [privacy] setting its stored rows went through (mixed, with the date, while
    # older rows were stored under another one), and whether they are weaker than the
    # configured one (``cdnlake maintain --apply-privacy`` rewrites them).
    privacy: str | None = None
    privacy_pending: bool = False
    # Whether ``maintain --apply-privacy`` would bring some of those rows to the configured
    # setting (not rows stored stronger: hashes of networks, a shorter prefix, dropped).
    privacy_rewritable: bool = False
    # A zone that names its archive: the days it holds and which are imported, as its
    # last backfill or archive job listed them (:func:`archive_days`); None otherwise.
    archive: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in vars(self).items()}


# An app id's version in a table (its Delta application transaction), None where none.
AppVersions = Callable[[str], int | None]


def app_versions(
    session: LakeSession, spec: TableSpec, table: DeltaTable | None, own_state: bool
) -> AppVersions | None:
    """How ``spec``'s app ids are read: from delta-rs's ``table`` (None: no table), or,
    ``own_state``, from the session's state of it (the daemon's: in memory, where each
    delta-rs call reads the log again, a millisecond and more, thousands a ``/healthz``)."""
    if table is None:
        return None
    held = session.log_table(spec, create=False) if own_state else None
    return table.transaction_version if held is None else held.apps()


def watermarks(
    spec: TableSpec, versions: AppVersions | None, zone_ids: list[int]
) -> dict[int, datetime]:
    """Each zone's watermark: its Delta application transaction in the table."""
    if versions is None:
        return {}
    marks = {}
    for zone_id in zone_ids:
        mark = from_ms(versions(spec.app_id(zone_id)))
        if mark is not None:
            marks[zone_id] = mark
    return marks


def zone_privacy(
    spec: TableSpec, app: AppVersions | None, zone_id: int, configured: Setting, held: bool
) -> tuple[str | None, bool, bool]:
    """The setting a zone's stored rows went through, as its marks say; whether some were
    stored under another than ``configured``; whether ``maintain --apply-privacy`` would
    rewrite some. (None, False, False: a zone holding no data file, whatever its marks: a
    commit of progress alone or an erasure's mark gives a zone without rows marks too.)"""
    if app is None or not held:
        return None, False, False

    def versions(mark: str) -> int | None:
        return app(spec.app_id(zone_id, mark))

    stored = stored_settings(versions)
    if not stored:
        return None, False, False
    pending = len(stored) > 1 or not stored[0].same_as(configured)
    rewritable = any(
        not s.same_as(configured) and s.reaches(configured) and s.cannot_become(configured) is None
        for s in stored
    )
    return describe_stored(versions), pending, rewritable


def rows_on(lake: Lake, spec: TableSpec, table: DeltaTable | None, day: date) -> dict[int, int]:
    """Rows per zone on ``day``, from the log's file statistics: no data file is read,
    except one whose log entry lacks its row count."""
    if table is None:
        return {}
    actions = lake.add_actions(
        spec, table, [("date", "=", day.isoformat())], stats=("num_records",)
    )
    counts: dict[int, int] = defaultdict(int)
    uncounted: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for action in actions:
        zone = int(action[f"partition.{spec.zone_column}"])
        if action["num_records"] is None:
            uncounted[zone].append(action)
        else:
            counts[zone] += action["num_records"]
    for zone, missing in uncounted.items():
        counts[zone] += lake.dataset(spec, table, actions=missing).count_rows()
    return dict(counts)


@dataclass(frozen=True)
class Freshness:
    newest: dict[int, datetime]  # zone -> the newest ts its files hold
    forwarded: dict[int, datetime]  # zone -> the request time of its newest forwarded row


def freshness(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    table: DeltaTable | None,
    zone_ids: list[int],
    now: datetime,
) -> Freshness:
    """Each zone's freshest row and newest forwarded row, from the log's statistics of
    the files in :data:`FRESH_DAYS` (no data file is read)."""
    if table is None or not zone_ids:
        return Freshness({}, {})
    log = add_actions_table(table)
    if log.num_rows == 0:
        return Freshness({}, {})
    names = {
        f"partition.{spec.zone_column}": "zone",
        "partition.date": "day",
        "max.ts": "max_ts",
        "min.source": "min_source",
        "max.source": "max_source",
    }
    present = [name for name in names if name in log.column_names]
    stats = log.select(present).rename_columns([names[name] for name in present])
    days = [now.date() + timedelta(days=d) for d in FRESH_DAYS]
    con.register("file_stats", stats)
    try:
        newest = _newest(con, zone_ids, days)
        missing = [zone for zone in zone_ids if zone not in newest]
        if missing:
            newest.update(_newest(con, missing, None))
        forwarded: dict[int, datetime] = {}
        if "min_source" in stats.column_names:
            found = con.execute(internal_sql("status_forwarded"), {"zones": zone_ids, "days": days})
            forwarded = {int(zone): at for zone, at in found.fetchall() if at is not None}
    finally:
        con.unregister("file_stats")
    return Freshness(newest, forwarded)


def _newest(
    con: duckdb.DuckDBPyConnection, zone_ids: list[int], days: list[date] | None
) -> dict[int, datetime]:
    found = con.execute(internal_sql("status_newest"), {"zones": zone_ids, "days": days})
    return {int(zone): newest for zone, newest in found.fetchall() if newest is not None}


def forwarding_state(
    forwarded_at: datetime | None, now: datetime, forwarding: ForwardingConfig
) -> str:
    """ "live" (a forwarded row of lately: ``forwarded_at``, its request time, within
    :func:`live_seconds`), "silent" (forwarded before, or this config listens for it) or
    "not configured"."""
    if forwarded_at is not None:
        age = (now - forwarded_at).total_seconds()
        return "live" if age <= live_seconds(forwarding) else "silent"
    return "silent" if forwarding.enabled else "not configured"


def live_seconds(forwarding: ForwardingConfig) -> float:
    """How old a zone's newest forwarded row may be while its forwarding counts as live."""
    return LIVE_SECONDS + forwarding.flush_seconds + FORWARDING_DELAY_SECONDS


def last_runs(
    warehouse: Warehouse,
    con: duckdb.DuckDBPyConnection,
    table: DeltaTable | None,
    wanted: set[tuple[int, bool]],
    now: datetime,
) -> dict[tuple[int, bool], tuple[Any, ...]]:
    """The newest run of each wanted (zone, is shield).

    Reads the runs files that the log says end within ``RUN_LOOKBACK`` (a daemon's
    month is millions of runs); a zone without a run in them is looked up in all of its
    files. A run found recent is the newest: any newer one ends later still.
    """
    lake = warehouse.lake
    if table is None or not wanted:
        return {}
    zones = sorted({zone for zone, _ in wanted})
    actions = lake.add_actions(
        INGEST_RUNS, table, [("zone", "in", [str(z) for z in zones])], stats=("max.finished",)
    )
    since = now - RUN_LOOKBACK
    stat_since = since - timedelta(milliseconds=1)  # the log keeps statistics to the ms
    recent = [a for a in actions if a["max.finished"] is None or a["max.finished"] >= stat_since]
    warehouse.read_only(con, INGEST_RUNS, table, recent)
    found = _newest_runs(con, since)
    missing = {zone for zone, _ in wanted - found.keys()}
    if missing and len(recent) < len(actions):
        rest = [a for a in actions if int(a["partition.zone"]) in missing]
        warehouse.read_only(con, INGEST_RUNS, table, rest)
        older = _newest_runs(con, datetime.min.replace(tzinfo=UTC))
        found.update({key: run for key, run in older.items() if key not in found})
    return found


def _newest_runs(
    con: duckdb.DuckDBPyConnection, since: datetime
) -> dict[tuple[int, bool], tuple[Any, ...]]:
    rows = con.execute(internal_sql("status_last_runs"), {"since": since}).fetchall()
    return {(row[0], bool(row[1])): row[2:] for row in rows}


def zone_statuses(
    config: Config,
    session: LakeSession,
    *,
    now: datetime | None = None,
    max_lag_seconds: int | None = None,
    own_state: bool = False,
) -> list[ZoneStatus]:
    """Every zone's status, read from the session's tables (:meth:`LakeSession.reader`:
    brought up to date, not opened anew at each call); ``own_state``: the zones' marks
    from the session's state of the tables (:func:`app_versions`)."""
    now = now or datetime.now(UTC)
    max_lag = config.status.max_lag_seconds if max_lag_seconds is None else max_lag_seconds
    lake = session.lake
    warehouse = Warehouse(config.storage, lake, tables=session.reader)
    pull_ids = [z.id for z in config.zones]
    shield_ids = [z.id for z in config.shield_zones]
    requests = session.reader(REQUESTS) if pull_ids else None
    events = session.reader(SHIELD_EVENTS) if shield_ids else None
    rows_today = rows_on(lake, REQUESTS, requests, now.date())
    events_today = rows_on(lake, SHIELD_EVENTS, events, now.date())
    pull_apps = app_versions(session, REQUESTS, requests, own_state)
    shield_apps = app_versions(session, SHIELD_EVENTS, events, own_state)
    pull_marks = watermarks(REQUESTS, pull_apps, pull_ids)
    shield_marks = watermarks(SHIELD_EVENTS, shield_apps, shield_ids)
    wanted = {(z, False) for z in pull_ids} | {(z, True) for z in shield_ids}
    archived = [z.id for z in config.zones if z.archive is not None]
    relations = [INGEST_GAPS.name, AUDIT_DAYS.name] + ([ARCHIVE_PARTS.name] if archived else [])
    with warehouse.connect(relations) as con:
        runs_table = session.reader(INGEST_RUNS) if wanted else None
        runs = last_runs(warehouse, con, runs_table, wanted, now)
        fresh = freshness(con, REQUESTS, requests, pull_ids, now)
        shield_fresh = freshness(con, SHIELD_EVENTS, events, shield_ids, now)
        gaps = {
            (z, bool(shield)): (n, s or 0.0)
            for z, shield, n, s in con.execute(
                internal_sql("status_gaps"), {"since": now - GAP_LOOKBACK}
            ).fetchall()
        }
        found = con.execute(internal_sql("status_last_audits"))
        names = [c[0] for c in found.description]
        kept = [from_row(dict(zip(names, r, strict=True))) for r in found.fetchall()]
        audits = {a.zone_id: a for a in kept}
        archives = archive_days(con, archived) if archived else {}
    configured = configured_setting(config.privacy)
    held = {
        False: set(held_zones(REQUESTS, requests)) if requests is not None else set(),
        True: set(held_zones(SHIELD_EVENTS, events)) if events is not None else set(),
    }
    # (id, name, source, is shield, its watermarks, its rows today, its freshness)
    zones = [(z.id, z.name, z.source, False, pull_marks, rows_today, fresh) for z in config.zones]
    zones += [
        (z.id, z.name, "shield", True, shield_marks, events_today, shield_fresh)
        for z in config.shield_zones
    ]
    out = []
    for zone_id, name, source, shield, marks, today, freshest in zones:
        watermark = marks.get(zone_id)
        lag = (now - watermark).total_seconds() if watermark else None
        outcome, error, finished, rejected = runs.get((zone_id, shield), (None,) * 4)
        problem = None
        if outcome is None:
            problem = "never ingested"
        elif outcome not in ("ok",):
            problem = f"last run {outcome}: {error or ''}".strip()
        elif lag is not None and lag > max_lag:
            problem = f"behind by {lag:.0f}s (more than {max_lag}s)"
        n_gaps, lost = gaps.get((zone_id, shield), (0, 0.0))
        newest = freshest.newest.get(zone_id)
        ahead = (newest - now).total_seconds() if newest else 0.0
        if problem is None and ahead > FUTURE_TOLERANCE_SECONDS:
            # A row from the future (stored before such records were refused): no age.
            problem = (
                f"freshest row {newest:%Y-%m-%d %H:%M:%S}Z is {ahead:.0f}s in the future "
                "(a record with a wrong timestamp)"
            )
        forwarded_at = freshest.forwarded.get(zone_id)
        privacy, pending, rewritable = zone_privacy(
            SHIELD_EVENTS if shield else REQUESTS,
            shield_apps if shield else pull_apps,
            zone_id,
            configured,
            zone_id in held[shield],
        )
        out.append(
            ZoneStatus(
                zone_id=zone_id,
                name=name,
                source=source,
                watermark=watermark,
                lag_seconds=lag,
                last_finished=finished,
                last_outcome=outcome,
                last_error=error,
                last_rejected=int(rejected or 0),
                rows_today=int(today.get(zone_id, 0)),
                gaps_7d=int(n_gaps),
                lost_seconds_7d=float(lost),
                healthy=problem is None,
                problem=problem,
                freshest_row=newest,
                freshest_age_seconds=(now - newest).total_seconds() if newest else None,
                forwarding=None
                if shield
                else forwarding_state(forwarded_at, now, config.forwarding),
                forwarded_at=forwarded_at,
                forwarded_age_seconds=(
                    (now - forwarded_at).total_seconds() if forwarded_at else None
                ),
                last_audit=None if shield or zone_id not in audits else audits[zone_id].as_dict(),
                privacy=privacy,
                privacy_pending=pending,
                privacy_rewritable=rewritable,
                archive=None if shield else archives.get(zone_id),
            )
        )
    return out


def archive_days(con: duckdb.DuckDBPyConnection, zone_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Per zone that names its archive: the days the archive holds (``first``, ``last``,
    ``days``), how many are imported whole (every part imported), and the days that are
    not (``pending``: a part open or not imported yet; ``damaged``: a damaged part), as
    ISO days. A zone never listed has zero days."""
    found: dict[int, dict[str, Any]] = {
        zone: {"days": 0, "imported": 0, "first": None, "last": None, "pending": [], "damaged": []}
        for zone in zone_ids
    }
    for zone, day, parts, imported, damaged, _open in con.execute(
        internal_sql("status_archive")
    ).fetchall():
        entry = found.get(int(zone))
        if entry is None:
            continue
        entry["days"] += 1
        entry["first"] = entry["first"] or day.isoformat()
        entry["last"] = day.isoformat()
        if imported == parts:
            entry["imported"] += 1
        elif damaged:
            entry["damaged"].append(day.isoformat())
        else:
            entry["pending"].append(day.isoformat())
    return found


@dataclass
class FleetStatus:
    """The daemons running on this lake, and the one each zone is held by."""

    coordinated: bool
    owners: dict[str, str]  # zone key (requests/<id>, shield_events/<id>) -> daemon
    daemons: list[str]  # one line each: "host:pid since ..., seen 3s ago"
    problem: str | None = None

    def owner(self, zone: ZoneStatus) -> str | None:
        table = SHIELD_EVENTS if zone.source == "shield" else REQUESTS
        return self.owners.get(lease_key(table.name, zone.zone_id))


def fleet_status(config: Config, *, now: datetime | None = None) -> FleetStatus:
    """Who runs here: the fleet's leases in PostgreSQL, or the storage root's one daemon."""
    if not config.coordination.enabled:
        from cdnlake.coordination.sole import holder

        running = holder(config.storage.work)
        if running is None:
            return FleetStatus(False, {}, [])
        daemon = running.split()[0]
        return FleetStatus(False, dict.fromkeys(lease_keys(config), daemon), [running])
    from cdnlake.coordination.postgres import fleet_view
    from cdnlake.errors import CoordinationError

    try:
        view = fleet_view(config.coordination.require_dsn().reveal(), config.storage.lake_location)
    except CoordinationError as exc:
        return FleetStatus(True, {}, [], problem=str(exc))
    now = now or datetime.now(UTC)
    lines = [
        f"{daemon} since {started:%Y-%m-%d %H:%M:%S}Z, "
        + (f"seen {(now - beat).total_seconds():.0f}s ago" if live else "gone")
        for daemon, started, beat, live in view.daemons
    ]
    return FleetStatus(True, view.owners, lines)


def full_status(
    config: Config,
    session: LakeSession,
    *,
    max_lag_seconds: int | None = None,
    own_state: bool = False,
) -> tuple[list[ZoneStatus], FleetStatus]:
    """Every zone's status with its owner, and the fleet: what ``status`` shows."""
    statuses = zone_statuses(config, session, max_lag_seconds=max_lag_seconds, own_state=own_state)
    fleet = fleet_status(config)
    for zone in statuses:
        zone.owner = fleet.owner(zone)
    return statuses, fleet


def health(config: Config, session: LakeSession) -> tuple[list[dict[str, Any]], bool]:
    """``status --format json``'s body, and whether every zone (and the fleet) is healthy:
    what the daemon's ``/healthz`` serves, from its own session's tables (the zones'
    marks from its state of them)."""
    statuses, fleet = full_status(config, session, own_state=True)
    healthy = all(s.healthy for s in statuses) and fleet.problem is None
    return [s.as_dict() for s in statuses], healthy


def zone_watermarks(session: LakeSession, config: Config) -> dict[tuple[str, str], datetime]:
    """Each configured zone's watermark keyed as the metrics label it: (zone, source), from
    the process's own state of the tables (brought up to date, not opened anew)."""
    marks: dict[tuple[str, str], datetime] = {}
    labelled = [(REQUESTS, [(z.id, z.source) for z in config.zones])]
    labelled.append((SHIELD_EVENTS, [(z.id, "shield") for z in config.shield_zones]))
    for spec, zones in labelled:
        if not zones:
            continue
        table = session.log_table(spec, create=False)  # a reader: creates nothing
        if table is None:
            continue
        found = table.marks([zone for zone, _ in zones], WATERMARK)
        for zone, source in zones:
            mark = from_ms(found[zone])
            if mark is not None:
                marks[(str(zone), source)] = mark
    return marks


def newest_rows(config: Config, session: LakeSession) -> dict[str, datetime]:
    """Each configured pull zone's newest stored row (its request time) as the metrics
    label it, from the log's file statistics (no data file is read)."""
    ids = [z.id for z in config.zones]
    table = session.reader(REQUESTS) if ids else None
    con = duckdb.connect()
    try:
        found = freshness(con, REQUESTS, table, ids, datetime.now(UTC)).newest
    finally:
        con.close()
    return {str(zone): at for zone, at in found.items()}


def completeness(config: Config, session: LakeSession) -> dict[tuple[str, str], float]:
    """The last week's audited days as the metrics label them: (zone, day) -> ratio."""
    from cdnlake.audit.days import recent_ratios

    days = recent_ratios(session, [z.id for z in config.zones], datetime.now(UTC).date())
    return {(str(d.zone_id), d.day.isoformat()): d.ratio for d in days}
