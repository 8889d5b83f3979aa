"""The bookkeeping tables: ``ingest_runs``, ``ingest_gaps``, ``rejected_lines``, ``audit_days``.

Every write is a MERGE on the row's key, so that no row is ever written twice:

- ``ingest_runs`` by ``run_id``;
- ``rejected_lines`` by ``record_key``, so that a record read again (an overlapping v2
  window, a closed v1 day read once more) is kept once: a v2 record by its request id, a
  shield event by its log id, a line of a file by the file and its line number;
- ``audit_days`` by day: a day audited again (after a re-read) updates its row;
- ``ingest_gaps`` by span: a gap claims only what no earlier gap of its zone claims, and
  a gap that continues one (an outage that goes on) extends that row instead of adding
  one (see :meth:`Bookkeeping.record_gaps`).

Why a MERGE and not an append: when the store applied a commit but its answer was lost,
delta-rs finds the commit's version taken and commits the same actions again as the next
version. An append then adds its file a second time, which doubles its rows once a
compaction (``maintain``) replaced the first copy in between. A MERGE reads the zone's
rows first, so delta-rs sees that the version it lost added rows it did not read and
refuses the commit; the MERGE is then run again and finds its rows already there.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl
from deltalake import CommitProperties
from deltalake.exceptions import CommitFailedError

from cdnlake.errors import StorageError
from cdnlake.lake.schema import (
    AUDIT_DAYS,
    INGEST_GAPS,
    INGEST_RUNS,
    REJECTED_LINES,
    TableSpec,
    conform,
    polars_schema,
)
from cdnlake.lake.shared import InFlight, PassGroup, shared_table
from cdnlake.lake.store import COMMIT_ATTEMPTS, Lake, first_line

log = logging.getLogger(__name__)

# How long the first pass to record its run waits for the passes in flight beside it.
GATHER_SECONDS = 2.0
# A MERGE whose commit delta-rs refused (a concurrent write to the zone's rows, or its
# own commit whose answer was lost) is run again, this many times in all.
MERGE_ATTEMPTS = 10
Span = tuple[datetime, datetime]
ClaimKey = tuple[int, bool]  # a zone, and whether its gaps are a shield zone's
RunRecord = tuple[int, dict[str, Any]]  # a zone, its run row


def _frame(spec: TableSpec, zone_id: int, rows: list[dict[str, Any]]) -> pl.DataFrame:
    records = [{spec.zone_column: zone_id, **row} for row in rows]
    return pl.DataFrame(records, schema=polars_schema(spec.schema))


class RunGathering:
    """The run rows of a process's passes, gathered into one MERGE per table.

    The first pass to record its run waits for the passes still in flight beside it
    (those inside :meth:`passing`), up to ``GATHER_SECONDS``, then records every run
    gathered by then at once; a pass ending meanwhile opens the next gathering. A pass
    alone (a command's only zone) waits for nobody. A daemon's quiet passes end a few a
    second, each MERGE costs about 60 ms of CPU whatever its rows: one per gathering
    instead of one per MERGE's latency. The rows are bookkeeping: a pass's own rows
    and progress were committed before it records its run."""

    def __init__(self, record: Callable[[list[RunRecord]], list[BaseException | None]]) -> None:
        self._record = record
        self._changed = threading.Condition()
        self._passing = InFlight(self._changed)  # the process's passes in flight
        self._arrived = 0  # of them, those recording their run
        self._open: _Gathered | None = None
        self._merging = threading.Lock()  # one gathering's MERGE at a time

    def passing(self) -> AbstractContextManager[None]:
        """A pass in flight: a gathering waits for its run (up to ``GATHER_SECONDS``)."""
        return self._passing.held()

    def record(self, item: RunRecord) -> None:
        """Once ``item``'s gathering is recorded; its error raised."""
        with self._changed:
            self._arrived += 1
            self._changed.notify_all()
            gathered = self._open
            leading = gathered is None
            if gathered is None:
                gathered = self._open = _Gathered()
            index = len(gathered.items)
            gathered.items.append(item)
        try:
            if leading:
                self._lead(gathered)
            else:
                gathered.done.wait()
        finally:
            with self._changed:
                self._arrived -= 1
                self._changed.notify_all()
        outcome = gathered.outcomes[index]
        if outcome is not None:
            raise outcome

    def _lead(self, gathered: _Gathered) -> None:
        try:
            deadline = time.monotonic() + GATHER_SECONDS
            with self._changed:
                while (
                    self._passing.count > self._arrived
                    and (left := deadline - time.monotonic()) > 0
                ):
                    self._changed.wait(left)
                self._open = None  # closed: what ends from now on gathers anew
            with self._merging:
                outcomes = self._record(gathered.items)
            if len(outcomes) != len(gathered.items):
                raise AssertionError("a gathering's outcomes do not match its runs")
            gathered.outcomes = outcomes
        except BaseException as exc:  # each pass of the gathering learns it
            with self._changed:
                if self._open is gathered:
                    self._open = None
            gathered.outcomes = [exc] * len(gathered.items)
        finally:
            gathered.done.set()


@dataclass
class _Gathered:
    items: list[RunRecord] = field(default_factory=list)
    outcomes: list[BaseException | None] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)


class Bookkeeping:
    def __init__(self, lake: Lake) -> None:
        self.lake = lake

    def _merge(
        self,
        spec: TableSpec,
        rows: Callable[[], pl.DataFrame],
        match: str,
        *,
        zones: list[int],
        update: dict[str, str] | None = None,
        update_if: str | None = None,
    ) -> None:
        """Insert the rows that ``match`` (``t``: the table, ``s``: the rows) finds no row
        of their zone for; ``update`` those it finds (where ``update_if`` holds).

        ``zones``: the zones of the rows (the MERGE reads only their partitions).
        ``rows`` is asked again for each attempt: what to write may depend on what the
        table holds by then."""
        column = spec.zone_column
        within = ", ".join(str(int(zone)) for zone in sorted(set(zones)))
        predicate = f"t.{column} = s.{column} AND t.{column} IN ({within}) AND {match}"
        for attempt in range(1, MERGE_ATTEMPTS + 1):
            frame = rows()
            if frame.height == 0:
                return
            try:
                with shared_table(self.lake, spec).current() as table:  # the process's one
                    merger = table.merge(
                        conform(frame, spec.schema),
                        predicate=predicate,
                        source_alias="s",
                        target_alias="t",
                        commit_properties=CommitProperties(max_commit_retries=COMMIT_ATTEMPTS),
                    )
                    if update:
                        merger = merger.when_matched_update(update, predicate=update_if)
                    merger.when_not_matched_insert_all().execute()
                return
            except CommitFailedError as exc:
                if attempt == MERGE_ATTEMPTS:
                    raise StorageError(
                        f"cannot write {spec.name}: {first_line(exc)} ({attempt} attempts)"
                    ) from None
                log.info("%s: merge refused, run again: %s", spec.name, first_line(exc))
            except Exception as exc:
                raise StorageError(f"cannot write {spec.name}: {first_line(exc)}") from None

    def runs(self) -> RunGathering:
        """The process's gathering of run rows for this lake (see :class:`RunGathering`)."""
        return self.lake.held(
            "bookkeeping:runs", lambda: RunGathering(Bookkeeping(self.lake)._record_runs)
        )

    def record_run(self, zone_id: int, run: dict[str, Any]) -> None:
        """The run's row, once by its ``run_id``. The runs of a process's passes that end
        close together go in one MERGE (:class:`RunGathering`). A run's gaps are not
        here: a pass records each when it claims it (:meth:`record_gaps`), before any
        commit moves its zone past the loss."""
        self.runs().record((zone_id, run))

    def _record_runs(self, batch: list[RunRecord]) -> list[BaseException | None]:
        """The rows of ``batch``'s runs in one MERGE: None for each, or the error."""
        frame = pl.concat([_frame(INGEST_RUNS, zone, [run]) for zone, run in batch])
        # The ids also as literals: delta-rs skips the files whose statistics rule them
        # out, instead of reading every run file of the zones at every pass.
        ids = ", ".join(_text(run["run_id"]) for _, run in batch)
        match = f"t.run_id = s.run_id AND t.run_id IN ({ids})"
        try:
            self._merge(INGEST_RUNS, lambda: frame, match, zones=[z for z, _ in batch])
        except StorageError as exc:
            return [StorageError(str(exc)) for _ in batch]
        return [None] * len(batch)

    def record_audit_days(self, zone_id: int, days: list[dict[str, Any]]) -> None:
        """The zone's audited days, one row per day: a day audited again replaces its row."""
        frame = _frame(AUDIT_DAYS, zone_id, days)
        columns = [c for c in AUDIT_DAYS.columns if c != "day"]
        self._merge(
            AUDIT_DAYS,
            lambda: frame,
            "t.day = s.day",
            zones=[zone_id],
            update={c: f"s.{c}" for c in columns},
        )

    def record_gaps(self, zone_id: int, gaps: list[dict[str, Any]]) -> float:
        """Claim the spans of ``gaps`` lost, each instant once per zone.

        Only what no gap of the zone claims yet is written: the rest of a span that
        continues a gap (one ending where it starts: an outage still going on) extends
        that gap's row; any other rest is a row of its own. Pull zones and shield zones
        (``source = 'shield'``) are numbered apart and claim apart. Returns the seconds
        newly claimed (as they stood before the first attempt)."""
        wanted = [g for g in gaps if g["gap_to"] > g["gap_from"]]
        if not wanted:
            return 0.0
        key = (zone_id, wanted[0].get("source") == "shield")
        spans = _union([(g["gap_from"], g["gap_to"]) for g in wanted])

        def fresh(held: dict[ClaimKey, list[dict[str, Any]]]) -> list[Span]:
            """What of ``spans`` no gap of the zone (and kind) claims yet."""
            return _subtract(spans, _spans(held.get(key, [])))

        new = fresh(self._claimed({key}))

        def rows() -> pl.DataFrame:
            held = self._claimed({key})
            ends = {row["gap_to"]: row for row in held.get(key, [])}
            out: list[dict[str, Any]] = []
            for start, end in fresh(held):
                if start in ends:  # it goes on from a claimed gap: that row grows
                    out.append({**ends[start], "gap_to": end})
                else:
                    first = next(g for g in wanted if g["gap_from"] <= start < g["gap_to"])
                    out.append({**first, "gap_from": start, "gap_to": end})
            return _frame(INGEST_GAPS, zone_id, out)

        kind = "(t.source = 'shield') IS NOT DISTINCT FROM (s.source = 'shield')"
        self._merge(
            INGEST_GAPS,
            rows,
            f"t.gap_from = s.gap_from AND {kind}",
            zones=[zone_id],
            update={"gap_to": "s.gap_to"},
            update_if="s.gap_to > t.gap_to",
        )
        return sum((end - start).total_seconds() for start, end in new)

    def _claimed(self, keys: set[ClaimKey]) -> dict[ClaimKey, list[dict[str, Any]]]:
        """The gap rows of each (zone, shield) of ``keys`` (its pull zone's or its shield
        zone's), in one read."""
        table = self.lake.open(INGEST_GAPS)
        if table is None:
            return {}
        zones = sorted({zone for zone, _ in keys})
        try:
            found = self.lake.dataset(INGEST_GAPS, table, [("zone", "in", zones)]).to_table()
        except OSError as exc:
            raise StorageError(f"cannot read ingest_gaps: {exc}") from None
        held: dict[ClaimKey, list[dict[str, Any]]] = {}
        for row in found.to_pylist():
            key = (row["zone"], row["source"] == "shield")
            if key in keys and row["gap_to"] > row["gap_from"]:
                held.setdefault(key, []).append(row)
        return held

    def read_whole(self, zone_id: int, source: str, instant: datetime) -> bool:
        """Whether a run of the zone from ``source`` ended ``ok`` with ``instant`` inside
        its window: it read its input whole (a file without damage), so what followed
        ``instant`` there is in the lake."""
        import pyarrow as pa
        import pyarrow.dataset as ds

        table = self.lake.open(INGEST_RUNS)
        if table is None:
            return False
        moment = pa.scalar(instant, pa.timestamp("us", "UTC"))
        whole = (
            (ds.field("source") == source)
            & (ds.field("outcome") == "ok")
            & (ds.field("window_from") <= moment)
            & (ds.field("window_to") >= moment)
        )
        runs = self.lake.dataset(INGEST_RUNS, table, [("zone", "=", str(zone_id))])
        try:
            return bool(runs.head(1, columns=["run_id"], filter=whole).num_rows)
        except OSError as exc:
            raise StorageError(f"cannot read ingest_runs: {exc}") from None

    def rejects(self) -> PassGroup[pl.DataFrame, None]:
        """The process's group of its passes' rejected lines, each submitted as a frame of
        :func:`rejects_frame` rows, one MERGE for those waiting at once.

        A pass records the rejects of the pages it has read just before the commit that
        moves its progress past them (so none is lost to a SIGKILL in between); while
        other passes that may still store rejects are in flight, a MERGE waits for theirs
        up to ``GROUP_SPACING``, as a group commit does (:mod:`cdnlake.lake.shared`).
        Zones whose every page has a bad line then cost a MERGE a second, not one per
        page (each about 60 ms of CPU whatever its rows)."""
        return self.lake.held(
            "bookkeeping:rejects", lambda: PassGroup(Bookkeeping(self.lake)._merge_rejects)
        )

    def _merge_rejects(self, frames: list[pl.DataFrame]) -> list[BaseException | None]:
        self.record_rejects(frames)
        return [None] * len(frames)

    def record_rejects(self, frames: list[pl.DataFrame]) -> None:
        """Rows of :func:`rejects_frame`, of one or more zones, in one MERGE: each line or
        record once (see the module docstring). A pass's go through :meth:`rejects`."""
        frame = pl.concat(frames).unique(
            subset=["zone", "record_key"], keep="first", maintain_order=True
        )
        zones = frame["zone"].unique().to_list()
        self._merge(REJECTED_LINES, lambda: frame, "t.record_key = s.record_key", zones=zones)


def rejects_frame(
    zone_id: int,
    rejects: pl.DataFrame,
    *,
    source: str,
    file: str,
    rejected_at: datetime,
    run_id: str,
) -> pl.DataFrame:
    """The ``rejected_lines`` rows of a source's rejects, each with its record key: a v2
    record by its request id (a shield event by its log id), a line of a file by the file
    and its line number."""
    if source in ("v2", "shield"):  # a record of the API: by its id (logId for shield)
        key = pl.concat_str(
            pl.lit(f"{source}:"),
            pl.coalesce(
                pl.col("request_id"),
                pl.lit("md5:") + pl.col("raw_line").map_elements(_md5, return_dtype=pl.String),
            ),
        )
    else:
        key = pl.concat_str(pl.lit(f"{file}:"), pl.col("line_number").cast(pl.String))
    return rejects.with_columns(
        pl.lit(zone_id, pl.Int64).alias("zone"),
        pl.lit(source).alias("source"),
        pl.lit(file).alias("file"),
        pl.lit(rejected_at).dt.cast_time_unit("us").alias("rejected_at"),
        pl.lit(run_id).alias("run_id"),
        key.alias("record_key"),
    ).unique(subset=["record_key"], keep="first", maintain_order=True)


def _md5(text: str | None) -> str:
    return hashlib.md5((text or "").encode(), usedforsecurity=False).hexdigest()


def _text(value: str) -> str:
    """A string literal of a merge predicate (delta-rs binds no parameters there)."""
    return "'" + value.replace("'", "''") + "'"


def _spans(rows: list[dict[str, Any]]) -> list[Span]:
    return [(row["gap_from"], row["gap_to"]) for row in rows]


def _union(spans: list[Span]) -> list[Span]:
    """The same instants as disjoint spans in order (touching spans become one)."""
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _subtract(spans: list[Span], taken: list[Span]) -> list[Span]:
    """What of ``spans`` (disjoint, in order) lies outside every span of ``taken``."""
    out: list[Span] = []
    held = _union(taken)
    for start, end in spans:
        cursor = start
        for lo, hi in held:
            if hi <= cursor or lo >= end:
                continue
            if lo > cursor:
                out.append((cursor, lo))
            cursor = max(cursor, hi)
        if cursor < end:
            out.append((cursor, end))
    return out
