"""A loopback HTTP server that plays the provider's API, faithfully, for tests and demos."""

from cdnlake.emulator.records import ZoneSpec
from cdnlake.emulator.server import DEMO_ZONES, Emulator, EmulatorConfig, parse_zones
from cdnlake.emulator.state import Faults
from cdnlake.emulator.traffic import Traffic

__all__ = [
    "DEMO_ZONES",
    "Emulator",
    "EmulatorConfig",
    "Faults",
    "Traffic",
    "ZoneSpec",
    "parse_zones",
]
