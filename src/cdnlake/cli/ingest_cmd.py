"""``cdnlake ingest`` and ``cdnlake import-v1``."""

from __future__ import annotations

import argparse
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdnlake.cli.common import (
    Interrupt,
    interruptible,
    is_tty,
    load,
    open_api,
    require_writable_root,
    say,
    say_retry,
)
from cdnlake.errors import UsageError
from cdnlake.ingest.result import ZoneResult, breakdown

if TYPE_CHECKING:
    from cdnlake.client.core import RetryNotice
    from cdnlake.config import Config


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
        self.seen: dict[int, ZoneResult] = {}  # the passes heard of so far, by zone

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, result: ZoneResult) -> None:
        reached = result.reached.strftime("%Y-%m-%d %H:%M") if result.reached else "-"
        info = f"{result.rows:,} rows, {result.pages} pages, reached {reached}"
        with self._lock:
            self.seen[result.zone_id] = result
            self._progress.update(self._tasks[result.zone_id], info=info)

    def retrying(self, notice: RetryNotice) -> None:
        """The zone's row says that its request waits on the provider, and for what."""
        task = self._tasks.get(notice.zone) if notice.zone is not None else None
        with self._lock:
            if task is None:
                self._progress.console.print(self._escape(f"cdnlake: {notice.text()}"))
            else:
                self._progress.update(task, info=self._escape(notice.text().split(": ", 1)[1]))

    def finished(self, result: ZoneResult) -> None:
        with self._lock:
            self.seen[result.zone_id] = result
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

    def __init__(self, json_lines: bool = False) -> None:
        self._lock = threading.Lock()
        self.seen: dict[int, ZoneResult] = {}  # the passes heard of so far, by zone
        self.json_lines = json_lines  # --log-format json: a JSON object per summary

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, result: ZoneResult) -> None:
        with self._lock:
            self.seen[result.zone_id] = result

    def finished(self, result: ZoneResult) -> None:
        with self._lock:
            self.seen[result.zone_id] = result
            print(summary_of(result, self.json_lines), flush=True)


def json_wanted(args: argparse.Namespace, config: Any) -> bool:
    """Whether summaries go as JSON objects: ``--log-format json``, else log.format."""
    return bool((getattr(args, "log_format", None) or config.log.format) == "json")


def summary_of(result: ZoneResult, json_lines: bool) -> str:
    if not json_lines:
        return result.summary()
    import json

    return json.dumps(result.record())


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
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy

    if args.span_from is not None or args.span_to is not None:
        return reread(args)
    config = load(args, default_level="WARNING")
    pull, shield_zones = config.select_all_zones(args.zone)
    zones = list(pull)
    if not zones and not shield_zones:
        raise UsageError("ingest: no zones configured ([[zones]] in the config file)")
    require_writable_root(config)
    as_json = json_wanted(args, config)
    progress = RichProgress(zones) if is_tty() and not as_json else LineProgress(as_json)
    total = len(zones) + len(shield_zones)

    def abandon() -> None:
        if isinstance(progress, RichProgress):
            progress.__exit__()
        say(interrupted_line(stop, list(progress.seen.values()), total))

    with (
        interruptible("ingest") as stop,
        open_api(config, abort=stop.event) as api,
        LakeSession.from_config(
            config.storage,
            privacy=PrivacyPolicy.from_config(config.privacy),
        ) as session,
    ):
        if isinstance(progress, RichProgress):
            api.on_retry = progress.retrying
        with progress:
            ingestor = Ingestor(
                config, LoggingClient(api), session, reporter=progress, stop=stop.event
            )
            results = stop.run(lambda: ingestor.run(zones), on_abandon=abandon)
        if isinstance(progress, RichProgress):
            api.on_retry = say_retry
            for r in results:
                print(r.summary())
        shield = ShieldApi(api)

        def shield_pass(zone: Any) -> ZoneResult:
            line = LineProgress(as_json)
            return stop.run(
                lambda: ingest_shield_zone(
                    config, shield, zone, session, reporter=line, stop=stop.event
                ),
                on_abandon=lambda: say(
                    interrupted_line(stop, results + list(line.seen.values()), total)
                ),
            )

        for shield_zone in shield_zones:
            if stop.is_set():
                break
            results.append(shield_pass(shield_zone))
    print_notes(results)
    if stop.is_set():
        say(interrupted_line(stop, results, total))
        return 1
    return 0 if all(r.ok or r.skipped for r in results) else 1


def interrupted_line(stop: Interrupt, results: list[ZoneResult], total: int) -> str:
    """What an interrupted ``ingest`` kept, in one line whose counts add up to ``total``:
    every zone is done, stopped (part way, its rows kept, or before it stored any),
    failed, skipped or not started."""
    last = {(r.source == "shield", r.zone_id): r for r in results}  # a zone once
    ended = [r for r in last.values() if r.finished is not None]
    done = sum(r.ok for r in ended)
    failed = sum(r.outcome == "failed" for r in ended)
    skipped = sum(r.skipped for r in ended)
    stopped = [
        r for r in last.values() if r.finished is None or r.outcome not in ("ok", "failed", "busy")
    ]
    part_way = sum(1 for r in stopped if r.rows)
    counts = [
        (done, "done"),
        (part_way, "stopped part way (their rows kept)"),
        (len(stopped) - part_way, "stopped before storing anything"),
        (failed, "failed"),
        (skipped, "skipped (another process ingests them)"),
        (total - len(last), "not started"),
    ]
    said = ", ".join(f"{n} {what}" for n, what in counts if n) or "0 done"
    rows = sum(r.rows for r in last.values())
    return (
        f"cdnlake: interrupted ({stop.signal}): of {total} zone(s), {said}; {rows:,} new rows "
        "committed in all, each zone up to its last whole commit; the next ingest reads on "
        "from there"
    )


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
    from cdnlake.cli.lake_cmd import writing
    from cdnlake.client.logging_api import LoggingClient
    from cdnlake.ingest.passes import Ingestor
    from cdnlake.ingest.reread import check_span
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy

    if args.span_from is None or args.span_to is None:
        raise UsageError("ingest: --from and --to go together")
    if not args.zone or len(args.zone) != 1:
        raise UsageError("ingest: --from/--to read a span of exactly one zone: give one --zone ID")
    start, end = parse_time(args.span_from, "--from"), parse_time(args.span_to, "--to")
    config = load(args, default_level="WARNING")
    zone = config.zone(args.zone[0])
    check_span(start, end, datetime.now(UTC))
    require_writable_root(config)
    with (
        interruptible("the re-read") as stop,
        writing(config, f"ingest --zone {zone.id} --from/--to", stop.is_set),
        open_api(config, abort=stop.event) as api,
        LakeSession.from_config(
            config.storage,
            privacy=PrivacyPolicy.from_config(config.privacy),
        ) as session,
    ):
        line = LineProgress(json_wanted(args, config))
        ingestor = Ingestor(config, LoggingClient(api), session, reporter=line, stop=stop.event)
        result = stop.run(
            lambda: ingestor.reread(zone, start, end),
            on_abandon=lambda: say(interrupted_line(stop, list(line.seen.values()), 1)),
        )
    print_notes([result])
    if stop.is_set():
        say(interrupted_line(stop, [result], 1))
        return 1
    return 0 if result.ok else 1


def import_v1(args: argparse.Namespace) -> int:
    """``import-v1 FILE...``; ``-`` reads one file from standard input (plain or gzip),
    copied under the work folder while it is imported and called ``-`` throughout."""
    from cdnlake.ingest.local_import import STDIN, stdin_copy

    if args.files.count(STDIN) > 1:
        raise UsageError("import-v1: - (standard input) can be given only once")
    config = load(args, default_level="WARNING")
    config.zone(args.zone)
    for name in args.files:
        if name != STDIN and not Path(name).is_file():
            raise UsageError(f"import-v1: {name} is not a readable file")
    if STDIN in args.files and sys.stdin.isatty():
        raise UsageError("import-v1: - reads a v1 file from standard input: pipe one in")
    require_writable_root(config)
    if STDIN not in args.files:
        return _import_v1(args, config, [Path(name) for name in args.files])
    with stdin_copy(config.storage.work, sys.stdin.buffer) as copy:
        paths = [copy if name == STDIN else Path(name) for name in args.files]
        return _import_v1(args, config, paths)


def _import_v1(args: argparse.Namespace, config: Config, paths: list[Path]) -> int:
    from cdnlake.ingest.local_import import file_zones, import_v1_files
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy

    labels = list(args.files)
    for path, label in zip(paths, labels, strict=True):  # up front: nothing stored yet
        zones = file_zones(path)
        if zones and args.zone not in zones:
            other, lines = zones.most_common(1)[0]
            raise UsageError(
                f"import-v1: {label} holds the logs of pull zone {other} ({lines:,} of its "
                f"first lines), not of zone {args.zone}: give --zone {other}"
            )

    def on_file(label: str, result: ZoneResult) -> None:
        status = "ok" if result.ok else f"FAILED: {result.error}"
        if result.ok and result.lines == result.blank:
            status += " (the file holds no log line: nothing to import)"
        print(
            f"{label}: {result.lines} lines, {result.rows} new rows, {result.duplicates} "
            f"duplicates dropped, {result.rejected_text()} - {status}",
            flush=True,
        )

    with (
        interruptible("import-v1") as stop,
        LakeSession.from_config(
            config.storage,
            privacy=PrivacyPolicy.from_config(config.privacy),
        ) as session,
    ):
        total = stop.run(
            lambda: import_v1_files(
                config,
                session,
                paths,
                args.zone,
                labels=labels,
                on_file=on_file,
                stop=stop.event,
            ),
            on_abandon=lambda: say(
                f"cdnlake: interrupted ({stop.signal}): the file being read keeps what it "
                "committed; importing it again adds only what is missing"
            ),
        )
    failed = [r for r in total.results if not r.ok]
    detail = f" ({breakdown(total.reasons)})" if total.reasons else ""
    print(
        f"imported {total.files} file(s) into zone {args.zone}: {total.lines} lines, "
        f"{total.rows} new rows, {total.duplicates} duplicates dropped, "
        f"{total.rejected} rejected{detail} (see rejected_lines), {total.blank} blank"
        + (f", {total.erased} held back (erased)" if total.erased else "")
        + (f"; {len(failed)} file(s) FAILED" if failed else "")
    )
    print_notes(failed)
    if stop.is_set():
        left = len(paths) - total.files
        cut = [r for r in total.results if r.outcome == "stopped"]
        say(
            f"cdnlake: interrupted ({stop.signal}): {total.files - len(cut)} file(s) imported "
            f"whole, {len(cut)} stopped part way (what it committed stays), {left} not started; "
            "importing them again adds only what is missing"
        )
        return 1
    return 1 if failed else 0
