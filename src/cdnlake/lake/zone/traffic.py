"""Where a process's traffic counters learn what its commits stored.

The lake knows the one moment a request is counted: when a commit that newly stores it
(after deduplication) has landed, whichever path made the commit (a pass, forwarding, an
import, an archive). A process that counts its traffic (the daemon serving /metrics)
gives its :class:`~cdnlake.lake.zone.session.LakeSession` a sink; the session tells it the rows
of every landed commit of the ``requests`` table. The lake does not know what the sink
does with them (it lives in ``monitoring/``, which the lake never imports).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import polars as pl


class TrafficSink(Protocol):
    def stored(self, zone_id: int, rows: pl.DataFrame, *, counted_as: str | None = None) -> None:
        """``rows`` (the ``requests`` table's columns) were newly stored for ``zone_id`` by
        one commit that landed; ``counted_as``: the source they count under instead of each
        row's own (``archive`` for an archive import, whose rows are v1 lines). Called once
        per such commit, from the committing thread; never for a commit that was sent
        back, lost its race or failed, nor for rows the table already held."""
        ...
