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
        config.zone(args.zone)
    formats = None
    if args.format:
        formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    paths = write_reports(
        config, day, zone=args.zone, formats=formats, out=Path(args.out) if args.out else None
    )
    for path in paths:
        print(path)
    return 0
