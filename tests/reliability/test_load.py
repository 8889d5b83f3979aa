"""Many zones polled concurrently by one daemon: each inside its budget, all complete."""

from __future__ import annotations

import os
import resource
import time

import pytest

from cdnlake.retention import oldest_served
from cdnlake.scheduler import Daemon, wait_for
from tests.conftest import (
    NOW,
    lake_ids,
    load_test_config,
    make_client,
    start_emulator,
    truth_ids,
    write_config,
)

ZONES = 50
SOAK = os.environ.get("SOAK") == "1"


@pytest.mark.timeout(600 if SOAK else 300)  # the soak watches 300 s of passes after warm-up
def test_fifty_zones_one_daemon(tmp_path):
    ids = list(range(2001, 2001 + ZONES))
    emu = start_emulator(",".join(str(i) for i in ids), rpm=0.5, rate=(30, 2.0))
    try:
        path = write_config(
            tmp_path,
            emu,
            zones=[(i, "v2") for i in ids],
            page_size=200,
            requests_per_window=30,
            window_seconds=2,
            max_window_seconds=43200,
        )
        path.write_text(path.read_text().replace("[ingest]", "[ingest]\nconcurrency = 16"))
        config = load_test_config(path)
        # Passes alone: the day's report and maintenance (due at 12:00) are not caught up.
        daemon = Daemon(config, make_client(config), clock=emu.clock.now, catch_up=False)
        fds_before = len(os.listdir("/proc/self/fd"))
        daemon.start()
        rss = []
        try:
            assert wait_for(lambda: len(daemon.zone_passes) == ZONES, 120), daemon.zone_passes
            deadline = time.monotonic() + (300 if SOAK else 8)
            while time.monotonic() < deadline:
                rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
                time.sleep(1)
        finally:
            assert daemon.stop()
        # No open-file leak across passes: once stopped, the daemon holds what it held at
        # start, give or take its HTTP pool and runtime threads (a leak of one file a pass
        # would leave hundreds here). Counted in flight, the Delta log files that
        # sixteen passes read at once swing by hundreds from one second to the next.
        passes = sum(daemon.zone_passes.values())
        fds_after = len(os.listdir("/proc/self/fd"))
        assert fds_after <= fds_before + 40, (fds_before, fds_after, passes)
        assert sum(c.rate_limited for c in emu.counters.values()) == 0
        start = oldest_served(NOW)
        for zone in ids:
            got = lake_ids(tmp_path / "data", zone)
            assert len(got) == len(set(got))
            assert set(got) == truth_ids(emu, zone, start, NOW)
        if len(rss) > 4:
            assert rss[-1] <= rss[len(rss) // 2] * 1.2  # flat after warm-up
    finally:
        emu.stop()
