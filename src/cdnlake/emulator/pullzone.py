"""Pull zones: hostnames (the zones themselves are the logging zones)."""

from __future__ import annotations

import re
from typing import ClassVar

from cdnlake.emulator.area import (
    AreaBase,
    RouteSpec,
    field_auth,
    field_error,
)
from cdnlake.emulator.http import Request, Response


class PullZoneRoutes(AreaBase):
    ROUTES: ClassVar[list[RouteSpec]] = [
        ("POST", r"^/pullzone/(\d+)/addHostname$", "add_hostname", field_auth),
    ]

    def add_hostname(self, req: Request, m: re.Match[str]) -> Response:
        zone = int(m.group(1))
        if zone not in self.emulator.zones:
            return field_error(404, "pullzone.not_found", "id", f"pull zone {zone} does not exist")
        try:
            body = req.json()
        except ValueError:
            return field_error(400, "body.invalid", "body", "not JSON")
        hostname = body.get("Hostname") if isinstance(body, dict) else None
        if not isinstance(hostname, str) or len(hostname) < 1:
            return field_error(400, "hostname.required", "Hostname", "at least 1 character")
        with self._lock:
            names = self.state.hostnames.setdefault(zone, [])
            if hostname.lower() in names:
                return field_error(409, "hostname.taken", "Hostname", f"{hostname} is in use")
            names.append(hostname.lower())
        return Response(204, b"", "application/json")
