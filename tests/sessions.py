"""The lake sessions tests write through.

A test that plays several processes holds a :class:`~cdnlake.lake.log.store.Lake` object per
process: :func:`session_of` gives each Lake object its one session, as each process has
one. :func:`session_for` is a new process's session for a config.
"""

from __future__ import annotations

from cdnlake.config import Config
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.privacy import PrivacyPolicy

_SESSIONS: dict[int, tuple[Lake, LakeSession]] = {}


def session_of(lake: Lake | LakeSession) -> LakeSession:
    """The one session of the process that ``lake`` stands for."""
    if isinstance(lake, LakeSession):
        return lake
    held = _SESSIONS.get(id(lake))
    if held is None or held[0] is not lake:
        held = _SESSIONS[id(lake)] = (lake, LakeSession(lake))
    return held[1]


def session_for(config: Config) -> LakeSession:
    """A new process's session over ``config``'s lake."""
    return LakeSession.from_config(
        config.storage,
        privacy=PrivacyPolicy.from_config(config.privacy),
    )


def mark_of(writer: ZoneWriter, mark: str = "") -> int | None:
    """A zone's progress mark as the table has it now."""
    return writer.table.snapshot(writer.zone_id).mark(mark)
