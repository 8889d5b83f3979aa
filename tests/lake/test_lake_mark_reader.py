"""The lake's erasure mark (zone 0's in ``requests``) has one reader, the session's filter's
``lake_mark``: ``shield_events``' committer asks it under that table's lock, so it waits on
no holder of the session's lock (read through a filter made lazily under that lock, it did)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from cdnlake.lake.log.progress import ERASED
from cdnlake.lake.log.schema import REQUESTS, SHIELD_EVENTS
from cdnlake.lake.personal.forget import Target, forget
from cdnlake.lake.zone.erasures import EVERY_ZONE
from tests.lake.test_forget import ADDRESS, config_at, seed
from tests.sessions import session_for


def test_the_shield_committer_reads_the_lake_mark_through_the_filter(tmp_path):
    with session_for(config_at(tmp_path)) as session:
        assert session.log_table(SHIELD_EVENTS)._lake_mark == session.erasures.lake_mark


def test_the_lake_mark_is_read_while_another_thread_holds_the_session_lock(tmp_path):
    with session_for(config_at(tmp_path)) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
        lake_mark = session.log_table(SHIELD_EVENTS)._lake_mark
        assert callable(lake_mark)
        read: list[int | None] = []
        reader = threading.Thread(target=lambda: read.append(lake_mark()), daemon=True)
        with session._lock:  # as any holder of it: a table's first load, close()
            reader.start()
            reader.join(timeout=30)
            waited = reader.is_alive()
        reader.join(timeout=30)
        assert not waited, "reading the lake's erasure mark waited for the session's lock"
        marks = session.log_table(REQUESTS).marks([EVERY_ZONE], ERASED)
        assert read == [marks[EVERY_ZONE]] and read[0] is not None
