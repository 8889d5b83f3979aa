"""Zones at a sustained rate: records made on demand, second by second, never held.

A zone given a rate (``cdnlake emulator --zone-rate 1234=10000/s``) has, in each UTC
second from its start on, a number of requests drawn from an RNG seeded by (seed, zone,
second): any second can be made again, identical, at any time, so a zone at 10,000
requests/s is never held in memory (three days of it would be 2.6 billion records). Each
second is drawn in two steps from one stream: first its *skeleton* (per request: the
millisecond, the request id and the delay until it is visible, the same late-arrival
model as the hourly traffic), cheap enough to count what a page must skip; then, only
when a page serves them, the records' other fields.

Memory is bounded by least-recently-used caches: the seconds' records (by record count),
the sorted visible-at times of the seconds still arriving late (by count) and the
seconds' counts. A v2 page without filters makes only the seconds it serves (plus the
few at its edges); with filters, or the ``lose_hours`` fault, the emulator makes the
whole window, and ``/statistics`` walks every record of the hours it counts: both work,
but slowly for a busy zone.
"""

from __future__ import annotations

import bisect
import random
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from cdnlake.emulator.records import MAX_DELAY_MS, Record, ZoneSpec

BUCKET_MS = 1000
K = TypeVar("K")
V = TypeVar("V")

# Makes one record's fields: (rng, spec, zone id, timestamp) -> Record.
MakeRecord = Callable[[random.Random, ZoneSpec, int, int], Record]


class BoundedLru(Generic[K, V]):
    """A least-recently-used map whose entries' total ``weight`` stays <= ``capacity``
    (the newest entry is always kept, however heavy)."""

    def __init__(self, capacity: int, weight: Callable[[V], int]) -> None:
        self.capacity = capacity
        self._weight = weight
        self._items: OrderedDict[K, V] = OrderedDict()
        self.total = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.total -= self._weight(old)
            self._items[key] = value
            self.total += self._weight(value)
            while self.total > self.capacity and len(self._items) > 1:
                _, evicted = self._items.popitem(last=False)
                self.total -= self._weight(evicted)

    def discard(self, key: K) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.total -= self._weight(old)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True, slots=True)
class Skeleton:
    """One second of a zone, before its records are made: per request its millisecond,
    id and visible-at time, in generation order (``rng`` continues with the fields)."""

    ts: list[int]
    ids: list[int]
    visible: list[int]


class SustainedTraffic:
    """The records of the zones that have a rate (``ZoneSpec.per_second``)."""

    def __init__(
        self,
        seed: int,
        make_record: MakeRecord,
        *,
        cache_records: int = 200_000,
        cache_times: int = 4_000_000,
    ) -> None:
        self.seed = seed
        self._make = make_record
        self.records_cache: BoundedLru[tuple[int, int], list[Record]] = BoundedLru(
            cache_records, len
        )
        self.times_cache: BoundedLru[tuple[int, int], array[int]] = BoundedLru(cache_times, len)
        # A second's count is one draw: remembered for a day of seconds of one zone.
        self._counts: BoundedLru[tuple[int, int], int] = BoundedLru(86_400, lambda _: 1)
        self._late: dict[tuple[int, int], list[Record]] = {}
        self._lock = threading.Lock()

    # -- one second ------------------------------------------------------------------
    def _rng(self, zone_id: int, second: int) -> random.Random:
        return random.Random(f"{self.seed}:{zone_id}:s{second}")

    def count(self, spec: ZoneSpec, second: int) -> int:
        """How many requests the second holds (late additions included)."""
        if spec.since_ms is not None and (second + 1) * BUCKET_MS <= spec.since_ms:
            return 0
        key = (spec.id, second)
        n = self._counts.get(key)
        if n is None:
            n = self._skeleton(spec, second, counted_only=True)[0]
            self._counts.put(key, n)
        with self._lock:
            return n + len(self._late.get(key, ()))

    def _skeleton(
        self, spec: ZoneSpec, second: int, counted_only: bool = False
    ) -> tuple[int, Skeleton, random.Random]:
        rng = self._rng(spec.id, second)
        rate = spec.per_second
        n = max(0, round(rng.gauss(rate, rate**0.5)))
        start = second * BUCKET_MS
        if spec.since_ms is not None and start < spec.since_ms:
            # The zone's first second: only what lies from its start on.
            n = round(n * (start + BUCKET_MS - spec.since_ms) / BUCKET_MS)
            start = spec.since_ms
        span = second * BUCKET_MS + BUCKET_MS - start
        if counted_only:
            return n, Skeleton([], [], []), rng
        ts: list[int] = []
        ids: list[int] = []
        visible: list[int] = []
        draw, bits = rng.random, rng.getrandbits
        for _ in range(n):
            t = start + int(draw() * span)
            if draw() < 0.05:
                t = max(start, t - t % 1000)  # whole-second timestamps exist on the wire too
            ts.append(t)
            ids.append(bits(128))
            visible.append(t + int(MAX_DELAY_MS * draw() ** 3))
        return n, Skeleton(ts, ids, visible), rng

    def settled(self, spec: ZoneSpec, second: int, now_ms: int) -> bool:
        """Whether every request of the second is visible at ``now_ms``."""
        with self._lock:
            late = self._late.get((spec.id, second))
        last = max((r.visible_ms for r in late), default=0) if late else 0
        return second * BUCKET_MS + BUCKET_MS - 1 + MAX_DELAY_MS <= now_ms and last <= now_ms

    def visible_count(self, spec: ZoneSpec, second: int, now_ms: int) -> int:
        """Requests of the second visible at ``now_ms``, from the skeleton alone."""
        if self.settled(spec, second, now_ms):
            return self.count(spec, second)
        key = (spec.id, second)
        times = self.times_cache.get(key)
        if times is None:
            cached = self.records_cache.get(key)
            if cached is not None:
                times = array("q", sorted(r.visible_ms for r in cached))
            else:
                if spec.since_ms is not None and (second + 1) * BUCKET_MS <= spec.since_ms:
                    return 0
                _, skeleton, _ = self._skeleton(spec, second)
                with self._lock:
                    late = [r.visible_ms for r in self._late.get(key, ())]
                times = array("q", sorted(skeleton.visible + late))
            self.times_cache.put(key, times)
        return bisect.bisect_right(times, now_ms)

    def second(self, spec: ZoneSpec, second: int) -> list[Record]:
        """Every record of the second, visible or not, sorted by (timestamp, request id)."""
        key = (spec.id, second)
        cached = self.records_cache.get(key)
        if cached is not None:
            return cached
        if spec.since_ms is not None and (second + 1) * BUCKET_MS <= spec.since_ms:
            return []
        _, skeleton, rng = self._skeleton(spec, second)
        make = self._make
        out: list[Record] = []
        for t, rid, seen in zip(skeleton.ts, skeleton.ids, skeleton.visible, strict=True):
            record = make(rng, spec, spec.id, t)
            record.wire.requestId = f"{rid:032x}"
            record.visible_ms = seen
            out.append(record)
        with self._lock:
            out += self._late.get(key, ())
        out.sort(key=lambda r: (r.ts_ms, r.wire.requestId))
        self.records_cache.put(key, out)
        return out

    def add_late(self, spec: ZoneSpec, records: list[Record]) -> None:
        """Late additions (``Traffic.add_late``): part of their second from now on."""
        with self._lock:
            for record in records:
                key = (spec.id, record.ts_ms // BUCKET_MS)
                self._late.setdefault(key, []).append(record)
                self.records_cache.discard(key)
                self.times_cache.discard(key)

    def forget_before(self, ts_ms: int) -> None:
        limit = ts_ms // BUCKET_MS
        with self._lock:
            for key in [k for k in self._late if k[1] < limit]:
                del self._late[key]

    # -- windows ---------------------------------------------------------------------
    def iter_records(self, spec: ZoneSpec, from_ms: int, to_ms: int) -> Iterator[Record]:
        """Every record with ``from_ms <= ts < to_ms``, visible or not, in order, one
        second at a time (never the whole window at once)."""
        first = from_ms // BUCKET_MS
        if spec.since_ms is not None:
            first = max(first, spec.since_ms // BUCKET_MS)
        for s in range(first, (to_ms - 1) // BUCKET_MS + 1):
            records = self.second(spec, s)
            if s * BUCKET_MS < from_ms or (s + 1) * BUCKET_MS > to_ms:
                records = [r for r in records if from_ms <= r.ts_ms < to_ms]
            yield from records

    def page(
        self,
        spec: ZoneSpec,
        from_ms: int,
        to_ms: int,
        now_ms: int,
        offset: int,
        limit: int,
        descending: bool,
    ) -> tuple[list[Record], bool]:
        """A v2 page without filters: the records visible at ``now_ms`` at ``offset``
        (in time order, or reversed), and whether more follow. What it skips is counted
        from skeletons; only the seconds it serves are made."""
        first = from_ms // BUCKET_MS
        if spec.since_ms is not None:
            first = max(first, spec.since_ms // BUCKET_MS)
        last = (to_ms - 1) // BUCKET_MS
        seconds = range(last, first - 1, -1) if descending else range(first, last + 1)
        out: list[Record] = []
        skip = offset
        for s in seconds:
            partial = s * BUCKET_MS < from_ms or (s + 1) * BUCKET_MS > to_ms
            if len(out) >= limit:
                # Only whether one more record follows.
                if self._visible(spec, s, from_ms, to_ms, now_ms, partial):
                    return out, True
                continue
            n = self._visible(spec, s, from_ms, to_ms, now_ms, partial)
            if n <= skip:
                skip -= n
                continue
            records = [
                r
                for r in self.second(spec, s)
                if r.visible_ms <= now_ms and (not partial or from_ms <= r.ts_ms < to_ms)
            ]
            if descending:
                records.reverse()
            take = records[skip : skip + limit - len(out)]
            more_here = skip + len(take) < len(records)
            skip = 0
            out += take
            if len(out) >= limit and more_here:
                return out, True
        return out, False

    def _visible(
        self, spec: ZoneSpec, second: int, from_ms: int, to_ms: int, now_ms: int, partial: bool
    ) -> int:
        if not partial:
            return self.visible_count(spec, second, now_ms)
        return sum(
            1
            for r in self.second(spec, second)
            if r.visible_ms <= now_ms and from_ms <= r.ts_ms < to_ms
        )
