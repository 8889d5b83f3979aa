"""Exactly-once commits of one zone's rows, with the zone's progress in the same commit.

Delta gives the rest, as an existing protocol:

- a commit is atomic: readers see all of its files or none;
- the zone's progress (watermark, cursors) travels as Delta *application transactions*
  (app id ``cdnlake/<table>/<zone>...``) inside the very commit that adds the rows it
  covers, so data and progress can never disagree;
- every commit of a zone updates the zone's app id, and Delta refuses a commit when
  another one updated the same app id since this writer's snapshot ("concurrent
  transaction"): the loser re-reads the table, drops what the winner added, and tries
  again. Two processes on one zone (a stale one and its successor) never duplicate a
  request;
- every commit carries the writer's fence token (:mod:`cdnlake.lake.progress`): after
  each re-read, a writer whose token a rewind or a new holder moved past is refused
  (:class:`FencedError`), so progress computed before a rewind is never resent over it;
- the commits of a process's zones waiting at the same time land as one Delta commit,
  each zone's part prepared by its own writer and refused or prepared again alone
  (:mod:`cdnlake.lake.shared`, which also keeps the process's one snapshot of the table).

Deduplication reads only the keys of the files that can hold the rows being written: the
zone and date partitions, and files whose ``ts`` statistics overlap the rows' time range
(a request's timestamp is part of the record, so a repeat has the same one). Its cost
follows the window being written, not the table; and the files of the writer's own last
commit are not read back at all, their keys being remembered.
"""

from __future__ import annotations

import io
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import unquote

import polars as pl
from deltalake import Transaction
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, RemoveAction

from cdnlake.config import RETENTION_SECONDS
from cdnlake.errors import DataError, FencedError, StorageError, ZoneBusyError
from cdnlake.lake.bookkeeping import Bookkeeping
from cdnlake.lake.damage import (
    DamagedFile,
    Undecodable,
    moved_already,
    read_checked,
    set_aside,
)
from cdnlake.lake.progress import FENCE, WATERMARK, Versions, holder_of, rewind, taken_by
from cdnlake.lake.schema import TableSpec, conform, polars_schema
from cdnlake.lake.shared import AGAIN, Part, Snapshot, shared_table
from cdnlake.lake.store import Lake, first_line, logged_span

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

log = logging.getLogger(__name__)

# Never rewind to the very edge of the provider's retention: clocks differ a little.
RETENTION_MARGIN = timedelta(minutes=2)
CONFLICT_RETRIES = 5  # re-reads after a concurrent commit on the same zone
# A repeat of a request may carry its time in seconds (some v1 exports) where the lake
# has milliseconds: look this much around the rows' time range for their keys.
TS_SLACK = timedelta(seconds=1)
# Rows per row group of every data file (commits and ``maintain`` alike): deduplication
# reads the keys of the groups whose ``ts`` statistics meet its rows, so a window reads
# about its minutes of a busy zone, and a day's file footer stays small.
ROW_GROUP_ROWS = 16_384
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A commit's progress: app-id parts ("" the watermark) to versions, or (a rewind) a
# function of the table's current versions, computed again at every attempt.
Plan: TypeAlias = dict[str, int] | Callable[[Versions], dict[str, int]]


@dataclass
class Written:
    """What one commit did."""

    new: int = 0
    duplicates: int = 0
    files_read: int = 0  # data files read to find repeats (follows the window, not the table)
    keys_read: int = 0  # rows of the row groups whose keys were read, likewise
    late: int = 0  # new rows from before the commit's ``behind`` instant
    # New requests by (cache status, status class "2xx"...): what the metrics count.
    traffic: dict[tuple[str, str], int] = field(default_factory=dict)


def traffic(frame: pl.DataFrame) -> dict[tuple[str, str], int]:
    """Requests by cache status and status class (``HIT``, ``2xx``); {} for other tables."""
    if frame.height == 0 or "cache_status" not in frame.columns:
        return {}
    counts = frame.group_by(
        pl.col("cache_status").fill_null("-"),
        ((pl.col("status_code") // 100).cast(pl.String) + "xx").fill_null("-").alias("class"),
    ).len()
    return {(status, klass): n for status, klass, n in counts.iter_rows()}


def _partition_text(value: object) -> str:
    return value.isoformat() if isinstance(value, date) else str(value)


def _stats(frame: pl.DataFrame, columns: list[str]) -> str:
    """Delta file statistics: numRecords, minValues and maxValues of ``columns``, and the
    nullCount of every column (so a session knows the file holds them all, and reads it
    without opening it: :func:`cdnlake.warehouse.db.data_files`)."""
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
    """Whether a key may occur twice: distinct hashes prove it does not, at a third of the
    cost of counting distinct strings; a collision only sends the rows to ``unique``."""
    return keys.hash().n_unique() < keys.len()


class ZoneWriter:
    """Commits rows of one zone into one exactly-once table (``requests``/``shield_events``)."""

    def __init__(
        self,
        lake: Lake,
        spec: TableSpec,
        zone_id: int,
        *,
        count_traffic: bool = False,
        holder: int | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """Take the zone's fence token as the table has it now (see
        :mod:`cdnlake.lake.progress`).

        ``clock``: the pass's own (the provider's retention, when a damaged file's span is
        judged still readable or lost, is counted from it).
        ``holder``: the generation of the fleet lease this writer's pass runs under
        (None without a fleet). A newer one than the table's takes the zone, by a commit
        of progress alone; an older one is refused at once (:class:`FencedError`).
        ``count_traffic``: break each commit's new rows down for the metrics
        (``Written.traffic``); only a daemon serving metrics reads it."""
        if spec.key is None:
            raise ValueError(f"{spec.name} has no key")
        self.lake = lake
        self.spec = spec
        self.zone_id = zone_id
        self.count_traffic = count_traffic
        self.clock = clock
        self.shared = shared_table(lake, spec)  # the process's one state of the table
        # The keys and times of the files this writer's last commit added, by path: the
        # next commit (an import's next chunk, a long pass's next flush) finds its
        # repeats there without reading back what it has just written. Data files are
        # never changed in place, so what is remembered is what the file holds.
        self._last_written: dict[str, pl.DataFrame] = {}
        self._in_pass = False  # inside passing(): its commits may wait for others
        # The zone's progress as this writer found it: where its pass starts reading.
        self.found = self.shared.snapshot(zone_id)
        self.token = self.found.part(FENCE) or 0
        if holder is not None and holder != holder_of(self.token):
            if holder < holder_of(self.token):
                raise self._fenced()
            self.token = taken_by(holder)
            self.commit(self.empty(), {})  # from now on, the earlier holder's commits fail

    @contextmanager
    def passing(self) -> Iterator[None]:
        """While this writer's pass reads and commits: its commits may wait for the other
        passes of the process in flight, to land with theirs (:mod:`cdnlake.lake.shared`)."""
        with self.shared.passing():
            self._in_pass = True
            try:
                yield
            finally:
                self._in_pass = False

    def empty(self) -> pl.DataFrame:
        """No rows: a commit of progress alone."""
        return pl.DataFrame(schema=polars_schema(self.spec.columns))

    # -- progress ------------------------------------------------------------------------
    def progress(self, part: str = "") -> int | None:
        """The version of the zone's app transaction ``part`` as of the newest commit."""
        return self.shared.snapshot(self.zone_id).part(part)

    # -- the commit ----------------------------------------------------------------------
    def rewind(self, plan: Callable[[Versions], dict[str, int]]) -> None:
        """Commit the progress ``plan`` makes of the table's current versions (earlier
        ones), and advance the fence: allowed whatever this writer's token."""
        self.commit(self.empty(), plan, rewinding=True)

    def read_again(self, start: datetime | None, end: datetime | None, why: str) -> None:
        """Make the zone read ``[start, end]`` again while the provider still serves it (a
        rewind, which fences every pass in flight), else claim the span lost in
        ``ingest_gaps``. Done before a damaged file is moved, never after."""
        now = self.clock()
        oldest = now - timedelta(seconds=RETENTION_SECONDS) + RETENTION_MARGIN
        start, end = start or oldest, end or now
        if end > oldest:
            rewind(self, max(start, oldest))
            log.error("zone %s: %s; its span is read again from %s", self.zone_id, why, start)
            return
        gap = {
            "gap_from": start,
            "gap_to": end,
            "reason": f"{why}; past retention",
            "detected_at": now,
            "run_id": f"damage-{uuid.uuid4().hex[:8]}",
            "source": "shield" if self.spec.name == "shield_events" else "maintain",
        }
        Bookkeeping(self.lake).record_gaps(self.zone_id, [gap])

    def _read_again_first(
        self, zone_id: int, start: datetime | None, end: datetime | None, why: str
    ) -> None:
        """Before a file this writer's deduplication found damaged is moved: another writer
        rewinds, so this one's token is older than the fence and it commits nothing more."""
        ZoneWriter(self.lake, self.spec, zone_id, clock=self.clock).read_again(start, end, why)

    def commit(
        self,
        rows: pl.DataFrame,
        progress: Plan,
        *,
        rewinding: bool = False,
        behind: datetime | None = None,
    ) -> Written:
        """Add the rows not yet in the table and set the zone's progress, in one commit.

        ``progress`` maps app-id parts ("" for the watermark) to versions. The zone's main
        app id and fence are always part of the commit, so that any two commits of one
        zone conflict and the loser re-reads. FencedError, with nothing written, when the
        table's fence token is newer than this writer's (a rewind or a new holder since).
        The watermark never moves back but in a rewind (``rewinding``). ``behind``: the
        new rows from before it are counted apart (``Written.late``).
        """
        frame = prepare(self.spec, self.zone_id, rows)
        written = Written()
        days = (
            [d.isoformat() for d in frame["date"].unique()]
            if self.spec.by_date and frame.height
            else None
        )
        for _attempt in range(CONFLICT_RETRIES + 1):
            snapshot = self.shared.snapshot(self.zone_id, files=frame.height > 0, days=days)
            if not rewinding and (snapshot.part(FENCE) or 0) > self.token:
                raise self._fenced()
            new, damaged = self._new_rows(frame, written, snapshot)
            if damaged:  # set aside, the zone rewound first: this pass stops here
                raise DataError(
                    f"zone {self.zone_id}: lake file(s) "
                    + ", ".join(f"{d.table}/{d.path} ({d.reason})" for d in damaged)
                    + " did not decode: set aside in _quarantine, the zone's progress "
                    "rewound to read the span again; nothing of this commit was written"
                )
            versions = self._versions(progress, rewinding, snapshot)
            try:
                actions, kept = self._write_files(new)
            except (OSError, DeltaError) as exc:
                raise StorageError(
                    f"cannot write to {self.lake.table_uri(self.spec)}: {first_line(exc)}"
                ) from None
            transactions = self._transactions(versions)
            part = Part(self.zone_id, snapshot.version, actions, transactions, self._in_pass)
            if self.shared.commit(part) == AGAIN:  # the zone was committed to meanwhile
                log.info(
                    "zone %s: another commit to %s came first; re-reading",
                    self.zone_id,
                    self.spec.name,
                )
                continue
            self._last_written = kept
            self.token = versions[FENCE]
            written.new = new.height
            written.duplicates = frame.height - new.height
            if behind is not None and new.height:
                written.late = new.filter(pl.col("ts") < behind).height
            if self.count_traffic:
                written.traffic = traffic(new)
            return written
        raise ZoneBusyError(
            f"zone {self.zone_id}: other processes kept committing to {self.spec.name}; "
            "nothing was written, the next pass tries again"
        )

    def _write_files(
        self, frame: pl.DataFrame
    ) -> tuple[list[AddAction | RemoveAction], dict[str, pl.DataFrame]]:
        """The rows as Parquet data files, one per partition, for the commit to name.

        polars writes them (zstd level 1, on every core: three times the single-threaded writer
        of ``write_deltalake`` here); the log gets each file's partition values and its
        ``ts`` and key statistics, which readers and deduplication prune files by, and its
        ``source`` range, by which ``status`` tells the files of forwarded rows alone.
        """
        if frame.height == 0:
            return [], {}
        keys = self.spec.partition_by
        key = self.spec.key
        assert key is not None
        actions: list[AddAction | RemoveAction] = []
        kept: dict[str, pl.DataFrame] = {}
        for values, part in _by_partition(frame, keys):
            partition = {k: _partition_text(v) for k, v in zip(keys, values, strict=True)}
            folder = "/".join(f"{k}={v}" for k, v in partition.items())
            path = f"{folder}/part-{uuid.uuid4()}.zstd.parquet"
            data = part.drop(keys)
            buffer = io.BytesIO()
            # zstd level 1: files as small as the default level 3 here, a fifth faster
            data.write_parquet(
                buffer,
                compression="zstd",
                compression_level=1,
                statistics=True,
                row_group_size=ROW_GROUP_ROWS,
            )
            content = buffer.getvalue()
            self.lake.write_file(f"{self.spec.name}/{path}", content)
            actions.append(
                AddAction(
                    path=path,
                    size=len(content),
                    partition_values=partition,
                    modification_time=int(time.time() * 1000),
                    data_change=True,
                    stats=_stats(data, [c for c in ("ts", key, "source") if c in data.columns]),
                )
            )
            kept[path] = data.select("ts", key)
        return actions, kept

    def _fenced(self) -> FencedError:
        return FencedError(
            f"zone {self.zone_id}: its {self.spec.name} progress was rewound or the zone "
            "taken by another holder since this pass began; this commit was refused and "
            "wrote nothing (the next pass reads from the zone's progress as it is now)"
        )

    def _versions(self, progress: Plan, rewinding: bool, snapshot: Snapshot) -> dict[str, int]:
        """The commit's progress, from the table as last read: the progress given, the
        watermark (0 where the zone has none yet; never earlier than the table's but in
        a rewind) and the fence token (one more in a rewind)."""
        versions = progress(snapshot.part) if callable(progress) else dict(progress)
        current = snapshot.part(WATERMARK) or 0
        if rewinding:
            versions.setdefault(WATERMARK, current)
            versions[FENCE] = (snapshot.part(FENCE) or 0) + 1
        else:
            versions[WATERMARK] = max(versions.get(WATERMARK, current), current)
            versions[FENCE] = self.token
        return versions

    def _transactions(self, versions: dict[str, int]) -> list[Transaction]:
        now_ms = int(time.time() * 1000)
        return [
            Transaction(self.spec.app_id(self.zone_id, part), int(version), now_ms)
            for part, version in sorted(versions.items())
        ]

    def _new_rows(
        self, frame: pl.DataFrame, written: Written, snapshot: Snapshot
    ) -> tuple[pl.DataFrame, list[DamagedFile]]:
        """The rows whose key the table does not hold yet, reading only where they can be.

        The snapshot's files of the zone-days and their ``ts`` statistics choose the
        files; each file's row group statistics, the parts of it read (a day that
        ``maintain`` sorted: the window's minutes). Read with Arrow's Parquet reader
        alone: its dataset layer would import pandas, when installed, in every commit's
        process.
        """
        if frame.height == 0:
            return frame, []
        key = self.spec.key
        assert key is not None
        lo = frame["ts"].min()
        hi = frame["ts"].max()
        assert isinstance(lo, datetime) and isinstance(hi, datetime)
        lo, hi = lo - TS_SLACK, hi + TS_SLACK
        assert snapshot.files is not None
        actions = [action for action in snapshot.files if _may_hold(action, lo, hi)]
        seen: list[pl.DataFrame] = []
        unread = []
        for action in actions:
            remembered = self._last_written.get(unquote(action["path"]))
            if remembered is None:
                unread.append(action)
                continue
            near = remembered.filter(pl.col("ts").is_between(lo, hi))
            written.keys_read += near.height
            seen.append(near.select(pl.col(key)))
        damaged: list[DamagedFile] = []
        if unread:  # (pyarrow is loaded only for these)
            read, damaged = self._read_keys(unread, key, lo, hi, written)
            seen += read
        if not seen:
            return frame, damaged
        existing = pl.concat(seen)[key]
        return frame.filter(~pl.col(key).is_in(existing.implode())), damaged

    def _read_keys(
        self,
        actions: list[dict[str, Any]],
        key: str,
        lo: datetime,
        hi: datetime,
        written: Written,
    ) -> tuple[list[pl.DataFrame], list[DamagedFile]]:
        """The keys near [lo, hi] of the files ``actions`` name, and those files that do
        not decode, set aside (a store that keeps failing raises, setting nothing aside)."""
        import pyarrow as pa  # loaded by the first commit that reads files, not by start-up

        files = self.lake.filesystem()
        seen: list[pl.DataFrame] = []
        undecodable: list[tuple[str, Undecodable]] = []
        orphans = False  # set aside by a process that died before the log's repair
        for action in actions:
            path = unquote(action["path"])
            name = f"{self.spec.name}/{path}"
            written.files_read += 1
            try:
                keys, rows = _keys_near(files, name, key, lo, hi)
            except (OSError, pa.ArrowException) as exc:
                if moved_already(files, self.spec.name, path):
                    orphans = True
                    continue
                checked = read_checked(files, name, [key], exc, name)
                if isinstance(checked, Undecodable):
                    undecodable.append((path, checked))
                    continue
                keys, rows = checked, checked.num_rows  # all its keys: more than needed
            written.keys_read += rows
            frame_of_keys = pl.from_arrow(keys)  # a table: no detour through pyarrow.compute
            assert isinstance(frame_of_keys, pl.DataFrame)
            seen.append(frame_of_keys.select(pl.col(key).cast(pl.String)))
        if not (undecodable or orphans):
            return seen, []
        table = self.lake.open(self.spec)  # an object of its own: the shared one is shared
        assert table is not None
        damaged = [
            set_aside(self.lake, self.spec, table, p, u.reason, self._read_again_first)
            for p, u in undecodable
        ]
        table.repair(dry_run=False)  # drop the set-aside files from the table
        return seen, damaged


def _by_partition(
    frame: pl.DataFrame, keys: list[str]
) -> list[tuple[tuple[Any, ...], pl.DataFrame]]:
    """The frame's rows by partition, in order. A frame of one partition (the usual
    commit: a window or a chunk of one zone's day) is handed over as it is: splitting
    it would copy every column (a fifth of a 250,000-row commit's page faults)."""
    if all(frame[k].null_count() == 0 and frame[k].min() == frame[k].max() for k in keys):
        return [(tuple(frame[k][0] for k in keys), frame)]
    return list(frame.partition_by(keys, as_dict=True, maintain_order=True).items())


def _may_hold(action: dict[str, Any], lo: datetime, hi: datetime) -> bool:
    """Whether a file's logged ``ts`` range meets [lo, hi] (a file without one may)."""
    span = logged_span(action)
    return span is None or bool(span[0] <= hi and span[1] > lo)


def _keys_near(
    files: pafs.FileSystem, path: str, key: str, lo: datetime, hi: datetime
) -> tuple[pa.Table, int]:
    """The keys of a data file's row groups whose ``ts`` statistics meet [lo, hi], and
    how many rows those groups hold.

    Statistics are compared raw (microseconds since the epoch, as the lake stores ``ts``):
    Arrow boxes a timestamp statistic through pandas, when installed.
    """
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
