"""Where the lake's Delta tables live (local disk or S3) and how they are opened.

Every table is a Delta table under ``storage.lake_uri``. Nothing here holds a path beyond
that URI, so a lake can be moved, copied or read by any Delta reader. S3 credentials come
from the standard AWS environment only; the config names the endpoint and region.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import TableNotFoundError

from cdnlake.config import StorageConfig
from cdnlake.errors import ConfigError, DataError, StorageError, first_line
from cdnlake.lake.log.schema import TableSpec
from cdnlake.sqlfiles import internal_sql

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs
    from arro3.core import Table as ArrowTable

log = logging.getLogger(__name__)

# Delta checkpoints every this many commits, so opening a table reads one checkpoint and
# at most this many small commit files, however old the table is.
CHECKPOINT_INTERVAL = "100"
TABLE_CONFIGURATION = {"delta.checkpointInterval": CHECKPOINT_INTERVAL}


def configuration(spec: TableSpec) -> dict[str, str]:
    """The properties a table of ``spec`` is created with: the lake's, and its own (the
    columns the log keeps statistics of: never a personal one)."""
    return {**TABLE_CONFIGURATION, **spec.configuration}


@dataclass(frozen=True)
class Lake:
    """The lake at one URI: ``file:///…`` or a local path, or ``s3://bucket/prefix``.

    A location and how to reach it, nothing more: what a process shares of the lake (each
    table's state and committer) is its :class:`~cdnlake.lake.zone.session.LakeSession`."""

    uri: str
    storage_options: dict[str, str]

    @classmethod
    def from_config(cls, storage: StorageConfig) -> Lake:
        return cls(storage.lake_location, storage.storage_options())

    @property
    def local(self) -> Path | None:
        return None if "://" in self.uri else Path(self.uri)

    def table_uri(self, spec: TableSpec) -> str:
        return f"{self.uri.rstrip('/')}/{spec.name}"

    def open(self, spec: TableSpec) -> DeltaTable | None:
        """The table as it is now, or None while nothing was ever written to it."""
        try:
            return DeltaTable(self.table_uri(spec), storage_options=self.storage_options)
        except TableNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"lake table {self.table_uri(spec)} cannot be read: {exc}") from None
        except Exception as exc:  # a damaged log, an unreachable store
            raise DataError(
                f"lake table {self.table_uri(spec)} cannot be opened: {first_line(exc)}"
            ) from None

    def open_or_create(self, spec: TableSpec) -> DeltaTable:
        """The table, created where it does not exist yet, and with every column of its
        spec: one of an older cdnlake gains the columns added since (see :meth:`evolve`)."""
        table = self.open(spec)
        if table is not None:
            return self.evolve(spec, table)
        try:
            made = DeltaTable.create(
                self.table_uri(spec),
                spec.delta_schema(),
                mode="ignore",
                partition_by=spec.partition_by,
                configuration=configuration(spec),
                storage_options=self.storage_options,
                # Only version 0 creates the table: a creation that lost the race must
                # not be retried as version 1, a second metadata commit that would fail
                # every writer whose snapshot is version 0 ("Metadata changed").
                commit_properties=CommitProperties(max_commit_retries=0),
            )
        except OSError as exc:
            raise StorageError(f"cannot create lake table {self.table_uri(spec)}: {exc}") from None
        except Exception:
            # Another process or thread created it first: its table is as good as ours.
            table = self.open(spec)
            if table is None:
                raise
            return table
        self.sync_commits(spec, 0, made.version())
        return made

    def evolve(self, spec: TableSpec, table: DeltaTable) -> DeltaTable:
        """``table`` with the columns its spec has and it lacks, added (nullable: the files
        written before hold no value for them, and read as NULL). Delta's own schema
        evolution, one metadata commit, once per lake; where another process added them
        first, its table is as good as ours."""
        from deltalake.schema import Field, PrimitiveType

        have = {field.name for field in table.schema().fields}
        missing = [name for name in spec.schema if name not in have]
        if not missing:
            return table
        before = table.version()
        try:
            table.alter.add_columns(
                [Field(name, PrimitiveType(spec.schema[name]), nullable=True) for name in missing]
            )
            log.info("lake table %s: columns added: %s", spec.name, ", ".join(missing))
        except Exception as exc:
            again = self.open(spec)
            if again is None or not set(spec.schema) <= {f.name for f in again.schema().fields}:
                raise StorageError(
                    f"lake table {self.table_uri(spec)} cannot gain the columns "
                    f"{', '.join(missing)}: {first_line(exc)}"
                ) from None
            return again
        table.update_incremental()
        self.sync_commits(spec, before + 1, table.version())
        return table

    def configure(self, spec: TableSpec) -> bool:
        """Give an existing table its spec's own properties where it lacks them (a table of
        an older cdnlake: ``delta.dataSkippingStatsColumns``, so that the files written
        from now on carry no statistics of a personal column). Delta's own
        ``SET TBLPROPERTIES``, one metadata commit, once per lake (``cdnlake maintain``);
        whether the table changed."""
        table = self.open(spec)
        if table is None:
            return False
        have = table.metadata().configuration or {}
        wanted = {k: v for k, v in spec.configuration.items() if have.get(k) != v}
        if not wanted:
            return False
        before = table.version()
        try:
            table.alter.set_table_properties(wanted)
        except Exception as exc:
            again = self.open(spec)
            have = {} if again is None else again.metadata().configuration or {}
            if any(have.get(k) != v for k, v in wanted.items()):
                raise StorageError(
                    f"lake table {self.table_uri(spec)} cannot be given the properties "
                    f"{', '.join(sorted(wanted))}: {first_line(exc)}"
                ) from None
            return False  # another process set them first
        table.update_incremental()
        self.sync_commits(spec, before + 1, table.version())
        log.info("lake table %s: properties set: %s", spec.name, ", ".join(sorted(wanted)))
        return True

    def zones(self, spec: TableSpec) -> list[int]:
        """The zones the table holds data files of."""
        table = self.open(spec)
        return [] if table is None else held_zones(spec, table)

    def dataset(
        self,
        spec: TableSpec,
        table: DeltaTable,
        partitions: list[Any] | None = None,
        *,
        actions: list[dict[str, Any]] | None = None,
    ) -> ds.Dataset:
        """The table's current snapshot as an Arrow dataset over Arrow's own filesystem
        (no calls back into Python while DuckDB or polars scan). Each file's expression
        holds its partition values and logged time range, so filters prune files; a
        column without statistics is left out (deltalake's ``to_pyarrow_dataset`` makes
        it ``column >= null``, which prunes every file). ``partitions``: as
        :meth:`add_actions`; ``actions``: those already chosen."""
        import pyarrow as pa
        import pyarrow.dataset as ds  # loads pandas when installed: only when reading
        import pyarrow.fs as pafs

        files = pafs.SubTreeFileSystem(spec.name, self.filesystem())
        schema = spec.arrow_schema()
        parquet = ds.ParquetFileFormat()
        fragments = []
        for action in actions if actions is not None else self.add_actions(spec, table, partitions):
            values = {c: action.get(f"partition.{c}") for c in spec.partition_by}
            where = ds.scalar(True)
            for column, value in values.items():
                field = ds.field(column)
                where &= (
                    field.is_null()
                    if value is None
                    else field == pa.scalar(value, schema.field(column).type)
                )
            span = logged_span(action)
            if span is not None:
                stamp = schema.field("ts").type
                where &= (ds.field("ts") >= pa.scalar(span[0], stamp)) & (
                    ds.field("ts") < pa.scalar(span[1], stamp)
                )
            path = unquote(action["path"])
            fragments.append(parquet.make_fragment(path, files, partition_expression=where))
        return ds.FileSystemDataset(fragments, schema, parquet, files)

    def write_file(self, path: str, content: bytes) -> None:
        """One file under the lake (``<table>/<partition folder>/<name>``): on local disk
        with Python's own I/O, in an object store through Arrow's filesystem, which is
        loaded only then (pyarrow and numpy are a tenth of a second of a process)."""
        if self.local is not None:
            write_durably(self.local / path, content)  # on disk before a commit names it
            return
        with self.filesystem().open_output_stream(path) as out:  # (no folder markers)
            out.write(content)

    def delete_file(self, path: str) -> None:
        """Remove one file under the lake; one already gone is no error."""
        if self.local is not None:
            (self.local / path).unlink(missing_ok=True)
            return
        try:
            self.filesystem().delete_file(path)
        except FileNotFoundError:
            pass

    def sync_checkpoint(self, spec: TableSpec, version: int) -> None:
        """The checkpoint of ``version`` delta-rs wrote, the pointer at it and their folder
        on the disk: a pointer that outlives a crash must not name a checkpoint that did
        not. In an object store a PUT answered is durable: nothing to do."""
        if self.local is None:
            return
        folder = self.local / spec.name / "_delta_log"
        for path in sorted(folder.glob(f"{version:020d}.checkpoint*.parquet")):
            sync_path(path)
        pointer = folder / "_last_checkpoint"
        if pointer.exists():
            sync_path(pointer)
        sync_path(folder)

    def sync_commits(self, spec: TableSpec, first: int, last: int) -> None:
        """Versions ``first`` to ``last`` of ``spec``, committed by delta-rs, on the disk
        before they are acknowledged: delta-rs syncs nothing, and an entry lost below one
        of cdnlake's own (synced) would leave the log a hole. Each entry, the data files it
        adds and their folders up to the lake's own (fsync). In an object store a PUT
        answered is durable: nothing to do."""
        if self.local is None or last < first:
            return
        table = self.local / spec.name
        files: list[Path] = []
        for version in range(max(first, 0), last + 1):
            entry = table / "_delta_log" / f"{version:020d}.json"
            try:
                text = entry.read_text()
            except FileNotFoundError:
                continue  # cleaned up since: past log retention, long on the disk
            files.append(entry)
            for line in text.splitlines():
                add = json.loads(line).get("add") if line.strip() else None
                if add is not None and "://" not in add["path"]:
                    files.append(table / unquote(add["path"]))
        folders: set[Path] = set()
        for path in files:
            sync_path(path)
            folders.update(f for f in path.parents if f.is_relative_to(self.local))
        for folder in folders:
            sync_path(folder)

    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem rooted at the lake."""
        import pyarrow.fs as pafs

        if self.local is not None:
            self.local.mkdir(parents=True, exist_ok=True)
            return pafs.SubTreeFileSystem(str(self.local.resolve()), pafs.LocalFileSystem())
        if not self.uri.startswith("s3://"):
            raise ConfigError(f"storage.lake_uri: unsupported scheme in {self.uri!r}")
        opts = self.storage_options
        s3 = _s3_client(
            opts.get("AWS_ENDPOINT_URL") or None,
            opts.get("AWS_REGION") or None,
            "http" if opts.get("AWS_ALLOW_HTTP") == "true" else "https",
            tuple(os.environ.get(name) for name in AWS_ENVIRONMENT),
        )
        return pafs.SubTreeFileSystem(self.uri.removeprefix("s3://").rstrip("/"), s3)

    @staticmethod
    def add_actions(
        spec: TableSpec,
        table: DeltaTable,
        partitions: list[Any] | None = None,
        *,
        stats: tuple[str, ...] = (),
    ) -> list[dict[str, Any]]:
        """The log's add actions of the wanted partitions, with the columns a dataset
        needs and ``stats`` (None where the log has none). ``partitions``: ``(column,
        "=" | "in", value)`` on the zone and date columns. DuckDB chooses on the Arrow
        actions in place: only the chosen ones become Python objects."""
        return Lake.chosen_actions(spec, add_actions_table(table), partitions, stats=stats)

    @staticmethod
    def chosen_actions(
        spec: TableSpec,
        log: ArrowTable | pa.Table,
        partitions: list[Any] | None = None,
        *,
        stats: tuple[str, ...] = (),
    ) -> list[dict[str, Any]]:
        """:meth:`add_actions` of the add actions ``log`` already read (and perhaps
        filtered, as the nightly check's files reaching into retention)."""
        wanted = ["path", *(f"partition.{c}" for c in spec.partition_by)]
        wanted += [c for c in ("min.ts", "max.ts", "null_count.ts") if c in log.column_names]
        wanted += [c for c in stats if c not in wanted]
        if log.num_rows == 0:  # a new table: nothing to choose (nor DuckDB to load)
            return []
        zones, days = _conditions(spec, partitions or [])
        actions = log.select([c for c in wanted if c in log.column_names])
        actions = actions.append_column("chosen_zone", log.column(f"partition.{spec.zone_column}"))
        if spec.by_date:
            actions = actions.append_column("chosen_day", log.column("partition.date"))
        params: dict[str, list[Any] | None] = {"zones": zones}
        query = "chosen_files"
        if spec.by_date:
            query, params["days"] = "chosen_day_files", days
        with _duckdb() as con:
            con.register("actions", actions)
            found = con.execute(internal_sql(query), params)
            names = [d[0] for d in found.description or []]
            chosen = found.fetchall()
        missing = dict.fromkeys(c for c in wanted if c not in names)
        return [{**missing, **dict(zip(names, row, strict=True))} for row in chosen]


def _conditions(
    spec: TableSpec, partitions: list[Any]
) -> tuple[list[int] | None, list[date] | None]:
    """The zones and the days (None: any) that ``(column, "=" | "in", value)`` conditions
    allow; values as the log's text or as Python values alike."""
    zones: set[int] | None = None
    days: set[date] | None = None
    for column, op, value in partitions:
        values = value if op == "in" else [value]
        if column == spec.zone_column:
            allowed = {int(str(v)) for v in values}
            zones = allowed if zones is None else zones & allowed
        elif column == "date" and spec.by_date:
            on = {date.fromisoformat(str(v)) for v in values}
            days = on if days is None else days & on
        else:
            raise ValueError(f"{spec.name}: files are not chosen on {column!r}")
    return (
        None if zones is None else sorted(zones),
        None if days is None else sorted(days),
    )


_DUCKDB: list[duckdb.DuckDBPyConnection] = []
_DUCKDB_LOCK = threading.Lock()


@contextmanager
def _duckdb() -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor of the process's in-memory DuckDB (a cursor per call: threads share
    nothing), opened once: a new database costs ten times the query."""
    import duckdb

    with _DUCKDB_LOCK:
        if not _DUCKDB:
            _DUCKDB.append(duckdb.connect())
        con = _DUCKDB[0].cursor()
    try:
        yield con
    finally:
        con.close()


# What both S3 clients of the lake take from the environment (delta-rs for the log and
# commits, Arrow for data files): the same standard AWS chain, from the same options.
AWS_ENVIRONMENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
)


@functools.lru_cache(maxsize=8)
def _s3_client(
    endpoint: str | None, region: str | None, scheme: str, credentials: tuple[str | None, ...]
) -> pafs.FileSystem:
    """Arrow's S3 client for the lake's options, made once per process (and per change of
    the AWS environment, ``credentials``), not at every read."""
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(endpoint_override=endpoint, region=region, scheme=scheme)


def logged_span(action: dict[str, Any]) -> tuple[datetime, datetime] | None:
    """A data file's ``ts`` range by its log statistics, as [first, end), or None where
    the log does not know it. The log keeps times to the millisecond: the last one
    counts whole."""
    first, last = action.get("min.ts"), action.get("max.ts")
    if first is None or last is None or action.get("null_count.ts"):
        return None
    return first, last + timedelta(milliseconds=1)


def add_actions_table(table: DeltaTable) -> ArrowTable:
    """The table's add actions (flattened), as delta-rs returns them: an arro3 table,
    which needs neither pyarrow nor (for its instants) pandas."""
    return table.get_add_actions(flatten=True)


def held_zones(spec: TableSpec, table: DeltaTable) -> list[int]:
    """The zones ``table`` (a snapshot of ``spec``) holds data files of."""
    actions = add_actions_table(table)
    if actions.num_rows == 0:
        return []
    column = actions.column(f"partition.{spec.zone_column}").to_pylist()
    return sorted({int(zone) for zone in column if zone is not None})


def write_durably(target: Path, content: bytes, *, named: bool = True, mode: int = 0o666) -> None:
    """A file on local disk that is on the disk once this returns: its bytes, and its name
    in each folder made for it (fsync of the file and of its folders). ``named=False``: a
    temporary file, whose own name need not survive (its final name is synced apart).
    ``mode``: the permissions of a file it makes (0o600: a secret; less the umask)."""
    made: list[Path] = []
    folder = target.parent
    while not folder.exists():
        made.append(folder)
        folder = folder.parent
    target.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as out:
        out.write(content)
        out.flush()
        os.fsync(out.fileno())
    for path in [target, *made] if named else made:
        sync_path(path.parent)


def sync_path(path: Path) -> None:
    """A file's bytes, or a folder's entries (a name made or changed in it), on disk: they
    survive a crash."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
