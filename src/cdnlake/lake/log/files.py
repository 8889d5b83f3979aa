"""Data files of an exactly-once table: rows written as Parquet with the statistics its log
records (row groups of ``ROW_GROUP_ROWS``, which deduplication reads by their ``ts``
statistics), and taken back when their commit does not land.
"""

from __future__ import annotations

import io
import json
import logging
import time
import uuid
from datetime import UTC, date, datetime
from typing import Any

import polars as pl
from deltalake.transaction import AddAction

from cdnlake.errors import first_line
from cdnlake.lake.log.schema import TableSpec, conform
from cdnlake.lake.log.store import Lake

log = logging.getLogger(__name__)

ROW_GROUP_ROWS = 16_384


def prepare(spec: TableSpec, zone_id: int, rows: pl.DataFrame) -> pl.DataFrame:
    """Rows as the table stores them: partitions added, microsecond UTC times, each key
    once (the first wins), ordered by time so each file's ``ts`` statistics are tight."""
    columns = [pl.lit(zone_id, pl.Int64).alias(spec.zone_column)]
    if spec.by_date:
        columns.append(pl.col("ts").dt.date().alias("date"))
    frame = rows.with_columns(pl.col("ts").dt.cast_time_unit("us")).with_columns(columns)
    frame = conform(frame, spec.schema)
    if spec.key is not None and frame.height and _may_repeat(frame[spec.key]):
        frame = frame.unique(subset=[spec.key], keep="first", maintain_order=True)
    if frame.height and not frame["ts"].is_sorted():
        frame = frame.sort("ts")
    return frame


def _may_repeat(keys: pl.Series) -> bool:
    """Whether a key may occur twice: distinct hashes prove it does not, cheaper than
    counting distinct strings; a collision only sends the rows to ``unique``."""
    return keys.hash().n_unique() < keys.len()


def write_files(
    lake: Lake, spec: TableSpec, frame: pl.DataFrame
) -> tuple[list[AddAction], dict[str, pl.DataFrame]]:
    """``frame`` (rows as :func:`prepare` makes them) as Parquet data files, one per
    partition, for a commit to name; and each file's keys and times, by path.

    polars writes them (on every core, unlike ``write_deltalake``); the log gets each
    file's partition values and statistics (:func:`_measured`)."""
    if frame.height == 0:
        return [], {}
    keys = spec.partition_by
    key = spec.key
    assert key is not None
    actions: list[AddAction] = []
    kept: dict[str, pl.DataFrame] = {}
    for values, part in _by_partition(frame, keys):
        partition = {k: _partition_text(v) for k, v in zip(keys, values, strict=True)}
        folder = "/".join(f"{k}={v}" for k, v in partition.items())
        path = f"{folder}/part-{uuid.uuid4()}.zstd.parquet"
        data = part.drop(keys)
        buffer = io.BytesIO()
        # zstd level 1: files as small as the default level's, written faster
        data.write_parquet(
            buffer,
            compression="zstd",
            compression_level=1,
            statistics=True,
            row_group_size=ROW_GROUP_ROWS,
        )
        content = buffer.getvalue()
        lake.write_file(f"{spec.name}/{path}", content)
        actions.append(
            AddAction(
                path=path,
                size=len(content),
                partition_values=partition,
                modification_time=int(time.time() * 1000),
                data_change=True,
                stats=_stats(data, _measured(spec, data)),
            )
        )
        kept[path] = data.select("ts", key)
    return actions, kept


def take_back(lake: Lake, spec: TableSpec, actions: list[AddAction]) -> None:
    """Delete the files of a commit known not to have landed (its version went to another
    writer, or it was refused before it was sent): no log entry will ever name them.
    A file that cannot be deleted is left to ``maintain``, which removes files no entry
    names once they are older than its retention."""
    for action in actions:
        try:
            lake.delete_file(f"{spec.name}/{action.path}")
        except OSError as exc:
            log.info(
                "%s/%s not deleted (%s); maintain removes it",
                spec.name,
                action.path,
                first_line(exc),
            )


def _partition_text(value: object) -> str:
    return value.isoformat() if isinstance(value, date) else str(value)


def _by_partition(
    frame: pl.DataFrame, keys: list[str]
) -> list[tuple[tuple[Any, ...], pl.DataFrame]]:
    """The frame's rows by partition, in order. A frame of one partition (the usual
    commit) is handed over as it is: splitting it would copy every column."""
    if all(frame[k].null_count() == 0 and frame[k].min() == frame[k].max() for k in keys):
        return [(tuple(frame[k][0] for k in keys), frame)]
    return list(frame.partition_by(keys, as_dict=True, maintain_order=True).items())


MEASURED = ("ts", "source")


def _measured(spec: TableSpec, data: pl.DataFrame) -> list[str]:
    """Of the table's statistics columns (never a personal one), those whose smallest and
    largest values this writer records: what readers and deduplication prune files by
    (``ts``; ``log_id``, not a request id), and ``source``, by which ``status`` tells
    forwarded files."""
    wanted = {*MEASURED, spec.key}
    return [c for c in spec.stats_columns if c in wanted and c in data.columns]


def _stats(frame: pl.DataFrame, columns: list[str]) -> str:
    """Delta file statistics: numRecords, minValues and maxValues of ``columns``, and the
    nullCount of every column: a count names no value, and tells a session that the file
    holds every column, so that it reads it without opening it
    (:func:`cdnlake.warehouse.db.data_files`)."""
    lows: dict[str, object] = {}
    highs: dict[str, object] = {}
    nulls: dict[str, int] = dict(zip(frame.columns, frame.null_count().row(0), strict=True))
    for name in columns:
        column = frame[name]
        lo, hi = column.min(), column.max()
        if isinstance(lo, datetime) and isinstance(hi, datetime):
            lows[name], highs[name] = _instant(lo), _instant(hi)
        elif lo is not None:
            lows[name], highs[name] = lo, hi
    return json.dumps(
        {"numRecords": frame.height, "minValues": lows, "maxValues": highs, "nullCount": nulls}
    )


def _instant(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
