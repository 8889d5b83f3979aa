"""Forwarded rows an erasure holds back are counted as held back (erased), not as rows
the lake already held (review finding 23)."""

from __future__ import annotations

from datetime import UTC, datetime

from cdnlake.forwarding.batch import Buffer, Flusher
from cdnlake.lake.personal.forget import Target, forget
from tests.forwarding.test_commit_race import config_at, line
from tests.sessions import session_for


def test_forwarded_rows_held_back_are_counted_as_erased(tmp_path):
    config = config_at(tmp_path)
    with session_for(config) as session:
        forget(session, Target(ip="198.51.100.7"), datetime.now(UTC))  # line 7's client
    with session_for(config) as session:
        buffer = Buffer()
        for i in range(10):
            buffer.put(line(i))
        assert Flusher(config, buffer, session).flush()
        counts = buffer.counts
        # line 7's request, and line 0's: 198.51.100.0 is the client's /24 network as a
        # provider that anonymises stores it, which forget removes and holds back too
        assert (counts.rows, counts.duplicates, counts.erased) == (8, 0, 2)
