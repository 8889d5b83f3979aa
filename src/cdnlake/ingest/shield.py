"""Shield event logs into the lake: ``lake/shield_events/shield_zone_id=<id>/date=<d>/``.

The same machinery as request logs: rows merged by ``logId`` into hour files that are
replaced atomically, and a per-zone state file that marks a day complete only after the
rows it covers are durable. Each pass walks the continuation tokens of the days that are
not complete yet (today, and recent days once more after they close).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, date, datetime, timedelta

import polars as pl

from cdnlake.client.shield import EventLog, ShieldApi
from cdnlake.config import Config, ShieldZoneConfig
from cdnlake.ingest.runner import Clock, LogProgress, Progress, ZoneResult, pass_outcome, utcnow
from cdnlake.ingest.state import LastRun, StateStore, V1Day
from cdnlake.lake.layout import SHIELD_SCHEMA
from cdnlake.lake.writer import StagedMerge, clean_leftovers
from cdnlake.warehouse.db import Warehouse

log = logging.getLogger("cdnlake.ingest")

DAYS_BACK = 2  # besides today: the event log's own retention is not documented
CLOSE_AFTER = timedelta(hours=1)  # a day is read once more this long after it ends
LABELS = {
    "asn": "asn",
    "country": "country",
    "ruleId": "rule_id",
    "severity": "severity",
    "method": "method",
    "ruleGroup": "rule_group",
    "status": "status",
    "serverZone": "server_zone",
}


def events_frame(logs: list[EventLog]) -> pl.DataFrame:
    def ms(ts: int) -> int:
        return ts * 1000 if ts < 100_000_000_000 else ts  # seconds or milliseconds

    columns: dict[str, list[object]] = {
        "log_id": [e.logId for e in logs],
        "ts": [ms(e.timestamp) for e in logs],
        "labels_json": [json.dumps(e.labels, sort_keys=True) for e in logs],
        "log": [e.log for e in logs],
    }
    for key, column in LABELS.items():
        columns[column] = [
            None if e.labels.get(key) is None else str(e.labels.get(key)) for e in logs
        ]
    frame = pl.DataFrame(columns, schema_overrides={"ts": pl.Int64})
    return frame.with_columns(
        pl.from_epoch(pl.col("ts"), time_unit="ms").dt.replace_time_zone("UTC").alias("ts")
    )


def ingest_shield_zone(
    config: Config,
    shield: ShieldApi,
    zone: ShieldZoneConfig,
    *,
    warehouse: Warehouse | None = None,
    clock: Clock = utcnow,
    progress: Progress | None = None,
) -> ZoneResult:
    warehouse = warehouse or Warehouse(config.storage)
    store = StateStore(config.storage.state, kind="shield")
    lake = config.storage.lake
    result = ZoneResult(zone.id, "shield")
    with pass_outcome(result, f"shield zone {zone.id}"), store.zone_lock(zone.id):
        clean_leftovers(lake, store.staging, zone.id, "shield_events")
        state = store.load(zone.id)
        now = clock()
        today = now.date()
        first = today - timedelta(days=DAYS_BACK)
        for key in [k for k in state.v1_days if date.fromisoformat(k) < first]:
            del state.v1_days[key]
        day = first
        result.window_from = datetime(first.year, first.month, first.day, tzinfo=UTC)
        result.window_to = now
        while day <= today:
            day_progress = state.v1_days.setdefault(day.isoformat(), V1Day())
            if not day_progress.complete:
                day_end = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(1)
                closed = now >= day_end + CLOSE_AFTER
                merge = StagedMerge(
                    lake,
                    zone.id,
                    store.staging,
                    key_column="log_id",
                    schema=SHIELD_SCHEMA,
                    table="shield_events",
                )
                try:
                    seen = 0
                    for page in shield.iter_event_logs(zone.id, day):
                        result.pages += 1
                        logs = page.logs or []
                        seen += len(logs)
                        if logs:
                            merge.add(events_frame(logs))
                    result.absorb(merge.commit())
                finally:
                    result.absorb(merge.discard())  # rows sealed hours wrote before a failure
                day_progress.lines = seen
                day_progress.complete = closed
                store.save(state)
            day += timedelta(days=1)
        state.watermark = now
        result.reached = now
        result.finished = utcnow()
        state.last_run = LastRun(
            started=result.started.isoformat(),
            finished=result.finished.isoformat(),
            outcome="ok",
            rows=result.rows,
        )
        store.save(state)
    try:
        warehouse.record_run(result.run_row(), [])
    except Exception as exc:  # bookkeeping must not undo durable rows
        result.notes.append(f"run not recorded in the warehouse: {exc}")
    (progress or LogProgress()).finished(result)
    return result
