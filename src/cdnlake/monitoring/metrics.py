"""The daemon's Prometheus metrics, per zone (labels ``zone`` and ``source``).

Counters live in the process: they start at zero with it, as Prometheus expects of a
restarted target (``rate()`` handles the reset). Every configured zone has its series
from the start, so a rate is defined before the first pass. The lag gauge is computed at
each scrape from the watermarks in the lake, so it is right from the first scrape and,
in a fleet, for zones that other daemons ingest. The traffic counters are fed by the lake
session, not by the passes (:mod:`cdnlake.monitoring.traffic`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cdnlake.config import Config
from cdnlake.ingest.result import ZoneResult
from cdnlake.monitoring.traffic import TrafficCounters

if TYPE_CHECKING:  # the daemon has it loaded; a scrape needs no writer
    from cdnlake.lake.upkeep.maintain import MaintainReport

log = logging.getLogger("cdnlake.metrics")

LABELS = ("zone", "source")
PASS_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
WATERMARK_REFRESH_SECONDS = 5.0
AMPLIFICATION_PASSES = 10  # cdnlake_read_amplification: over each zone's last passes

COMPLETENESS_REFRESH_SECONDS = 60.0

Watermarks = dict[tuple[str, str], datetime]
Completeness = dict[tuple[str, str], float]  # (zone, day) -> lake requests / provider's
Newest = dict[str, datetime]  # zone -> the request time of its newest stored row
K = TypeVar("K")
V = TypeVar("V")


class _Refreshed(Generic[K, V]):
    """A reading of the lake, taken again at most every ``seconds`` when asked for; a
    read that fails keeps the last one (a scrape must not fail on a slow store).

    The read runs under its own lock, not the value's: a pass that ends while the lake
    is read (a whole table's watermarks, seconds on a big log) sets its value at once
    instead of waiting for the read, and what it set wins over the read's."""

    def __init__(self, read: Callable[[], dict[K, V]], seconds: float, what: str):
        self.read, self.seconds, self.what = read, seconds, what
        self._value: dict[K, V] = {}
        self._set_while_read: dict[K, V] | None = None
        self._at = -math.inf
        self._expired = 0  # how many times expired: a read begun before an expiry is stale
        self._lock = threading.Lock()  # the value
        self._reading = threading.Lock()  # one read at a time

    def get(self) -> dict[K, V]:
        with self._reading:
            if time.monotonic() - self._at >= self.seconds:
                with self._lock:
                    self._set_while_read = {}
                    expired = self._expired
                try:
                    value = self.read()
                except Exception as exc:
                    log.warning("metrics: %s not read: %s", self.what, exc)
                    value = None
                with self._lock:
                    if value is not None:
                        self._value = {**value, **(self._set_while_read or {})}
                        if self._expired == expired:  # else the next get reads again
                            self._at = time.monotonic()
                    self._set_while_read = None
        with self._lock:
            return dict(self._value)

    def set(self, key: K, value: V) -> None:
        """One entry as known now (newer than any read under way)."""
        with self._lock:
            self._value[key] = value
            if self._set_while_read is not None:
                self._set_while_read[key] = value

    def expire(self) -> None:
        """The next :meth:`get` reads again."""
        with self._lock:
            self._at = -math.inf
            self._expired += 1


class _LagCollector(Collector):
    """``cdnlake_watermark_lag_seconds``: now minus each zone's watermark, at scrape time."""

    def __init__(self, read: Callable[[], Watermarks]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "cdnlake_watermark_lag_seconds",
            "Seconds between now and the zone's watermark (how far behind its data is).",
            labels=list(LABELS),
        )
        now = datetime.now(UTC)
        for (zone, source), mark in sorted(self.read().items()):
            family.add_metric([zone, source], (now - mark).total_seconds())
        yield family


class _NewestCollector(Collector):
    """``cdnlake_newest_row_age_seconds``: now minus the request time of each zone's newest
    stored row, at scrape time. Unlike the watermark, it moves with forwarded rows too:
    the first number an incident needs (is the lake seeing traffic right now?)."""

    def __init__(self, read: Callable[[], Newest]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "cdnlake_newest_row_age_seconds",
            "Seconds between now and the request time of the zone's newest stored row "
            "(whichever way it came).",
            labels=["zone"],
        )
        now = datetime.now(UTC)
        for zone, newest in sorted(self.read().items()):
            family.add_metric([zone], max(0.0, (now - newest).total_seconds()))
        yield family


class _CompletenessCollector(Collector):
    """``cdnlake_completeness_ratio``: each audited day's lake requests over the
    provider's statistics, per zone and day (from ``audit_days``, at scrape time)."""

    def __init__(self, read: Callable[[], Completeness]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "cdnlake_completeness_ratio",
            "The lake's requests over the provider's statistics for an audited UTC day "
            "(label day), per zone: below 1 - audit.tolerance, the day is short.",
            labels=["zone", "day"],
        )
        for (zone, day), ratio in sorted(self.read().items()):
            family.add_metric([zone, day], ratio)
        yield family


ForwardedCounts = tuple[dict[int, int], dict[int, int]]  # rows first stored, rejected: by zone


class _ForwardedCollector(Collector):
    """``cdnlake_forwarded_rows_total`` and ``cdnlake_forwarded_rejected_total`` per zone,
    from the syslog receiver's own counts (none while the daemon receives nothing)."""

    def __init__(self) -> None:
        self.read: Callable[[], ForwardedCounts] | None = None

    def collect(self) -> Iterator[Metric]:
        rows = CounterMetricFamily(
            "cdnlake_forwarded_rows",
            "Rows first stored from the provider's log forwarding (not yet in the lake from "
            "a pass), per zone.",
            labels=["zone"],
        )
        rejected = CounterMetricFamily(
            "cdnlake_forwarded_rejected",
            "Forwarded lines of a configured zone kept in rejected_lines, per zone.",
            labels=["zone"],
        )
        stored, refused = self.read() if self.read is not None else ({}, {})
        for zone, n in sorted(stored.items()):
            rows.add_metric([str(zone)], n)
        for zone, n in sorted(refused.items()):
            rejected.add_metric([str(zone)], n)
        yield rows
        yield rejected


class _AmplificationCollector(Collector):
    """``cdnlake_read_amplification``: records read per new record stored, per zone."""

    def __init__(self, read: Callable[[], dict[tuple[str, str], tuple[int, int]]]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "cdnlake_read_amplification",
            f"Records (v1: lines) read from the provider per new record stored, over the "
            f"zone's last {AMPLIFICATION_PASSES} passes in this daemon; +Inf when they read "
            "records and stored none, absent when they read none.",
            labels=list(LABELS),
        )
        for labels, (read, new) in sorted(self.read().items()):
            if read:
                family.add_metric(list(labels), read / new if new else math.inf)
        yield family


class DaemonMetrics:
    def __init__(
        self,
        config: Config,
        *,
        watermarks: Callable[[], Watermarks] | None = None,
        completeness: Callable[[], Completeness] | None = None,
        traffic: TrafficCounters | None = None,
        registry: CollectorRegistry | None = None,
        newest: Callable[[], Newest] | None = None,
    ) -> None:
        """``traffic``: the counters the process's lake session feeds (the daemon builds
        them with the session); None, no traffic counters are exported. ``newest``: each
        zone's newest stored row as the lake's statistics say (every daemon's commits),
        read at most every few seconds; the rows this process stores since count at once."""
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.traffic = traffic
        if traffic is not None:
            r.register(traffic)
        self.rows = Counter("cdnlake_rows_ingested", "Rows added to the lake.", LABELS, registry=r)
        self.records_read = Counter(
            "cdnlake_records_read",
            "Records (v1: lines) read from the provider, new or not.",
            LABELS,
            registry=r,
        )
        self.duplicates = Counter(
            "cdnlake_duplicates_dropped", "Rows read again and dropped.", LABELS, registry=r
        )
        self.rejected = Counter(
            "cdnlake_rejected", "Lines or records that could not be parsed.", LABELS, registry=r
        )
        self.late = Counter(
            "cdnlake_records_later_than_lag",
            "New records that only the safety margin's re-read found: they reached the "
            "provider later than ingest.lag_seconds (raise it: those as late between the "
            "margin's slices are not read again).",
            LABELS,
            registry=r,
        )
        self.rate_limited = Counter(
            "cdnlake_rate_limited", "429 answers received from the provider.", LABELS, registry=r
        )
        self.retries = Counter("cdnlake_retries", "Requests sent again.", LABELS, registry=r)
        self.gap_seconds = Counter(
            "cdnlake_gap_seconds",
            "Seconds of logs recorded as lost (past retention, damaged and gone); each "
            "instant once, however many passes claim it.",
            LABELS,
            registry=r,
        )
        self.passes = Counter(
            "cdnlake_passes", "Zone passes, by outcome.", (*LABELS, "outcome"), registry=r
        )
        self.duration = Histogram(
            "cdnlake_pass_duration_seconds",
            "How long a zone pass took.",
            LABELS,
            buckets=PASS_BUCKETS,
            registry=r,
        )
        self.repeats = Counter(
            "cdnlake_repeats_removed",
            "Rows whose key another row of the same table held, found by maintain and removed "
            "(one of each kept): deduplication assumes there are none.",
            ("table",),
            registry=r,
        )
        self.last_ok = Gauge(
            "cdnlake_last_pass_ok",
            "1 if the zone's last pass succeeded, else 0.",
            LABELS,
            registry=r,
        )
        self.zones = [(str(z.id), z.source) for z in config.zones]
        self.zones += [(str(z.id), "shield") for z in config.shield_zones]
        for labels in self.zones:
            for counter in (
                self.rows,
                self.records_read,
                self.duplicates,
                self.rejected,
                self.late,
                self.rate_limited,
                self.retries,
                self.gap_seconds,
            ):
                counter.labels(*labels)
            self.duration.labels(*labels)
        self._marks = _Refreshed(watermarks or dict, WATERMARK_REFRESH_SECONDS, "watermarks")
        self._lock = threading.Lock()
        self._after_pass: list[Callable[[], None]] = []
        # (records read, new rows) of each zone's last passes
        self._passes: dict[tuple[str, str], deque[tuple[int, int]]] = {}
        r.register(_LagCollector(self.watermarks))
        self._newest = _Refreshed(newest or dict, WATERMARK_REFRESH_SECONDS, "newest rows")
        r.register(_NewestCollector(self.newest))
        r.register(_AmplificationCollector(self.read_and_new))
        self._completeness = _Refreshed(
            completeness or dict, COMPLETENESS_REFRESH_SECONDS, "audited days"
        )
        r.register(_CompletenessCollector(self.completeness))
        self._forwarded = _ForwardedCollector()
        r.register(self._forwarded)

    def after_pass(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` each time a pass has been observed."""
        self._after_pass.append(listener)

    def watermarks(self) -> Watermarks:
        """The zones' watermarks, read again from the lake at most every few seconds."""
        return self._marks.get()

    def newest(self) -> Newest:
        """Each zone's newest stored row: the lake's (read again at most every few seconds)
        or, when newer, the newest one this process's commits stored."""
        found = self._newest.get()
        if self.traffic is not None:
            for zone, at in self.traffic.newest().items():
                if zone not in found or at > found[zone]:
                    found[zone] = at
        return found

    def completeness(self) -> Completeness:
        """The audited days' ratios, read again from the lake at most once a minute."""
        return self._completeness.get()

    def audited(self) -> None:
        """An audit was just kept: the next scrape reads the days again."""
        self._completeness.expire()

    def read_and_new(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Records read and new rows stored over each zone's last passes."""
        with self._lock:
            return {
                labels: (sum(read for read, _ in passes), sum(new for _, new in passes))
                for labels, passes in self._passes.items()
            }

    def forwarding(self, read: Callable[[], ForwardedCounts]) -> None:
        """Export the syslog receiver's counts, read at each scrape."""
        self._forwarded.read = read

    def observe_maintain(self, report: MaintainReport) -> None:
        for table in report.tables:
            self.repeats.labels(table.table).inc(table.repeats)

    def observe(self, result: ZoneResult) -> None:
        labels = (str(result.zone_id), result.source)
        stats = result.stats
        self.rows.labels(*labels).inc(result.rows)
        self.records_read.labels(*labels).inc(result.rows_read)
        with self._lock:
            passes = self._passes.setdefault(labels, deque(maxlen=AMPLIFICATION_PASSES))
            passes.append((result.rows_read, result.rows))
        self.duplicates.labels(*labels).inc(result.duplicates)
        self.rejected.labels(*labels).inc(result.rejected)
        self.late.labels(*labels).inc(result.late)
        self.rate_limited.labels(*labels).inc(stats.rate_limited)
        self.retries.labels(*labels).inc(stats.retries)
        self.gap_seconds.labels(*labels).inc(max(0.0, result.lost_seconds))
        self.passes.labels(*labels, result.outcome).inc()
        finished = result.finished or datetime.now(UTC)
        self.duration.labels(*labels).observe((finished - result.started).total_seconds())
        self.last_ok.labels(*labels).set(1 if result.ok else 0)
        if result.reached is not None:
            self._marks.set(labels, result.reached)
        for listener in self._after_pass:
            listener()
