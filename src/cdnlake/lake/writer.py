"""Merging new rows into the lake, exactly once and crash-safe.

Rows are first collected per target hour file (spilled to a staging folder when large,
so memory stays bounded whatever the input size). Each touched hour file is then
rewritten as old rows plus the new ``request_id``s, sorted, into a temporary sibling that
is fsynced and renamed over the old file. A reader, or a process killed at any instant,
sees either the old file or the new one, never both and never half of one.

Input comes in time order (log files, ascending pages), so an hour is usually complete
once rows of a later hour arrive: such a *sealed* hour is merged at once, on a background
thread, while the caller goes on parsing. That keeps one hour in memory instead of
spilling, and overlaps writing with parsing. Merging early is safe at any time: a row
that arrives later for a sealed hour is merged into the file again, deduplicated by key,
and a run that fails after some hours were written is made whole by re-reading, which
the key makes idempotent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl

from cdnlake.errors import DataError, StorageError
from cdnlake.lake.check import DamagedFile, quarantine
from cdnlake.lake.layout import REQUEST_SCHEMA, fsync_dir, hour_file, tmp_sibling, zone_dir

log = logging.getLogger(__name__)

DEFAULT_SPILL_ROWS = 250_000
MERGE_WORKERS = 2
LARGE_MERGE_ROWS = 150_000  # hours bigger than this are merged one at a time (memory)
Key = tuple[date, int]


def write_parquet_atomic(frame: pl.DataFrame | pl.LazyFrame, path: Path) -> None:
    """Write ``frame`` to ``path`` via a temporary sibling, fsync, and rename.

    A lazy frame is streamed (sunk) batch by batch instead of being collected first.
    """
    tmp = tmp_sibling(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(frame, pl.LazyFrame):
            frame.sink_parquet(tmp, compression="zstd", compression_level=1, statistics=True)
        else:
            frame.write_parquet(tmp, compression="zstd", compression_level=1, statistics=True)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except (OSError, pl.exceptions.PolarsError) as exc:
        _remove(tmp)
        raise StorageError(f"cannot write lake file {path}: {_reason(exc)}") from exc
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp: Path) -> None:
    with contextlib.suppress(OSError):  # not there, or its folder never was
        tmp.unlink()


def _reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc).splitlines()[0]


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


def is_ordered(frame: pl.DataFrame, key: str) -> bool:
    """Whether ``frame`` is already sorted by (``ts``, ``key``), so the sort can be skipped."""
    if frame.height < 2:
        return True
    if frame["ts"].null_count() or not frame["ts"].is_sorted():
        return False
    # ts is sorted: only rows that tie with the previous one must be in key order.
    ts, ids = pl.col("ts"), pl.col(key)
    in_order = ((ts != ts.shift()) | (ids >= ids.shift())).fill_null(True)
    return bool(frame.select(in_order.all()).item())


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
        self._key_rows: dict[Key, int] = defaultdict(int)  # rows not yet merged, per hour
        self._spills = 0
        self.rows_in = 0
        self._sealed: list[tuple[Future[MergeResult], int]] = []  # (merge, its rows)
        self._background: ThreadPoolExecutor | None = None
        self._done = MergeResult()  # sealed hours already merged into the lake

    def add(self, frame: pl.DataFrame) -> None:
        if frame.height == 0:
            return
        frame = conform(frame, self.schema)
        self.rows_in += frame.height
        keys = []
        for key, part in hour_parts(frame):
            self._memory[key].append(part)
            self._key_rows[key] += part.height
            keys.append(key)
        self._memory_rows += frame.height
        self._merge_sealed(before=min(keys))
        if self._memory_rows >= self.spill_rows:
            self._spill()

    def _merge_sealed(self, before: Key) -> None:
        """Hand every hour older than ``before`` to the background merge."""
        sealed = [k for k in self.pending_keys() if k < before]
        if not sealed:
            return
        if self._background is None:
            # One thread: merges of the same hour file must never run side by side.
            self._background = ThreadPoolExecutor(1, thread_name_prefix="lake-merge")
        for key in sealed:
            frames = self._memory.pop(key, [])
            self._memory_rows -= sum(f.height for f in frames)
            spilled = self._spilled.pop(key, [])
            merge = self._background.submit(self._merge_key, key, frames, spilled)
            self._sealed.append((merge, self._key_rows.pop(key, 0)))
        # Rows handed over still count against memory: past the spill size, wait.
        while self._sealed and sum(n for _, n in self._sealed) > self.spill_rows:
            self._done.add(self._sealed.pop(0)[0].result())

    def _merge_key(self, key: Key, frames: list[pl.DataFrame], spilled: list[Path]) -> MergeResult:
        if spilled:
            streamed = self._stream_new_hour(key, frames, spilled)
            if streamed is not None:
                return streamed
        # Spilled rows came first: in this order, time-ordered input stays ordered.
        incoming = pl.concat([pl.read_parquet(p) for p in spilled] + frames)
        rows_new, path, damaged = self._merge_file(key, incoming)
        return MergeResult(
            rows_in=incoming.height,
            rows_new=rows_new,
            files_written=[path] if path is not None else [],
            damaged=[damaged] if damaged is not None else [],
        )

    def _stream_new_hour(
        self, key: Key, frames: list[pl.DataFrame], spilled: list[Path]
    ) -> MergeResult | None:
        """Stream a spilled (large) hour straight to a new lake file; None if it cannot be.

        Only the two key columns are held to check that ids are unique and rows ordered;
        the rows go from staging to the file a batch at a time, so memory does not grow
        with the size of the hour. An hour that needs deduplication, sorting or merging
        with an existing file takes the in-memory route.
        """
        path = hour_file(self.lake, self.zone_id, key[0], key[1], self.table)
        if path.exists():
            return None
        plan = pl.concat([pl.scan_parquet(p) for p in spilled] + [f.lazy() for f in frames])
        keys = plan.select("ts", self.key).collect()
        if keys[self.key].n_unique() < keys.height or not is_ordered(keys, self.key):
            return None
        write_parquet_atomic(plan, path)
        return MergeResult(rows_in=keys.height, rows_new=keys.height, files_written=[path])

    def _wait_sealed(self) -> None:
        """Wait for every background merge; the first failure is raised after all end."""
        failure: BaseException | None = None
        for future, _ in self._sealed:
            try:
                self._done.add(future.result())
            except BaseException as exc:  # re-raised below, once all have ended
                failure = failure or exc
        self._sealed.clear()
        if self._background is not None:
            self._background.shutdown()
            self._background = None
        if failure is not None:
            raise failure

    def _spill(self) -> None:
        self._spills += 1
        for key, frames in self._memory.items():
            path = self.staging / f"{key[0].isoformat()}-{key[1]:02d}-{self._spills}.parquet"
            try:
                self.staging.mkdir(parents=True, exist_ok=True)
                pl.concat(frames).write_parquet(path, compression="lz4")
            except (OSError, pl.exceptions.PolarsError) as exc:
                raise StorageError(f"cannot stage rows in {path}: {_reason(exc)}") from exc
            self._spilled[key].append(path)
        self._memory.clear()
        self._memory_rows = 0

    def pending_keys(self) -> list[Key]:
        return sorted(set(self._memory) | set(self._spilled))

    def commit(self) -> MergeResult:
        """Merge everything added into the lake; safe to call again after a crash."""
        self._wait_sealed()
        result, self._done = self._done, MergeResult()

        def merge(key: Key) -> MergeResult:
            return self._merge_key(key, self._memory.get(key, []), self._spilled.get(key, []))

        # Each key is its own file, so files can be merged side by side, unless the hours
        # are large: then one at a time keeps peak memory to one hour's rows.
        keys = self.pending_keys()
        pending = sum(self._key_rows.values())
        workers = 1 if pending / max(1, len(keys)) > LARGE_MERGE_ROWS else MERGE_WORKERS
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for merged in pool.map(merge, keys):
                result.add(merged)
        self.discard()
        return result

    def _merge_file(
        self, key: Key, incoming: pl.DataFrame
    ) -> tuple[int, Path | None, DamagedFile | None]:
        day, hour = key
        path = hour_file(self.lake, self.zone_id, day, hour, self.table)
        if incoming[self.key].n_unique() < incoming.height:
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
        if not is_ordered(merged, self.key):
            merged = merged.sort(["ts", self.key])
        write_parquet_atomic(merged, path)
        return incoming.height, path, damaged

    def discard(self) -> MergeResult:
        """Drop what was not merged; return what sealed hours already wrote to the lake.

        After a failure the caller still learns which rows reached the lake.
        """
        try:
            self._wait_sealed()
        except Exception as exc:  # the caller is already failing; keep its error
            log.warning("a background lake merge failed too: %s", exc)
        written, self._done = self._done, MergeResult()
        self._memory.clear()
        self._spilled.clear()
        self._memory_rows = 0
        self._key_rows.clear()
        self.rows_in = 0
        shutil.rmtree(self.staging, ignore_errors=True)
        return written


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
