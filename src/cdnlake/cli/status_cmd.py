"""``cdnlake status``: a health check per zone (exit 1 when any zone is unhealthy)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdnlake.config import Config
    from cdnlake.status import ZoneStatus


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0:  # a row stamped ahead of now: the zone is unhealthy, said so
        return "in the future"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _freshest(s: ZoneStatus) -> str:
    if s.freshest_row is None:
        return "-"
    return f"{s.freshest_row:%Y-%m-%d %H:%M:%S}Z ({_age(s.freshest_age_seconds)})"


def _forwarding(s: ZoneStatus) -> str:
    """ "live, last line 4s ago", "silent since ...", "silent, no line yet", "not configured"."""
    if s.forwarding is None:
        return "-"
    if s.forwarding == "live":
        return f"live, last line {_age(s.forwarded_age_seconds)} ago"
    if s.forwarding == "silent":
        if s.forwarded_at is None:
            return "silent, no line yet"
        return f"silent since {s.forwarded_at:%Y-%m-%d %H:%M:%S}Z"
    return s.forwarding


WIDTH = 80  # the compact table's columns; --wide takes what every column needs


def _last_run(s: ZoneStatus, now: datetime) -> str:
    if s.last_finished is None:
        return "-"
    return f"{s.last_outcome} {_age((now - s.last_finished).total_seconds())} ago"


def compact(statuses: list[ZoneStatus]) -> tuple[list[str], list[tuple[object, ...]]]:
    """What fits 80 columns: zone, source, lag, the last run's outcome and age, health."""
    now = datetime.now(UTC)
    columns = ["zone", "source", "lag", "last run", "health"]
    rows: list[tuple[object, ...]] = [
        (
            f"{s.zone_id} {s.name}".strip(),
            s.source,
            _age(s.lag_seconds),
            _last_run(s, now),
            "ok" if s.healthy else f"PROBLEM: {s.problem}",
        )
        for s in statuses
    ]
    return columns, rows


def wide(config: Config, statuses: list[ZoneStatus]) -> tuple[list[str], list[tuple[object, ...]]]:
    """Every column (``--wide``)."""
    columns = [
        "zone",
        "source",
        "watermark",
        "lag",
        "freshest row",
        "last run",
        "rejected",
        "rows today",
        "gaps 7d",
        "owner",
        "health",
    ]
    rows: list[tuple[object, ...]] = [
        (
            f"{s.zone_id} {s.name}".strip(),
            s.source,
            s.watermark.strftime("%Y-%m-%d %H:%M:%SZ") if s.watermark else "-",
            _age(s.lag_seconds),
            _freshest(s),
            f"{s.last_outcome} {s.last_finished:%Y-%m-%d %H:%M}Z" if s.last_finished else "-",
            s.last_rejected,
            s.rows_today,
            f"{s.gaps_7d} ({_age(s.lost_seconds_7d)} lost)" if s.gaps_7d else "0",
            s.owner or "-",
            "ok" if s.healthy else f"PROBLEM: {s.problem}",
        )
        for s in statuses
    ]
    # The forwarding column where it says something: a receiver configured, or a
    # zone's rows forwarded (to another daemon of the fleet).
    if config.forwarding.enabled or any(s.forwarded_at for s in statuses):
        columns.insert(columns.index("owner"), "forwarding")
        at = columns.index("forwarding")
        rows = [
            (*row[:at], _forwarding(s), *row[at:]) for row, s in zip(rows, statuses, strict=True)
        ]
    return columns, rows


def privacy_lines(config: Config, statuses: list[ZoneStatus]) -> str:
    """Where some zone's rows were stored under another [privacy] setting than the
    configured one: that setting, and per such zone the one its rows went through
    ("mixed ... until" while older rows went through another); nothing otherwise (the
    JSON has each zone's ``privacy`` always)."""
    from cdnlake.privacy import configured_setting

    pending = [s for s in statuses if s.privacy_pending]
    if not pending:
        return ""
    text = f"privacy: {configured_setting(config.privacy).describe()}\n"
    for s in pending:
        text += f"privacy: zone {s.zone_id} ({s.source}) stored: {s.privacy}\n"
    if any(s.privacy_rewritable for s in pending):
        return text + (
            "privacy: rows stored under another setting than the configured one: "
            "`cdnlake maintain --apply-privacy` rewrites the weaker ones\n"
        )
    return text + (
        "privacy: rows stored stronger than the configured setting stay so (what was "
        "removed cannot be given back): nothing to rewrite\n"
    )


SHOWN_DAYS = 3  # the days not imported that the compact table names, the rest counted


def _days(days: list[str], wide: bool) -> str:
    if wide or len(days) <= SHOWN_DAYS:
        return ", ".join(days)
    return ", ".join(days[:SHOWN_DAYS]) + f" and {len(days) - SHOWN_DAYS} more"


def archive_line(archive: dict[str, Any], wide: bool) -> str:
    """``31 days 2026-10-21..2026-11-20, 29 imported; not yet: ...; damaged: ...``."""
    if not archive["days"]:
        return "no day listed yet (run `cdnlake backfill`, or the daemon lists it)"
    text = (
        f"{archive['days']} day(s) {archive['first']}..{archive['last']}, "
        f"{archive['imported']} imported"
    )
    if archive["pending"]:
        text += f"; not yet: {_days(archive['pending'], wide)}"
    if archive["damaged"]:
        text += f"; DAMAGED part(s): {_days(archive['damaged'], wide)}"
    return text


def status(args: argparse.Namespace) -> int:
    from cdnlake.cli.common import load
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy
    from cdnlake.status import full_status
    from cdnlake.warehouse.output import render

    config = load(args, default_level="WARNING")
    config.require_zones("status")
    with LakeSession.from_config(
        config.storage, privacy=PrivacyPolicy.from_config(config.privacy)
    ) as session:
        statuses, fleet = full_status(config, session, max_lag_seconds=args.max_lag)
    if args.format == "json":
        json.dump([s.as_dict() for s in statuses], sys.stdout, indent=1)  # as /healthz
        sys.stdout.write("\n")
    else:
        from cdnlake.warehouse.output import terminal_width, wrap

        width = terminal_width(sys.stdout)
        lines: list[str] = []

        def say(text: str) -> None:  # prose: at the terminal's width (a pipe: one line)
            for line in text.splitlines():
                lines.append(wrap(line, width) + "\n")

        # Where the numbers come from: a config copied elsewhere moves the storage root.
        storage = config.storage
        say(f"lake: {storage.lake_location} (storage root {storage.root})")
        columns, rows = wide(config, statuses) if args.wide else compact(statuses)
        table_width = width if args.wide else WIDTH
        lines.append(
            render("table", columns, rows, width=table_width, hint="--format json has them all")
        )
        audits = [
            f"zone {s.zone_id} {a['day']} {a['verdict']} (ratio {a['ratio']:.6f})"
            for s in statuses
            if (a := s.last_audit) is not None
        ]
        if audits:  # the completeness audit's last day of each zone audited
            say(f"last audit: {'; '.join(audits)}")
        say(privacy_lines(config, statuses))
        for s in statuses:  # the archived days of each zone that names its archive
            if s.archive is not None:
                say(f"archive: zone {s.zone_id} {archive_line(s.archive, args.wide)}")
        kind = "daemons (PostgreSQL fleet)" if fleet.coordinated else "daemon"
        say(f"{kind}: {'; '.join(fleet.daemons) or 'none running'}")
        say(f"retention: {config.retention.describe()}")
        never = [str(s.zone_id) for s in statuses if s.problem == "never ingested"]
        if never:  # a config copied elsewhere moves the storage root: say where we looked
            say(
                f"never ingested into the lake at {config.storage.lake_location}: "
                f"zone {', '.join(never)} (storage.root in the config)"
            )
        sys.stdout.write("".join(lines))
    if fleet.problem:
        print(f"cdnlake: error: {fleet.problem}", file=sys.stderr)
        return 1
    return 0 if all(s.healthy for s in statuses) else 1
