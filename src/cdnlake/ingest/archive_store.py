"""What a backfill needs of the storage zone that holds a zone's archive: list a folder,
fetch a file to a local path. :class:`ArchiveStore` is that, and nothing more, so that the
backfill's logic is tested with a fake as well as over HTTP against the emulator."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Entry:
    """One entry of a folder's listing (the fields of the provider's storage object that a
    backfill reads)."""

    name: str  # ObjectName
    is_directory: bool
    length: int
    last_changed: datetime  # UTC
    checksum: str  # lower-case hex SHA-256 of the content; "" where none is given


class ArchiveStore(Protocol):
    def list_folder(self, path: str) -> list[Entry]:
        """The entries of the folder ``path`` (relative to the storage zone, ending in
        ``/``); [] for a folder that does not exist."""
        ...

    def fetch(self, path: str, dest: Path, *, size: int, checksum: str) -> None:
        """The file ``path`` into ``dest`` whole, checked against the listing's ``size``
        and ``checksum`` ("" where none): a short or altered body is retried, then a
        :class:`~cdnlake.errors.TransportError`."""
        ...
