"""``cdnlake report``: the daily report of one UTC day, or the report of a range of days
(``--from DAY --to DAY``: a daily trend), in html, csv, json and md."""

from __future__ import annotations

import argparse
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from cdnlake.errors import UsageError

MAX_RANGE_DAYS = 400


def parse_day(text: str | None, option: str = "--date") -> date:
    if text is None:
        return (datetime.now(UTC) - timedelta(days=1)).date()
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"report {option}: expected YYYY-MM-DD, got {text!r}") from None


def parse_range(args: argparse.Namespace) -> tuple[date, date | None]:
    """``(day, None)`` for a daily report, ``(first, last)`` for a range report."""
    if args.date is not None and (args.from_day or args.to_day):
        raise UsageError("report: give --date DAY, or --from DAY --to DAY, not both")
    if bool(args.from_day) != bool(args.to_day):
        raise UsageError("report: --from and --to go together")
    today = datetime.now(UTC).date()
    if not args.from_day:
        day = parse_day(args.date)
        if day > today:
            raise UsageError(f"report --date: {day} is in the future")
        return day, None
    first, last = parse_day(args.from_day, "--from"), parse_day(args.to_day, "--to")
    if first > last:
        raise UsageError(f"report: --from {first} is after --to {last}")
    if last > today:
        raise UsageError(f"report --to: {last} is in the future")
    if (last - first).days >= MAX_RANGE_DAYS:
        raise UsageError(f"report: a range covers at most {MAX_RANGE_DAYS} days")
    return first, last


def report(args: argparse.Namespace) -> int:
    from cdnlake.cli.common import load
    from cdnlake.reports.build import write_reports

    day, end = parse_range(args)
    config = load(args, default_level="WARNING")
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
        end=end,
    )
    if [p.suffix for p in paths] == [".md"]:  # Markdown alone is for reading: show it
        import sys

        sys.stdout.write(paths[0].read_text(encoding="utf-8"))
        print(f"cdnlake: wrote {paths[0]}", file=sys.stderr)
        return 0
    for path in paths:
        print(path)
    return 0
