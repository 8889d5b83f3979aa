"""``migrate-lake``: an hour-file lake of an earlier cdnlake into the Delta tables.

The old lake, state files and ``warehouse.duckdb`` are first moved (renamed) into
``<root>/migrated-<stamp>/``, then copied in through the same exactly-once commits as
ingestion, and the folder marked done. A run cut off is finished by the next; migrating
twice gives the same lake as once.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from cdnlake.config import StorageConfig
from cdnlake.errors import first_line
from cdnlake.lake.log.progress import DAYS, WATERMARK, DayCursor, to_ms
from cdnlake.lake.log.schema import (
    INGEST_GAPS,
    INGEST_RUNS,
    REJECTED_LINES,
    TS,
    TableSpec,
    frame_of,
    polars_schema,
)
from cdnlake.lake.log.table import Merge
from cdnlake.lake.upkeep.legacy import LEGACY_TABLES, legacy_lake
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter

if TYPE_CHECKING:
    import duckdb

log = logging.getLogger(__name__)

DONE_MARKER = "MIGRATED"


@dataclass
class MigrationReport:
    moved_to: list[Path] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)
    bookkeeping: dict[str, int] = field(default_factory=dict)

    def count(self, table: str, rows: int, duplicates: int) -> None:
        self.rows[table] = self.rows.get(table, 0) + rows
        self.duplicates[table] = self.duplicates.get(table, 0) + duplicates


def migrate_lake(storage: StorageConfig, session: LakeSession) -> MigrationReport:
    report = MigrationReport()
    old = legacy_lake(storage)
    if old is not None:
        aside = storage.root / f"migrated-{time.strftime('%Y%m%dT%H%M%S')}"
        aside.mkdir()
        for name in ("lake", "state", "warehouse.duckdb", "warehouse.duckdb.wal"):
            if (storage.root / name).exists():
                (storage.root / name).replace(aside / name)
        log.info("earlier lake moved to %s", aside)
    for folder in sorted(storage.root.glob("migrated-*")):
        if folder.is_dir() and not (folder / DONE_MARKER).exists():
            _import(folder, session, report)
            (folder / DONE_MARKER).write_text(f"migrated {datetime.now(UTC).isoformat()}\n")
            report.moved_to.append(folder)
    return report


def _import(folder: Path, session: LakeSession, report: MigrationReport) -> None:
    for spec, state_kind in LEGACY_TABLES:
        zones = sorted((folder / "lake" / spec.name).glob(f"{spec.zone_column}=*"))
        for zone_dir in zones:
            zone_id = int(zone_dir.name.split("=", 1)[1])
            writer = ZoneWriter(session, spec, zone_id)
            for day_dir in sorted(zone_dir.glob("date=*")):
                frames = []
                for part in sorted(day_dir.glob("part-*.parquet")):
                    try:
                        frames.append(pl.read_parquet(part))
                    except Exception as exc:
                        report.unreadable.append(f"{part}: {first_line(exc)}")
                if frames:
                    written = writer.commit(pl.concat(frames, how="vertical_relaxed"), {})
                    report.count(spec.name, written.new, written.duplicates)
            state = folder / "state" / state_kind / f"{zone_id}.json"
            progress = _progress(state)
            current = writer.table.snapshot(zone_id).mark(WATERMARK)
            if progress and not current:  # 0: rows, but no watermark yet
                writer.commit(writer.empty(), progress)
    warehouse = folder / "warehouse.duckdb"
    if warehouse.exists():
        _bookkeeping(warehouse, session, report)


def _progress(path: Path) -> dict[str, int]:
    """An earlier state file as app-transaction versions (see :mod:`cdnlake.lake.log.progress`)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    progress: dict[str, int] = {}
    if data.get("watermark"):
        progress[WATERMARK] = to_ms(datetime.fromisoformat(data["watermark"]))
    days = sorted((date.fromisoformat(k), v) for k, v in (data.get("v1_days") or {}).items())
    if days:
        open_days = [(d, v) for d, v in days if not v.get("complete")]
        if open_days:
            day, lines = open_days[0][0], int(open_days[0][1].get("lines", 0))
        else:
            day, lines = days[-1][0] + timedelta(days=1), 0
        progress[DAYS] = DayCursor(day, lines).encode()
    return progress


def _bookkeeping(path: Path, session: LakeSession, report: MigrationReport) -> None:
    """Runs, gaps and rejected lines from the earlier warehouse file, each once; rejected
    lines as a pass records them (held against erasures, scrubbed, through the table's
    committer)."""
    import duckdb  # only a migration reads the earlier warehouse file

    con = duckdb.connect(str(path), read_only=True)
    try:
        con.execute("SET TimeZone = 'UTC'")
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        for spec, key in (
            (INGEST_RUNS, ["run_id"]),
            (INGEST_GAPS, ["run_id", "gap_from", "gap_to"]),
        ):
            if spec.name in tables:
                _add_new(session, spec, _frame(con, spec.name), key, report)
        if "rejected_lines" in tables:
            rejects = _frame(con, "rejected_lines")
            if "record_key" not in rejects.columns:
                rejects = rejects.with_columns(
                    pl.concat_str(
                        pl.col("file"), pl.lit(":"), pl.col("line_number").cast(pl.String)
                    ).alias("record_key")
                )
            new = _new_rows(session, REJECTED_LINES, rejects, ["record_key"])
            Bookkeeping(session).record_rejects([new], patient=False)
            report.bookkeeping[REJECTED_LINES.name] = new.height
    finally:
        con.close()


def _frame(con: duckdb.DuckDBPyConnection, table: str) -> pl.DataFrame:
    return frame_of(con.sql(f"SELECT * FROM {table}").to_arrow_table())


def _add_new(
    session: LakeSession,
    spec: TableSpec,
    frame: pl.DataFrame,
    key: list[str],
    report: MigrationReport,
) -> None:
    """Rows of an earlier bookkeeping table that the Delta table lacks, by ``key``: a MERGE
    through the table's committer that inserts each row its key finds no row of."""
    frame = _new_rows(session, spec, frame, key)
    if frame.height:
        zones = frame[spec.zone_column].drop_nulls().unique().sort().to_list()
        match = " AND ".join(f"t.{column} = s.{column}" for column in key)
        merge = Merge(lambda: frame, match, zones, key=tuple(key))
        session.merge_table(spec).committer.run(merge, patient=False)
    report.bookkeeping[spec.name] = report.bookkeeping.get(spec.name, 0) + frame.height


def _new_rows(
    session: LakeSession, spec: TableSpec, frame: pl.DataFrame, key: list[str]
) -> pl.DataFrame:
    """The rows of an earlier bookkeeping table, as ``spec`` has them, that the Delta
    table lacks, by ``key``."""
    frame = frame.rename({"pull_zone_id": spec.zone_column}) if "pull_zone_id" in frame else frame
    frame = frame.rename({"duplicates": "duplicates_dropped"}) if "duplicates" in frame else frame
    columns = []
    types = polars_schema(spec.schema)
    for name, kind in spec.schema.items():
        dtype = types[name]
        if name in frame.columns:
            column = pl.col(name)
            if kind == TS:
                column = column.dt.convert_time_zone("UTC").dt.cast_time_unit("us")
            columns.append(column.cast(dtype).alias(name))
        else:
            columns.append(pl.lit(None, dtype).alias(name))
    frame = frame.select(columns).unique(subset=[spec.zone_column, *key], keep="first")
    with session.merge_table(spec).current() as table:
        existing = frame_of(table.to_pyarrow_table(columns=[spec.zone_column, *key]))
    if existing.height:
        frame = frame.join(existing, on=[spec.zone_column, *key], how="anti", nulls_equal=True)
    return frame
