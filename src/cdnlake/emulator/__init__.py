"""A loopback HTTP server that plays the provider's API, faithfully, for tests and demos."""

from cdnlake.emulator.archive import ArchiveLimits
from cdnlake.emulator.records import ZoneSpec
from cdnlake.emulator.server import DEMO_ZONES, Emulator, EmulatorConfig, parse_zones
from cdnlake.emulator.state import Faults
from cdnlake.emulator.storage import DEFAULT_STORAGE_ZONES, StorageZone
from cdnlake.emulator.traffic import Traffic

__all__ = [
    "DEFAULT_STORAGE_ZONES",
    "DEMO_ZONES",
    "ArchiveLimits",
    "Emulator",
    "EmulatorConfig",
    "Faults",
    "StorageZone",
    "Traffic",
    "ZoneSpec",
    "parse_zones",
]
