"""The fault suite: every zone ends complete and without duplicates, faults counted."""

from __future__ import annotations

import time
from datetime import timedelta

from cdnlake.emulator import Faults
from cdnlake.ingest.passes import Ingestor
from cdnlake.retention import RETENTION, oldest_served
from cdnlake.warehouse.db import Warehouse
from tests.conftest import (
    FAULT_RETRY,
    NOW,
    lake_ids,
    lake_text_contains,
    load_test_config,
    logging_client,
    start_emulator,
    truth_ids,
    write_config,
)
from tests.sessions import session_for


def test_everything_at_once(tmp_path, lake_kind, request):
    faults = Faults(
        seed=5,
        spurious_429_rate=0.33,
        retry_after="mixed",
        error_rate=0.1,
        drop_rate=0.05,
        truncate_rate=0.05,
        malformed_rate=0.05,
        slow_rate=0.03,
        slow_seconds=1.5,
    )
    emu = start_emulator("1234:extended,1235,1236", faults=faults)
    try:
        s3 = request.getfixturevalue("s3_server") if lake_kind == "s3" else None
        path = write_config(
            tmp_path, emu, zones=[(1234, "v2"), (1235, "v1"), (1236, "v2")], s3=s3, page_size=1000
        )
        path.write_text(path.read_text().replace("timeout_seconds = 10", "timeout_seconds = 1"))
        config = load_test_config(path)
        started = time.monotonic()
        client = logging_client(config, retry=FAULT_RETRY)
        results = Ingestor(config, client, session_for(config), clock=emu.clock.now).run(
            config.zones
        )
        assert time.monotonic() - started < 120
        assert all(r.ok for r in results), [r.error for r in results]
        start = oldest_served(NOW)
        for zone in (1234, 1236):
            ids = lake_ids(config, zone)
            assert len(ids) == len(set(ids))
            assert set(ids) == truth_ids(emu, zone, start, NOW)
        v1 = lake_ids(config, 1235)
        assert len(v1) == len(set(v1))
        assert set(v1) == truth_ids(emu, 1235, NOW - RETENTION, NOW + timedelta(seconds=1))
        with Warehouse(config.storage).connect() as con:
            totals = con.execute(
                "SELECT sum(rate_limited), sum(retries), sum(server_errors), sum(transport_errors)"
                " FROM ingest_runs"
            ).fetchone()
        assert all(t > 0 for t in totals), totals
        # The lake never holds the end user's credential, whatever the faults did.
        assert lake_text_contains(config, "Bearer eyJ") == []
    finally:
        emu.stop()
