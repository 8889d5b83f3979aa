"""``cdnlake report``: the daily report of one UTC day, or the report of a range of days
(``--from DAY --to DAY``: a daily trend), in html, csv, json and md."""

from __future__ import annotations

import argparse
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from cdnlake.errors import UsageError

if TYPE_CHECKING:
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.warehouse.named import Slice

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


def parse_slice(args: argparse.Namespace) -> Slice:
    """``--host``, ``--path-prefix``, ``--country``, ``--status-class``, ``--cache-status``
    (of ``report`` and ``sql --query``), checked."""
    from cdnlake.warehouse.named import Slice

    return Slice.parse(
        host=args.host,
        path_prefix=args.path_prefix,
        country=args.country,
        status_class=args.status_class,
        cache_status=args.cache_status,
    )


def report(args: argparse.Namespace) -> int:
    from cdnlake.cli.common import load
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy
    from cdnlake.reports.build import check_formats, write_reports

    day, end = parse_range(args)
    piece = parse_slice(args)
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
        check_formats(formats)
    # The command's one session: the lake check and the report read its tables.
    with LakeSession.from_config(
        config.storage, privacy=PrivacyPolicy.from_config(config.privacy)
    ) as session:
        check_lake_holds(session, day, end, args.zone)
        paths = write_reports(
            config,
            day,
            session=session,
            zone=args.zone,
            formats=formats,
            out=Path(args.out) if args.out else None,
            engine=args.engine,
            end=end,
            piece=piece,
            compare=args.compare,
        )
    if [p.suffix for p in paths] == [".md"]:  # Markdown alone is for reading: show it
        import sys

        sys.stdout.write(paths[0].read_text(encoding="utf-8"))
        print(f"cdnlake: wrote {paths[0]}", file=sys.stderr)
        return 0
    if getattr(args, "verbose", False):
        for path in paths:
            print(path)
    else:
        print(written_summary(paths))
    return 0


def written_summary(paths: list[Path]) -> str:
    """``wrote 30 files to data/reports: report-all-2026-11-26 .html, .json, .md, and 27
    .csv (one per table); --verbose names each``: the folder and the formats, in a line."""
    if len(paths) == 1:
        return str(paths[0])
    folder = paths[0].parent
    kinds: dict[str, int] = {}
    for path in paths:
        kinds[path.suffix] = kinds.get(path.suffix, 0) + 1
    stem = paths[0].name.split(".", 1)[0]
    shown = ", ".join(
        suffix if n == 1 else f"{n} {suffix} (one per table)" for suffix, n in kinds.items()
    )
    return f"wrote {len(paths)} files to {folder}: {stem} {shown}; --verbose names each"


def check_lake_holds(
    session: LakeSession, first: date, last: date | None, zone: int | None
) -> None:
    """A report of days the lake holds nothing of, before its first day or after its last,
    is refused in one line naming the days it holds (not an empty report, exit 0)."""
    from cdnlake.lake.log.schema import REQUESTS

    last = last or first
    table = session.reader(REQUESTS)
    days = sorted(
        {
            date.fromisoformat(str(part["date"]))
            for part in (table.partitions() if table is not None else [])
            if zone is None or str(part.get(REQUESTS.zone_column)) == str(zone)
        }
    )
    of = f"of zone {zone} " if zone is not None else ""
    asked = f"{first}" if first == last else f"{first} to {last}"
    if not days:
        raise UsageError(
            f"report: the lake holds no requests {of}yet, so there is no report of {asked}: "
            "run `cdnlake ingest` first"
        )
    if last < days[0] or first > days[-1]:
        raise UsageError(
            f"report: {asked} is outside what the lake holds {of}({days[0]} to {days[-1]} "
            "UTC): nothing was written"
        )
