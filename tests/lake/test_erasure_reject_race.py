"""A rejected line racing an erasure is not kept (issue 48): a forwarding flush or a fleet
daemon queued the line before ``forget`` (in another process) landed; whether the erasure
lands before the MERGE is applied or between its filter and its commit (after forget's
own delete of rejected lines), the line of the erased address is not left stored.

Real Delta tables on local disk; the interleavings forced on the committer thread.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from cdnlake.lake.log.schema import REJECTED_LINES
from cdnlake.lake.personal.forget import Target, forget
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from tests.lake.test_erasure_fail_closed import rejected
from tests.lake.test_forget import ADDRESS, OTHER, config_at, seed, table_rows
from tests.sessions import session_for


@pytest.mark.parametrize("when", ["before the MERGE", "after its filter"])
def test_a_rejected_line_queued_before_an_erasure_is_not_kept(tmp_path, when):
    config = config_at(tmp_path)
    with session_for(config) as session, session_for(config) as daemon:
        seed(session, zones=(7,))
        forgotten: list[str] = []

        def erase() -> None:
            if not forgotten:
                forgotten.append(forget(session, Target(ip=ADDRESS), datetime.now(UTC)).erasure_id)

        committer = daemon.merge_table(REJECTED_LINES).committer
        apply, kept_rejects = committer._apply, daemon.erasures.kept_rejects

        def queued_then_erased(items):  # the MERGE is applied after the erasure landed
            erase()
            return apply(items)

        def filtered_then_erased(frame):  # it lands between the filter and the commit
            kept = kept_rejects(frame)
            if threading.current_thread().name == "commit-rejected_lines":
                erase()
            return kept

        if when == "before the MERGE":
            committer._apply = queued_then_erased  # type: ignore[method-assign]
        else:
            daemon.erasures.kept_rejects = filtered_then_erased  # type: ignore[method-assign]
        lines = [rejected(7, "v1-file", ADDRESS), rejected(7, "v2", OTHER)]
        Bookkeeping(daemon).record_rejects(lines, patient=False)
        assert forgotten, "the erasure did not land while the line was being recorded"
        stored = table_rows(session, REJECTED_LINES)
        assert not any(ADDRESS in text for text in stored["raw_line"]), stored["raw_line"]
        keys = stored["record_key"].to_list()
        assert any(key.startswith("v2:") for key in keys)  # the other client's line is kept
