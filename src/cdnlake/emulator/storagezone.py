"""Storage zones in the management API (``/storagezone``, as ``core.json`` shapes them)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, ClassVar

from cdnlake.emulator.area import AreaBase, RouteSpec, field_error, status_only
from cdnlake.emulator.http import Request, Response, json_response
from cdnlake.emulator.storage import USER_ID, StorageZone, stored_content

MAX_PER_PAGE = 1000


def _stamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _int(req: Request, name: str, default: int, lo: int, hi: int) -> int:
    text = req.arg(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or not lo <= int(text) <= hi:
        raise ValueError(f"{name} must be an integer within {lo}..{hi}, got {text!r}")
    return int(text)


class StorageZoneRoutes(AreaBase):
    ROUTES: ClassVar[list[RouteSpec]] = [
        ("GET", r"^/storagezone/?$", "list_storage_zones", lambda s: status_only(s)),
        ("GET", r"^/storagezone/(\d+)$", "get_storage_zone", lambda s: status_only(s)),
    ]

    def storage_zone_model(self, zone: StorageZone) -> dict[str, Any]:
        """``StorageZoneModel`` (passwords included, as the provider sends them)."""
        now = self.emulator.clock.now_ms()
        used = files = 0
        for archive in self.emulator.archive.in_storage_zone(zone.id):
            for day in self.emulator.archive.days(archive, now)[-3:]:  # cheap, recent days
                for part in self.emulator.archive.parts(archive, day, now):
                    files += 1
                    used += len(stored_content(self.emulator, archive, part))
        return {
            "Id": zone.id,
            "UserId": USER_ID,
            "Name": zone.name,
            "Password": zone.password,
            "DateModified": _stamp(now),
            "Deleted": False,
            "StorageUsed": used,
            "FilesStored": files,
            "Region": zone.region,
            "ReplicationRegions": [],
            "PullZones": [],
            "ReadOnlyPassword": zone.read_only_password,
            "Rewrite404To200": False,
            "Custom404FilePath": None,
            "StorageHostname": zone.hostname,
            "ZoneTier": 0,
            "ReplicationChangeInProgress": False,
            "PriceOverride": 0.0,
            "Discount": 0,
            "StorageZoneType": 0,
        }

    def list_storage_zones(self, req: Request, m: re.Match[str]) -> Response:
        page = _int(req, "page", 1, 1, 2_147_483_647)
        per_page = _int(req, "perPage", MAX_PER_PAGE, 5, MAX_PER_PAGE)
        search = (req.arg("search") or "").lower()
        zones = [z for z in self.emulator.storage.zones.values() if search in z.name.lower()]
        chunk = zones[(page - 1) * per_page : page * per_page]
        return json_response(
            200,
            {
                "Items": [self.storage_zone_model(z) for z in chunk],
                "CurrentPage": page,
                "TotalItems": len(zones),
                "HasMoreItems": page * per_page < len(zones),
            },
        )

    def get_storage_zone(self, req: Request, m: re.Match[str]) -> Response:
        zone = self.emulator.storage.zones.get(int(m.group(1)))
        if zone is None:
            return field_error(404, "storagezone.not_found", "id", "no such storage zone")
        return json_response(200, self.storage_zone_model(zone))
