"""The storage zone's own API (Edge Storage), under ``/storage`` on the emulator's port.

``GET /storage/<storage zone name>/<path>/`` lists a folder as a JSON array of storage
objects, ``GET /storage/<storage zone name>/<path>/<file>`` downloads a file (``Range``
honoured: 206 with ``Content-Range``, 416 past the end). The header ``AccessKey`` must be
the storage zone's password or its read-only password, else 401 (the provider's
``{"HttpCode", "Message"}`` body). The provider serves this on the storage zone's own
host at ``/``; a client takes a base URL, so here it is ``<emulator url>/storage``.

What the zone holds is the archive (``archive.py``): ``pullzone-logs/<zone name>/<YYYY>/<MM>/``.
Faults (``Faults.archive_*``, patterns matched against ``<zone name>/<YYYY>/<MM>/<file>``)
spoil single parts: cut short, bad lines, a listed checksum that does not match, or the
first download corrupted; ``storage_cut_after`` cuts every download after that many bytes.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from cdnlake.emulator.archive import ROOT, Part, ZoneArchive
from cdnlake.emulator.http import Request, Response, json_response

if TYPE_CHECKING:
    from cdnlake.emulator.state import Provider

PREFIX = "/storage"
USER_ID = "emulated-user-0001"
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
BAD_LINES = (
    "this line is no log line",
    "HIT|200|not-a-time|512|0|198.51.100.0|-|https://x.example/|DE|-|bad0000000000000|DE",
)


@dataclass(frozen=True)
class StorageZone:
    """A storage zone of the account (the fixture the emulator starts with)."""

    id: int
    name: str
    password: str
    read_only_password: str
    region: str = "DE"
    hostname: str = "storage.example-cdn.net"


DEFAULT_STORAGE_ZONES = (StorageZone(8001, "cdnlake-archive", "storage-key", "storage-ro-key"),)


def error(status: int, message: str) -> Response:
    return json_response(status, {"HttpCode": status, "Message": message})


def stamp(ms: int) -> str:
    """The storage API's time: UTC without an offset, milliseconds."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def part_key(zone: ZoneArchive, part: Part) -> str:
    """What the archive fault patterns match: ``<zone name>/<YYYY>/<MM>/<file>``."""
    return f"{zone.name}/{part.folder}/{part.name}"


def _matches(patterns: str, key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, p.strip()) for p in patterns.split(",") if p.strip())


def stored_content(emu: Provider, zone: ZoneArchive, part: Part) -> bytes:
    """The part's bytes as stored (the cut and bad-lines faults spoil the stored file)."""
    content = part.content
    key = part_key(zone, part)
    if _matches(emu.faults.archive_bad_lines, key):
        lines = gzip.decompress(content).decode().splitlines()
        lines[1:1] = BAD_LINES
        content = gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)
    if _matches(emu.faults.archive_cut, key):
        content = content[: max(1, len(content) * 2 // 3)]
    return content


def listed_checksum(emu: Provider, zone: ZoneArchive, part: Part, content: bytes) -> str:
    digest = hashlib.sha256(content)
    if _matches(emu.faults.archive_bad_checksum, part_key(zone, part)):
        digest.update(b"mismatch")
    return digest.hexdigest().upper()


class StorageApi:
    """The Edge Storage routes of one emulator."""

    def __init__(self, emu: Provider, zones: tuple[StorageZone, ...]) -> None:
        self.emu = emu
        self.zones = {z.id: z for z in zones}
        self.by_name = {z.name.lower(): z for z in zones}
        self._corrupted: set[str] = set()  # parts whose first download was spoiled

    def handle(self, req: Request) -> Response:
        rest = req.path[len(PREFIX) :].lstrip("/")
        name, _, path = rest.partition("/")
        zone = self.by_name.get(name.lower())
        key = req.headers.get("accesskey")
        if zone is None or key not in (zone.password, zone.read_only_password):
            return error(401, "Unauthorized")
        if req.method != "GET":
            return error(405, "Only GET is emulated")
        now = self.emu.clock.now_ms()
        if path == "" or path.endswith("/"):
            entries = self._listing(zone, [p for p in path.split("/") if p], now)
            if entries is None:
                return error(404, "Object Not Found")
            return json_response(200, entries)
        found = self._find(zone, path, now)
        if found is None:
            return error(404, "Object Not Found")
        return self._download(req, *found)

    # -- listing --------------------------------------------------------------------------
    def _entry(
        self,
        zone: StorageZone,
        folder: list[str],
        name: str,
        *,
        directory: bool,
        length: int = 0,
        changed_ms: int = 0,
        created_ms: int = 0,
        checksum: str | None = None,
    ) -> dict[str, Any]:
        path = "/" + "/".join([zone.name, *folder]) + "/"
        return {
            "Guid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{zone.id}:{path}{name}")),
            "StorageZoneName": zone.name,
            "Path": path,
            "ObjectName": name,
            "Length": length,
            "LastChanged": stamp(changed_ms),
            "ServerId": 0,
            "ArrayNumber": 0,
            "IsDirectory": directory,
            "UserId": USER_ID,
            "ContentType": "",
            "DateCreated": stamp(created_ms),
            "StorageZoneId": zone.id,
            "Checksum": checksum,
            "ReplicatedZones": "",
        }

    def _listing(
        self, zone: StorageZone, folder: list[str], now: int
    ) -> list[dict[str, Any]] | None:
        archives = [a for a in self.emu.archive.in_storage_zone(zone.id) if a.first_ms()]
        if not folder:
            if not archives:
                return []
            first = min(a.first_ms() or now for a in archives)
            return [self._entry(zone, [], ROOT, directory=True, changed_ms=now, created_ms=first)]
        if folder[0] != ROOT:
            return None
        if len(folder) == 1:
            return [
                self._entry(
                    zone,
                    folder,
                    a.name,
                    directory=True,
                    changed_ms=now,
                    created_ms=a.first_ms() or now,
                )
                for a in sorted(archives, key=lambda a: a.name)
            ]
        archive = next((a for a in archives if a.name == folder[1]), None)
        if archive is None or len(folder) > 4:
            return None
        days = self.emu.archive.days(archive, now)
        if len(folder) == 2:
            years = sorted({d.year for d in days})
            return [self._dir(zone, folder, f"{y:04d}", now) for y in years]
        if not folder[2].isdigit():
            return None
        year = int(folder[2])
        if len(folder) == 3:
            months = sorted({d.month for d in days if d.year == year})
            if not months:
                return None
            return [self._dir(zone, folder, f"{m:02d}", now) for m in months]
        if not folder[3].isdigit():
            return None
        month_days = [d for d in days if (d.year, d.month) == (year, int(folder[3]))]
        if not month_days:
            return None
        out = []
        for day in month_days:
            for part in self.emu.archive.parts(archive, day, now):
                content = stored_content(self.emu, archive, part)
                out.append(
                    self._entry(
                        zone,
                        folder,
                        part.name,
                        directory=False,
                        length=len(content),
                        changed_ms=part.last_write_ms,
                        created_ms=part.created_ms,
                        checksum=listed_checksum(self.emu, archive, part, content),
                    )
                )
        return out

    def _dir(self, zone: StorageZone, folder: list[str], name: str, now: int) -> dict[str, Any]:
        return self._entry(zone, folder, name, directory=True, changed_ms=now, created_ms=now)

    # -- downloads ------------------------------------------------------------------------
    def _find(self, zone: StorageZone, path: str, now: int) -> tuple[str, bytes] | None:
        parts = path.split("/")
        if len(parts) != 5 or parts[0] != ROOT or not parts[2].isdigit():
            return None
        archive = next(
            (a for a in self.emu.archive.in_storage_zone(zone.id) if a.name == parts[1]), None
        )
        match = re.fullmatch(r"(\d{2})_.+\.gzip", parts[4])
        if archive is None or match is None or not parts[3].isdigit():
            return None
        try:
            day = date(int(parts[2]), int(parts[3]), int(match.group(1)))
        except ValueError:
            return None
        if day not in self.emu.archive.days(archive, now):
            return None
        for part in self.emu.archive.parts(archive, day, now):
            if part.name == parts[4]:
                key = part_key(archive, part)
                return key, stored_content(self.emu, archive, part)
        return None

    def _download(self, req: Request, key: str, content: bytes) -> Response:
        if _matches(self.emu.faults.archive_corrupt_once, key) and key not in self._corrupted:
            self._corrupted.add(key)
            middle = len(content) // 2
            content = content[:middle] + bytes([content[middle] ^ 0xFF]) + content[middle + 1 :]
        size = len(content)
        headers = {"Accept-Ranges": "bytes"}
        status = 200
        wanted = req.headers.get("range")
        if wanted is not None:
            bounds = _byte_range(wanted, size)
            if bounds is None:
                unsatisfiable = {"Content-Range": f"bytes */{size}"}
                return Response(416, b"", "application/octet-stream", unsatisfiable)
            first, last = bounds
            content = content[first : last + 1]
            headers["Content-Range"] = f"bytes {first}-{last}/{size}"
            status = 206
        response = Response(status, content, "application/octet-stream", headers)
        cut = self.emu.faults.storage_cut_after
        if cut > 0 and len(content) > cut:
            response.cut_at = cut
        return response


def _byte_range(text: str, size: int) -> tuple[int, int] | None:
    """``bytes=a-b`` / ``bytes=a-`` / ``bytes=-n`` as inclusive bounds, or None (416)."""
    match = _RANGE.match(text.strip())
    if match is None or (not match.group(1) and not match.group(2)):
        return None
    if not match.group(1):
        count = int(match.group(2))
        if count == 0 or size == 0:
            return None
        return max(0, size - count), size - 1
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) else size - 1
    if first >= size or last < first:
        return None
    return first, min(last, size - 1)
