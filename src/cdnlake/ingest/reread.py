"""A past span of one pull zone read again (``cdnlake ingest --zone ID --from --to``).

What the provider's logging API still serves of ``[start, end)`` is read once more (v2:
the span's windows; v1: the day files that cover it, keeping only the span's rows) and
what the lake lacks is stored; repeats are dropped as in any pass. Its chunks carry no
progress: the zone's watermark, day cursor and fresh end stay where the zone's own passes
put them (each commit re-sets the watermark the table holds, never another). It runs as
a pass of its own (:class:`~cdnlake.ingest.runner.Runner`) but takes no zone lock, so
the zone's passes (a daemon's) go on beside it: its commits carry no progress and, like
the forwarding receiver's, are fenced (a rewind since it began refuses them) and
conflict-checked against concurrent commits, repeats dropped. Its ``ingest_runs`` row
says ``v2-reread`` or ``v1-reread``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl

from cdnlake.errors import DamagedInputError, TransportError, UsageError
from cdnlake.ingest.runner import Chunk, PassContext, RowBuffer, split_windows
from cdnlake.ingest.v1_parser import iter_parsed
from cdnlake.ingest.v2_source import read_window
from cdnlake.lake.log.progress import day_start
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.retention import oldest_served

if TYPE_CHECKING:
    from cdnlake.client.logging_api import LoggingClient

ONE_DAY = timedelta(days=1)


def check_span(start: datetime, end: datetime, now: datetime) -> None:
    """UsageError (one line) for a span that cannot be read again."""
    if start >= end:
        raise UsageError(f"ingest: --from {start:%Y-%m-%dT%H:%M:%SZ} is not before --to")
    if end > now:
        raise UsageError(f"ingest: --to {end:%Y-%m-%dT%H:%M:%SZ} is in the future")
    oldest = oldest_served(now)
    if start < oldest:
        raise UsageError(
            f"ingest: --from {start:%Y-%m-%dT%H:%M:%SZ} is past the provider's 3-day log "
            f"retention (it serves from {oldest:%Y-%m-%dT%H:%M:%SZ} on): that span cannot be "
            "read again"
        )


class RereadSource:
    """One zone's span ``[start, end)`` read again, from v2 or v1 as the zone is set."""

    spec = REQUESTS

    def __init__(self, client: LoggingClient, source: str, start: datetime, end: datetime) -> None:
        self.client = client
        self.v1 = source == "v1"
        self.kind = f"{source}-reread"
        self.noun = "lines" if self.v1 else "records"
        self.start, self.end = start, end

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        ctx.result.window_from, ctx.result.window_to = self.start, self.end
        buffer = RowBuffer(self.spec, ctx.config.ingest.flush_rows)
        if self.v1:
            yield from self._v1(ctx, buffer)
        else:
            span = timedelta(seconds=ctx.config.ingest.max_window_seconds)
            for window_from, window_to in split_windows(self.start, self.end, span):
                yield from read_window(self.client, ctx, buffer, window_from, window_to)
        last = buffer.take()  # no progress: only rows
        if last.rows.height:
            yield last

    def _v1(self, ctx: PassContext, buffer: RowBuffer) -> Iterator[Chunk]:
        """Each day file that covers the span, whole; only the span's rows are kept.
        Rejected lines are kept for a closed day only (an open day's line numbers may
        still change; the zone's own passes keep them once settled)."""
        stable = ctx.now - timedelta(seconds=ctx.config.ingest.lag_seconds)
        day = self.start.date()
        while day_start(day) < self.end:
            closed = day_start(day) + ONE_DAY <= stable
            yield from self._v1_day(ctx, buffer, day, closed)
            day += ONE_DAY

    def _v1_day(
        self, ctx: PassContext, buffer: RowBuffer, day: date, closed: bool
    ) -> Iterator[Chunk]:
        name = f"api:v1:{day:%m-%d-%y}/{ctx.zone_id}.log"
        # Its own file: re-reads of one zone may run at once (they take no lock).
        dest = (
            ctx.config.storage.work
            / "downloads"
            / str(ctx.zone_id)
            / f"{day}-reread-{ctx.result.run_id}.log"
        )
        attempts = self.client.api.retry.max_attempts
        for attempt in range(1, attempts + 1):
            ctx.check_stop()
            try:
                self.client.download_v1(ctx.zone_id, day, dest, order="asc", stats=ctx.result.stats)
                ctx.result.pages += 1
                # A damaged file is fetched again: its rows are only buffered once whole.
                frames = []
                for good, rejects, _ in iter_parsed(dest, ctx.zone_id, keep_unterminated=closed):
                    ctx.check_stop()
                    inside = good.filter((pl.col("ts") >= self.start) & (pl.col("ts") < self.end))
                    ctx.result.parsed += inside.height
                    if closed:
                        ctx.store_rejects(rejects, "v1", name)
                    frames.append(inside)
                for frame in frames:
                    chunk = buffer.add(frame)
                    if chunk is not None:
                        yield chunk
                return
            except DamagedInputError as exc:
                ctx.result.stats.add("transport_errors")
                if attempt == attempts:
                    raise TransportError(
                        f"v1 file {name} arrived damaged {attempts} times: {exc}"
                    ) from None
                ctx.result.stats.add("retries")
            finally:
                dest.unlink(missing_ok=True)
