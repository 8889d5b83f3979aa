"""``cdnlake report``: the daily report of one UTC day, in html, csv, json and md."""

from __future__ import annotations

import argparse
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from cdnlake.errors import UsageError


def parse_day(text: str | None) -> date:
    if text is None:
        return (datetime.now(UTC) - timedelta(days=1)).date()
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"report --date: expected YYYY-MM-DD, got {text!r}") from None


def report(args: argparse.Namespace) -> int:
    from cdnlake.cli.common import load
    from cdnlake.reports.build import write_reports

    config = load(args, default_level="WARNING")
    day = parse_day(args.date)
    if day > datetime.now(UTC).date():
        raise UsageError(f"report --date: {day} is in the future")
    if args.zone is not None:
        if args.zone in {z.id for z in config.shield_zones} - {z.id for z in config.zones}:
            raise UsageError(
                f"report --zone: {args.zone} is a shield zone; the daily report covers pull "
                "zones' requests, and its WAF events are in the shield_events relation "
                f'(cdnlake sql "SELECT * FROM shield_events WHERE shield_zone_id = {args.zone}")'
            )
        config.zone(args.zone)
    formats = None
    if args.format is not None:
        formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    paths = write_reports(
        config,
        day,
        zone=args.zone,
        formats=formats,
        out=Path(args.out) if args.out else None,
        engine=args.engine,
    )
    for path in paths:
        print(path)
    return 0
