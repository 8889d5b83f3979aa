"""Storage zones in the management API: list them, get one (``/storagezone``).

A storage zone's model carries its passwords; :class:`StorageZone` never shows them in a
repr, and ``masked()`` gives the model with them hidden (what ``cdnlake api`` prints
unless asked otherwise). Reading the files of a zone is :mod:`cdnlake.client.storage`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import msgspec

from cdnlake.client.area import INT32_MAX, Area, Model, check_id, check_range
from cdnlake.client.error_bodies import field_error

MIN_PER_PAGE, MAX_PER_PAGE = 5, 1000
MASK = "***"


class StorageZone(Model, rename="pascal"):
    """``StorageZoneModel`` (core.json), the fields cdnlake reads."""

    id: int
    name: str | None = None
    password: str | None = None
    read_only_password: str | None = None
    storage_hostname: str | None = None
    region: str | None = None
    replication_regions: list[str] | None = None
    date_modified: datetime | None = None
    deleted: bool = False
    storage_used: int = 0
    files_stored: int = 0
    user_id: str | None = None
    zone_tier: int | None = None
    storage_zone_type: int | None = None

    def __repr__(self) -> str:
        return f"StorageZone(id={self.id}, name={self.name!r}, hostname={self.storage_hostname!r})"

    __str__ = __repr__

    def masked(self) -> StorageZone:
        """The same zone with its passwords replaced by ``***`` (those that are set)."""
        return msgspec.structs.replace(
            self,
            password=MASK if self.password else self.password,
            read_only_password=MASK if self.read_only_password else self.read_only_password,
        )


class StorageZonePage(Model):
    Items: list[StorageZone] | None = None
    CurrentPage: int = 0
    TotalItems: int = 0
    HasMoreItems: bool = False


class StorageZoneApi(Area):
    def list_storage_zones(
        self, page: int = 1, per_page: int = MAX_PER_PAGE, search: str | None = None
    ) -> StorageZonePage:
        check_range("page", page, 1, INT32_MAX)
        check_range("perPage", per_page, MIN_PER_PAGE, MAX_PER_PAGE)
        params: dict[str, Any] = {"page": page, "perPage": per_page, "search": search}
        return self._call("GET", "/storagezone", StorageZonePage, parser=field_error, params=params)

    def iter_storage_zones(
        self, per_page: int = MAX_PER_PAGE, search: str | None = None
    ) -> Iterator[StorageZone]:
        """Every storage zone of the account, following ``HasMoreItems``."""
        page = 1
        while True:
            got = self.list_storage_zones(page, per_page, search)
            yield from got.Items or []
            if not got.HasMoreItems:
                return
            page += 1

    def get_storage_zone(self, storage_zone_id: int) -> StorageZone:
        check_id("id", storage_zone_id)
        return self._call("GET", f"/storagezone/{storage_zone_id}", StorageZone, parser=field_error)
