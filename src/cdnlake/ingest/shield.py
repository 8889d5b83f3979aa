"""Shield event logs as a source: the ``shield_events`` Delta table, each ``logId`` once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import polars as pl

from cdnlake.client.shield import BadEvent, EventLog, ShieldApi, decode_events
from cdnlake.ingest.normalize import REJECT_SCHEMA
from cdnlake.ingest.runner import Chunk, PassContext
from cdnlake.lake.log.progress import DAYS, WATERMARK, DayCursor, day_start, to_ms
from cdnlake.lake.log.schema import SHIELD_EVENTS, SHIELD_SCHEMA, conform, polars_schema

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
    frame = frame.with_columns(
        pl.from_epoch(pl.col("ts"), time_unit="ms").dt.replace_time_zone("UTC").alias("ts")
    )
    return conform(frame, SHIELD_SCHEMA)


def rejects_frame(bad: list[BadEvent]) -> pl.DataFrame:
    """Events that do not decode as rejected rows: ``line_number`` is the event's place
    in its day's event log (from 0), ``request_id`` its ``logId`` where it has one."""
    return pl.DataFrame(
        {
            "line_number": [b.index for b in bad],
            "reason": [f"event does not decode: {b.reason}" for b in bad],
            "raw_line": [b.text for b in bad],
            "kind": ["undecodable event"] * len(bad),
            "request_id": [b.log_id for b in bad],
        },
        schema=REJECT_SCHEMA,
    )


class ShieldSource:
    """A shield zone's WAF event logs, by UTC day, each ``logId`` once.

    The zone's day cursor (its first day not yet closed) and its watermark are Delta
    application transactions committed with the events. Each pass walks every page of the
    days from the cursor to today; a day is left once it closed ``CLOSE_AFTER`` ago. The
    watermark moves only with a day read whole (to its end, or to now for today), so a
    pass that fails within a day leaves the zone's lag showing where its data stops.
    """

    kind = "shield"
    spec = SHIELD_EVENTS
    noun = "events"

    def __init__(self, shield: ShieldApi) -> None:
        self.shield = shield

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        now = ctx.now
        today = now.date()
        first = today - timedelta(days=DAYS_BACK)
        saved = DayCursor.decode(ctx.progress(DAYS))
        watermark = ctx.watermark()
        cursor = first if saved is None else max(saved.day, first)
        result = ctx.result
        result.window_from, result.window_to = day_start(cursor), now
        day = cursor
        while day <= today:
            ctx.check_stop()
            closed = now >= day_start(day) + timedelta(days=1) + CLOSE_AFTER
            logs: list[EventLog] = []
            bad: list[BadEvent] = []
            for page in self.shield.iter_event_logs(ctx.zone_id, day):
                ctx.check_stop()
                result.pages += 1
                events, faults = decode_events(page)
                before = len(logs) + len(bad)  # the events of the day's earlier pages
                bad += [replace(fault, index=before + fault.index) for fault in faults]
                logs += events
            if bad:
                ctx.store_rejects(rejects_frame(bad), "shield", f"api:shield:{day.isoformat()}")
            frame = (
                events_frame(logs) if logs else pl.DataFrame(schema=polars_schema(SHIELD_SCHEMA))
            )
            result.parsed += frame.height
            if closed and day == cursor:
                cursor = day + timedelta(days=1)
            read = min(day_start(day) + timedelta(days=1), now)  # every page of the day
            watermark = read if watermark is None else max(watermark, read)
            yield Chunk(frame, {DAYS: DayCursor(cursor).encode(), WATERMARK: to_ms(watermark)})
            day += timedelta(days=1)
