"""Where a process's traffic counters learn what its commits stored: a landed commit's newly
stored ``requests`` rows, told once to the sink its session holds (it lives in
``monitoring/``, which the lake never imports).
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
