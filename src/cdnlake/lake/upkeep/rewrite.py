"""A zone's data files removed, or rewritten without some rows: retention and erasure.

A rewrite is a commit of the zone like any other (:mod:`cdnlake.lake.zone.writer`): fenced,
through the door, carrying the zone's progress unchanged, so it conflicts with every other
commit of the zone. It removes the files it read, only while they are all still in the
table. Files never change, so a rewrite prepared again reads only the files new since.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from urllib.parse import unquote

import polars as pl

from cdnlake.errors import (
    CdnlakeError,
    DataError,
    FencedError,
    StorageError,
    ZoneBusyError,
    first_line,
)
from cdnlake.lake.log.delta_log import Removal
from cdnlake.lake.log.progress import FENCE
from cdnlake.lake.log.retry import retrying
from cdnlake.lake.log.schema import TableSpec, conform, frame_of, polars_schema
from cdnlake.lake.log.table import Prepared
from cdnlake.lake.zone.dedup import Reads
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import Plan, Written, ZoneWriter, _Attempt

ATTEMPTS = 10  # rewrites begun again after the zone was fenced or kept busy meanwhile
Match = Callable[[pl.DataFrame], pl.Series]  # the rows of a file that go


class NothingToRewrite(CdnlakeError):
    """No file of the zone holds a row that goes, and the rewrite carries no progress."""


def day_of(path: str) -> date | None:
    """A data file's UTC day, from its partition folder (``.../date=2026-11-20/...``)."""
    for part in unquote(path).split("/"):
        if part.startswith("date="):
            return date.fromisoformat(part[5:])
    return None


class Rewriter(ZoneWriter):
    """One zone's rewrite: the files of ``days`` (every day where None) that ``chooses``
    picks; of each, the rows ``match`` finds go (the whole file without ``match``)."""

    def __init__(
        self,
        session: LakeSession,
        spec: TableSpec,
        zone_id: int,
        *,
        chooses: Callable[[date | None], bool],
        match: Match | None = None,
        days: list[str] | None = None,
    ) -> None:
        super().__init__(session, spec, zone_id)
        self.chooses = chooses
        self.match = match
        self.days = days
        # path: the rows kept (None: no match) and the number removed
        self._read: dict[str, tuple[pl.DataFrame | None, int]] = {}

    def _prepare(
        self,
        frame: pl.DataFrame,
        progress: Plan,
        rewinding: bool,
        reads: Reads,
        received: pl.DataFrame | None = None,  # (no rows come in: nothing received)
    ) -> _Attempt:
        snapshot = self.table.snapshot(self.zone_id, files=True, days=self.days)
        if (snapshot.mark(FENCE) or 0) > self.token:
            raise self._fenced()
        removals: list[Removal] = []
        kept: list[pl.DataFrame] = []
        removed = 0
        for file in snapshot.files or []:
            day = day_of(file["path"])
            if not self.chooses(day):
                continue
            if self.match is not None:
                rest, gone = self._rest(file["path"], day)
                if rest is None:
                    continue
                if rest.height:
                    kept.append(rest)
                removed += gone
            partition: dict[str, str | None] = {self.spec.zone_column: str(self.zone_id)}
            if self.spec.by_date:
                partition["date"] = day.isoformat() if day else None
            removals.append(Removal(file["path"], partition))
        if not removals and not progress:
            raise NothingToRewrite(f"zone {self.zone_id}: nothing to rewrite")
        new = pl.concat(kept) if kept else pl.DataFrame(schema=polars_schema(self.spec.schema))
        versions = self._versions(progress, False, snapshot)
        actions, written_kept = self._write(new)
        share = Prepared(
            self.zone_id, snapshot.version, actions, self._transactions(versions), removals
        )
        days = {day_of(r.path) for r in removals}
        written = Written(
            removed=removed,
            files_removed=len(removals),
            days_removed={d for d in days if d is not None},
            reads=reads,
        )
        return _Attempt(share, snapshot, versions, new.clear(), written_kept, written)

    def _rest(self, path: str, day: date | None) -> tuple[pl.DataFrame | None, int]:
        """The rows of a file that stay (None when none goes) and how many go; read once."""
        if path not in self._read:
            rows = self._rows(path, day)
            assert self.match is not None
            goes = self.match(rows).fill_null(False)
            gone = int(goes.sum())
            self._read[path] = (rows.filter(~goes) if gone else None), gone
        return self._read[path]

    def _rows(self, path: str, day: date | None) -> pl.DataFrame:
        """A data file's rows, with its partition values, as the table stores them."""
        import pyarrow.parquet as pq

        lake = self.session.lake
        try:
            table = pq.read_table(f"{self.spec.name}/{unquote(path)}", filesystem=lake.filesystem())
        except OSError as exc:
            raise StorageError(
                f"cannot read {self.spec.name}/{path}: {first_line(exc)}; nothing was rewritten"
            ) from None
        except Exception as exc:  # not Parquet: maintain's check sets it aside
            raise DataError(
                f"{self.spec.name}/{path} does not decode ({first_line(exc)}); run "
                "`cdnlake maintain --check-all`, then this again"
            ) from None
        zone = pl.lit(self.zone_id, pl.Int64).alias(self.spec.zone_column)
        frame = frame_of(table).with_columns(zone)
        if self.spec.by_date:
            frame = frame.with_columns(pl.lit(day, pl.Date).alias("date"))
        missing = [c for c in self.spec.schema if c not in frame.columns]
        if missing:  # a file older than a column the table gained
            frame = frame.with_columns(pl.lit(None).alias(c) for c in missing)
        return conform(frame, self.spec.schema)


def rewrite(make: Callable[[], Rewriter], progress: dict[str, int]) -> Written:
    """Commit one zone's rewrite (``make`` builds its writer), begun again with a new
    writer when the zone was fenced (a new holder took it) or kept busy meanwhile; what
    it did. Nothing is committed when there is nothing to remove and no progress."""
    for attempt in retrying("rewrite", on=(FencedError, ZoneBusyError), attempts=ATTEMPTS):
        with attempt:
            writer = make()
            try:
                return writer.commit(writer.empty(), progress)
            except NothingToRewrite:
                return Written()
    raise AssertionError("unreachable")
