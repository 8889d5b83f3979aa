"""``cdnlake backfill --zone ID [--from D --to D]``: a zone's archive into the lake.

Exit 0 when every closed part of the days is in the lake; 1 when a part failed, is
damaged (now or before: what its whole lines held is kept) or the run was interrupted
(what is committed stays; a rerun goes on from there); 2 for bad usage or configuration,
the storage zone refusing the password or holding nothing under the zone's folder included.
"""

from __future__ import annotations

import argparse
import threading
import time
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

from cdnlake.errors import ConfigError, StopRequested, UnauthorizedError, UsageError

if TYPE_CHECKING:
    from cdnlake.ingest.archive_parts import Part
    from cdnlake.ingest.backfill import BackfillResult, Listing, PartDone
    from cdnlake.ingest.result import ZoneResult


def _day(text: str, option: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"backfill {option}: expected YYYY-MM-DD, got {text!r}") from None


def parse_days(args: argparse.Namespace, today: date) -> tuple[date | None, date | None]:
    if bool(args.from_day) != bool(args.to_day):
        raise UsageError("backfill: --from and --to go together")
    if not args.from_day:
        return None, None
    first, last = _day(args.from_day, "--from"), _day(args.to_day, "--to")
    if first > last:
        raise UsageError(f"backfill: --from {first} is after --to {last}")
    if first > today:
        raise UsageError(f"backfill: {first} is in the future")
    return first, last


def _rate(count: float, seconds: float) -> str:
    per = count / seconds if seconds > 0 else 0.0
    return (
        f"{per / 1e6:.2f}M" if per >= 1e6 else f"{per / 1e3:.0f}k" if per >= 1e3 else f"{per:.0f}"
    )


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class _Pace:
    """Parts, rows and bytes so far, for a rate and the time left (by bytes: a part's
    lines are not known before it is read). Bytes done only grow, up to the total: the
    part being read counts at most its own size."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.total_parts = 0
        self.total_bytes = 0
        self.done_parts = 0
        self.done_bytes = 0
        self.done_lines = 0
        self.read_bytes = 0  # of the parts done that gave lines: bytes a line
        self.read_lines = 0
        self.rows = 0
        self.current_size = 0
        self.current_lines = 0
        self.current_rows = 0

    def listed(self, listing: Listing) -> None:
        self.total_parts, self.total_bytes = len(listing.todo), listing.todo_bytes

    def reading(self, part: Part, result: ZoneResult) -> None:
        self.current_size = part.size
        self.current_lines, self.current_rows = result.lines, result.rows

    def finished(self, part: Part, result: ZoneResult) -> None:
        self.done_parts += 1
        self.done_bytes += part.size
        self.done_lines += result.lines
        if result.lines:  # a part that failed before its lines says nothing of their size
            self.read_bytes += part.size
            self.read_lines += result.lines
        self.rows += result.rows
        self.current_size = self.current_lines = self.current_rows = 0

    def skipped(self, part: Part) -> None:
        """Another run imported it: out of what is left to do."""
        self.total_parts -= 1
        self.total_bytes -= part.size

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def bytes_done(self) -> float:
        """Bytes read, the part in reading counted by its lines at the bytes a line so
        far (never past its size)."""
        per_line = self.read_bytes / self.read_lines if self.read_lines else 0.0
        current = min(self.current_lines * per_line, self.current_size)
        return min(self.done_bytes + current, max(self.total_bytes, self.done_bytes))

    def left(self) -> float | None:
        done = self.bytes_done()
        if done <= 0 or self.total_bytes <= 0:
            return None
        return self.elapsed() * max(0, self.total_bytes - done) / done

    def line(self) -> str:
        lines = self.done_lines + self.current_lines
        return (
            f"{self.done_parts}/{self.total_parts} parts, "
            f"{self.rows + self.current_rows:,} new rows, {_rate(lines, self.elapsed())} lines/s, "
            f"about {_clock(self.left())} left"
        )


class LineProgress:
    """On a pipe: one line per part as it ends."""

    def __init__(self) -> None:
        self.pace = _Pace()
        self._lock = threading.Lock()

    def listed(self, listing: Listing) -> None:
        self.pace.listed(listing)
        print(_listing_line(listing), flush=True)

    def reading(self, part: Part, result: ZoneResult) -> None:
        self.pace.reading(part, result)

    def part_done(self, done: PartDone, index: int) -> None:
        with self._lock:
            self.pace.finished(done.part, done.result)
            print(f"{_part_line(done)} [{self.pace.line()}]", flush=True)

    def skipped(self, part: Part) -> None:
        with self._lock:
            self.pace.skipped(part)
            print(f"{part.path}: {SKIPPED} [{self.pace.line()}]", flush=True)


class RichProgress:
    """On a terminal: a bar by bytes, with parts, rows, rate and time left."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, Progress, TextColumn

        self.pace = _Pace()
        self._progress = Progress(
            TextColumn("backfill"), BarColumn(), TextColumn("{task.fields[info]}"), transient=True
        )
        self._task = self._progress.add_task("backfill", total=None, info="listing")

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def listed(self, listing: Listing) -> None:
        self.pace.listed(listing)
        self._progress.console.print(_listing_line(listing))
        self._progress.update(self._task, total=max(listing.todo_bytes, 1), info=self.pace.line())

    def reading(self, part: Part, result: ZoneResult) -> None:
        self.pace.reading(part, result)
        self._show()

    def part_done(self, done: PartDone, index: int) -> None:
        self.pace.finished(done.part, done.result)
        if not done.result.ok:
            self._progress.console.print(_part_line(done))
        self._show()

    def skipped(self, part: Part) -> None:
        self.pace.skipped(part)
        self._progress.update(self._task, total=max(self.pace.total_bytes, 1))
        self._show()

    def _show(self) -> None:
        self._progress.update(self._task, completed=self.pace.bytes_done(), info=self.pace.line())


SKIPPED = "imported meanwhile by another run (the daemon's archive job?): not read here"


def _listing_line(listing: Listing) -> str:
    days = sorted(listing.days)
    span = f"{days[0]}..{days[-1]}" if days else "no day"
    return (
        f"archive: {len(days)} day(s) {span}: {len(listing.closed)} closed part(s), "
        f"{len(listing.done)} imported before, {len(listing.todo)} to import "
        f"({listing.todo_bytes / 1e6:,.1f} MB), {len(listing.open)} open (left for later), "
        f"{len(listing.damaged)} damaged"
    )


def _part_line(done: PartDone) -> str:
    r = done.result
    status = "ok" if r.ok else f"{r.outcome.upper()}: {r.error}"
    return (
        f"{done.part.path}: {r.lines:,} lines, {r.rows:,} new rows, {r.duplicates:,} "
        f"duplicates dropped, {r.rejected_text()} - {status}"
    )


def summary(zone_id: int, result: BackfillResult) -> str:
    listing = result.listing
    failed = result.failed
    dups = sum(p.result.duplicates for p in result.parts)
    rejected = sum(p.result.rejected for p in result.parts)
    erased = sum(p.result.erased for p in result.parts)
    imported = sum(p.result.ok for p in result.parts)
    text = (
        f"backfill zone {zone_id}: {imported} part(s) imported now, "
        f"{len(listing.done) + len(result.skipped)} before, "
        f"{len(listing.open)} open (left for later); {result.lines:,} lines, "
        f"{result.rows:,} new rows, {dups:,} duplicates dropped, {rejected:,} rejected "
        f"(see rejected_lines)"
        + (f", {erased:,} held back (erased)" if erased else "")
        + f" in {result.seconds:.1f}s"
    )
    if failed:
        text += f"; {len(failed)} part(s) FAILED"
    return text


def backfill(args: argparse.Namespace) -> int:
    from cdnlake.cli.common import (
        interruptible,
        is_tty,
        load,
        open_api,
        require_writable_root,
        say,
    )
    from cdnlake.cli.lake_cmd import writing
    from cdnlake.ingest.archive_client import archive_store
    from cdnlake.ingest.backfill import Backfill
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy

    first, last = parse_days(args, datetime.now(UTC).date())
    config = load(args, default_level="WARNING")
    zone = config.zone(args.zone)
    index = config.zones.index(zone)
    if zone.archive is None:
        raise ConfigError(
            f"zones[{index}].archive: zone {zone.id} names no archive; add "
            'archive = { storage_zone = "...", folder = "...", password_env = "..." } '
            "to its [[zones]] table"
        )
    password = zone.archive.require_password(f"zones[{index}].archive.password_env")
    require_writable_root(config)
    progress: LineProgress | RichProgress = RichProgress() if is_tty() else LineProgress()
    with (
        interruptible("the backfill") as stop,
        writing(config, f"backfill --zone {zone.id}", stop.is_set),
        open_api(config, require_key=False, abort=stop.event) as api,
        LakeSession.from_config(
            config.storage, privacy=PrivacyPolicy.from_config(config.privacy)
        ) as session,
    ):
        span = f"{first} to {last}" if first and last else "every day it holds"
        # From the first second: listing a year's month folders takes seconds.
        print(
            f"backfill: zone {zone.id}: listing its archive in storage zone "
            f"{zone.archive.storage_zone} ({span})...",
            flush=True,
        )
        store = archive_store(api, zone.archive, password)
        job = Backfill(config, session, store, zone, progress=progress, stop=stop.event)
        try:
            listing = stop.run(lambda: job.listing(first, last))
        except UnauthorizedError as exc:  # the configured password: exit 2, one line
            raise ConfigError(f"zones[{index}].archive: {exc}") from None
        except StopRequested:
            say(f"cdnlake: interrupted ({stop.signal}) while listing the archive: nothing imported")
            return 1
        cut = (
            "cdnlake: interrupted ({}): the part being read keeps what it committed; "
            "parts imported whole are not read again; run backfill again to finish"
        )
        if isinstance(progress, RichProgress):
            with progress:
                result = stop.run(
                    lambda: job.run(listing), on_abandon=lambda: say(cut.format(stop.signal))
                )
        else:
            result = stop.run(
                lambda: job.run(listing), on_abandon=lambda: say(cut.format(stop.signal))
            )
    print(summary(zone.id, result))
    for part, line in result.listing.damaged:
        say(
            f"cdnlake: zone {zone.id}: archived part {part.path} is damaged after line "
            f"{line}: its whole lines are in the lake, the rest is not (see rejected_lines); "
            "it is read again only if the archive's copy changes"
        )
    for done in result.failed:
        say(f"cdnlake: zone {zone.id}: {_part_line(done)}")
    if stop.is_set() or result.stopped:
        say(cut.format(stop.signal or "stopped"))
        return 1
    return 0 if result.ok else 1
