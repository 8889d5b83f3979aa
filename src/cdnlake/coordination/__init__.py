"""Who ingests which zone: one daemon per storage root, or a fleet through PostgreSQL.

Both kinds answer the daemon alike (:class:`Fleet`): ``claim(key)`` for a zone pass,
``fleet_job(name)`` for the once-a-day work that one daemon of the fleet does.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Protocol

from cdnlake.config import Config


class Fleet(Protocol):
    daemon_id: str

    def start(self, zone_keys: list[str], on_acquired: Callable[[str, float], None]) -> None: ...

    def claim(
        self, key: str
    ) -> contextlib.AbstractContextManager[tuple[float, threading.Event] | None]: ...

    def fleet_job(self, job: str) -> contextlib.AbstractContextManager[bool]: ...

    def stop(self) -> None: ...


def fleet_for(config: Config, daemon_id: str) -> Fleet:
    """The fleet a daemon joins: PostgreSQL when configured, else its storage root alone."""
    if config.coordination.enabled:
        from cdnlake.coordination.postgres import PostgresFleet

        return PostgresFleet(
            config.coordination.require_dsn().reveal(),
            config.storage.lake_location,
            daemon_id,
            lease_seconds=config.schedule.poll_seconds,
            rate_window_seconds=config.ingest.window_seconds,
        )
    from cdnlake.coordination.sole import SoleDaemon

    return SoleDaemon(config.storage.work, daemon_id)
