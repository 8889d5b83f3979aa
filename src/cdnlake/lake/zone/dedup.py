"""Which of a zone's rows its table holds already, reading only where they can be.

The rows' zone-days and the files' ``ts`` statistics choose the files, their row groups'
statistics the parts read: the cost follows the window, not the table. The files of the
writer's own last commit are not read back (their keys are remembered). A file that does
not decode is set aside (:mod:`cdnlake.lake.zone.damage`); one that is gone (vacuumed
since the snapshot) makes the files be chosen again, once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import polars as pl

from cdnlake.errors import StorageError
from cdnlake.lake.log.schema import frame_of
from cdnlake.lake.log.store import logged_span
from cdnlake.lake.zone.damage import (
    BeforeMove,
    DamagedFile,
    Undecodable,
    drop,
    gone,
    moved_already,
    read_checked,
    set_aside,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

    from cdnlake.lake.log.delta_log import File
    from cdnlake.lake.log.table import LogTable

log = logging.getLogger(__name__)

# The data files of a zone (on some ISO days; every day where None), as the table is now.
Current = Callable[[int, list[str] | None], list["File"]]

# A repeat of a request may carry its time in seconds (some v1 exports) where the lake
# has milliseconds: look this much around the rows' time range for their keys.
TS_SLACK = timedelta(seconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Reads:
    """What finding the repeats read: data files, and rows of the row groups whose keys
    were read (both follow the window, not the table)."""

    files: int = 0
    keys: int = 0


class Dedup:
    """The repeats of one zone's rows in one exactly-once table."""

    def __init__(
        self, door: LogTable, before_move: BeforeMove, current: Current | None = None
    ) -> None:
        self.door = door  # the table's door: a damaged file leaves the table through it
        self.lake = door.lake
        self.spec = door.spec
        self.before_move = before_move  # the zone's rewind, before a damaged file moves
        # The zone's files on some days as the table is now, once a file is found gone.
        self.current: Current = current or self._current
        # The keys and times of the files the writer's last commit added, by path.
        self.remembered: dict[str, pl.DataFrame] = {}

    def new_rows(
        self, frame: pl.DataFrame, files: list[File], reads: Reads
    ) -> tuple[pl.DataFrame, list[DamagedFile]]:
        """The rows of ``frame`` whose key none of ``files`` holds, and the files among
        them that did not decode (set aside). Read with Arrow's Parquet reader alone: its
        dataset layer would import pandas, when installed, in every commit's process. A
        file gone twice (see the module docstring) is a StorageError."""
        try:
            return self._new_rows(frame, files, reads)
        except _Gone as missing:
            log.info(
                "%s: lake file %s is gone (vacuumed since the snapshot): choosing the "
                "files again from the table as it is now",
                self.spec.name,
                missing.path,
            )
        zone = int(frame[self.spec.zone_column][0])
        days = sorted(d.isoformat() for d in frame["date"].unique()) if self.spec.by_date else None
        try:
            return self._new_rows(frame, self.current(zone, days), reads)
        except _Gone as missing:
            raise StorageError(
                f"reading lake file {self.spec.name}/{missing.path}: not found in the lake's "
                "store, though the table as it is now names it; nothing of this commit "
                "was written"
            ) from None

    def _current(self, zone_id: int, days: list[str] | None) -> list[File]:
        """The zone's files (on ``days``) as the table's state has them once brought up
        to date (a file vacuumed since was removed by a commit the state now knows)."""
        return self.door.snapshot(zone_id, files=True, days=days).files or []

    def _new_rows(
        self, frame: pl.DataFrame, files: list[File], reads: Reads
    ) -> tuple[pl.DataFrame, list[DamagedFile]]:
        if frame.height == 0:
            return frame, []
        key = self.spec.key
        assert key is not None
        lo = frame["ts"].min()
        hi = frame["ts"].max()
        assert isinstance(lo, datetime) and isinstance(hi, datetime)
        lo, hi = lo - TS_SLACK, hi + TS_SLACK
        seen: list[pl.DataFrame] = []
        unread = []
        for action in files:
            if not _may_hold(action, lo, hi):
                continue
            remembered = self.remembered.get(unquote(action["path"]))
            if remembered is None:
                unread.append(action)
                continue
            near = remembered.filter(pl.col("ts").is_between(lo, hi))
            reads.keys += near.height
            seen.append(near.select(pl.col(key)))
        damaged: list[DamagedFile] = []
        if unread:  # (pyarrow is loaded only for these)
            read, damaged = self._read_keys(unread, key, lo, hi, reads)
            seen += read
        if not seen:
            return frame, damaged
        existing = pl.concat(seen)[key]
        return frame.filter(~pl.col(key).is_in(existing.implode())), damaged

    def _read_keys(
        self, actions: list[dict[str, Any]], key: str, lo: datetime, hi: datetime, reads: Reads
    ) -> tuple[list[pl.DataFrame], list[DamagedFile]]:
        """The keys near [lo, hi] of the files ``actions`` name, and those files that do
        not decode, set aside (a store that keeps failing raises, setting nothing aside)."""
        import pyarrow as pa  # loaded by the first commit that reads files, not by start-up

        files = self.lake.filesystem()
        seen: list[pl.DataFrame] = []
        undecodable: list[tuple[str, Undecodable]] = []
        orphans: list[str] = []  # set aside by a process that died before their removal
        for action in actions:
            path = unquote(action["path"])
            name = f"{self.spec.name}/{path}"
            reads.files += 1
            try:
                keys, rows = _keys_near(files, name, key, lo, hi)
            except (OSError, pa.ArrowException) as exc:
                if moved_already(files, self.spec.name, path):
                    orphans.append(path)
                    continue
                if gone(files, name):
                    raise _Gone(path) from None
                checked = read_checked(files, name, [key], exc, name)
                if isinstance(checked, Undecodable):
                    undecodable.append((path, checked))
                    continue
                keys, rows = checked, checked.num_rows  # all its keys: more than needed
            reads.keys += rows
            # as a frame: no detour through pyarrow.compute
            seen.append(frame_of(keys).select(pl.col(key).cast(pl.String)))
        if not (undecodable or orphans):
            return seen, []
        table = self.lake.open(self.spec)  # a delta-rs table for their statistics alone
        assert table is not None
        damaged = [
            set_aside(self.lake, self.spec, table, p, u.reason, self.before_move)
            for p, u in undecodable
        ]
        drop(self.door, [*orphans, *(d.path for d in damaged)])
        return seen, damaged


class _Gone(Exception):
    """A file the snapshot names is not in the store (vacuumed since)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def _may_hold(action: dict[str, Any], lo: datetime, hi: datetime) -> bool:
    """Whether a file's logged ``ts`` range meets [lo, hi] (a file without one may)."""
    span = logged_span(action)
    return span is None or bool(span[0] <= hi and span[1] > lo)


def _keys_near(
    files: pafs.FileSystem, path: str, key: str, lo: datetime, hi: datetime
) -> tuple[pa.Table, int]:
    """The keys of a data file's row groups whose ``ts`` statistics meet [lo, hi], and
    how many rows those groups hold. Statistics are compared raw (microseconds since the
    epoch, as the lake stores ``ts``): Arrow boxes a timestamp statistic through pandas."""
    import pyarrow.parquet as pq

    low, high = _epoch_us(lo), _epoch_us(hi)
    with files.open_input_file(path) as source:
        parquet = pq.ParquetFile(source)
        meta = parquet.metadata
        ts = next(i for i in range(meta.num_columns) if meta.schema.column(i).path == "ts")
        in_us = '"timeUnit":"microseconds"' in meta.schema.column(ts).logical_type.to_json()
        groups = []
        for number in range(meta.num_row_groups):
            stats = meta.row_group(number).column(ts).statistics
            known = in_us and stats is not None and stats.has_min_max
            if not known or (stats.min_raw <= high and stats.max_raw >= low):
                groups.append(number)
        rows = sum(meta.row_group(number).num_rows for number in groups)
        return parquet.read_row_groups(groups, columns=[key]), rows


def _epoch_us(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)
