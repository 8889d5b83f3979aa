"""Who ingests which zone: one daemon per storage root, or a fleet through PostgreSQL.

Both kinds answer the daemon alike (:mod:`cdnlake.coordination.fleet`): ``claim(key)`` for
a zone pass, ``fleet_job(name)`` for the once-a-day work that one daemon of the fleet does
(its ``Turn``: this daemon's, done, or unknown while PostgreSQL cannot be reached).
"""

from __future__ import annotations

from collections.abc import Callable

from cdnlake.config import Config
from cdnlake.coordination.fleet import Fleet
from cdnlake.lake.log.progress import ZoneHold
from cdnlake.lake.log.schema import REQUESTS, SHIELD_EVENTS


def lease_key(table: str, zone_id: int) -> str:
    """The name a zone's lease goes by: ``requests/<id>`` or ``shield_events/<id>``."""
    return f"{table}/{zone_id}"


def lease_keys(config: Config) -> list[str]:
    """Every configured zone's lease key: pull zones, then shield zones."""
    keys = [lease_key(REQUESTS.name, z.id) for z in config.zones]
    return keys + [lease_key(SHIELD_EVENTS.name, z.id) for z in config.shield_zones]


MAINTAIN_WAIT_SECONDS = 120.0  # how long maintain waits for a zone's lease, at least


def maintain_hold(
    config: Config, daemon_id: str, stop: Callable[[], bool] = lambda: False
) -> ZoneHold | None:
    """In a fleet, the zone leases ``maintain`` holds while it rewinds (it waits up to
    ``MAINTAIN_WAIT_SECONDS``, or three lease times if longer, for each, and no longer
    once ``stop`` turns true); None alone."""
    if not config.coordination.enabled:
        return None
    from cdnlake.coordination.postgres import MaintainHold

    lease = float(config.schedule.poll_seconds)
    return MaintainHold(
        config.coordination.require_dsn().reveal(),
        config.storage.lake_location,
        daemon_id,
        lease_seconds=lease,
        wait=max(MAINTAIN_WAIT_SECONDS, 3 * lease),
        stop=stop,
    )


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
