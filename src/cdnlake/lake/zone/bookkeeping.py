"""The bookkeeping tables: ``ingest_runs``, ``ingest_gaps``, ``rejected_lines``,
``audit_days``, ``archive_parts``, ``erased_requests``.

Every write is a MERGE on the row's key (a run's id, a rejected record's key, a day, a
part's path, an erased request's hash, a gap's span), through the table's one committer
(:mod:`cdnlake.lake.log.table`), so that no row is ever written twice. Not an append:
where the store applied a commit but its answer was lost, delta-rs commits the same
actions again as the next version, and an appended file would count twice. A MERGE reads
the zone's rows first, so delta-rs refuses that second commit; run again, the MERGE finds
its rows already there.
"""

from __future__ import annotations

import hashlib
import logging
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from cdnlake.errors import ConfigError, StorageError
from cdnlake.lake.log.schema import (
    ARCHIVE_PARTS,
    AUDIT_DAYS,
    ERASED_REQUESTS,
    INGEST_GAPS,
    INGEST_RUNS,
    REJECTED_LINES,
    REQUESTS,
    SHIELD_EVENTS,
    TableSpec,
    conform,
    frame_of,
    polars_schema,
)
from cdnlake.lake.log.table import Delete, Merge, literal
from cdnlake.lake.zone.erasure_key import ErasureKey

if TYPE_CHECKING:
    from collections.abc import Iterator

    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy

log = logging.getLogger(__name__)

HASHED = "hmac-sha256:"  # how a keyed hash begins (ErasureKey.digest)
Span = tuple[datetime, datetime]
ClaimKey = tuple[int, bool]  # a zone, and whether its gaps are a shield zone's


def _frame(spec: TableSpec, zone_id: int, rows: list[dict[str, Any]]) -> pl.DataFrame:
    records = [{spec.zone_column: zone_id, **row} for row in rows]
    return pl.DataFrame(records, schema=polars_schema(spec.schema))


class Bookkeeping:
    """The bookkeeping writes of a session: each through its table's one committer, so the
    runs and rejected lines of the passes that end together go in one MERGE per table
    (:mod:`cdnlake.lake.log.committer`); a gap's claim and an audit's days go at once."""

    def __init__(self, session: LakeSession) -> None:
        self.session = session

    @contextmanager
    def passing(self) -> Iterator[None]:
        """While a pass may still record its rejects and its run: those MERGEs may wait
        for its rows, to carry them with the others'."""
        with ExitStack() as stack:
            for spec in (INGEST_RUNS, REJECTED_LINES):
                stack.enter_context(self.session.merge_table(spec).committer.passing())
            yield

    def record_run(self, zone_id: int, run: dict[str, Any]) -> None:
        """The run's row, once by its ``run_id``. A run's gaps are not here: a pass records
        each when it claims it (:meth:`record_gaps`), before any commit moves its zone
        past the loss."""
        frame = _frame(INGEST_RUNS, zone_id, [run])
        merge = Merge(
            lambda: frame, "t.run_id = s.run_id", [zone_id], key=("run_id",), key_literals=True
        )
        self.session.merge_table(INGEST_RUNS).committer.run(merge)

    def record_audit_days(self, zone_id: int, days: list[dict[str, Any]]) -> None:
        """The zone's audited days, one row per day: a day audited again replaces its row."""
        frame = _frame(AUDIT_DAYS, zone_id, days)
        columns = [c for c in AUDIT_DAYS.columns if c != "day"]
        merge = Merge(
            lambda: frame, "t.day = s.day", [zone_id], update={c: f"s.{c}" for c in columns}
        )
        self.session.merge_table(AUDIT_DAYS).committer.run(merge, patient=False)

    def record_archive_parts(
        self, zone_id: int, parts: list[dict[str, Any]], *, listing: bool
    ) -> None:
        """Archived parts of the zone, one row each by path. A ``listing`` updates what
        the listing tells (size, checksum, last change, state) and keeps what an import
        counted, and never takes back a done state of the same copy (another run may
        have imported it since this listing); an import's rows replace theirs whole."""
        if not parts:
            return
        frame = _frame(ARCHIVE_PARTS, zone_id, parts)
        listed = ("size", "checksum", "last_changed", "state", "listed_at", "day")
        columns = (
            listed
            if listing
            else [c for c in ARCHIVE_PARTS.columns if c not in ("path", "listed_at")]
        )
        update = {c: f"s.{c}" for c in columns}
        if listing:
            update["state"] = _LISTED_STATE
        merge = Merge(lambda: frame, "t.path = s.path", [zone_id], update=update)
        self.session.merge_table(ARCHIVE_PARTS).committer.run(merge, patient=False)

    def record_erased(self, zone_id: int, rows: pl.DataFrame, kind: str) -> None:
        """Requests of the zone (``request_id``, ``ts``) an erasure removed (``kind``
        "removed") or held back ("held"), as :func:`erased_rows`: each once, so that the
        audit explains an hour short by them once, however often they are read again."""
        if rows.height == 0:
            return
        rows = rows.select("request_id", "ts").with_columns(
            pl.lit(zone_id, pl.Int64).alias("zone"),
            pl.lit(kind).alias("kind"),
            pl.lit(datetime.now(UTC)).alias("recorded_at"),
        )
        frame = erased_rows(self._erasure_key(), rows)
        merge = Merge(lambda: frame, "t.request_id = s.request_id", [zone_id])
        self.session.merge_table(ERASED_REQUESTS).committer.run(merge, patient=False)

    def hash_erased_ids(self, zones: list[int] | None = None) -> int:
        """Rows of ``erased_requests`` written before ids were hashed (a raw request id,
        its instant), of ``zones`` (all without), rewritten as :meth:`record_erased` writes
        them: the hashed rows merged in ("removed" wins over "held"), then the raw ones
        deleted; cut off between the two, the next run finishes. How many were raw."""
        table = self.session.reader(ERASED_REQUESTS)
        if table is None:
            return 0
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        filters = [("zone", "in", [str(z) for z in zones])] if zones else None
        unhashed = ~pc.starts_with(ds.field("request_id"), pattern=HASHED)
        with _reading(ERASED_REQUESTS):
            dataset = self.session.lake.dataset(ERASED_REQUESTS, table, filters)
            raw = frame_of(dataset.to_table(filter=unhashed))
        if raw.height == 0:
            return 0
        key = self._erasure_key()
        erased = self.session.merge_table(ERASED_REQUESTS).committer
        first = raw.sort(pl.col("kind") != "removed")  # one row a request: "removed" first
        for rows in first.partition_by("zone", maintain_order=True):
            erased.run(_rehashed(erased_rows(key, rows)), patient=False)
        where = f"request_id NOT LIKE '{HASHED}%'"
        if zones:
            where += f" AND zone IN ({', '.join(str(int(z)) for z in zones)})"
        erased.run(Delete(where), patient=False)
        log.info("erased_requests: %d row(s) of raw request ids rewritten hashed", raw.height)
        return raw.height

    def _erasure_key(self) -> ErasureKey:
        """The erasure key that hashes the ids of ``erased_requests`` (made in the work
        folder where there is none yet, as ``forget`` makes it); ConfigError where this
        process has none: nothing is recorded, so nothing of the zone is committed."""
        key = self.session.erasure_keys.get(create=True)
        if key is None:
            raise ConfigError(
                "privacy.hash_key_env: no erasure key to hash the ids of erased requests "
                "with (no storage root's work folder), so nothing an erasure covers is "
                "committed: set privacy.hash_key_env"
            )
        return key

    def record_gaps(self, zone_id: int, gaps: list[dict[str, Any]]) -> float:
        """Claim the spans of ``gaps`` lost, each instant once per zone (pull and shield
        zones apart): what no gap claims yet extends the gap it continues (an outage still
        going on), else is a row of its own. The seconds newly claimed (as they stood
        before the first attempt)."""
        wanted = [g for g in gaps if g["gap_to"] > g["gap_from"]]
        if not wanted:
            return 0.0
        key = (zone_id, wanted[0].get("source") == "shield")
        spans = _union([(g["gap_from"], g["gap_to"]) for g in wanted])

        def fresh(held: dict[ClaimKey, list[dict[str, Any]]]) -> list[Span]:
            """What of ``spans`` no gap of the zone (and kind) claims yet."""
            return _subtract(spans, [(g["gap_from"], g["gap_to"]) for g in held.get(key, [])])

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
        merge = Merge(
            rows,
            f"t.gap_from = s.gap_from AND {kind}",
            [zone_id],
            update={"gap_to": "s.gap_to"},
            update_if="s.gap_to > t.gap_to",
        )
        self.session.merge_table(INGEST_GAPS).committer.run(merge, patient=False)
        return sum((end - start).total_seconds() for start, end in new)

    def _claimed(self, keys: set[ClaimKey]) -> dict[ClaimKey, list[dict[str, Any]]]:
        """The gap rows of each (zone, shield) of ``keys`` (its pull zone's or its shield
        zone's), in one read."""
        lake = self.session.lake
        table = self.session.reader(INGEST_GAPS)
        if table is None:
            return {}
        zones = sorted({zone for zone, _ in keys})
        with _reading(INGEST_GAPS):
            found = lake.dataset(INGEST_GAPS, table, [("zone", "in", zones)]).to_table()
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

        lake = self.session.lake
        table = self.session.reader(INGEST_RUNS)
        if table is None:
            return False
        moment = pa.scalar(instant, pa.timestamp("us", "UTC"))
        whole = (
            (ds.field("source") == source)
            & (ds.field("outcome") == "ok")
            & (ds.field("window_from") <= moment)
            & (ds.field("window_to") >= moment)
        )
        runs = lake.dataset(INGEST_RUNS, table, [("zone", "=", str(zone_id))])
        with _reading(INGEST_RUNS):
            return bool(runs.head(1, columns=["run_id"], filter=whole).num_rows)

    def record_rejects(self, frames: list[pl.DataFrame], *, patient: bool = True) -> None:
        """Rows of :func:`rejects_frame`, of one or more zones, each line or record once, in
        one MERGE with the other passes' waiting rejects (a pass records them just before
        the commit that moves its progress past them: none is lost to a SIGKILL between).

        At each attempt of the MERGE, on the committer thread, the lines an erasure covers
        are left out by their text as received, then the rest stored as the privacy policy
        allows. An erasure that lands meanwhile moves the erasure marks: the lines it covers
        are deleted again (``forget``'s own delete may have run before they landed)."""
        received = pl.concat(frames)
        if received.height == 0:
            return
        erasures = self.session.erasures
        held: list[tuple[object, pl.DataFrame]] = []  # the last attempt's marks and lines
        refused: list[ConfigError] = []

        def rows() -> pl.DataFrame:
            marks = self._erasure_marks(received)
            refused.clear()
            try:
                kept = erasures.kept_rejects(received)
            except ConfigError as exc:  # raised to the caller, as it is, after the MERGE
                refused.append(exc)
                kept = received.clear()
            held[:] = [(marks, kept)]
            return scrubbed(self.session.privacy, kept)

        zones = received["zone"].unique().to_list()
        merge = Merge(rows, "t.record_key = s.record_key", zones, key=("record_key",))
        committer = self.session.merge_table(REJECTED_LINES).committer
        committer.run(merge, patient=patient)
        if refused:
            raise refused[0]
        marks, kept = held[-1]
        if kept.height and self._erasure_marks(received) != marks:
            self._delete_rejects(kept)

    def _erasure_marks(self, frame: pl.DataFrame) -> object:
        """The erasure marks that concern rejected lines of ``frame``'s zones, as the tables
        have them now: the lake's, and each pull and shield zone's."""
        erasures = self.session.erasures
        shield = frame["source"] == "shield"
        marks: list[object] = [erasures.lake_mark()]
        for spec, is_shield in ((REQUESTS, False), (SHIELD_EVENTS, True)):
            side = (shield == is_shield).fill_null(True)  # no source: held as either
            zones = sorted(int(z) for z in frame.filter(side)["zone"].unique())
            marks.append(erasures.marks(spec, zones) if zones else {})
        return marks

    def _delete_rejects(self, stored: pl.DataFrame) -> None:
        """Delete the lines of ``stored`` (as received) the erasures cover now (one landed
        meanwhile); every one where it cannot tell (ConfigError, raised after: the lines of
        a zone whose erasures cannot be matched are not kept)."""
        refused: ConfigError | None = None
        try:
            gone = stored.join(
                self.session.erasures.kept_rejects(stored).select("zone", "record_key"),
                on=["zone", "record_key"],
                how="anti",
            )
        except ConfigError as exc:
            gone, refused = stored, exc
        self.delete_rejects(gone)
        if gone.height:
            log.info("%d rejected line(s) an erasure covers deleted again", gone.height)
        if refused is not None:
            raise refused

    def delete_rejects(self, lines: pl.DataFrame) -> int:
        """Delete ``lines`` (by their zone and ``record_key``) from ``rejected_lines``,
        through its committer: how many rows went."""
        committer = self.session.merge_table(REJECTED_LINES).committer
        removed = 0
        for rows in lines.partition_by("zone", maintain_order=True) if lines.height else []:
            keys = ", ".join(literal(key) for key in rows["record_key"].unique().sort())
            where = f"zone = {int(rows['zone'][0])} AND record_key IN ({keys})"
            deleted = committer.run(Delete(where), patient=False)
            removed += deleted.rows if deleted is not None else 0
        return removed


# A listing's state of a part, unless the row says the same copy was done meanwhile.
_LISTED_STATE = (
    "CASE WHEN t.state IN ('imported', 'damaged') AND s.state = 'closed'"
    " AND t.size = s.size AND t.checksum = s.checksum"
    " AND (s.checksum <> '' OR t.last_changed = s.last_changed)"
    " THEN t.state ELSE s.state END"
)


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


def scrubbed(privacy: PrivacyPolicy, frame: pl.DataFrame) -> pl.DataFrame:
    """Rejected lines as the privacy policy stores their raw text and reason."""
    if privacy.changes_nothing or frame.height == 0:
        return frame
    return frame.with_columns(privacy.texts(frame["raw_line"]), privacy.texts(frame["reason"]))


def erased_rows(key: ErasureKey, rows: pl.DataFrame) -> pl.DataFrame:
    """``erased_requests`` rows of ``rows`` (its columns, a raw ``request_id`` and
    ``ts``): the keyed hash of each id (lowercased: one request however a source spelled
    it) and the hour it was made in, each request once."""
    frame = rows.with_columns(
        pl.Series("request_id", [key.digest(i) for i in rows["request_id"].str.to_lowercase()]),
        pl.col("ts").dt.truncate("1h"),
    )
    return conform(frame.unique("request_id", keep="first"), ERASED_REQUESTS.schema)


def _rehashed(frame: pl.DataFrame) -> Merge:
    """The MERGE of rows of one zone rewritten hashed: "removed" wins over "held" (the
    audit counts a removed request by its erasure's ``hours_removed``, not here)."""
    return Merge(
        lambda: frame,
        "t.request_id = s.request_id",
        [int(frame["zone"][0])],
        update={"kind": "s.kind"},
        update_if="s.kind = 'removed'",
    )


@contextmanager
def _reading(spec: TableSpec) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise StorageError(f"cannot read {spec.name}: {exc}") from None


def _md5(text: str | None) -> str:
    return hashlib.md5((text or "").encode(), usedforsecurity=False).hexdigest()


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
