"""Removed files, and the log that names their values, deleted now: ``forget --vacuum-now``.

A vacuum with no retention deletes every file a table has removed. The Delta log still
names values of them: delta-rs records, for each file it writes (a compaction, a MERGE),
the smallest and largest value of every column, which may be an erased address. So the
log entries and checkpoints older than a checkpoint written now are deleted too, as
Delta's log cleanup does once they expire (``delta.logRetentionDuration``): readers
start from the new checkpoint; older versions of the table are gone.
"""

from __future__ import annotations

from cdnlake.errors import StorageError, first_line
from cdnlake.lake.schema import TableSpec
from cdnlake.lake.session import LakeSession


def vacuum_removed(session: LakeSession, specs: list[TableSpec]) -> int:
    """Delete now every file these tables have removed (no retention: readers of older
    versions lose those versions), and their log before a checkpoint made now (an older
    entry may name a removed value in a file's statistics: the smallest and largest of
    each column, which delta-rs records for the files it writes); the files deleted."""
    deleted = 0
    for spec in specs:
        table = session.lake.open(spec)
        if table is None:
            continue
        try:
            deleted += len(table.vacuum(0, dry_run=False, enforce_retention_duration=False))
            table.update_incremental()
            table.create_checkpoint()
            deleted += _drop_log_before(session, spec, table.version())
        except Exception as exc:
            raise StorageError(f"cannot vacuum {spec.name}: {first_line(exc)}") from None
    return deleted


def _drop_log_before(session: LakeSession, spec: TableSpec, version: int) -> int:
    """Delete the table's log entries and checkpoints older than ``version`` (whose
    checkpoint readers start from), as Delta's log cleanup does once they expire."""
    import pyarrow.fs as pafs

    fs = session.lake.filesystem()
    folder = f"{spec.name}/_delta_log"
    dropped = 0
    for info in fs.get_file_info(pafs.FileSelector(folder)):
        name = info.base_name
        head = name.split(".", 1)[0]
        if not head.isdigit() or int(head) >= version:
            continue
        if name.endswith(".json") or ".checkpoint." in name:
            session.lake.delete_file(f"{folder}/{name}")
            dropped += 1
    return dropped
