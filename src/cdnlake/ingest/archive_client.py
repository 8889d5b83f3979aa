"""The storage zone of a zone's archive, read through the shared storage-zone client
(:mod:`cdnlake.client.storage`), as the :class:`~cdnlake.ingest.archive_store.ArchiveStore`
a backfill uses."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from cdnlake.client.core import ApiClient
from cdnlake.client.storage import StorageObject, StorageZoneClient
from cdnlake.config import ArchiveConfig, Secret
from cdnlake.errors import NotFoundError
from cdnlake.ingest.archive_store import Entry

NEVER = datetime(1970, 1, 1, tzinfo=UTC)


class StorageZoneArchive:
    def __init__(self, client: StorageZoneClient) -> None:
        self.client = client

    def list_folder(self, path: str) -> list[Entry]:
        try:
            found = self.client.list(path)
        except NotFoundError:  # a month or a zone folder the archive has not made yet
            return []
        return [_entry(item) for item in found]

    def fetch(self, path: str, dest: Path, *, size: int, checksum: str) -> None:
        # Only the listed length is asked for: a part that grew since it was listed comes
        # as listed (and verifies), and is imported again once listed grown.
        self.client.download(path, dest, checksum=checksum or None, length=size, resume=False)


def _entry(item: StorageObject) -> Entry:
    changed = item.last_changed or NEVER
    if changed.tzinfo is None:  # the API gives UTC without saying so
        changed = changed.replace(tzinfo=UTC)
    return Entry(
        name=item.object_name,
        is_directory=item.is_directory,
        length=item.length,
        last_changed=changed,
        checksum=(item.checksum or "").lower(),
    )


def archive_store(api: ApiClient, archive: ArchiveConfig, password: Secret) -> StorageZoneArchive:
    """The archive's storage zone at ``archive.url``, with its password."""
    client = StorageZoneClient(
        api,
        archive.storage_zone,
        password,
        password_env=archive.password_env,
        base_url=archive.url,
    )
    return StorageZoneArchive(client)
