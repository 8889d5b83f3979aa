"""The emulator's moving parts: its clock, fault switches and the per-zone rate limit."""

from __future__ import annotations

import math
import random
import re
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from cdnlake.emulator.archive import Archive
    from cdnlake.emulator.http import Request
    from cdnlake.emulator.records import Record, ZoneSpec
    from cdnlake.emulator.storage import StorageApi
    from cdnlake.emulator.traffic import Traffic


class EmulatorClock:
    """Real time, optionally shifted or frozen, so tests can stand at any instant."""

    def __init__(self, start: datetime | None = None, frozen: bool = False) -> None:
        self._lock = threading.Lock()
        self._offset = 0.0
        self._frozen_at: float | None = None
        if start is not None:
            self.set(start, frozen=frozen)

    def now_ms(self) -> int:
        with self._lock:
            base = self._frozen_at if self._frozen_at is not None else time.time() + self._offset
        return int(base * 1000)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms() / 1000, tz=UTC)

    def set(self, moment: datetime, frozen: bool | None = None) -> None:
        with self._lock:
            target = moment.timestamp()
            keep_frozen = self._frozen_at is not None if frozen is None else frozen
            self._offset = target - time.time()
            self._frozen_at = target if keep_frozen else None

    def advance(self, seconds: float) -> None:
        with self._lock:
            if self._frozen_at is not None:
                self._frozen_at += seconds
            self._offset += seconds


HOUR_MS = 3_600_000
RETRY_AFTER_MODES = ("positive", "zero", "absent", "mixed")


@dataclass
class Faults:
    """Fault injection switches, each a share of logging requests (0..1)."""

    error_rate: float = 0.0  # 500s, half with a JSON body, half with an HTML page
    spurious_429_rate: float = 0.0  # 429s beyond the real limit
    retry_after: str = "mixed"  # Retry-After on spurious 429s: positive|zero|absent|mixed
    slow_rate: float = 0.0  # answers delayed by slow_seconds
    slow_seconds: float = 2.0
    drop_rate: float = 0.0  # connection closed without an answer
    truncate_rate: float = 0.0  # body cut off half way
    malformed_rate: float = 0.0  # 200 with a body that is not JSON (v2)
    # v2 records and shield events served spoiled (see is_bad_record): always the same ones
    # (chosen by their id), as a provider bug would be, so a reject can be counted once.
    bad_record_rate: float = 0.0
    # Hours the logging API lost while the statistics still count them: a comma list of
    # ZONE@YYYY-MM-DDTHH (UTC), e.g. "1234@2026-11-20T05". Neither v1 nor v2 serves a
    # record of those hours of that zone; ``GET /statistics`` counts every one.
    lose_hours: str = ""
    # Permanent log storage, one part at a time: comma lists of patterns (fnmatch) on
    # ``<zone name>/<YYYY>/<MM>/<file>``, e.g. "zone-1234/2026/11/07_1.gzip" or "*/07_100-0-*".
    archive_cut: str = ""  # the stored file is cut short (a gzip stream that ends early)
    archive_bad_lines: str = ""  # two lines that are no log lines among the part's lines
    archive_bad_checksum: str = ""  # the listing's Checksum does not match the content
    archive_corrupt_once: str = ""  # the first download of the part comes corrupted
    storage_cut_after: int = 0  # every storage download breaks off after this many bytes
    seed: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _lost: frozenset[tuple[int, int]] = field(default=frozenset(), repr=False)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)
        self.check()

    def check(self) -> None:
        for f in fields(self):
            if f.name.endswith("_rate"):
                value = getattr(self, f.name)
                if not 0.0 <= value <= 1.0:
                    raise ValueError(f"{f.name} must be within 0..1, got {value}")
        if self.retry_after not in RETRY_AFTER_MODES:
            raise ValueError(f"retry_after must be one of {RETRY_AFTER_MODES}")
        if self.storage_cut_after < 0:
            raise ValueError("storage_cut_after must not be negative")
        if self.slow_seconds < 0:
            raise ValueError("slow_seconds must not be negative")
        self._lost = parse_lost_hours(self.lose_hours)

    def logged(self, zone_id: int, records: list[Record]) -> list[Record]:
        """``records`` of ``zone_id`` less those of the hours the logging API lost."""
        lost = {hour for zone, hour in self._lost if zone == zone_id}
        if not lost:
            return records
        return [r for r in records if r.ts_ms // HOUR_MS not in lost]

    def update(self, values: dict[str, Any]) -> None:
        names = {f.name for f in fields(self) if not f.name.startswith("_")}
        before = self.as_dict()
        try:
            for key, value in values.items():
                if key not in names:
                    raise ValueError(f"unknown fault switch {key!r}")
                setattr(self, key, type(getattr(self, key))(value))
            self.check()
        except (TypeError, ValueError):
            for key, value in before.items():  # a refused update changes nothing
                setattr(self, key, value)
            raise

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    def roll(self, rate: float) -> bool:
        if rate <= 0:
            return False
        with self._lock:
            return self._rng.random() < rate

    def choice(self, options: list[str]) -> str:
        with self._lock:
            return self._rng.choice(options)


def parse_lost_hours(text: str) -> frozenset[tuple[int, int]]:
    """``ZONE@YYYY-MM-DDTHH,...`` as (zone, hour index since the epoch) pairs."""
    out: set[tuple[int, int]] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = re.fullmatch(r"(\d+)@(\d{4}-\d{2}-\d{2})T(\d{2})(:00)?(:00)?Z?", item)
        if not match:
            raise ValueError(f"lose_hours: expected ZONE@YYYY-MM-DDTHH, got {item!r}")
        try:
            day = datetime.fromisoformat(match.group(2)).replace(tzinfo=UTC)
        except ValueError:
            raise ValueError(f"lose_hours: not a date in {item!r}") from None
        hour = int(match.group(3))
        if hour > 23:
            raise ValueError(f"lose_hours: hour {hour} in {item!r} is not 00..23")
        out.add((int(match.group(1)), int(day.timestamp()) // 3600 + hour))
    return frozenset(out)


def is_bad_record(record_id: str, rate: float) -> bool:
    """Whether the bad-record fault spoils this record or event (the same answer every time)."""
    return zlib.crc32(record_id.encode()) % 10_000 < rate * 10_000


class ZoneRateLimiter:
    """``limit`` accepted requests per zone in any rolling ``window`` seconds."""

    def __init__(self, limit: int = 30, window: float = 10.0) -> None:
        self.limit = limit
        self.window = window
        self._hits: dict[int, deque[float]] = {}
        self._lock = threading.Lock()

    def admit(self, zone_id: int) -> float | None:
        """Count the request and return None, or return seconds until a slot frees."""
        now = time.monotonic()
        with self._lock:
            hits = self._hits.setdefault(zone_id, deque())
            while hits and hits[0] <= now - self.window:
                hits.popleft()
            if len(hits) >= self.limit:
                return hits[0] + self.window - now
            hits.append(now)
            return None


def ceil_seconds(seconds: float) -> int:
    return max(1, math.ceil(seconds))


class Provider(Protocol):
    """What the route modules read of the provider they play (``server.Emulator`` is
    one): its zones, clock, traffic and faults, and its credential check. Typing the
    routes against it keeps them below the server that dispatches to them."""

    zones: dict[int, ZoneSpec]
    clock: EmulatorClock
    traffic: Traffic
    faults: Faults
    archive: Archive
    storage: StorageApi

    def check_credentials(self, req: Request, *, allow_bearer: bool) -> str | None: ...
