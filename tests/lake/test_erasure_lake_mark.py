"""A lake-wide erasure (zone 0's erasure mark in ``requests``) sends back a share prepared
before it for any zone, also one forget's configuration does not name (review finding 2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from cdnlake.lake.log.progress import WATERMARK, to_ms
from cdnlake.lake.log.schema import REQUESTS, SHIELD_EVENTS
from cdnlake.lake.personal.forget import Target, forget
from cdnlake.lake.zone.writer import ZoneWriter
from tests.lake.test_forget import (
    ADDRESS,
    END,
    START,
    config_at,
    requests,
    seed,
    shield_events,
    table_rows,
)
from tests.sessions import session_for


def _forgotten_while_held(writer: ZoneWriter, run_forget) -> list[int]:
    """``writer``'s share prepared, then forget landing before it is submitted."""
    prepare = writer._prepare
    calls: list[int] = []

    def prepared_then_forgotten(*args, **kwargs):
        attempt = prepare(*args, **kwargs)
        if not calls:
            run_forget()
        calls.append(1)
        return attempt

    writer._prepare = prepared_then_forgotten  # type: ignore[method-assign]
    return calls


def test_a_share_of_a_zone_forget_does_not_know_goes_back(tmp_path):
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        with session_for(config) as daemon:  # zone 11: in the daemon's config only
            writer = ZoneWriter(daemon, REQUESTS, 11)
            calls = _forgotten_while_held(
                writer,
                lambda: forget(session, Target(ip=ADDRESS), datetime.now(UTC), zones_known=(7,)),
            )
            written = writer.commit(requests(11), {WATERMARK: to_ms(END)})
            assert len(calls) == 2, "the share held against no erasure landed"
            assert (written.new, written.erased) == (108, 12)
        rows = table_rows(session).filter(pl.col("pull_zone_id") == 11)
        assert rows.height == 108 and ADDRESS not in rows["remote_ip"].to_list()


def test_a_shield_share_prepared_before_a_lake_wide_erasure_goes_back(tmp_path):
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        with session_for(config) as daemon:
            writer = ZoneWriter(daemon, SHIELD_EVENTS, 5002)
            calls = _forgotten_while_held(
                writer, lambda: forget(session, Target(ip=ADDRESS), datetime.now(UTC))
            )
            events = shield_events(START - timedelta(minutes=1), 10)
            written = writer.commit(events, {})
            assert len(calls) == 2, "the shield share held against no erasure landed"
            assert (written.new, written.erased) == (5, 5)
        logs = table_rows(session, SHIELD_EVENTS)["log"].to_list()
        assert len(logs) == 5 and not any(ADDRESS in text for text in logs)
