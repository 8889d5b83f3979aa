"""Who ingests which zone: one daemon per storage root, or a fleet through PostgreSQL.

Both kinds answer the daemon alike (:class:`Fleet`): ``claim(key)`` for a zone pass,
``fleet_job(name)`` for the once-a-day work that one daemon of the fleet does (its
:class:`Turn`: this daemon's, done, or unknown while PostgreSQL cannot be reached).
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Callable
from typing import NamedTuple, Protocol

from cdnlake.config import Config
from cdnlake.lake.log.progress import ZoneHold
from cdnlake.lake.log.schema import REQUESTS, SHIELD_EVENTS


class Hold(NamedTuple):
    """A zone held by this daemon for one pass."""

    ready_at: float  # time.monotonic(): the previous owner's rate window has passed
    lost: threading.Event  # set when the hold is lost: the pass stops at its next page
    # The lease's generation, the fence token its pass commits under (None: a daemon
    # alone on its storage root, whose zones no other daemon takes).
    generation: int | None


class Turn(enum.Enum):
    """Whose a fleet job is (:meth:`Fleet.fleet_job`); true only for ``MINE``."""

    MINE = "mine"  # this daemon does it now
    DONE = "done"  # done already, or being done by another daemon of the fleet
    UNKNOWN = "unknown"  # the coordination could not be asked: try again later

    def __bool__(self) -> bool:
        return self is Turn.MINE


def never() -> bool:
    return False


class Fleet(Protocol):
    daemon_id: str
    # How a job found done is said: "already done on this storage root", ...
    done_elsewhere: str

    def start(
        self,
        zone_keys: list[str],
        on_acquired: Callable[[str, float], None],
        *,
        stopping: Callable[[], bool] = never,
        room: Callable[[], int] | None = None,
    ) -> None:
        """Join; ``on_acquired(key, wait)`` when a zone becomes this daemon's. Once
        ``stopping()`` is true (the daemon stops) no zone is taken any more. ``room()``:
        how many more zones this daemon could start polling now (None: no bound); a round
        takes no more than that."""
        ...

    def more_room(self) -> None:
        """``room()`` grew (a zone's first pass ended): the zones left for lack of it may
        be taken now, not a round later."""
        ...

    def claim(self, key: str) -> contextlib.AbstractContextManager[Hold | None]: ...

    def fleet_job(self, job: str) -> contextlib.AbstractContextManager[Turn]:
        """Whether this daemon does ``job`` (e.g. a day's report) now, it is done already,
        or that cannot be known now; a job done here is marked done when the block ends
        without an exception."""
        ...

    def stop(self) -> None: ...


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
