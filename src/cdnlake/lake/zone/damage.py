"""A data file that the Delta log names but whose bytes do not decode: set aside, never deleted.

A failed read is told apart from a file that does not decode by doing the two apart
(:func:`read_checked`); a store that keeps failing stops the work
(:class:`StorageUnavailableError`), nothing set aside. A damaged file is moved to
``<lake>/_quarantine/<table>/<its path>.<stamp>`` and dropped from the table through its
door (:func:`drop`); its time range says what to read again, or to record as a gap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

from deltalake import DeltaTable

from cdnlake.errors import (
    StopRequested,
    StorageError,
    StorageUnavailableError,
    ZoneBusyError,
    first_line,
)
from cdnlake.lake.log.retry import retrying
from cdnlake.lake.log.schema import TableSpec
from cdnlake.lake.log.store import Lake, add_actions_table
from cdnlake.lake.log.table import Replacement

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

    from cdnlake.lake.log.table import LogTable

log = logging.getLogger(__name__)
QUARANTINE = "_quarantine"
# A store that failed a read is asked again this many times, the waits doubling from
# FIRST_WAIT (jittered): a few seconds, besides the S3 client's own retries of each call.
READ_ATTEMPTS = 4
FIRST_WAIT = 0.25

T = TypeVar("T")


@dataclass(frozen=True)
class Undecodable:
    """Bytes in hand that are not the Parquet file they should be: why not."""

    reason: str


@dataclass(frozen=True)
class DamagedFile:
    table: str
    path: str  # relative to the table, ``<zone column>=<id>/date=<day>/<file>``
    start: datetime | None  # the file's time range, from the log's statistics
    end: datetime | None
    moved_to: str
    reason: str
    # Why it was left in place (its zone could not be held for the rewind: a fleet's
    # lease not had in time); "" once set aside.
    left: str = ""

    @property
    def partition(self) -> tuple[int, str]:
        """Its (zone, ISO day), from its path."""
        return zone_of(self.path), self.path.split("/")[1].split("=", 1)[1]


def zone_of(path: str) -> int:
    """The zone of a data file, from its path (``<zone column>=<id>/...``)."""
    return int(path.split("/", 1)[0].split("=", 1)[1])


def file_time_range(
    spec: TableSpec, table: DeltaTable, path: str
) -> tuple[datetime | None, datetime | None]:
    """A data file's time range by the log's statistics (None where it has none). Only
    the add actions of the file's own partition (its folders, ``column=value``) become
    Python values, not one per file of the table."""
    folders = [part.split("=", 1) for part in path.split("/")[:-1]]
    for action in Lake.add_actions(spec, table, [(c, "=", unquote(v)) for c, v in folders]):
        if action["path"] == path:
            return action["min.ts"], action["max.ts"]
    return None, None


# What must happen before a damaged file of a zone is moved: (zone id, the file's time
# range, why) -> the zone is made to read the span again, or the span is claimed lost.
BeforeMove = Callable[[int, datetime | None, datetime | None, str], None]


def set_aside(
    lake: Lake, spec: TableSpec, table: DeltaTable, path: str, reason: str, before: BeforeMove
) -> DamagedFile:
    """Move a data file that does not decode (``reason``: why) into the quarantine; its log
    entry is dropped later. ``before`` runs first (the zone's rewind): whatever fails or is
    killed after it, the zone's progress never stands past rows the lake no longer holds."""
    start, end = file_time_range(spec, table, path)
    before(zone_of(path), start, end, f"lake file {spec.name}/{path} was damaged ({reason})")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    source = f"{spec.name}/{path}"
    target = f"{QUARANTINE}/{spec.name}/{path}.{stamp}"
    fs = lake.filesystem()

    def move() -> None:
        fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        try:
            fs.move(source, target)
        except FileNotFoundError:  # an earlier attempt moved it, and its answer was lost
            if fs.get_file_info(target).size is None:
                raise

    with_retries(f"setting aside damaged lake file {source}", move)
    log.error("lake file %s is damaged (%s); kept as %s", source, reason, target)
    return DamagedFile(spec.name, path, start, end, target, reason)


def moved_already(files: pafs.FileSystem, table_name: str, path: str) -> bool:
    """Whether a data file the log still names was set aside by a process that died before
    its removal from the table: gone from its place, its copy in the quarantine (the zone's rewind
    came first, so only the log entry is left to drop)."""
    import pyarrow.fs as pafs

    if not gone(files, f"{table_name}/{path}"):
        return False
    folder, name = f"{QUARANTINE}/{table_name}/{path}".rsplit("/", 1)
    try:
        listed = files.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    except OSError:  # the store does not answer: not known to be so (the read says why)
        return False
    return any(info.base_name.startswith(f"{name}.") for info in listed)


def gone(files: pafs.FileSystem, name: str) -> bool:
    """Whether the file ``name`` is not in the store (a failure to ask: not known)."""
    import pyarrow.fs as pafs

    try:
        return bool(files.get_file_info(name).type == pafs.FileType.NotFound)
    except OSError:
        return False


def unreadable_files(
    door: LogTable,
    table: DeltaTable,
    since: datetime | None,
    before: BeforeMove,
    stop: Callable[[], bool] = lambda: False,
) -> list[DamagedFile]:
    """Read every data file whose rows reach past ``since`` (all with None); set aside
    the ones that do not decode. They are dropped from the table (:func:`drop`). A store
    that keeps failing raises :class:`StorageUnavailableError`, and ``stop`` turning true
    :class:`StopRequested`, both with nothing set aside."""
    import pyarrow as pa

    lake, spec = door.lake, door.spec
    dataset = lake.dataset(spec, table, actions=files_reaching(spec, table, since))
    columns = [spec.key or "ts"]
    undecodable: list[tuple[str, Undecodable]] = []
    orphans: list[str] = []
    for fragment in dataset.get_fragments():
        if stop():
            raise StopRequested()
        try:
            fragment.to_table(columns=columns)
        except (OSError, pa.ArrowException) as exc:
            if moved_already(lake.filesystem(), spec.name, fragment.path):
                orphans.append(fragment.path)
                continue
            checked = read_checked(
                dataset.filesystem, fragment.path, columns, exc, f"{spec.name}/{fragment.path}"
            )
            if isinstance(checked, Undecodable):
                undecodable.append((fragment.path, checked))
    # Only once every file was read: a store failing half-way sets nothing aside.
    damaged = []
    for path, why in undecodable:
        try:
            damaged.append(set_aside(lake, spec, table, path, why.reason, before))
        except ZoneBusyError as exc:  # its zone not held: not rewound, so not moved
            log.error(
                "lake file %s/%s is damaged (%s); left in place: %s",
                spec.name,
                path,
                why.reason,
                exc,
            )
            start, end = file_time_range(spec, table, path)
            left = f"{exc}; run maintain again"
            damaged.append(DamagedFile(spec.name, path, start, end, "", why.reason, left))
    drop(door, [*orphans, *(d.path for d in damaged if not d.left)])
    return damaged


def drop(door: LogTable, paths: list[str]) -> None:
    """Remove set-aside files from the table, through its door: a share per zone (no
    progress) removing those it still holds; a set-aside file is gone from its place, so
    its log entry is all that is left of it."""
    zones: dict[int, list[str]] = {}
    for path in paths:
        zones.setdefault(zone_of(path), []).append(path)
    for zone, named in zones.items():

        def held(named: list[str] = named) -> Replacement:
            return Replacement([path for path in named if door.holds(path)])

        door.replace(zone, held)


def files_reaching(
    spec: TableSpec, table: DeltaTable, since: datetime | None
) -> list[dict[str, Any]]:
    """The add actions of the data files whose rows reach past ``since`` by the log's
    statistics (a file without them counts as reaching; every file with None), chosen in
    Arrow: a check of the last days pays for their files, not for every file of the table."""
    import pyarrow as pa
    import pyarrow.compute as pc

    log = pa.table(add_actions_table(table))
    if since is not None and "max.ts" in log.column_names:
        last = log.column("max.ts")
        reaching = pc.or_kleene(pc.is_null(last), pc.greater_equal(last, pa.scalar(since)))
        log = log.filter(reaching)
    return Lake.chosen_actions(spec, log)


def read_checked(
    files: pafs.FileSystem, path: str, columns: list[str], failure: BaseException, name: str
) -> pa.Table | Undecodable:
    """After a read of ``path`` failed with ``failure``: its ``columns``, decoded from the
    file's whole bytes (fetched as :func:`with_retries` does), or why those bytes do not
    decode (damage). pyarrow raises ``OSError`` for a refused HEAD and for a ZSTD page
    that does not decompress alike: the exception does not tell I/O from decoding, so
    they are done apart."""
    log.info("lake file %s did not read (%s); checking it", name, first_line(failure))
    return decoded(files, path, f"reading lake file {name}", columns, "nothing was set aside")


def decoded(
    files: pafs.FileSystem, path: str, what: str, columns: list[str] | None = None, then: str = ""
) -> pa.Table | Undecodable:
    """The rows (``columns``; all with None) of ``path``'s whole bytes, fetched as
    :func:`with_retries` does (``what``, ``then``), or why they do not decode."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def fetch() -> bytes:
        with files.open_input_file(path) as source:
            return bytes(source.read())

    data = with_retries(what, fetch, then=then)
    try:
        return pq.ParquetFile(pa.BufferReader(data)).read(columns=columns)
    except (OSError, pa.ArrowException, ValueError) as exc:  # bytes in memory: no I/O
        return Undecodable(first_line(exc))


def with_retries(what: str, action: Callable[[], T], *, then: str = "") -> T:
    """``action()``, again with backoff while the store fails; then
    :class:`StorageUnavailableError` (``what``: the object and the operation; ``then``:
    what that means, appended to the message). A file that is not there is no failure of
    the store: :class:`StorageError` at once."""
    try:
        for attempt in retrying(what, on=OSError, attempts=READ_ATTEMPTS, wait=FIRST_WAIT):
            with attempt:
                try:
                    return action()
                except FileNotFoundError as exc:
                    where = f"not found in the lake's store ({first_line(exc)})"
                    raise StorageError(f"{what}: {where}") from None
    except OSError as exc:
        raise StorageUnavailableError(
            f"{what}: the store kept failing ({READ_ATTEMPTS} attempts): "
            f"{first_line(exc)}{'; ' + then if then else ''}"
        ) from None
    raise AssertionError("unreachable")
