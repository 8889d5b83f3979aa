"""A daemon stopping ends ``maintain`` between whole steps, so SIGTERM is not held up by it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cdnlake.errors import StopRequested
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.upkeep.maintain import maintain
from cdnlake.lake.zone.writer import ZoneWriter
from tests.lake.test_commit import BASE, rows
from tests.sessions import mark_of, session_of


def test_maintain_stops_between_steps_and_leaves_each_one_whole(tmp_path):
    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 7)
    for minute in range(3):
        writer.commit(rows(minute * 10, 10, BASE + timedelta(minutes=minute)), {"": minute + 1})
    before = lake.open(REQUESTS).version()  # type: ignore[union-attr]
    with pytest.raises(StopRequested):
        maintain(session_of(lake), stop=lambda: True)
    assert lake.open(REQUESTS).version() == before  # type: ignore[union-attr]

    asked: list[int] = []

    def after_some_checks() -> bool:  # the stop arrives while it works
        asked.append(1)
        return len(asked) > 3

    with pytest.raises(StopRequested):
        maintain(session_of(lake), stop=after_some_checks)
    table = lake.open(REQUESTS)
    assert table is not None
    assert table.to_pyarrow_table().num_rows == 30  # whatever it finished, nothing lost
    assert mark_of(ZoneWriter(session_of(lake), REQUESTS, 7)) == 3
    assert len(maintain(session_of(lake)).tables) >= 1  # and a later run does the rest
