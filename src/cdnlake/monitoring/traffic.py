"""The traffic counters: ``cdnlake_requests_total`` and ``cdnlake_bytes_sent_total``.

Each request is counted once, when a commit that newly stores it has landed, whichever
way it came (the lake session tells this sink, :class:`cdnlake.lake.zone.session.TrafficSink`):
a request forwarded and then read again by a pass, or read twice by overlapping passes,
was stored once and counts once. The label ``source`` is the row's own ``source`` column
(``v2``, ``v1``, ``forwarded``, ...), except for archive imports (``cdnlake backfill``, the
daemon's archive job): ``archive``, so that rules on live traffic can leave catch-up out
(a day of old rows imported at once is no traffic spike). A commit's rows are grouped by
polars, not counted one by one, and added under one lock.

Cardinality is bounded: per zone, the sources cdnlake writes times the provider's cache
statuses (anything else is ``other``) times the status classes ``1xx``..``5xx`` (a code
outside 100-599 is ``other``); no path, host or country label. The counts live in the
process and start at zero with it, as Prometheus expects of a restarted target.

Prometheus' ``rate()`` and ``increase()`` take a series' first sample as its start, not as
an increase: a series born with a commit's count would never count that commit (a short
outage stored by one pass, a zone's first 5xx, would not show at all). So the series of
the zones and sources the process expects (``expected``: its configured zones, each with
its pass's source and ``forwarded`` where it receives) are exported at zero from the start,
for every provider cache status and class ``1xx``..``5xx``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from datetime import datetime

import polars as pl
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from cdnlake.ingest.v1_parser import CACHE_STATUSES

OTHER = "other"
KNOWN_CACHE_STATUSES = frozenset(CACHE_STATUSES)
STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
REQUEST_LABELS = ["zone", "source", "cache_status", "status_class"]
BYTES_LABELS = ["zone", "source", "cache_status"]

RequestKey = tuple[str, str, str, str]  # zone, source, cache status, status class
BytesKey = tuple[str, str, str]  # zone, source, cache status


def status_class(code: int | None) -> str:
    """``2xx`` for 200-299 ..., ``other`` outside 100-599 (or none)."""
    return f"{code // 100}xx" if code is not None and 100 <= code <= 599 else OTHER


class TrafficCounters(Collector):
    """The process's traffic counters: a :class:`~cdnlake.lake.zone.session.TrafficSink` for its
    lake session, and a collector for its metrics registry."""

    def __init__(self, expected: Iterable[tuple[int, str]] = ()) -> None:
        """``expected``: (zone, source) pairs whose series start at zero (see above)."""
        self._lock = threading.Lock()
        self._requests: dict[RequestKey, int] = {}
        self._bytes: dict[BytesKey, int] = {}
        self._newest: dict[str, datetime] = {}  # zone -> its newest stored row's ts
        for zone_id, source in expected:
            for cache in CACHE_STATUSES:
                self._bytes[(str(zone_id), source, cache)] = 0
                for klass in STATUS_CLASSES:
                    self._requests[(str(zone_id), source, cache, klass)] = 0

    def stored(self, zone_id: int, rows: pl.DataFrame, *, counted_as: str | None = None) -> None:
        """Count the requests one landed commit newly stored: grouped by their raw values
        first (a few dozen groups however many rows), then labelled; under ``counted_as``
        (``archive``) instead of the rows' own source when given."""
        groups = (
            rows.lazy()
            .group_by("source", "cache_status", "status_code")
            .agg(pl.len(), pl.col("bytes_sent").sum())
            .collect()
        )
        zone = str(zone_id)
        newest = rows["ts"].max()
        with self._lock:
            if isinstance(newest, datetime) and (
                zone not in self._newest or newest > self._newest[zone]
            ):
                self._newest[zone] = newest
            for source, cache_status, code, requests, sent in groups.iter_rows():
                cache = cache_status if cache_status in KNOWN_CACHE_STATUSES else OTHER
                key = (zone, counted_as or source or OTHER, cache, status_class(code))
                self._requests[key] = self._requests.get(key, 0) + requests
                where = key[:3]
                self._bytes[where] = self._bytes.get(where, 0) + (sent or 0)

    def newest(self) -> dict[str, datetime]:
        """Each zone's newest row stored by this process's commits (its request time)."""
        with self._lock:
            return dict(self._newest)

    def counts(self) -> tuple[dict[RequestKey, int], dict[BytesKey, int]]:
        """Requests and bytes counted so far, by their labels."""
        with self._lock:
            return dict(self._requests), dict(self._bytes)

    def collect(self) -> Iterator[Metric]:
        requests, sent = self.counts()
        family = CounterMetricFamily(
            "cdnlake_requests",
            "CDN requests stored in the lake, each once when first stored whichever way it "
            "came (label source: the row's source), by cache status and status class.",
            labels=REQUEST_LABELS,
        )
        for labels, n in sorted(requests.items()):
            family.add_metric(list(labels), n)
        yield family
        family = CounterMetricFamily(
            "cdnlake_bytes_sent",
            "Bytes the CDN sent for the requests stored in the lake (bytes_sent), counted "
            "with them, by cache status.",
            labels=BYTES_LABELS,
        )
        for where, n in sorted(sent.items()):
            family.add_metric(list(where), n)
        yield family
