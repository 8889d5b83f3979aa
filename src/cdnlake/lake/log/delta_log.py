"""The Delta log of an exactly-once table, followed and written by cdnlake itself.

delta-rs rebuilds a table's active files at every commit and refresh; a writer needs only
what the log entries hold (app transactions, each partition's files, metadata or protocol
changes). :class:`TableLog` loads that state from delta-rs once, advances it entry by
entry, and commits by writing the next entry itself, put-if-absent (a link on local disk,
a conditional ``PUT`` on S3 through obstore). A commit costs its own lines.

An unreadable or cleaned-up entry, or a metadata or protocol change, reloads the state from
delta-rs; a protocol or writer feature not honoured here refuses every commit
(:class:`StorageError`). Checkpoints are written off the commit path
(:mod:`cdnlake.lake.log.table`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from deltalake import DeltaTable
from deltalake.transaction import AddAction

from cdnlake.errors import StorageError, first_line
from cdnlake.lake.log.schema import TableSpec
from cdnlake.lake.log.store import Lake, sync_path, write_durably
from cdnlake.version import __version__

if TYPE_CHECKING:
    from deltalake import Transaction
    from obstore.store import S3Store

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_INTERVAL = 100  # the Delta protocol's default
# Per S3 store (endpoint, bucket) this process writes to: None where it honours a
# conditional PUT, else why nothing is written there (probed once: _Entries._check_store).
_PROBED: dict[tuple[str, str], str | None] = {}
_PROBED_LOCK = threading.Lock()
# A process that learned no new version for this long (wall clock: a process or machine
# suspended for days counts them) checks the last checkpoint before
# trusting that the next entry is missing because nobody wrote it (log cleanup removes
# entries older than a checkpoint and than ``delta.logRetentionDuration``, 30 days).
STALE_SECONDS = 3600.0
# What cdnlake's writer honours: the tables it creates are reader 1 / writer 2. Of writer
# 2's features it checks invariants (a table with any is refused, :func:`_refusal`) and
# honours appendOnly by writing nothing but add actions (:func:`entry`).
READER_VERSIONS = frozenset({1})
WRITER_VERSIONS = frozenset({1, 2})
STATS_COLUMN = "ts"  # the statistic a writer chooses files by

File = dict[str, Any]  # "path" (as the log has it), "min.ts", "max.ts", "null_count.ts"
# A file as the state keeps it (a tuple of plain values: a fraction of a dict's memory and
# of its making, for every file of the table): path, the ``ts`` statistics (min and max in
# microseconds since the epoch, null count; None where unknown).
Kept = tuple[str, int | None, int | None, int | None]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FIELDS = ("path", f"min.{STATS_COLUMN}", f"max.{STATS_COLUMN}", f"null_count.{STATS_COLUMN}")
Key = tuple[str | None, ...]  # a partition's values, as text, in the spec's order


@dataclass(frozen=True)
class Removal:
    """A data file a commit removes (a partition past retention, a file rewritten without
    erased rows): its path as the log names it, and its partition values; ``data_change``
    False where its rows stay, rewritten (a compaction: Delta's OPTIMIZE)."""

    path: str
    partition_values: dict[str, str | None]
    data_change: bool = True


@dataclass(frozen=True)
class Learned:
    """One new version: the app transactions its commit carried, or None where that is
    not known (an entry unread, a reload, a metadata or protocol change: every zone then
    counts as touched)."""

    version: int
    apps: dict[str, int] | None


class TableLog:
    """One exactly-once table's state, as of :attr:`version`, advanced entry by entry.

    Not thread-safe: its owner (:class:`cdnlake.lake.log.table.LogTable`) holds a lock."""

    def __init__(self, lake: Lake, spec: TableSpec, table: DeltaTable | None = None) -> None:
        """``table``: the table as opened (a reader's, never made nor evolved); without
        it, opened and made ready to write (:meth:`Lake.open_or_create`)."""
        self.lake = lake
        self.spec = spec
        self._entries = _Entries(lake, spec)
        self.version = -1
        self.refusal: str | None = None  # why this writer must not write, if it must not
        self.append_only = False  # delta.appendOnly: no commit of this writer removes a file
        self.checkpoint_interval = DEFAULT_CHECKPOINT_INTERVAL
        self._base: DeltaTable | None = None
        # App transactions as of :attr:`version`: learned since ``_base``, or asked of it.
        self._apps: dict[str, int | None] = {}
        self._files: dict[Key, dict[str, Kept]] = {}
        self._where: dict[str, Key] = {}  # each file's partition, by path
        self._learned_at = time.time()
        self._checkpoint_ahead = -1  # a newer checkpoint a commit found than the state
        self._load(lake.open_or_create(spec) if table is None else table)

    def uri(self) -> str:
        return self.lake.table_uri(self.spec)

    # -- the state -----------------------------------------------------------------------
    def app(self, app_id: str) -> int | None:
        """An app transaction's version as of :attr:`version`."""
        if app_id in self._apps:
            return self._apps[app_id]
        assert self._base is not None
        found = self._base.transaction_version(app_id)  # as of the load: nothing since
        self._apps[app_id] = found
        return found

    def files(self, zone_id: int, days: Iterable[str] | None = None) -> list[File]:
        """The data files of a zone (on ``days``, ISO dates, for a table by date)."""
        zone = str(zone_id)
        if not self.spec.by_date:
            keys: list[Key] = [(zone,)]
        elif days is not None:
            keys = [(zone, day) for day in days]
        else:  # every day of the zone (a rare caller: this one goes through the table)
            keys = [key for key in self._files if key[0] == zone]
        return [
            dict(zip(FIELDS, (path, _moment(low), _moment(high), nulls), strict=True))
            for key in keys
            for path, low, high, nulls in self._files.get(key, {}).values()
        ]

    def _load(self, table: DeltaTable) -> None:
        """The whole state from a delta-rs snapshot (once per process, and as the fallback)."""
        try:
            actions = table.get_add_actions(flatten=True)
            protocol = table.protocol()
            metadata = table.metadata()
            schema = table.schema().to_json()
        except Exception as exc:
            why = first_line(exc)
            raise StorageError(f"lake table {self.uri()} cannot be read: {why}") from None
        configuration = metadata.configuration or {}
        self.refusal = _refusal(
            protocol.min_reader_version,
            protocol.min_writer_version,
            [*(protocol.reader_features or []), *(protocol.writer_features or [])],
            schema,
        )
        self.checkpoint_interval = int(
            configuration.get("delta.checkpointInterval") or DEFAULT_CHECKPOINT_INTERVAL
        )
        self.append_only = (configuration.get("delta.appendOnly") or "").lower() == "true"
        self._files, self._where = {}, {}
        for key, file in _files(self.spec, actions) if actions.num_rows else ():
            self._add(key, file)
        self._base = table
        self._apps = {}
        self.version = table.version()

    def holds(self, path: str) -> bool:
        """Whether the data file ``path`` (as the log names it) is in the table."""
        return path in self._where

    def _add(self, key: Key, file: Kept) -> None:
        self._files.setdefault(key, {})[file[0]] = file
        self._where[file[0]] = key

    def _remove(self, path: str) -> None:
        key = self._where.pop(path, None)
        if key is not None:
            files = self._files.get(key, {})
            files.pop(path, None)
            if not files:
                self._files.pop(key, None)

    # -- following the log ---------------------------------------------------------------
    def advance(self) -> list[Learned]:
        """Read every version after :attr:`version`, up to the newest (the first missing
        entry ends it); what each one carried."""
        learned: list[Learned] = []
        while True:
            following = self.version + 1
            try:
                text = self._entries.read(following)
                apps = None if text is None else self._apply(following, text)
            except TornEntry:
                raise
            except Exception as exc:
                log.info("%s: log entry %s unread (%s)", self.spec.name, following, first_line(exc))
                return [*learned, *self.reload()]
            if text is None:
                if self._checkpoint_ahead > self.version:  # the entries up to it are gone
                    return [*learned, *self.reload()]
                if learned:
                    self._learned_at = time.time()
                elif time.time() - self._learned_at > STALE_SECONDS and self._cleaned_up():
                    return self.reload()
                return learned
            if apps is None:  # metadata or protocol: delta-rs reads them
                return [*learned, *self.reload()]
            learned.append(Learned(following, apps))

    def _cleaned_up(self) -> bool:
        """Whether the log was cleaned up past :attr:`version` (its next entry then never
        comes: the last checkpoint is newer)."""
        self._learned_at = time.time()
        try:
            return self._entries.last_checkpoint() > self.version
        except Exception as exc:
            log.info("%s: last checkpoint unread (%s)", self.spec.name, first_line(exc))
            return False

    def reload(self) -> list[Learned]:
        """The whole state again from delta-rs; every version since counts as unknown."""
        before = self.version
        table = self.lake.open(self.spec)
        if table is None:
            raise StorageError(f"lake table {self.uri()} is gone")
        self._load(table)
        self._learned_at = time.time()
        return [Learned(v, None) for v in range(before + 1, self.version + 1)]

    def _apply(self, version: int, text: str) -> dict[str, int] | None:
        """Apply one log entry to the state: the app transactions it carried, or None when
        it changes the metadata or protocol (the state is then left to a reload)."""
        lines = _lines(self.uri(), version, text)
        if any("metaData" in line or "protocol" in line for line in lines):
            return None
        apps: dict[str, int] = {}
        for line in lines:
            if (txn := line.get("txn")) is not None:
                apps[str(txn["appId"])] = int(txn["version"])
            elif (add := line.get("add")) is not None:
                values = add.get("partitionValues") or {}
                key = tuple(values.get(c) for c in self.spec.partition_by)
                self._add(key, (add["path"], *_span(add.get("stats"))))
            elif (remove := line.get("remove")) is not None:
                self._remove(remove["path"])
        self._apps.update(apps)
        self.version = version
        return apps

    # -- committing ----------------------------------------------------------------------
    def commit(
        self,
        actions: list[AddAction],
        transactions: list[Transaction],
        removals: Sequence[Removal] = (),
    ) -> Learned | None:
        """Write the next version's entry if nobody has: the version, when it landed (the
        state is then at it), else None: another writer's entry is there.

        An attempt whose answer was lost (the entry landed, the store's retry was then
        refused as "exists", or the call failed) is known by the commit's own ``txnId``
        read back: it landed, and its rows count as new, not as their own duplicates."""
        if self.refusal is not None:
            raise StorageError(f"lake table {self.uri()} is not written: {self.refusal}")
        if removals and self.append_only:
            raise StorageError(
                f"lake table {self.uri()} is append-only (delta.appendOnly): no file is removed"
            )
        following = self.version + 1
        if self._checkpoint_passed():  # never a version below a checkpoint not seen
            return None
        txn_id = uuid.uuid4().hex
        text = entry(self.spec, actions, transactions, txn_id=txn_id, removals=removals)
        try:
            landed = self._entries.put_if_absent(following, text)
        except Exception:
            if not self._ours(following, txn_id):
                raise
            landed = True
        if not landed:
            ours = self._ours(following, txn_id)
            if ours is None:  # never "another's" unseen: its files might be named
                raise StorageError(
                    f"lake table {self.uri()}: whether the commit at version {following} "
                    "landed cannot be told (its entry does not read back); nothing is taken "
                    "back, and the zone's next pass reads again from its progress"
                )
            if not ours:
                return None
        apps = self._apply(following, text)
        assert apps is not None
        self._learned_at = time.time()
        return Learned(following, apps)

    def _checkpoint_passed(self) -> bool:
        """Whether the last checkpoint is newer than :attr:`version`: the entries up to it
        may have been cleaned up, so the next version's missing entry is no proof that
        nobody wrote it (a commit there would be acknowledged, yet every reader starts from
        the checkpoint and never sees it). The state is then reloaded by the next
        :meth:`advance`, and the commit is prepared again on it."""
        try:
            self._checkpoint_ahead = self._entries.last_checkpoint()
        except Exception as exc:
            raise StorageError(
                f"lake table {self.uri()}: its last checkpoint cannot be read "
                f"({first_line(exc)}); nothing was committed"
            ) from None
        return self._checkpoint_ahead > self.version

    def checkpoint_due(self, version: int) -> bool:
        """Whether a checkpoint belongs at ``version`` (readers then read one file, not
        every entry since the first)."""
        return version % self.checkpoint_interval == 0

    def _ours(self, version: int, txn_id: str) -> bool | None:
        """Whether ``version``'s entry is the commit ``txn_id``: True, False (another
        writer's entry), or None where that cannot be told (unread, or not there)."""
        try:
            text = self._entries.read(version)
        except Exception as exc:
            log.info("%s: log entry %s unread (%s)", self.spec.name, version, first_line(exc))
            return None
        if not text:
            return None
        try:
            first = json.loads(text.splitlines()[0])
        except ValueError:  # not an entry of ours (advance() judges it)
            return False
        return isinstance(first, dict) and (first.get("commitInfo") or {}).get("txnId") == txn_id


def write_checkpoint(lake: Lake, spec: TableSpec, version: int) -> DeltaTable | None:
    """A checkpoint of the table at ``version`` by delta-rs, unless one as new is there:
    the table at ``version`` where it was written, else None. ``_last_checkpoint`` never
    moves back: delta-rs points it at the checkpoint it writes, so where another process
    wrote a newer one meanwhile (a checkpoint thread finishing late), the pointer is set
    to the newest again."""
    entries = _Entries(lake, spec)
    if entries.last_checkpoint() >= version:
        return None
    table = DeltaTable(lake.table_uri(spec), version=version, storage_options=lake.storage_options)
    table.create_checkpoint()
    lake.sync_checkpoint(spec, version)  # delta-rs syncs nothing
    newest = max(entries.checkpoints(), default=version)
    if newest > version and entries.last_checkpoint() < newest:
        log.info("%s: checkpoint %s came after %s; pointing at it", spec.name, newest, version)
        entries.point_at(newest)
    return table


class TornEntry(StorageError):
    """A log entry that is empty or does not parse: written by no complete commit (a
    store or disk that lost part of it). It is never read as an empty commit."""


def _lines(uri: str, version: int, text: str) -> list[dict[str, Any]]:
    """A log entry's actions, one per line; :class:`TornEntry` for an empty or torn one."""
    try:
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise TornEntry(
            f"lake table {uri}: log entry {version} is torn ({first_line(exc)}); the table "
            "is not read past it until the entry is repaired"
        ) from None
    if not lines or not all(isinstance(line, dict) for line in lines):
        raise TornEntry(
            f"lake table {uri}: log entry {version} is empty; the table is not read past "
            "it until the entry is repaired"
        )
    return lines


def entry(
    spec: TableSpec,
    actions: list[AddAction],
    transactions: list[Transaction],
    *,
    txn_id: str = "",
    removals: Sequence[Removal] = (),
) -> str:
    """One commit's log entry, line by line as delta-rs writes an append (adds only, as an
    ``appendOnly`` table allows) or, with ``removals``, a delete (the files removed, and
    those written in their place; an optimize where no action changes data); ``txn_id``
    (Delta's ``commitInfo.txnId``) names the commit, so its writer knows it again."""
    now = int(time.time() * 1000)
    rearranged = not any(r.data_change for r in removals) and not any(
        a.data_change for a in actions
    )
    operation = (
        {"operation": "OPTIMIZE", "operationParameters": {}}
        if removals and rearranged
        else {"operation": "DELETE", "operationParameters": {"predicate": "cdnlake"}}
        if removals
        else {
            "operation": "WRITE",
            "operationParameters": {
                "mode": "Append",
                "partitionBy": json.dumps(spec.partition_by),
            },
        }
    )
    info = {
        "timestamp": now,
        **operation,
        "engineInfo": f"cdnlake-{__version__}",
        "clientVersion": f"cdnlake-{__version__}",
        "txnId": txn_id or uuid.uuid4().hex,
    }
    lines: list[dict[str, Any]] = [{"commitInfo": info}]
    for removal in removals:
        remove = {
            "path": removal.path,
            "deletionTimestamp": now,
            "dataChange": removal.data_change,
            "extendedFileMetadata": False,
            "partitionValues": dict(removal.partition_values),
        }
        lines.append({"remove": remove})
    for action in actions:
        add = {
            "path": encoded(action.path),
            "partitionValues": dict(action.partition_values),
            "size": action.size,
            "modificationTime": action.modification_time,
            "dataChange": action.data_change,
            "stats": action.stats,
        }
        lines.append({"add": add})
    for txn in transactions:
        lines.append(
            {"txn": {"appId": txn.app_id, "version": txn.version, "lastUpdated": txn.last_updated}}
        )
    return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)


def encoded(path: str) -> str:
    """A data file's path as the log holds it (a URI reference: percent-encoded)."""
    return quote(path, safe="/=")


def _refusal(reader: int, writer: int, features: list[str], schema: str) -> str | None:
    """Why cdnlake's writer must not write to a table of this protocol, or None."""
    if reader not in READER_VERSIONS or writer not in WRITER_VERSIONS or features:
        named = ", ".join(features) or f"reader version {reader}, writer version {writer}"
        return f"its protocol has {named} (cdnlake writes reader 1 / writer 2 tables only)"
    if "delta.invariants" in schema:
        return "its columns have invariants (cdnlake writes tables without them)"
    return None


def _files(spec: TableSpec, actions: Any) -> Iterator[tuple[Key, Kept]]:
    """Each file of delta-rs's add actions (flattened) with its partition, column by
    column in Arrow (a Python value per row and column, no more: 100,000 files in a
    fraction of a second)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = pa.table(actions)

    def column(name: str, kind: pa.DataType) -> list[Any]:
        if name not in table.column_names:
            return [None] * table.num_rows
        values = table.column(name)
        if kind == pa.int64() and pa.types.is_timestamp(values.type):
            values = pc.cast(values, pa.timestamp("us", tz="UTC"))
        return list(pc.cast(values, kind).to_pylist())

    paths = column("path", pa.string())
    keys = zip(*(column(f"partition.{c}", pa.string()) for c in spec.partition_by), strict=True)
    lows, highs, nulls = (
        column(f"{s}.{STATS_COLUMN}", pa.int64()) for s in ("min", "max", "null_count")
    )
    for path, key, low, high, null in zip(paths, keys, lows, highs, nulls, strict=True):
        yield key, (path, low, high, null)


def _span(stats: str | None) -> tuple[int | None, int | None, int | None]:
    """A data file's ``ts`` statistics (min, max, null count) from its log entry."""
    if not stats:
        return None, None, None
    parsed = json.loads(stats)
    low, high = ((parsed.get(side) or {}).get(STATS_COLUMN) for side in ("minValues", "maxValues"))
    nulls = (parsed.get("nullCount") or {}).get(STATS_COLUMN)
    return (
        _micros(low) if isinstance(low, str) else None,
        _micros(high) if isinstance(high, str) else None,
        nulls if isinstance(nulls, int) else None,
    )


def _micros(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // timedelta(microseconds=1)


def _moment(micros: int | None) -> datetime | None:
    return None if micros is None else EPOCH + timedelta(microseconds=micros)


class _Entries:
    """A table's ``_delta_log`` folder: entries read, and written put-if-absent."""

    def __init__(self, lake: Lake, spec: TableSpec) -> None:
        self.lake = lake
        self.folder = f"{spec.name}/_delta_log"
        self._store: S3Store | None = None

    def name(self, version: int) -> str:
        return f"{self.folder}/{version:020d}.json"

    def read(self, version: int) -> str | None:
        """One version's entry, or None where it does not exist."""
        return self._read(self.name(version))

    def last_checkpoint(self) -> int:
        text = self._read(self.pointer)
        return -1 if text is None else int(json.loads(text)["version"])

    @property
    def pointer(self) -> str:
        return f"{self.folder}/_last_checkpoint"

    def checkpoints(self) -> list[int]:
        """The versions of the checkpoints in the folder (single-file ones, as delta-rs
        writes them), oldest first."""
        import pyarrow.fs as pafs

        found = self.lake.filesystem().get_file_info(pafs.FileSelector(self.folder))
        return sorted(
            int(info.base_name.split(".", 1)[0])
            for info in found
            if info.base_name.endswith(".checkpoint.parquet")
            and info.base_name.split(".", 1)[0].isdigit()
        )

    def point_at(self, version: int) -> None:
        """``_last_checkpoint`` names the checkpoint at ``version`` (its size: the actions
        it holds, as Delta's pointer records)."""
        import pyarrow.parquet as pq

        name = f"{self.folder}/{version:020d}.checkpoint.parquet"
        with self.lake.filesystem().open_input_file(name) as source:
            size = pq.ParquetFile(source).metadata.num_rows
        text = json.dumps({"version": version, "size": size}).encode()
        if self.lake.local is None:
            self.lake.write_file(self.pointer, text)  # a PUT replaces it whole
            return
        final = self.lake.local / self.pointer
        temporary = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
        write_durably(temporary, text, named=False)
        os.replace(temporary, final)  # readers see the old pointer or the new, whole
        sync_path(final.parent)

    def _read(self, name: str) -> str | None:
        if self.lake.local is not None:
            try:
                return (self.lake.local / name).read_text()
            except FileNotFoundError:
                return None
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            return bytes(obstore.get(self.store(), name).bytes()).decode()
        except (NotFoundError, FileNotFoundError):
            return None

    def put_if_absent(self, version: int, text: str) -> bool:
        """Write one version's entry unless it exists: whether it was ours that landed."""
        name = self.name(version)
        if self.lake.local is not None:
            final = self.lake.local / name
            temporary = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
            write_durably(temporary, text.encode(), named=False)  # whole before it is named
            try:
                os.link(temporary, final)
            except FileExistsError:
                return False
            finally:
                temporary.unlink()
            sync_path(final.parent)  # the name too: acknowledged only once it is there
            return True
        self._check_store()
        return self._put_create(name, text.encode())

    def _put_create(self, name: str, data: bytes) -> bool:
        """A PUT of ``name`` only if absent (``If-None-Match: *``): whether it was made."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self.store(), name, data, mode="create")
        except (AlreadyExistsError, PreconditionError, FileExistsError):
            return False
        return True

    def _check_store(self) -> None:
        """Once per process and store (endpoint, bucket): that it honours a conditional
        PUT, on which every commit's exactly-once rests (a store ignoring it lets two
        writers both land one version, one commit lost). Where it does not, every write
        is refused in one line naming the store (:class:`StorageError`)."""
        endpoint = self.lake.storage_options.get("AWS_ENDPOINT_URL") or "AWS S3"
        bucket = self.lake.uri.removeprefix("s3://").partition("/")[0]
        with _PROBED_LOCK:
            if (endpoint, bucket) not in _PROBED:
                _PROBED[endpoint, bucket] = self._probe(f"{endpoint}, bucket {bucket}")
            refusal = _PROBED[endpoint, bucket]
        if refusal is not None:
            raise StorageError(refusal)

    def _probe(self, store: str) -> str | None:
        """A scratch object under the lake's root put-if-absent twice, then deleted: None
        where the second was refused, else why nothing may be written."""
        import obstore

        scratch = f"_cdnlake/probe-{uuid.uuid4().hex}"
        try:
            honoured = self._put_create(scratch, b"probe") and not self._put_create(
                scratch, b"probe"
            )
        finally:
            try:
                obstore.delete(self.store(), scratch)
            except Exception as exc:  # a scratch object left costs nothing
                log.warning("cannot delete the probe %s: %s", scratch, first_line(exc))
        if honoured:
            return None
        return (
            f"the lake's store ({store}) ignores a conditional PUT (If-None-Match: *): "
            "two writers could both land one version and a commit be lost; cdnlake "
            "writes nothing to it (use a store that honours it)"
        )

    def store(self) -> S3Store:
        """obstore's S3 client for the lake, from the options delta-rs and Arrow get
        (endpoint, region, plain HTTP) and the standard AWS environment (credentials)."""
        if self._store is None:
            from obstore.store import S3Store

            bucket, _, prefix = self.lake.uri.removeprefix("s3://").partition("/")
            opts = self.lake.storage_options  # credentials: obstore reads the environment
            config: dict[str, str] = {}
            if opts.get("AWS_ENDPOINT_URL"):
                config["endpoint"] = opts["AWS_ENDPOINT_URL"]
            if opts.get("AWS_REGION"):
                config["region"] = opts["AWS_REGION"]
            self._store = S3Store(
                bucket,
                prefix=prefix.rstrip("/") or None,
                config=config,  # type: ignore[arg-type]
                client_options={"allow_http": opts.get("AWS_ALLOW_HTTP") == "true"},
            )
        return self._store
