"""Logging API v2 as a source: time windows read in offset pages.

Each span of time is read twice: once as soon as the provider serves it (*fresh*: data is
at most one poll old), and once more when it has become stable at ``now - lag_seconds``
(*complete*: the records that arrived late). A pass reads

- a slice of the safety margin ``overlap_seconds`` before the watermark, for records
  later than ``lag_seconds`` (``overlap_seconds`` of every hour in all, a slice a pass: see
  :func:`~cdnlake.ingest.runner.margin_slice`); it moves no progress;
- the stable span, from the watermark to ``now - lag_seconds``, and moves the watermark
  with it: a watermark never moves past data not in the lake;
- the fresh span, from where the zone's last fresh read ended (progress part ``FRESH``,
  committed with its rows) or the stable point, whichever is later, to now.

Windows are split at the stable point, so a stable window receives no record while its
offset pages are read; a fresh window can (late arrivals), but pages are read in time
order, where a record arriving before the page being read only repeats one already read,
and the stable read takes it. Deduplication keeps every request once; a window with no
new rows still moves the watermark.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from cdnlake.client.logging_wire import V2Query, iso_utc
from cdnlake.ingest.decode import decode_v2_batch
from cdnlake.ingest.normalize import normalize_v2
from cdnlake.ingest.runner import Chunk, PassContext, RowBuffer, floor_ms, split_windows
from cdnlake.lake.log.progress import FRESH, WATERMARK, from_ms, to_ms
from cdnlake.lake.log.schema import REQUESTS

if TYPE_CHECKING:
    from cdnlake.client.logging_api import LoggingClient


def v2_query_name(window_from: datetime, window_to: datetime) -> str:
    """How a v2 reject's query is named in ``rejected_lines.file``: it finds it again."""
    return f"api:v2?from={iso_utc(window_from)}&to={iso_utc(window_to)}"


class V2Source:
    kind = "v2"
    spec = REQUESTS
    noun = "records"

    def __init__(self, client: LoggingClient) -> None:
        self.client = client

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        cfg = ctx.config.ingest
        result = ctx.result
        end = floor_ms(ctx.now)  # everything the provider serves already
        stable = floor_ms(ctx.now - timedelta(seconds=cfg.lag_seconds))
        start = ctx.read_start()
        margin = ctx.margin(stable)
        watermark = ctx.watermark()
        fresh = max(stable, from_ms(ctx.progress(FRESH)) or stable)
        result.window_from = margin[0] if margin else start
        result.window_to, result.reached = end, watermark
        # The margin's new rows (before the watermark) came later than lag_seconds; with
        # lag_seconds = 0 the margin is all the lateness the zone allows, nothing later.
        behind = watermark if margin is not None and cfg.lag_seconds > 0 else None
        buffer = RowBuffer(self.spec, cfg.flush_rows, behind)
        span = timedelta(seconds=cfg.max_window_seconds)
        if margin is not None:  # read again: no progress moves with it
            for window_from, window_to in split_windows(*margin, span):
                yield from read_window(self.client, ctx, buffer, window_from, window_to)
        for window_from, window_to in split_windows(start, stable, span):
            yield from read_window(self.client, ctx, buffer, window_from, window_to)
            if watermark is None or window_to > watermark:
                watermark = window_to
            # Few, larger commits: the progress of the windows read so far rides along
            # with the next commit of rows (or the pass's last commit, rows or not).
            buffer.progress[WATERMARK] = to_ms(watermark)
        for window_from, window_to in split_windows(fresh, end, span):
            yield from read_window(self.client, ctx, buffer, window_from, window_to)
            buffer.progress[FRESH] = to_ms(window_to)
        yield buffer.take()


def read_window(
    client: LoggingClient,
    ctx: PassContext,
    buffer: RowBuffer,
    window_from: datetime,
    window_to: datetime,
) -> Iterator[Chunk]:
    """Every page of one window into ``buffer``; a chunk whenever it is full (with the
    progress ``buffer`` holds: none for a read that moves none). Shared by the passes and
    the re-read of a past span."""
    result = ctx.result
    ctx.check_stop()
    query = V2Query(from_=window_from, to=window_to, limit=ctx.config.ingest.page_size, order="asc")
    name = v2_query_name(window_from, window_to)
    for batch in client.iter_v2(ctx.zone_id, query, decode_v2_batch, result.stats):
        ctx.check_stop()
        result.pages += 1
        if batch.frame.height == 0:  # a quiet zone's window: nothing to normalise
            continue
        good, rejects = normalize_v2(batch.frame, ctx.zone_id, batch.pagination.offset)
        result.parsed += good.height
        ctx.store_rejects(rejects, "v2", name)
        chunk = buffer.add(good)
        if chunk is not None:
            yield chunk  # rows of finished windows carry their progress
