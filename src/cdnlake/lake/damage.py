"""A data file that the Delta log names but that cannot be read: set aside, never deleted.

The file is moved to ``<lake>/_quarantine/<table>/<its path>.<stamp>`` and dropped from the
table (Delta's repair removes log entries whose file is gone). Its time range, from the
log's statistics, tells the runner what to read again while the provider still has it,
or to record as a gap.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime

from deltalake import DeltaTable

from cdnlake.errors import StorageError
from cdnlake.lake.schema import TableSpec
from cdnlake.lake.store import Lake, action_rows, add_actions_table, first_line

log = logging.getLogger(__name__)
QUARANTINE = "_quarantine"


@dataclass(frozen=True)
class DamagedFile:
    table: str
    path: str  # relative to the table, ``<zone column>=<id>/date=<day>/<file>``
    start: datetime | None  # the file's time range, from the log's statistics
    end: datetime | None
    moved_to: str
    reason: str

    @property
    def zone_id(self) -> int:
        return int(self.path.split("/", 1)[0].split("=", 1)[1])


def file_time_range(table: DeltaTable, path: str) -> tuple[datetime | None, datetime | None]:
    for row in action_rows(add_actions_table(table), ["path", "min.ts", "max.ts"]):
        if row["path"] == path:
            return row["min.ts"], row["max.ts"]
    return None, None


def set_aside(
    lake: Lake, spec: TableSpec, table: DeltaTable, path: str, exc: BaseException
) -> DamagedFile:
    """Move an unreadable data file into the quarantine; its log entry is dropped later."""
    start, end = file_time_range(table, path)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    source = f"{spec.name}/{path}"
    target = f"{QUARANTINE}/{spec.name}/{path}.{stamp}"
    fs = lake.filesystem()
    try:
        fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        fs.move(source, target)
    except OSError as move_error:
        raise StorageError(
            f"damaged lake file {source} could not be set aside: {first_line(move_error)}"
        ) from None
    reason = first_line(exc)
    log.error("lake file %s is damaged (%s); kept as %s", source, reason, target)
    return DamagedFile(spec.name, path, start, end, target, reason)


def unreadable_files(
    lake: Lake, spec: TableSpec, table: DeltaTable, since: datetime | None
) -> list[DamagedFile]:
    """Read every data file whose rows reach past ``since`` (all with None); set aside
    the ones that do not read. Their log entries are dropped (Delta's repair)."""
    import pyarrow as pa

    dataset = lake.dataset(spec, table)
    wanted = {
        row["path"]
        for row in action_rows(add_actions_table(table), ["path", "max.ts"])
        if since is None or row["max.ts"] is None or row["max.ts"] >= since
    }
    damaged = []
    for fragment in dataset.get_fragments():
        if fragment.path not in wanted:
            continue
        try:
            fragment.to_table(columns=[spec.key or "ts"])
        except (OSError, pa.ArrowInvalid) as exc:
            damaged.append(set_aside(lake, spec, table, fragment.path, exc))
    if damaged:
        table.repair(dry_run=False)
    return damaged
