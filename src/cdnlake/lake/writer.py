"""Merging new rows into the lake, exactly once and crash-safe.

Rows are first collected per target hour file (spilled to a staging folder when large,
so memory stays bounded whatever the input size). ``commit`` then rewrites each touched
hour file as old rows plus the new ``request_id``s, sorted, into a temporary sibling that
is fsynced and renamed over the old file. A reader, or a process killed at any instant,
sees either the old file or the new one, never both and never half of one.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl

from cdnlake.errors import DataError
from cdnlake.lake.check import DamagedFile, quarantine
from cdnlake.lake.layout import REQUEST_SCHEMA, fsync_dir, hour_file, tmp_sibling, zone_dir

log = logging.getLogger(__name__)

DEFAULT_SPILL_ROWS = 250_000
MERGE_WORKERS = 2
LARGE_MERGE_ROWS = 150_000  # hours bigger than this are merged one at a time (memory)
Key = tuple[date, int]


def write_parquet_atomic(frame: pl.DataFrame, path: Path) -> None:
    """Write ``frame`` to ``path`` via a temporary sibling, fsync, and rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_sibling(path)
    try:
        frame.write_parquet(tmp, compression="zstd", compression_level=1, statistics=True)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def read_lake_file(path: Path, columns: list[str] | None = None) -> pl.DataFrame:
    try:
        return pl.read_parquet(path, columns=columns)
    except Exception as exc:  # polars raises several kinds for a damaged file
        raise DataError(f"lake file {path} is unreadable: {exc}") from None


def conform(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Exactly the schema's columns, in order and type."""
    exprs = [
        (pl.col(name) if name in frame.columns else pl.lit(None)).cast(dtype).alias(name)
        for name, dtype in schema.items()
    ]
    return frame.select(exprs)


def hour_parts(frame: pl.DataFrame) -> Iterator[tuple[Key, pl.DataFrame]]:
    """The frame's rows by UTC hour of ``ts``.

    Log files and pages come in time order, so hours are usually runs of rows: those are
    sliced without a copy. Anything else is partitioned by hashing.
    """
    hours = frame["ts"].dt.epoch("ms") // 3_600_000
    if hours.null_count() == 0 and hours.is_sorted():
        offset = 0
        for length, hour in hours.rle().struct.unnest().iter_rows():
            moment = datetime.fromtimestamp(hour * 3600, UTC)
            yield (moment.date(), moment.hour), frame.slice(offset, length)
            offset += length
        return
    keyed = frame.with_columns(
        pl.col("ts").dt.date().alias("_day"), pl.col("ts").dt.hour().alias("_hour")
    )
    for (day, hour), part in keyed.partition_by(["_day", "_hour"], as_dict=True).items():
        yield (day, int(hour)), part.drop("_day", "_hour")  # type: ignore[misc,arg-type]


@dataclass
class MergeResult:
    rows_in: int = 0
    rows_new: int = 0
    files_written: list[Path] = field(default_factory=list)
    damaged: list[DamagedFile] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return self.rows_in - self.rows_new

    def add(self, other: MergeResult) -> None:
        self.rows_in += other.rows_in
        self.rows_new += other.rows_new
        self.files_written.extend(other.files_written)
        self.damaged.extend(other.damaged)


class StagedMerge:
    """Collects rows for one zone, then merges them into the lake in one commit."""

    def __init__(
        self,
        lake: Path,
        zone_id: int,
        staging_root: Path,
        *,
        key_column: str = "request_id",
        schema: dict[str, pl.DataType] = REQUEST_SCHEMA,
        table: str = "requests",
        spill_rows: int = DEFAULT_SPILL_ROWS,
    ) -> None:
        self.lake = lake
        self.zone_id = zone_id
        self.key = key_column
        self.schema = schema
        self.table = table
        self.spill_rows = spill_rows
        self.staging = staging_root / f"{zone_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._memory: dict[Key, list[pl.DataFrame]] = defaultdict(list)
        self._spilled: dict[Key, list[Path]] = defaultdict(list)
        self._memory_rows = 0
        self._spills = 0
        self.rows_in = 0

    def add(self, frame: pl.DataFrame) -> None:
        if frame.height == 0:
            return
        frame = conform(frame, self.schema)
        self.rows_in += frame.height
        for key, part in hour_parts(frame):
            self._memory[key].append(part)
        self._memory_rows += frame.height
        if self._memory_rows >= self.spill_rows:
            self._spill()

    def _spill(self) -> None:
        self.staging.mkdir(parents=True, exist_ok=True)
        self._spills += 1
        for key, frames in self._memory.items():
            path = self.staging / f"{key[0].isoformat()}-{key[1]:02d}-{self._spills}.parquet"
            pl.concat(frames).write_parquet(path, compression="lz4")
            self._spilled[key].append(path)
        self._memory.clear()
        self._memory_rows = 0

    def pending_keys(self) -> list[Key]:
        return sorted(set(self._memory) | set(self._spilled))

    def commit(self) -> MergeResult:
        """Merge everything added into the lake; safe to call again after a crash."""
        result = MergeResult(rows_in=self.rows_in)

        def merge(key: Key) -> tuple[int, Path | None, DamagedFile | None]:
            frames = list(self._memory.get(key, []))
            frames += [pl.read_parquet(p) for p in self._spilled.get(key, [])]
            return self._merge_file(key, pl.concat(frames))

        # Each key is its own file, so files can be merged side by side, unless the hours
        # are large: then one at a time keeps peak memory to one hour's rows.
        keys = self.pending_keys()
        workers = 1 if self.rows_in / max(1, len(keys)) > LARGE_MERGE_ROWS else MERGE_WORKERS
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for rows_new, path, damaged in pool.map(merge, keys):
                result.rows_new += rows_new
                if path is not None:
                    result.files_written.append(path)
                if damaged is not None:
                    result.damaged.append(damaged)
        self.discard()
        return result

    def _merge_file(
        self, key: Key, incoming: pl.DataFrame
    ) -> tuple[int, Path | None, DamagedFile | None]:
        day, hour = key
        path = hour_file(self.lake, self.zone_id, day, hour, self.table)
        incoming = incoming.unique(subset=[self.key], keep="first", maintain_order=True)
        existing: pl.DataFrame | None = None
        damaged = None
        if path.exists():
            try:
                existing = conform(read_lake_file(path), self.schema)
            except DataError as exc:
                # Set the damaged file aside; the caller re-reads its hour if it still can.
                damaged = quarantine(self.lake, path, str(exc))
            else:
                incoming = incoming.filter(~pl.col(self.key).is_in(existing[self.key].implode()))
        if incoming.height == 0:
            return 0, None, damaged
        merged = incoming if existing is None else pl.concat([existing, incoming])
        merged = merged.sort(["ts", self.key])
        write_parquet_atomic(merged, path)
        return incoming.height, path, damaged

    def discard(self) -> None:
        self._memory.clear()
        self._spilled.clear()
        self._memory_rows = 0
        self.rows_in = 0
        shutil.rmtree(self.staging, ignore_errors=True)


def clean_leftovers(lake: Path, staging_root: Path, zone_id: int, table: str = "requests") -> int:
    """Remove temporary files a killed process left for this zone; return how many."""
    removed = 0
    zone_root = zone_dir(lake, zone_id, table)
    if zone_root.exists():
        for tmp in zone_root.glob("*/.*.tmp"):
            tmp.unlink(missing_ok=True)
            removed += 1
    if staging_root.exists():
        for leftover in staging_root.glob(f"{zone_id}-*"):
            shutil.rmtree(leftover, ignore_errors=True)
            removed += 1
    return removed
