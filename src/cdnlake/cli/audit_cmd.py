"""``cdnlake audit``: the lake's hourly counts against the provider's own statistics.

Exit 1 when any hour is short (or missing) beyond ``[audit] tolerance``, or when the
provider's statistics cannot be read (one line, and no verdict); 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

from cdnlake.errors import CdnlakeError, StopRequested, UsageError

MAX_RANGE_DAYS = 31


def add_arguments(
    p: argparse.ArgumentParser, zone_id: Callable[[str], int], once: type[argparse.Action]
) -> None:
    """``once``: the action of an option given at most once (cli.main.Once)."""
    p.add_argument("--date", action=once, metavar="YYYY-MM-DD", help="UTC day (default: yesterday)")
    p.add_argument(
        "--from", dest="from_day", action=once, metavar="YYYY-MM-DD", help="first day of a range"
    )
    p.add_argument(
        "--to", dest="to_day", action=once, metavar="YYYY-MM-DD", help="last day of a range"
    )
    p.add_argument(
        "--zone",
        type=zone_id,
        action="append",
        metavar="ID",
        help="only this pull zone (repeat for more; default: every configured pull zone)",
    )
    p.add_argument(
        "--format",
        choices=["table", "csv", "json"],
        default="table",
        help="table: for people, fit to the terminal (default); csv, json: every column, "
        "with the advice of each hour",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="a table shows every column, however wide the terminal (default: the columns "
        "that do not fit are left out, and named)",
    )


def _day(text: str, option: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"audit {option}: expected YYYY-MM-DD, got {text!r}") from None


def parse_days(args: argparse.Namespace, today: date) -> tuple[date, date]:
    """(first, last) UTC days, both included."""
    if args.date is not None and (args.from_day or args.to_day):
        raise UsageError("audit: give --date DAY, or --from DAY --to DAY, not both")
    if bool(args.from_day) != bool(args.to_day):
        raise UsageError("audit: --from and --to go together")
    if args.from_day:
        first, last = _day(args.from_day, "--from"), _day(args.to_day, "--to")
    elif args.date is not None:
        first = last = _day(args.date, "--date")
    else:
        first = last = today - timedelta(days=1)
    if first > last:
        raise UsageError(f"audit: --from {first} is after --to {last}")
    if last > today:
        raise UsageError(f"audit: {last} is in the future")
    if (last - first).days >= MAX_RANGE_DAYS:
        raise UsageError(f"audit: a range covers at most {MAX_RANGE_DAYS} days")
    return first, last


def audit(args: argparse.Namespace) -> int:
    from cdnlake.audit.compare import COLUMNS, row
    from cdnlake.audit.run import audit as audit_hours
    from cdnlake.audit.run import keep
    from cdnlake.cli.common import interruptible, load, open_api, say
    from cdnlake.client.statistics import StatisticsApi
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy
    from cdnlake.warehouse.output import render, terminal_width, wrap

    now = datetime.now(UTC)
    first, last = parse_days(args, now.date())
    config = load(args, default_level="WARNING")
    zones = [config.zone(z).id for z in args.zone] if args.zone else [z.id for z in config.zones]
    if not zones:
        raise UsageError("audit: no pull zones are configured ([[zones]] in the config)")
    # The command's one session: the audit reads its tables, ``keep`` writes through it
    # (closed there: reading queues nothing to commit).
    session = LakeSession.from_config(
        config.storage, privacy=PrivacyPolicy.from_config(config.privacy)
    )
    with interruptible("audit") as stop, open_api(config, abort=stop.event) as api:
        try:
            hours = stop.run(
                lambda: audit_hours(config, session, StatisticsApi(api), zones, first, last, now)
            )
        except StopRequested:
            say(f"cdnlake: interrupted ({stop.signal}): audit stopped; no verdict was kept")
            return 1
        except CdnlakeError as exc:
            print(
                "cdnlake: error: audit: the provider's statistics could not be read, so no "
                f"hour was judged: {exc}",
                file=sys.stderr,
            )
            return 1
    if args.format == "table":
        columns = COLUMNS[:-1]
        width = terminal_width(sys.stdout)
        rows = [row(h)[:-1] for h in hours]
        sys.stdout.write(render("table", columns, rows, width=width, wide=args.wide))
        for h in hours:
            if h.failed:
                line = f"zone {h.zone_id} {h.hour:%Y-%m-%d %H:00}: {h.verdict}: {h.advice}"
                print(wrap(line, width))
    else:
        sys.stdout.write(render(args.format, COLUMNS, [row(h) for h in hours]))
    try:  # whole days are kept for status, /metrics and the report
        with session:
            keep(session, hours, now)
    except CdnlakeError as exc:
        print(f"cdnlake: warning: audit: the days' verdicts were not kept: {exc}", file=sys.stderr)
    failed = [h for h in hours if h.failed]
    pending = sum(h.verdict == "pending" for h in hours)
    before = sum(h.verdict == "before" for h in hours)
    expired = sum(h.verdict == "expired" for h in hours)
    summary = (
        f"audit: {len(hours)} zone-hours, {len(failed)} short or missing, {pending} pending"
        + (f", {before} before cdnlake started (not audited)" if before else "")
        + (f", {expired} expired by [retention] (not audited)" if expired else "")
        + f" (tolerance {config.audit.tolerance:g})"
    )
    print(wrap(summary, terminal_width(sys.stderr)), file=sys.stderr)
    return 1 if failed else 0
