"""Logging API v2 as a source: time windows read in offset pages.

Each pass stores what the provider serves up to *now*, but moves the watermark only to
``now - lag_seconds``: the next pass reads the unstable tail again (from the watermark
less ``overlap_seconds``), and deduplication keeps every request once. Data is at most
one poll old; a window with no new rows still moves the watermark.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from cdnlake.client.logging_wire import V2Query, iso_utc
from cdnlake.ingest.decode import decode_v2_batch
from cdnlake.ingest.normalize import normalize_v2
from cdnlake.ingest.runner import Chunk, PassContext, RowBuffer, floor_ms, split_windows
from cdnlake.lake.progress import WATERMARK, to_ms
from cdnlake.lake.schema import REQUESTS

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
        start = ctx.read_start()
        end = floor_ms(ctx.now)  # everything the provider serves already
        stable = floor_ms(ctx.now - timedelta(seconds=cfg.lag_seconds))
        watermark = ctx.watermark()
        result.window_from, result.window_to, result.reached = start, end, watermark
        buffer = RowBuffer(self.spec, cfg.flush_rows)
        for window_from, window_to in split_windows(
            start, end, timedelta(seconds=cfg.max_window_seconds)
        ):
            ctx.check_stop()
            query = V2Query(from_=window_from, to=window_to, limit=cfg.page_size, order="asc")
            name = v2_query_name(window_from, window_to)
            for batch in self.client.iter_v2(ctx.zone_id, query, decode_v2_batch, result.stats):
                ctx.check_stop()
                result.pages += 1
                good, rejects = normalize_v2(batch.frame, ctx.zone_id, batch.pagination.offset)
                result.parsed += good.height
                ctx.store_rejects(rejects, "v2", name)
                chunk = buffer.add(good)
                if chunk is not None:
                    yield chunk  # rows of finished windows carry their watermark
            mark = min(window_to, stable)
            if watermark is None or mark > watermark:
                watermark = mark
            # Few, larger commits: the watermark of the windows read so far rides along
            # with the next commit of rows (or the pass's last commit, rows or not).
            buffer.progress = {WATERMARK: to_ms(watermark)}
        yield buffer.take()
