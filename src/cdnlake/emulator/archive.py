"""Permanent log storage (the archive): a zone's traffic as gzipped part files.

With ``LoggingSaveToStorage`` on, the provider's writers append each request, once it
reaches them, to a part file of its UTC day under ``pullzone-logs/<zone name>/<YYYY>/<MM>/``
(see ``shared/provider/README.md``). Here the parts are a pure function of the seeded
traffic, the zone's archiving spans, the limits and the clock: nothing is written ahead,
a day is made when it is first listed or read (a month of history costs nothing at start).

- A writer flushes once a ``flush_seconds`` step has passed: each flush appends one gzip
  member, so a part that is still open grows by appending, and what was served of it
  before stays its prefix (a download can resume with a Range).
- A part closes on the first of: ``max_lines`` lines or ``max_bytes`` bytes of lines, open
  ``max_open_seconds``, ``idle_seconds`` without a write, or midnight UTC after it opened.
  Nothing in the listing says "closed": a newer part of the same writer, or a last change
  more than ``idle_seconds`` ago, shows it.
- Days before ``legacy_until`` use the older naming scheme (one writer, ``<dd>_<n>.gzip``
  from 1); later days the newer one (writers 100 and 101 side by side,
  ``<dd>_<writer>-<index from 0>-<8 hex>.gzip``), each request with one writer.

Every request of an archived span is in exactly one part, so ``GET /statistics`` (the
same traffic) agrees with the archive hour by hour, however old the day.
"""

from __future__ import annotations

import gzip
import hashlib
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

from cdnlake.emulator.records import HOUR_MS, MAX_DELAY_MS, Record

if TYPE_CHECKING:
    from cdnlake.emulator.state import EmulatorClock
    from cdnlake.emulator.traffic import Traffic

DAY_MS = 24 * HOUR_MS
WRITERS = (100, 101)
ROOT = "pullzone-logs"
CACHED_DAYS = 64  # finished days kept made (a month of two zones)...
CACHED_BYTES = 256 << 20  # ...within this many bytes of parts
CACHED_RECENT = 16  # days still being written, kept as of their last flush step


@dataclass(frozen=True)
class ArchiveLimits:
    """When a part closes (the provider's documented values by default)."""

    max_lines: int = 5_000_000
    max_bytes: int = 2_000_000_000  # bytes of (uncompressed) lines
    max_open_seconds: float = 7200.0
    idle_seconds: float = 3600.0
    flush_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.max_lines < 1 or self.max_bytes < 1:
            raise ValueError("archive limits: max_lines and max_bytes must be at least 1")
        if min(self.max_open_seconds, self.idle_seconds, self.flush_seconds) <= 0:
            raise ValueError("archive limits: seconds must be positive")


@dataclass
class Part:
    """One part file as the storage zone holds it at some instant."""

    day: date
    name: str
    writer: int | None  # None: the older naming scheme's single writer
    index: int  # from 0 (the older scheme's name says index + 1)
    created_ms: int
    last_write_ms: int
    closed_ms: int | None  # None: still open, it may grow
    lines: int = 0
    line_bytes: int = 0
    members: list[bytes] = field(default_factory=list)

    @property
    def content(self) -> bytes:
        return b"".join(self.members)

    @property
    def folder(self) -> str:
        """``<YYYY>/<MM>`` of its day."""
        return f"{self.day:%Y/%m}"


@dataclass
class ZoneArchive:
    """One pull zone's permanent storage: where, under which name, since when."""

    zone_id: int
    name: str  # the folder under pullzone-logs/ (the pull zone's name)
    storage_zone_id: int
    spans: list[list[int | None]]  # [start_ms, end_ms or None], archived when start <= ts < end
    legacy_until_ms: int = 0  # days that begin before this use the older naming scheme

    @property
    def enabled(self) -> bool:
        return bool(self.spans) and self.spans[-1][1] is None

    def holds(self, ts_ms: int) -> bool:
        return any(s is not None and s <= ts_ms and (e is None or ts_ms < e) for s, e in self.spans)

    def first_ms(self) -> int | None:
        return min((s for s, _ in self.spans if s is not None), default=None)

    def last_ms(self, now_ms: int) -> int:
        ends = [now_ms if e is None else min(e, now_ms) for _, e in self.spans]
        return max(ends, default=now_ms)


def day_start_ms(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def ms_day(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).date()


class Archive:
    """Every archived zone's parts, made lazily per (zone, day) and kept once final."""

    def __init__(
        self,
        seed: int,
        traffic: Traffic,
        clock: EmulatorClock,
        limits: ArchiveLimits | None = None,
    ) -> None:
        self.seed = seed
        self.traffic = traffic
        self.clock = clock
        self.limits = limits or ArchiveLimits()
        self.zones: dict[int, ZoneArchive] = {}
        self._lock = threading.Lock()
        self._final: OrderedDict[tuple[int, date], list[Part]] = OrderedDict()
        self._final_bytes = 0
        # Days still being written, as of a flush step: what is stored changes only when
        # a writer flushes, so a listing and the downloads after it share one making.
        self._recent: dict[tuple[int, date], tuple[int, list[Part]]] = {}

    # -- switching ------------------------------------------------------------------------
    def enable(
        self,
        zone_id: int,
        storage_zone_id: int,
        since_ms: int,
        *,
        name: str | None = None,
        legacy_until_ms: int = 0,
    ) -> ZoneArchive:
        """Archive ``zone_id`` into ``storage_zone_id`` from ``since_ms`` on (a span of
        history when ``since_ms`` lies in the past)."""
        with self._lock:
            zone = self.zones.get(zone_id)
            if zone is None:
                zone = ZoneArchive(
                    zone_id, name or zone_name(zone_id), storage_zone_id, [], legacy_until_ms
                )
                self.zones[zone_id] = zone
            if zone.storage_zone_id != storage_zone_id:
                # Another storage zone: what was written stays where it was; the emulator
                # keeps one place per zone and starts it anew there.
                zone.storage_zone_id = storage_zone_id
                zone.spans = []
            if not zone.enabled:
                zone.spans.append([since_ms, None])
            self._forget(zone_id)
            return zone

    def disable(self, zone_id: int, at_ms: int) -> None:
        with self._lock:
            zone = self.zones.get(zone_id)
            if zone is not None and zone.enabled:
                zone.spans[-1][1] = at_ms
                self._forget(zone_id)

    def set_limits(self, limits: ArchiveLimits) -> None:
        with self._lock:
            self.limits = limits
            self._final.clear()
            self._final_bytes = 0
            self._recent.clear()

    def _forget(self, zone_id: int) -> None:
        for key in [k for k in self._final if k[0] == zone_id]:
            self._final_bytes -= _size(self._final.pop(key))
        for key in [k for k in self._recent if k[0] == zone_id]:
            del self._recent[key]

    # -- reading --------------------------------------------------------------------------
    def in_storage_zone(self, storage_zone_id: int) -> list[ZoneArchive]:
        with self._lock:
            return [z for z in self.zones.values() if z.storage_zone_id == storage_zone_id]

    def days(self, zone: ZoneArchive, now_ms: int) -> list[date]:
        """The UTC days of the zone's spans up to ``now_ms`` (newest included)."""
        first = zone.first_ms()
        if first is None or first > now_ms:
            return []
        out: list[date] = []
        ms = first - first % DAY_MS
        last = zone.last_ms(now_ms)
        while ms <= last:
            if any(
                s is not None and s < ms + DAY_MS and (e is None or e > ms) for s, e in zone.spans
            ):
                out.append(ms_day(ms))
            ms += DAY_MS
        return out

    def parts(self, zone: ZoneArchive, day: date, now_ms: int) -> list[Part]:
        """The parts of ``day`` as they stand at ``now_ms``, in name order."""
        key = (zone.zone_id, day)
        with self._lock:
            cached = self._final.get(key)
            if cached is not None:
                self._final.move_to_end(key)
                return cached
            limits = self.limits
            step = now_ms // int(limits.flush_seconds * 1000)
            recent = self._recent.get(key)
            if recent is not None and recent[0] == step:
                return recent[1]
        start = day_start_ms(day)
        parts = self._make(zone, day, start, now_ms, limits)
        settled = now_ms >= start + DAY_MS + MAX_DELAY_MS + limits.flush_seconds * 1000
        with self._lock:
            if settled and all(p.closed_ms is not None for p in parts):
                self._recent.pop(key, None)
                self._final[key] = parts
                self._final_bytes += _size(parts)
                while len(self._final) > 1 and (
                    len(self._final) > CACHED_DAYS or self._final_bytes > CACHED_BYTES
                ):
                    self._final_bytes -= _size(self._final.popitem(last=False)[1])
            else:
                self._recent[key] = (step, parts)
                while len(self._recent) > CACHED_RECENT:
                    del self._recent[next(iter(self._recent))]
        return parts

    def _records(self, zone: ZoneArchive, start: int, now_ms: int) -> Iterator[Record]:
        for record in self.traffic.iter_records(zone.zone_id, start, start + DAY_MS):
            if zone.holds(record.ts_ms):
                yield record

    def _make(
        self, zone: ZoneArchive, day: date, start: int, now_ms: int, limits: ArchiveLimits
    ) -> list[Part]:
        flush = int(limits.flush_seconds * 1000)
        legacy = start < zone.legacy_until_ms
        extended = self.traffic.spec(zone.zone_id).extended
        streams: dict[int | None, list[tuple[int, int, str, Record]]] = {}
        for record in self._records(zone, start, now_ms):
            written = (record.visible_ms // flush + 1) * flush
            if written > now_ms:
                continue
            writer = None if legacy else WRITERS[zlib.crc32(record.wire.requestId.encode()) & 1]
            streams.setdefault(writer, []).append(
                (written, record.ts_ms, record.wire.requestId, record)
            )
        if start + DAY_MS < now_ms - 4 * DAY_MS:
            # A day the logging API no longer serves: its hours leave memory, as statistics do.
            self.traffic.forget_before(start + DAY_MS)
        parts: list[Part] = []
        for writer, stream in streams.items():
            stream.sort(key=lambda item: item[:3])
            parts.extend(
                self._cut(
                    zone,
                    day,
                    writer,
                    [(w, r.v1_line(extended)) for w, _, _, r in stream],
                    now_ms,
                    limits,
                )
            )
        parts.sort(key=lambda p: p.name)
        return parts

    def _cut(
        self,
        zone: ZoneArchive,
        day: date,
        writer: int | None,
        lines: list[tuple[int, str]],
        now_ms: int,
        limits: ArchiveLimits,
    ) -> list[Part]:
        """One writer's stream of (write time, line) cut into parts by the closing rules."""
        parts: list[Part] = []
        current: Part | None = None
        batch: list[str] = []

        def flush() -> None:
            if current is not None and batch:
                data = ("\n".join(batch) + "\n").encode()
                current.members.append(gzip.compress(data, compresslevel=6, mtime=0))
                batch.clear()

        def deadline(part: Part) -> int:
            return min(
                part.created_ms + int(limits.max_open_seconds * 1000),
                part.last_write_ms + int(limits.idle_seconds * 1000),
                part.created_ms - part.created_ms % DAY_MS + DAY_MS,
            )

        for written, line in lines:
            if current is not None and (written >= deadline(current)):
                flush()
                current.closed_ms = deadline(current)
                current = None
            if current is not None and written != current.last_write_ms:
                flush()
            if current is None:
                current = Part(
                    day,
                    self._name(zone, day, writer, len(parts)),
                    writer,
                    len(parts),
                    written,
                    written,
                    None,
                )
                parts.append(current)
            batch.append(line)
            current.lines += 1
            current.line_bytes += len(line.encode()) + 1
            current.last_write_ms = written
            if current.lines >= limits.max_lines or current.line_bytes >= limits.max_bytes:
                flush()
                current.closed_ms = written
                current = None
        flush()
        if current is not None and now_ms >= deadline(current):
            current.closed_ms = deadline(current)
        return parts

    def _name(self, zone: ZoneArchive, day: date, writer: int | None, index: int) -> str:
        if writer is None:
            return f"{day.day:02d}_{index + 1}.gzip"
        tag = hashlib.sha256(
            f"{self.seed}:{zone.zone_id}:{day}:{writer}:{index}".encode()
        ).hexdigest()[:8]
        return f"{day.day:02d}_{writer}-{index}-{tag}.gzip"


def _size(parts: list[Part]) -> int:
    return sum(len(m) for p in parts for m in p.members)


def zone_name(zone_id: int) -> str:
    """The emulator's name of a pull zone (what ``POST /pullzone/{id}`` answers too)."""
    return f"zone-{zone_id}"
