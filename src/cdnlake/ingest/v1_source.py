"""v1 day files as sources: from the API (a zone's days in turn) and from local files.

API: a zone's day cursor (its first unfinished UTC day and the lines of it that are
settled) is a Delta application transaction, committed with the rows. A day file is in
time order, so a record that arrives late (up to ``lag_seconds``) is inserted among the
lines of its own time, not appended. The cursor of an open day therefore moves only over
lines that can no longer change: those before the first line at or after the stable point
(now - ``lag_seconds``). Each pass reads the open day from the cursor: the lines after the
stable point are stored at once and read again by the next pass (deduplication drops the
repeats), so a late record is stored by the next pass, and a pass reads only the last
``lag_seconds`` again, never the whole day. A day that has closed is read whole once more,
then left.

Local files (``import-v1``): every whole line a file holds is taken, even from a damaged
gzip file, whose loss is then recorded and failed loudly.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from cdnlake.errors import DamagedInputError, DataError, TransportError
from cdnlake.ingest.normalize import REJECT_SCHEMA
from cdnlake.ingest.runner import Chunk, PassContext, RowBuffer, floor_ms
from cdnlake.ingest.v1_parser import iter_parsed
from cdnlake.lake.log.progress import DAYS, WATERMARK, DayCursor, day_start, to_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.retention import RETENTION

if TYPE_CHECKING:
    from cdnlake.client.logging_api import LoggingClient

ONE_DAY = timedelta(days=1)


class V1DaySource:
    kind = "v1"
    spec = REQUESTS
    noun = "lines"

    def __init__(self, client: LoggingClient) -> None:
        self.client = client

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        cfg = ctx.config.ingest
        result = ctx.result
        stable = floor_ms(ctx.now - timedelta(seconds=cfg.lag_seconds))
        ctx.read_start()  # records a gap when the watermark is past retention
        first_day = (ctx.now - RETENTION).date()
        cursor = DayCursor.decode(ctx.progress(DAYS))
        if cursor is None or cursor.day < first_day:
            cursor = DayCursor(first_day)  # days the provider no longer keeps are gone
        watermark = ctx.watermark()
        result.window_from, result.window_to = day_start(cursor.day), stable
        result.reached = watermark
        day = cursor.day
        buffer = RowBuffer(self.spec, cfg.flush_rows)
        after = cursor
        while day <= ctx.now.date():
            ctx.check_stop()
            closed = day_start(day) + ONE_DAY <= stable  # every record of the day arrived
            # A closed day is read whole once more: belt and braces against a file that
            # was not strictly append-only.
            start = 0 if closed or day != cursor.day else cursor.lines
            settled = yield from self._read_day(ctx, day, start, None if closed else stable, buffer)
            if closed:
                after = DayCursor(day + ONE_DAY)
            elif after.day == day:
                # The first open day keeps the cursor: just after midnight the day before
                # is still open, and today (read too, for freshness) must not skip it.
                after = DayCursor(day, settled)
            mark = min(day_start(day) + ONE_DAY, stable)
            if watermark is None or mark > watermark:
                watermark = mark
            # The cursor and watermark ride with the next commit of rows (or the last).
            buffer.progress = {DAYS: after.encode(), WATERMARK: to_ms(watermark)}
            day += ONE_DAY
        yield buffer.take()

    def _read_day(
        self, ctx: PassContext, day: date, start: int, stable: datetime | None, buffer: RowBuffer
    ) -> Generator[Chunk, None, int]:
        """Download a day file from line ``start`` and store its rows; returns the lines
        settled (see :class:`OpenTail`). ``stable`` is None for a day that has closed.

        A body that arrived whole by HTTP's count but is no whole gzip file is fetched
        again: what it held is kept (duplicates are dropped), and the cursor only moves
        past a whole file.
        """
        name = f"api:v1:{day:%m-%d-%y}/{ctx.zone_id}.log"
        dest = ctx.config.storage.work / "downloads" / str(ctx.zone_id) / f"{day}-{start}.log"
        attempts = self.client.api.retry.max_attempts
        for attempt in range(1, attempts + 1):
            try:
                self.client.download_v1(
                    ctx.zone_id, day, dest, start=start or None, order="asc", stats=ctx.result.stats
                )
                ctx.result.pages += 1
                tail = OpenTail(start, stable)
                for numbered, rejects, _ in iter_parsed(
                    dest,
                    ctx.zone_id,
                    first_line=start + 1,
                    keep_unterminated=stable is None,
                    numbered=True,
                ):
                    ctx.check_stop()
                    good = numbered.drop("line_number")
                    ctx.result.parsed += good.height
                    ctx.store_rejects(tail.settle(numbered, rejects), "v1", name)
                    chunk = buffer.add(good)
                    if chunk is not None:
                        yield chunk
                return tail.settled
            except DamagedInputError as exc:
                ctx.result.stats.add("transport_errors")
                if attempt == attempts:
                    raise TransportError(
                        f"v1 file {name} arrived damaged {attempts} times: {exc}"
                    ) from None
                ctx.result.notes.append(f"{exc}; fetched again")
                ctx.result.stats.add("retries")
            finally:
                dest.unlink(missing_ok=True)
        raise AssertionError("unreachable")  # pragma: no cover


class OpenTail:
    """How far an open day file is settled: the lines before its first record at or after
    the stable point, up to the last record before it. Nothing can be inserted there any
    more: every record older than the stable point has arrived, and the file is in time
    order. (A rejected or blank line has no time: it is settled only when a settled record
    follows it.) Rejected lines are kept by their line number, so they are stored only
    once settled, where their number is final. A closed day (``stable`` None) is settled
    whole."""

    def __init__(self, start: int, stable: datetime | None) -> None:
        self.settled = start  # lines of the file, from its first, that are settled
        self.stable = stable
        self._open = False  # a record at or after the stable point was met
        self._held: list[pl.DataFrame] = []  # rejects past ``settled`` so far

    def settle(self, numbered: pl.DataFrame, rejects: pl.DataFrame) -> pl.DataFrame:
        """Take the next block's records (with line numbers) and rejects; return the
        rejects now settled."""
        if self.stable is None:
            return rejects
        if not self._open and numbered.height:
            lines = numbered["line_number"]
            fresh = lines.filter(numbered["ts"] >= self.stable)
            if fresh.len():
                self._open = True
                lines = lines.filter(lines < fresh.min())
            if lines.len():
                last = lines.max()
                assert isinstance(last, int)
                self.settled = max(self.settled, last)
        held = pl.concat([*self._held, rejects]) if self._held else rejects
        ready = held["line_number"] <= self.settled
        self._held = [held.filter(~ready)] if not self._open else []
        return held.filter(ready)


class V1FileSource:
    """One local v1 day file (plain or gzip, any size).

    ``label``: what ``rejected_lines.file`` and messages call it (default: its path), so
    that a copy of standard input is ``-``, never the temporary file it was read from."""

    kind = "v1-file"
    spec = REQUESTS
    noun = "lines"

    def __init__(self, path: Path, label: str | None = None) -> None:
        self.path = path
        self.label = str(path) if label is None else label

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        result = ctx.result
        buffer = RowBuffer(self.spec, ctx.config.ingest.flush_rows)
        result.pages = 1
        try:
            for good, rejects, counts in iter_parsed(self.path, ctx.zone_id):
                ctx.check_stop()
                result.lines += counts.lines
                result.blank += counts.blank
                result.parsed += good.height
                if good.height:
                    lo, hi = good["ts"].min(), good["ts"].max()
                    assert isinstance(lo, datetime) and isinstance(hi, datetime)
                    wf, wt = result.window_from, result.window_to
                    result.window_from = lo if wf is None else min(wf, lo)
                    result.window_to = hi if wt is None else max(wt, hi)
                ctx.store_rejects(rejects, "v1", self.label)
                chunk = buffer.add(good)
                if chunk is not None:
                    yield chunk
        except DamagedInputError as exc:
            yield buffer.take()  # the whole lines before the damage are kept
            self._record_damage(ctx, exc)
            raise
        except OSError as exc:
            raise DataError(f"cannot read {self.label}: {exc.strerror or exc}") from None
        result.reached = result.window_to
        yield buffer.take()

    def _damage_marker(self, ctx: PassContext, exc: DamagedInputError) -> None:
        """The damage as a row of ``rejected_lines`` (kind ``damaged file``)."""
        marker = pl.DataFrame(
            {
                "line_number": [exc.last_line + 1],
                "reason": [str(exc)],
                "raw_line": [""],
                "kind": ["damaged file"],
                "request_id": [None],
            },
            schema=REJECT_SCHEMA,
        )
        ctx.store_rejects(marker, "v1", self.label)

    def _record_damage(self, ctx: PassContext, exc: DamagedInputError) -> None:
        """The loss where ``rejected_lines``, ``ingest_gaps`` and ``status`` show it."""
        self._damage_marker(ctx, exc)
        last = ctx.result.window_to
        if last is None:
            return
        # A day file is in time order: the rest of its day is what the damage hides. It
        # is not lost where the lake holds it: the zone's passes read it, or a whole copy
        # of the file was imported.
        end = day_start(last.date()) + ONE_DAY
        whole = ctx.bookkeeping.read_whole(ctx.zone_id, self.kind, last)
        if whole or ctx.lake_holds(last, end):
            ctx.result.notes.append(
                f"{self.path.name}: nothing lost, the lake already holds the zone's rows "
                f"after {last.isoformat()}"
            )
        elif not ctx.claim_gap(
            last, end, f"{self.path.name} is damaged after line {exc.last_line}"
        ):
            ctx.result.notes.append(
                f"{self.path.name}: the rest of {last.date()} is not in the lake, but the "
                "provider still serves it: the zone's next pass or a whole copy reads it"
            )
