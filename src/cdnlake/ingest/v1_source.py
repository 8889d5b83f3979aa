"""v1 day files as sources: from the API (a zone's days in turn) and from local files.

API: a zone's day cursor (its first unfinished UTC day and the lines taken from it) is
a Delta application transaction, committed with the rows. An open day is read from the
first line not yet taken; a day that has closed is read whole once more, then left.

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
from cdnlake.ingest.runner import RETENTION, Chunk, PassContext, RowBuffer, floor_ms
from cdnlake.ingest.v1_parser import iter_parsed
from cdnlake.lake.progress import DAYS, WATERMARK, DayCursor, day_start, to_ms
from cdnlake.lake.schema import REQUESTS

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
        while day <= ctx.now.date():
            ctx.check_stop()
            closed = day_start(day) + ONE_DAY <= stable  # every record of the day arrived
            # A closed day is read whole once more: belt and braces against a file that
            # was not strictly append-only.
            start = 0 if closed or day != cursor.day else cursor.lines
            taken = yield from self._read_day(ctx, day, start, closed, buffer)
            after = DayCursor(day + ONE_DAY) if closed else DayCursor(day, start + taken)
            mark = min(day_start(day) + ONE_DAY, stable)
            if watermark is None or mark > watermark:
                watermark = mark
            # The cursor and watermark ride with the next commit of rows (or the last).
            buffer.progress = {DAYS: after.encode(), WATERMARK: to_ms(watermark)}
            day += ONE_DAY
        yield buffer.take()

    def _read_day(
        self, ctx: PassContext, day: date, start: int, closed: bool, buffer: RowBuffer
    ) -> Generator[Chunk, None, int]:
        """Download a day file from line ``start`` and parse it; returns the lines taken.

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
                taken = 0
                for good, rejects, counts in iter_parsed(
                    dest, ctx.zone_id, first_line=start + 1, keep_unterminated=closed
                ):
                    ctx.check_stop()
                    taken += counts.lines
                    ctx.result.parsed += good.height
                    ctx.store_rejects(rejects, "v1", name)
                    chunk = buffer.add(good)
                    if chunk is not None:
                        yield chunk
                return taken
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


class V1FileSource:
    """One local v1 day file (plain or gzip, any size)."""

    kind = "v1-file"
    spec = REQUESTS
    noun = "lines"

    def __init__(self, path: Path) -> None:
        self.path = path

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
                ctx.store_rejects(rejects, "v1", str(self.path))
                chunk = buffer.add(good)
                if chunk is not None:
                    yield chunk
        except DamagedInputError as exc:
            yield buffer.take()  # the whole lines before the damage are kept
            self._record_damage(ctx, exc)
            raise
        except OSError as exc:
            raise DataError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        result.reached = result.window_to
        yield buffer.take()

    def _record_damage(self, ctx: PassContext, exc: DamagedInputError) -> None:
        """The loss where ``rejected_lines``, ``ingest_gaps`` and ``status`` show it."""
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
        ctx.store_rejects(marker, "v1", str(self.path))
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
