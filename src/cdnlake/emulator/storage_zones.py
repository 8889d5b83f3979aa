"""The account's storage zones, as the emulator holds them (the management API lists
them, the Edge Storage routes check their passwords)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StorageZone:
    """A storage zone of the account (the fixture the emulator starts with)."""

    id: int
    name: str
    password: str
    read_only_password: str
    region: str = "DE"
    hostname: str = "storage.example-cdn.net"


DEFAULT_STORAGE_ZONES = (StorageZone(8001, "cdnlake-archive", "storage-key", "storage-ro-key"),)


class StorageZones:
    """The emulator's storage zones, by id and by name (names are case-insensitive)."""

    def __init__(self, zones: tuple[StorageZone, ...]) -> None:
        self.zones = {z.id: z for z in zones}
        self._by_name = {z.name.lower(): z for z in zones}

    def named(self, name: str) -> StorageZone | None:
        return self._by_name.get(name.lower())
