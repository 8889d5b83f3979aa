"""Where the lake's Delta tables live (local disk or S3) and how they are opened.

Every table is a Delta table under ``storage.lake_uri``. Nothing here holds a path beyond
that URI, so a lake can be moved, copied or read by any Delta reader. S3 credentials come
from the standard AWS environment only; the config names the endpoint and region.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import TableNotFoundError

from cdnlake.config import StorageConfig
from cdnlake.errors import ConfigError, DataError, StorageError
from cdnlake.lake.schema import TableSpec

if TYPE_CHECKING:
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs
    from arro3.core import Table as ArrowTable

log = logging.getLogger(__name__)

# Delta checkpoints every this many commits, so opening a table reads one checkpoint and
# at most this many small commit files, however old the table is.
CHECKPOINT_INTERVAL = "100"
TABLE_CONFIGURATION = {"delta.checkpointInterval": CHECKPOINT_INTERVAL}
# Appends of other zones to a table never conflict with ours, but each one moves the
# version our commit must land on: with many zones committing at once delta-rs needs
# more than its default 15 attempts (else "Failed to commit transaction: 15").
COMMIT_ATTEMPTS = 200


@dataclass(frozen=True)
class Lake:
    """The lake at one URI: ``file:///…`` or a local path, or ``s3://bucket/prefix``."""

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
        table = self.open(spec)
        if table is not None:
            return table
        try:
            return DeltaTable.create(
                self.table_uri(spec),
                spec.delta_schema(),
                mode="ignore",
                partition_by=spec.partition_by,
                configuration=TABLE_CONFIGURATION,
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

    def dataset(
        self,
        spec: TableSpec,
        table: DeltaTable,
        partitions: list[Any] | None = None,
        *,
        actions: list[dict[str, Any]] | None = None,
    ) -> ds.Dataset:
        """The table's current snapshot as an Arrow dataset over Arrow's own filesystem.

        Arrow's native local and S3 filesystems read the data files directly (no calls
        back into Python while DuckDB or polars scan). Each file's expression holds its
        partition values and the time range its log entry records, so filters on them
        prune files. A column without statistics is left out of it:
        deltalake's own ``to_pyarrow_dataset`` turns a missing statistic into
        ``column >= null``, which prunes every file for any filter on that column.

        ``partitions``: ``(column, "=" | "in", text)`` conditions on partition values;
        ``actions``: the :meth:`add_actions` they chose, when the caller has them already.
        """
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
            target = self.local / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            return
        files = self.filesystem()
        files.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with files.open_output_stream(path) as out:
            out.write(content)

    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem rooted at the lake."""
        import pyarrow.fs as pafs

        if self.local is not None:
            self.local.mkdir(parents=True, exist_ok=True)
            return pafs.SubTreeFileSystem(str(self.local.resolve()), pafs.LocalFileSystem())
        if not self.uri.startswith("s3://"):
            raise ConfigError(f"storage.lake_uri: unsupported scheme in {self.uri!r}")
        opts = self.storage_options
        s3 = pafs.S3FileSystem(
            endpoint_override=opts.get("AWS_ENDPOINT_URL") or None,
            region=opts.get("AWS_REGION") or None,
            scheme="http" if opts.get("AWS_ALLOW_HTTP") == "true" else "https",
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
        """The log's add actions of the wanted partitions, with only the columns a dataset
        needs (and ``stats``, such as ``num_records`` or ``max.finished``; None where the
        log has none). Partitions are chosen on their columns alone, and only the chosen
        files become dicts: a window's commit pays for the log's columns as Python lists
        (about 3 ms for 1,500 files), not for a dict per file of the table."""
        log = add_actions_table(table)
        wanted = ["path", *(f"partition.{c}" for c in spec.partition_by)]
        wanted += [c for c in ("min.ts", "max.ts", "null_count.ts") if c in log.column_names]
        wanted += [c for c in stats if c not in wanted]
        cells = _column_lists(log, wanted)
        rows: Sequence[int] = range(log.num_rows)
        for column, op, value in partitions or []:
            values = {str(v) for v in (value if op == "in" else [value])}
            found = cells[f"partition.{column}"]
            rows = [i for i in rows if found[i] is not None and str(found[i]) in values]
        return [{c: cells[c][i] for c in wanted} for i in rows]


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


def action_rows(actions: ArrowTable, columns: list[str]) -> list[dict[str, Any]]:
    """The add actions' ``columns`` as one dict per file; None in a column that the log
    does not have."""
    cells = _column_lists(actions, columns)
    return [{c: cells[c][i] for c in columns} for i in range(actions.num_rows)]


def _column_lists(actions: ArrowTable, columns: list[str]) -> dict[str, list[Any]]:
    """Each of ``columns`` as a Python list, converted once; Nones for a missing one."""
    present = set(actions.column_names)
    lists: dict[str, list[Any]] = {}
    for column in columns:
        values: Any = actions.column(column).to_pylist() if column in present else None
        lists[column] = [None] * actions.num_rows if values is None else values
    return lists


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
