"""Per-zone ingestion state: the watermark and v1 day progress, one small JSON file each.

The watermark means "every request with a timestamp before this instant is in the lake".
It is written (atomically) only after the rows it covers are durable. A damaged state
file is set aside, never deleted, and the watermark is rebuilt from the lake itself.
A zone is worked on by one process at a time (an advisory ``flock``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from cdnlake.errors import ZoneBusyError
from cdnlake.lake.layout import fsync_dir, tmp_sibling

log = logging.getLogger(__name__)
STATE_VERSION = 1


@dataclass
class V1Day:
    lines: int = 0  # newline-terminated lines taken from the day file so far
    complete: bool = False


@dataclass
class LastRun:
    started: str
    finished: str
    outcome: str
    rows: int = 0
    error: str | None = None


@dataclass
class ZoneState:
    zone_id: int
    watermark: datetime | None = None
    v1_days: dict[str, V1Day] = field(default_factory=dict)
    last_run: LastRun | None = None
    recovered: str | None = None  # set when the file was rebuilt after damage

    def to_json(self) -> bytes:
        data: dict[str, Any] = {
            "version": STATE_VERSION,
            "zone_id": self.zone_id,
            "watermark": self.watermark.isoformat() if self.watermark else None,
            "v1_days": {k: asdict(v) for k, v in sorted(self.v1_days.items())},
            "last_run": asdict(self.last_run) if self.last_run else None,
        }
        return msgspec.json.format(msgspec.json.encode(data))

    @classmethod
    def from_json(cls, zone_id: int, content: bytes) -> ZoneState:
        data = msgspec.json.decode(content)
        if not isinstance(data, dict) or data.get("zone_id") != zone_id:
            raise ValueError("not a state file of this zone")
        wm = data.get("watermark")
        watermark = datetime.fromisoformat(wm) if wm else None
        if watermark is not None and watermark.tzinfo is None:
            raise ValueError("watermark without time zone")
        days = {str(k): V1Day(**v) for k, v in (data.get("v1_days") or {}).items()}
        last = data.get("last_run")
        return cls(
            zone_id=zone_id,
            watermark=watermark,
            v1_days=days,
            last_run=LastRun(**last) if last else None,
        )


class StateStore:
    def __init__(self, state_dir: Path, kind: str = "zones") -> None:
        """``kind`` separates pull zones ("zones") from shield zones ("shield")."""
        self.root = state_dir
        self.kind = kind
        self.zones_dir = state_dir / kind
        self.locks_dir = state_dir / "locks"
        self.staging = state_dir / ("staging" if kind == "zones" else f"staging-{kind}")
        self.downloads = state_dir / "downloads"

    def path(self, zone_id: int) -> Path:
        return self.zones_dir / f"{int(zone_id)}.json"

    def load(self, zone_id: int, rebuild_watermark: datetime | None = None) -> ZoneState:
        """The zone's state; a damaged file is moved aside and rebuilt from ``rebuild``."""
        path = self.path(zone_id)
        try:
            content = path.read_bytes()
        except FileNotFoundError:
            return ZoneState(zone_id)
        try:
            return ZoneState.from_json(zone_id, content)
        except (ValueError, TypeError, msgspec.DecodeError) as exc:
            aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
            os.replace(path, aside)
            message = (
                f"state file {path} was damaged ({exc}); kept as {aside.name}, "
                f"watermark rebuilt from the lake: {rebuild_watermark or 'none'}"
            )
            log.warning(message)
            state = ZoneState(zone_id, watermark=rebuild_watermark, recovered=message)
            return state

    def save(self, state: ZoneState) -> None:
        path = self.path(state.zone_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = tmp_sibling(path)
        with open(tmp, "wb") as out:
            out.write(state.to_json())
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)

    def all_zone_ids(self) -> list[int]:
        if not self.zones_dir.exists():
            return []
        return sorted(int(p.stem) for p in self.zones_dir.glob("*.json") if p.stem.isdigit())

    @contextmanager
    def zone_lock(self, zone_id: int) -> Iterator[None]:
        """Hold the zone for this process; ZoneBusyError if another process has it."""
        self.locks_dir.mkdir(parents=True, exist_ok=True)
        prefix = "zone" if self.kind == "zones" else self.kind
        fd = os.open(
            self.locks_dir / f"{prefix}-{int(zone_id)}.lock", os.O_RDWR | os.O_CREAT, 0o644
        )
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ZoneBusyError(
                    f"pull zone {zone_id} is being ingested by another cdnlake process"
                ) from None
            yield
        finally:
            os.close(fd)


def utcnow() -> datetime:
    return datetime.now(UTC)
