"""``cdnlake daemon``: run the scheduler until SIGINT / SIGTERM.

First signal: no new pages, passes in flight end or are abandoned without moving their
watermark, a daily report or audit in flight stops (not marked done: the next start makes
it again), the fleet's leases are released, exit 0 within 10 seconds whatever the number of
zones or the job that runs. Second signal:
exit at once (the lake stays consistent: a Delta commit is whole or absent).

Alone, a daemon holds its storage root (a second one exits 2 naming it); with
``coordination.postgres_dsn_env`` it joins the fleet of daemons sharing the zones.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from cdnlake.config import Config

if TYPE_CHECKING:
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.monitoring.http import MetricsServer
    from cdnlake.monitoring.metrics import DaemonMetrics
    from cdnlake.monitoring.traffic import TrafficCounters


def daemon(args: argparse.Namespace) -> int:
    from cdnlake.cli.common import load, open_api, require_writable_root
    from cdnlake.errors import UsageError
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy
    from cdnlake.scheduler import Daemon

    config = load(args)
    if not config.zones:
        raise UsageError("daemon: no zones configured ([[zones]] in the config file)")
    require_writable_root(config)
    if config.coordination.enabled:  # erasures made elsewhere are matched under its key
        config.privacy.require_hash_key()
    log = logging.getLogger("cdnlake.daemon")
    interrupted = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        if interrupted.is_set():
            log.warning("second signal: exiting now")
            os._exit(1)
        log.info("signal %s: stopping (send again to exit at once)", signal.Signals(signum).name)
        interrupted.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # The traffic counters: every commit of the session tells them what it newly stored.
    traffic = traffic_counters(config)
    with LakeSession.from_config(
        config.storage,
        privacy=PrivacyPolicy.from_config(config.privacy),
        traffic=traffic,
    ) as session:
        metrics, server = serve_metrics(config, session, traffic)
        try:
            with open_api(config) as api:
                runner = Daemon(config, api, metrics=metrics, session=session)
                runner.run_forever(interrupted)
                clean = runner.stop()
        finally:
            if server is not None:
                server.stop()
    log.info("daemon stopped after %d zone passes%s", runner.passes, "" if clean else " (forced)")
    if not clean:
        # A job left running (a report's query over a thousand zones) would hold the exit
        # until it ends: the pool's threads are joined as the interpreter exits. Nothing is
        # lost by not waiting: a commit is whole or absent, a report file is written whole
        # or not at all, and a daily job left is not marked done (made at the next start).
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def traffic_counters(config: Config) -> TrafficCounters | None:
    """With ``metrics.listen`` set: the traffic counters the daemon's session feeds, each
    configured zone's series at zero from the start (its pass's source, and ``forwarded``
    where the daemon receives forwarded logs, ``archive`` where it imports an archive), so
    that Prometheus counts its first requests."""
    if config.metrics.address() is None:
        return None
    from cdnlake.forwarding.batch import SOURCE as FORWARDED
    from cdnlake.ingest.backfill import COUNTED_AS as ARCHIVE
    from cdnlake.monitoring.traffic import TrafficCounters

    expected = [(zone.id, zone.source) for zone in config.zones]
    if config.forwarding.address() is not None:
        expected += [(zone.id, FORWARDED) for zone in config.zones]
    expected += [(zone.id, ARCHIVE) for zone in config.zones if zone.archive is not None]
    return TrafficCounters(expected)


def serve_metrics(
    config: Config, session: LakeSession, traffic: TrafficCounters | None
) -> tuple[DaemonMetrics | None, MetricsServer | None]:
    """With ``metrics.listen`` set: the metrics, and /metrics and /healthz serving them;
    the watermarks come from the daemon's own ``session``, the traffic counters are the
    ones it feeds."""
    address = config.metrics.address()
    if address is None:
        return None, None
    from cdnlake.monitoring.http import MetricsServer
    from cdnlake.monitoring.metrics import DaemonMetrics
    from cdnlake.status import completeness, health, newest_rows, zone_watermarks

    metrics = DaemonMetrics(
        config,
        watermarks=lambda: zone_watermarks(session, config),
        completeness=lambda: completeness(config, session),
        traffic=traffic,
        newest=lambda: newest_rows(config, session),
    )
    server = MetricsServer(*address, metrics, lambda: health(config, session))
    server.start()
    return metrics, server
