"""The passes that commands run over the provider's API: configured zones, shield zones.

Each picks the source for a zone and hands it to the one :class:`Runner`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime

from cdnlake.client.logging_api import LoggingClient
from cdnlake.client.shield import ShieldApi
from cdnlake.config import Config, ShieldZoneConfig, ZoneConfig
from cdnlake.ingest.reread import RereadSource
from cdnlake.ingest.result import Reporter, ZoneResult, utcnow
from cdnlake.ingest.runner import Clock, Runner, Source, StopSignal
from cdnlake.ingest.shield import ShieldSource
from cdnlake.ingest.v1_source import V1DaySource
from cdnlake.ingest.v2_source import V2Source
from cdnlake.lake.zone.session import LakeSession


class Ingestor:
    """Passes over pull zones from the logging API; shared by ``ingest`` and the daemon."""

    def __init__(
        self,
        config: Config,
        logging_client: LoggingClient,
        session: LakeSession,
        *,
        clock: Clock = utcnow,
        stop: threading.Event | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        self.runner = Runner(config, session, clock=clock, stop=stop, reporter=reporter)
        self.client = logging_client
        self.v1: Source = V1DaySource(logging_client)
        self.v2: Source = V2Source(logging_client)

    def source(self, zone: ZoneConfig) -> Source:
        return self.v1 if zone.source == "v1" else self.v2

    def run(self, zones: Iterable[ZoneConfig]) -> list[ZoneResult]:
        return self.runner.run_many((z.id, self.source(z)) for z in zones)

    def run_zone(
        self, zone: ZoneConfig, stop: StopSignal | None = None, holder: int | None = None
    ) -> ZoneResult:
        return self.runner.run(zone.id, self.source(zone), stop, holder=holder)

    def reread(self, zone: ZoneConfig, start: datetime, end: datetime) -> ZoneResult:
        """Read ``[start, end)`` of ``zone`` again, storing what the lake lacks; the zone's
        progress stays as it is (see :mod:`cdnlake.ingest.reread`). It takes no zone
        lock: the zone's own passes go on beside it."""
        source = RereadSource(self.client, zone.source, start, end)
        return self.runner.run(zone.id, source, locked=False)


def ingest_shield_zone(
    config: Config,
    shield: ShieldApi,
    zone: ShieldZoneConfig,
    session: LakeSession,
    *,
    clock: Clock = utcnow,
    stop: StopSignal | None = None,
    reporter: Reporter | None = None,
    holder: int | None = None,
) -> ZoneResult:
    """One pass of a shield zone, through the process's ``session``."""
    runner = Runner(config, session, clock=clock, reporter=reporter)
    return runner.run(zone.id, ShieldSource(shield), stop, holder=holder)
