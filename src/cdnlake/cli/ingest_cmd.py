"""``cdnlake ingest`` and ``cdnlake import-v1``."""

from __future__ import annotations

import argparse
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdnlake.cli.common import is_tty, load, open_api, require_writable_root
from cdnlake.errors import UsageError
from cdnlake.ingest.result import ZoneResult, breakdown


class RichProgress:
    """One live row per zone on a terminal: rows, pages, window reached."""

    def __init__(self, zones: list[Any]) -> None:
        from rich.markup import escape
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._escape = escape
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            transient=True,  # the summaries printed after it say how each zone ended
        )
        self._tasks = {
            z.id: self._progress.add_task(
                escape(f"zone {z.label} [{z.source}]"), total=None, info=""
            )
            for z in zones
        }
        self._lock = threading.Lock()

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, result: ZoneResult) -> None:
        reached = result.reached.strftime("%Y-%m-%d %H:%M") if result.reached else "-"
        info = f"{result.rows:,} rows, {result.pages} pages, reached {reached}"
        with self._lock:
            self._progress.update(self._tasks[result.zone_id], info=info)

    def finished(self, result: ZoneResult) -> None:
        task = self._tasks.get(result.zone_id) if result.source != "shield" else None
        if task is None:
            return  # shield zones print their own line
        with self._lock:
            info = f"{result.outcome}: {result.rows:,} rows, {result.pages} pages"
            if result.error:
                info += f" - {result.error}"
            self._progress.update(task, info=self._escape(info), completed=1, total=1)


class LineProgress:
    """On a pipe: one summary line per zone, when it finishes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, result: ZoneResult) -> None:
        pass

    def finished(self, result: ZoneResult) -> None:
        with self._lock:
            print(result.summary(), flush=True)


def print_notes(results: list[ZoneResult]) -> None:
    import sys

    for r in results:
        for gap in r.gaps:
            print(
                f"WARNING zone {r.zone_id}: data lost from {gap.gap_from:%Y-%m-%d %H:%M:%SZ} "
                f"to {gap.gap_to:%Y-%m-%d %H:%M:%SZ}: {gap.reason}",
                file=sys.stderr,
            )
        for note in r.notes:
            print(f"WARNING zone {r.zone_id}: {note}", file=sys.stderr)


def ingest(args: argparse.Namespace) -> int:
    from cdnlake.client.logging_api import LoggingClient
    from cdnlake.client.shield import ShieldApi
    from cdnlake.ingest.passes import Ingestor, ingest_shield_zone
    from cdnlake.lake.session import LakeSession

    if args.span_from is not None or args.span_to is not None:
        return reread(args)
    config = load(args, default_level="WARNING")
    pull, shield_zones = config.select_all_zones(args.zone)
    zones = list(pull)
    if not zones and not shield_zones:
        raise UsageError("ingest: no zones configured ([[zones]] in the config file)")
    require_writable_root(config)
    progress = RichProgress(zones) if is_tty() else LineProgress()
    with open_api(config) as api, LakeSession.from_config(config.storage) as session:
        with progress:
            ingestor = Ingestor(config, LoggingClient(api), session, reporter=progress)
            results = ingestor.run(zones)
        if isinstance(progress, RichProgress):
            for r in results:
                print(r.summary())
        shield = ShieldApi(api)
        for shield_zone in shield_zones:
            results.append(
                ingest_shield_zone(config, shield, shield_zone, session, reporter=LineProgress())
            )
    print_notes(results)
    return 0 if all(r.ok for r in results) else 1


def parse_time(text: str, option: str) -> datetime:
    """An instant given on the command line: ISO 8601, UTC when it names no offset."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"ingest {option}: expected a time like 2026-11-23T05:00Z, got {text!r}"
        ) from None
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00+01:00: before year 1 in UTC
        raise UsageError(
            f"ingest {option}: {text!r} is outside the years 1 to 9999 in UTC"
        ) from None


def reread(args: argparse.Namespace) -> int:
    """``ingest --zone ID --from TIME --to TIME``: a past span of one zone read again."""
    from cdnlake.client.logging_api import LoggingClient
    from cdnlake.ingest.passes import Ingestor
    from cdnlake.ingest.reread import check_span
    from cdnlake.lake.session import LakeSession

    if args.span_from is None or args.span_to is None:
        raise UsageError("ingest: --from and --to go together")
    if not args.zone or len(args.zone) != 1:
        raise UsageError("ingest: --from/--to read a span of exactly one zone: give one --zone ID")
    start, end = parse_time(args.span_from, "--from"), parse_time(args.span_to, "--to")
    config = load(args, default_level="WARNING")
    zone = config.zone(args.zone[0])
    check_span(start, end, datetime.now(UTC))
    require_writable_root(config)
    with open_api(config) as api, LakeSession.from_config(config.storage) as session:
        ingestor = Ingestor(config, LoggingClient(api), session, reporter=LineProgress())
        result = ingestor.reread(zone, start, end)
    print_notes([result])
    return 0 if result.ok else 1


def import_v1(args: argparse.Namespace) -> int:
    from cdnlake.ingest.local_import import import_v1_files
    from cdnlake.lake.session import LakeSession

    config = load(args, default_level="WARNING")
    config.zone(args.zone)
    paths = [Path(f) for f in args.files]
    for path in paths:
        if not path.is_file():
            raise UsageError(f"import-v1: {path} is not a readable file")
    require_writable_root(config)

    def on_file(path: Path, result: ZoneResult) -> None:
        status = "ok" if result.ok else f"FAILED: {result.error}"
        print(
            f"{path}: {result.lines} lines, {result.rows} new rows, {result.duplicates} duplicates "
            f"dropped, {result.rejected_text()} - {status}",
            flush=True,
        )

    with LakeSession.from_config(config.storage) as session:
        total = import_v1_files(config, session, paths, args.zone, on_file=on_file)
    failed = [r for r in total.results if not r.ok]
    detail = f" ({breakdown(total.reasons)})" if total.reasons else ""
    print(
        f"imported {total.files} file(s) into zone {args.zone}: {total.lines} lines, "
        f"{total.rows} new rows, {total.duplicates} duplicates dropped, "
        f"{total.rejected} rejected{detail} (see rejected_lines), {total.blank} blank"
        + (f"; {len(failed)} file(s) FAILED" if failed else "")
    )
    print_notes(failed)
    return 1 if failed else 0
