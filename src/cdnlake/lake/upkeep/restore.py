"""``cdnlake maintain --restore``: put back into the lake what was set aside, if it decodes.

A quarantined file (:mod:`cdnlake.lake.zone.damage`) that decodes is committed again to its
zone, less the keys the table holds already; only then is the copy removed. A file that
still does not decode stays. Running it twice is harmless.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from cdnlake.errors import CdnlakeError, StorageError, StorageUnavailableError
from cdnlake.lake.log.schema import TABLES_BY_NAME, frame_of
from cdnlake.lake.zone.damage import QUARANTINE, Undecodable, decoded, with_retries
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter

if TYPE_CHECKING:
    import pyarrow.fs as pafs

log = logging.getLogger(__name__)

# ``<table>/<zone column>=<id>/date=<day>/<file>.<stamp>``, as ``set_aside`` names it
KEPT = re.compile(r"(?P<table>[a-z_]+)/(?P<path>[a-z_]+=(?P<zone>\d+)/.+)\.\d{8}T\d{6}")


@dataclass
class Restored:
    """What became of one file of the quarantine."""

    kept_as: str  # under the lake: ``_quarantine/<table>/<path>.<stamp>``
    table: str = ""
    path: str = ""  # the data file's path in its table when it was set aside
    added: int = 0  # rows put back
    present: int = 0  # rows whose key the table held already
    erased: int = 0  # rows an erasure covers, held back (cdnlake forget)
    error: str | None = None  # why it was left in the quarantine

    def line(self) -> str:
        if self.error is not None:
            return f"NOT RESTORED {self.kept_as}: {self.error}; left where it is"
        return (
            f"restored {self.kept_as} to {self.table}: {self.added} rows added, "
            f"{self.present} already in the table"
            + (f", {self.erased} held back (erased)" if self.erased else "")
        )


def restore(session: LakeSession, zones: list[int] | None = None) -> list[Restored]:
    """Put back every file of the quarantine (of ``zones``, all without) that decodes."""
    import pyarrow.fs as pafs

    files = session.lake.filesystem()
    found = with_retries(
        f"listing {QUARANTINE}",
        lambda: files.get_file_info(
            pafs.FileSelector(QUARANTINE, recursive=True, allow_not_found=True)
        ),
    )
    kept = sorted(info.path for info in found if info.type == pafs.FileType.File)
    writers: dict[tuple[str, int], ZoneWriter] = {}
    results = []
    for name in kept:
        inside = name.removeprefix(f"{QUARANTINE}/")
        match = KEPT.fullmatch(inside)
        spec = TABLES_BY_NAME.get(match["table"]) if match else None
        if match is None or spec is None or spec.key is None:
            results.append(Restored(name, error="not a data file that cdnlake set aside"))
            continue
        zone = int(match["zone"])
        if zones and zone not in zones:
            continue
        item = Restored(name, spec.name, match["path"])
        results.append(item)
        rows = _decoded(files, name, item)
        if rows is None:
            continue
        try:
            writer = writers.get((spec.name, zone))
            if writer is None:
                writer = writers[(spec.name, zone)] = ZoneWriter(session, spec, zone)
            written = writer.commit(rows, {})  # the zone's progress unchanged
            item.added, item.present, item.erased = written.new, written.duplicates, written.erased
            _remove(files, name)
        except StorageUnavailableError:
            raise  # the store is down: the next files would fail alike
        except CdnlakeError as exc:
            item.error = str(exc)
            continue
        log.info("%s", item.line())
    return results


def _remove(files: pafs.FileSystem, name: str) -> None:
    """Remove a quarantined copy whose rows are all in the table now."""

    def delete() -> None:
        try:
            files.delete_file(name)
        except FileNotFoundError:  # an earlier attempt did, and its answer was lost
            pass

    with_retries(f"removing {name} (its rows are in the table)", delete)


def _decoded(files: pafs.FileSystem, name: str, item: Restored) -> pl.DataFrame | None:
    """The rows of a quarantined file as a polars frame, or None (``item.error`` says why)."""
    try:
        table = decoded(files, name, f"reading {name}")
    except StorageError as exc:
        item.error = str(exc)
        return None
    if isinstance(table, Undecodable):
        item.error = f"still does not decode ({table.reason})"
        return None
    return frame_of(table)
