"""The hour-file lake of an earlier cdnlake: how to recognise it (apart from the migration,
as every command checks it at start-up).
"""

from __future__ import annotations

from pathlib import Path

from cdnlake.config import StorageConfig
from cdnlake.lake.log.schema import REQUESTS, SHIELD_EVENTS

# (table, the state folder of its zones' watermarks)
LEGACY_TABLES = ((REQUESTS, "zones"), (SHIELD_EVENTS, "shield"))


def legacy_lake(storage: StorageConfig) -> Path | None:
    """``<root>/lake`` when it holds hour files of an earlier cdnlake, else None."""
    lake = storage.root / "lake"
    for spec, _ in LEGACY_TABLES:
        folder = lake / spec.name
        if (folder / "_delta_log").exists():
            continue
        if folder.is_dir() and next(folder.glob(f"{spec.zone_column}=*/date=*/part-*"), None):
            return lake
    return None
