"""What one process shares of the lake: each table's one state and committer.

Built once at the composition root (each CLI command, the daemon) and passed to everything
that touches the lake, so a process holds one state of each table and every change goes
through that table's one committer (:mod:`cdnlake.lake.log.table`). It also carries the
``[privacy]`` policy, the erasures rows are held against, and the traffic sink.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Protocol, overload

from cdnlake.errors import first_line
from cdnlake.lake.log.progress import ERASED
from cdnlake.lake.log.schema import REQUESTS, TableSpec
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.erasure_key import KeySource
from cdnlake.lake.zone.erasures import EVERY_ZONE, ErasureFilter
from cdnlake.privacy import KEEP, PrivacyPolicy

if TYPE_CHECKING:
    import polars as pl
    from deltalake import DeltaTable

    from cdnlake.config import StorageConfig
    from cdnlake.lake.log.table import LogTable, MergeTable

log = logging.getLogger(__name__)


class TrafficSink(Protocol):
    """The process's traffic counters (in ``monitoring/``, which the lake never imports)."""

    def stored(self, zone_id: int, rows: pl.DataFrame, *, counted_as: str | None = None) -> None:
        """``rows`` (the ``requests`` table's columns) were newly stored for ``zone_id`` by
        one commit that landed; ``counted_as``: the source they count under instead of each
        row's own (``archive`` for an archive import, whose rows are v1 lines). Called once
        per such commit, from the committing thread; never for a commit that was sent
        back, lost its race or failed, nor for rows the table already held."""
        ...


class LakeSession:
    def __init__(
        self,
        lake: Lake,
        privacy: PrivacyPolicy = KEEP,
        erasure_keys: KeySource | None = None,
        *,
        traffic: TrafficSink | None = None,
    ) -> None:
        """``erasure_keys``: where the key that hashes erased addresses is found (none:
        address erasures are not matched, a test's lake without a root). ``traffic``: the
        daemon's counters; None where nothing counts (a CLI command)."""
        self.lake = lake
        self.privacy = privacy
        self.erasure_keys = erasure_keys or KeySource(None)
        self.traffic = traffic
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}  # one per table: loads run apart
        self._logs: dict[str, LogTable] = {}
        self._merges: dict[str, MergeTable] = {}
        self._readers: dict[str, DeltaTable] = {}
        # The erasures the rows entering a table are held against (read when a zone's
        # erasure mark says there are new ones). Made here, under no lock: its ``marks``
        # reads the session's tables, and ``shield_events``' committer asks it for the
        # lake's mark under that table's lock.
        self.erasures = ErasureFilter(
            lake, self.erasure_keys, self._erasure_marks, privacy.stored_as
        )

    @classmethod
    def from_config(
        cls,
        storage: StorageConfig,
        *,
        privacy: PrivacyPolicy,
        traffic: TrafficSink | None = None,
    ) -> LakeSession:
        """The session of a composition root: ``privacy`` is the configured policy
        (``PrivacyPolicy.from_config(config.privacy)``), required so that no root can
        forget it; its key of ``[privacy] hash_key_env`` hashes erased addresses, else
        ``<root>/work/erasure.key`` does."""
        return cls(
            Lake.from_config(storage),
            privacy,
            KeySource(storage.work, privacy.erasure_key or None),
            traffic=traffic,
        )

    def stored(
        self, spec: TableSpec, zone_id: int, rows: pl.DataFrame, counted_as: str | None = None
    ) -> None:
        """A commit of ``spec`` that landed newly stored ``rows`` of ``zone_id``: requests
        go to the traffic sink (under ``counted_as``, when the writer has one). The commit
        has landed whatever the sink does, so a sink that fails is logged, never turned
        into a failed commit."""
        if self.traffic is None or spec.name != REQUESTS.name or rows.height == 0:
            return
        try:
            self.traffic.stored(zone_id, rows, counted_as=counted_as)
        except Exception:  # the rows are stored: a counting bug must not fail the commit
            log.exception("zone %s: %d stored requests not counted", zone_id, rows.height)

    def _erasure_marks(self, spec: TableSpec, zones: list[int]) -> dict[int, int | None]:
        """The erasure marks of ``zones`` in ``spec`` as the table has it now."""
        return self.log_table(spec).marks(zones, ERASED)

    @overload
    def log_table(self, spec: TableSpec) -> LogTable: ...
    @overload
    def log_table(self, spec: TableSpec, *, create: Literal[True]) -> LogTable: ...
    @overload
    def log_table(self, spec: TableSpec, *, create: Literal[False]) -> LogTable | None: ...
    def log_table(self, spec: TableSpec, *, create: bool = True) -> LogTable | None:
        """The exactly-once table ``spec``, loaded at the first call (created, or given the
        columns it lacks). ``create=False``, a reader's (``top``, the metrics): None where
        the table does not exist, an older one followed as it is (a reader writes nothing);
        a writer of the process asking for it later makes it ready then."""
        from cdnlake.lake.log.table import LogTable

        if spec.key is None:
            raise ValueError(f"{spec.name} has no key: its rows are merged (merge_table)")
        with self._table_lock(spec):
            held = self._logs.get(spec.name)
            if held is None:
                table = None if create else self.lake.open(spec)
                if not create and table is None:
                    return None
                held = self._logs[spec.name] = LogTable(
                    self.lake,
                    spec,
                    REQUESTS.app_id(EVERY_ZONE, ERASED)
                    if spec.name == REQUESTS.name
                    else self.erasures.lake_mark,
                    table,
                )
            elif create and not held.made:
                self.lake.open_or_create(spec)  # its state reads the metadata entry
                held.made = True
            return held

    def merge_table(self, spec: TableSpec) -> MergeTable:
        """The bookkeeping table ``spec``, opened at the first call (created where it does
        not exist yet)."""
        from cdnlake.lake.log.table import MergeTable

        if spec.key is not None:
            raise ValueError(f"{spec.name} is written through its log (log_table)")
        with self._table_lock(spec):
            if spec.name not in self._merges:
                self._merges[spec.name] = MergeTable(self.lake, spec)
            return self._merges[spec.name]

    def reader(self, spec: TableSpec) -> DeltaTable | None:
        """The table as this process reads it (``status``, ``/healthz``, the audit): one
        delta-rs snapshot per table, brought up to date at each call (reopened only where
        its entries were cleaned up); None while the table does not exist (a reader never
        creates it)."""
        with self._table_lock(spec):
            table = self._readers.get(spec.name)
            if table is not None:
                try:
                    table.update_incremental()
                    return table
                except Exception as exc:  # explicit: any failure to advance means reopen
                    log.info("lake table %s: reopened (%s)", spec.name, first_line(exc))
            opened = self.lake.open(spec)
            if opened is None:
                self._readers.pop(spec.name, None)
            else:
                self._readers[spec.name] = opened
            return opened

    def _table_lock(self, spec: TableSpec) -> threading.Lock:
        """``spec``'s loading lock; the session's lock only the first time, so a table's
        committer reading another table (the lake's erasure mark) waits on no holder of it."""
        held = self._loading.get(spec.name)
        if held is not None:
            return held
        with self._lock:
            return self._loading.setdefault(spec.name, threading.Lock())

    def close(self) -> None:
        """Commit what is queued, finish the checkpoints under way."""
        with self._lock:
            logs, merges = list(self._logs.values()), list(self._merges.values())
        for log_table in logs:
            log_table.close()
        for merge_table in merges:
            merge_table.close()

    def __enter__(self) -> LakeSession:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
