"""What a fleet answers the daemon: a zone held for a pass (:class:`Hold`), whose a fleet job is
(:class:`Turn`), and the :class:`Fleet` both kinds of coordination are."""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Callable
from typing import NamedTuple, Protocol


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
