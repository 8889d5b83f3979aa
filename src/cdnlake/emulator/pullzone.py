"""Pull zones: hostnames, log forwarding and permanent log storage (the zones themselves
are the logging zones)."""

from __future__ import annotations

import re
from typing import ClassVar

from cdnlake.emulator.archive import zone_name
from cdnlake.emulator.area import (
    AreaBase,
    RouteSpec,
    field_auth,
    field_error,
)
from cdnlake.emulator.forwarding import JSON, PLAIN, TLS, UDP, Target
from cdnlake.emulator.http import Request, Response, json_response

FORWARDING_KEYS = (
    "LogForwardingEnabled",
    "LogForwardingHostname",
    "LogForwardingPort",
    "LogForwardingProtocol",
    "LogForwardingFormat",
)
ARCHIVE_KEYS = ("LoggingSaveToStorage", "LoggingStorageZoneId")
# A zone's forwarding settings before any update: off, plain (as the provider's model says).
UNSET_FORWARDING = dict.fromkeys(FORWARDING_KEYS, None) | {
    "LogForwardingEnabled": False,
    "LogForwardingFormat": PLAIN,
}


class PullZoneRoutes(AreaBase):
    ROUTES: ClassVar[list[RouteSpec]] = [
        ("POST", r"^/pullzone/(\d+)/addHostname$", "add_hostname", field_auth),
        ("POST", r"^/pullzone/(\d+)$", "update_pull_zone", field_auth),
        ("GET", r"^/pullzone/(\d+)$", "get_pull_zone", field_auth),
    ]

    def pull_zone_model(self, zone: int) -> dict[str, object]:
        """The part of ``PullZoneModel`` the emulator keeps."""
        spec = self.emulator.zones[zone]
        forwarding = self.state.forwarding.get(zone, dict(UNSET_FORWARDING))
        archive = self.emulator.archive.zones.get(zone)
        return {
            "Id": zone,
            "Name": zone_name(zone),
            "EnableLogging": not spec.disabled,
            "LoggingIPAnonymizationEnabled": True,
            "LogAnonymizationType": 0,
            **forwarding,
            "LoggingSaveToStorage": archive is not None and archive.enabled,
            "LoggingStorageZoneId": archive.storage_zone_id if archive is not None else 0,
        }

    def get_pull_zone(self, req: Request, m: re.Match[str]) -> Response:
        zone = int(m.group(1))
        if zone not in self.emulator.zones:
            return field_error(404, "pullzone.not_found", "id", f"pull zone {zone} does not exist")
        with self._lock:
            return json_response(200, self.pull_zone_model(zone))

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

    def update_pull_zone(self, req: Request, m: re.Match[str]) -> Response:
        """Update Pull Zone, of which the emulator keeps log forwarding and permanent
        storage (``LoggingSaveToStorage``, ``LoggingStorageZoneId``)."""
        zone = int(m.group(1))
        if zone not in self.emulator.zones:
            return field_error(404, "pullzone.not_found", "id", f"pull zone {zone} does not exist")
        try:
            body = req.json()
        except ValueError:
            return field_error(400, "body.invalid", "body", "not JSON")
        if not isinstance(body, dict):
            return field_error(400, "body.invalid", "body", "a JSON object")
        with self._lock:
            settings = self.state.forwarding.setdefault(zone, dict(UNSET_FORWARDING))
            merged = settings | {k: v for k, v in body.items() if k in FORWARDING_KEYS}
            problem = _forwarding_problem(merged) or self._archive_update(zone, body)
            if problem is not None:
                return field_error(400, "pullzone.validation", problem[0], problem[1])
            settings.update(merged)
            target = None
            if merged["LogForwardingEnabled"]:
                target = Target(
                    merged["LogForwardingHostname"],
                    merged["LogForwardingPort"],
                    merged["LogForwardingProtocol"],
                    merged["LogForwardingFormat"] or PLAIN,
                )
            model = self.pull_zone_model(zone)
        self.forwarder.set(zone, target)
        return json_response(200, model)

    def _archive_update(self, zone: int, body: dict[str, object]) -> tuple[str, str] | None:
        """Switch permanent log storage as the body says; (field, message) if refused."""
        if not any(k in body for k in ARCHIVE_KEYS):
            return None
        archive = self.emulator.archive.zones.get(zone)
        enabled = body.get("LoggingSaveToStorage", archive is not None and archive.enabled)
        if not isinstance(enabled, bool):
            return "LoggingSaveToStorage", "true or false"
        storage_id = body.get(
            "LoggingStorageZoneId", archive.storage_zone_id if archive is not None else 0
        )
        if isinstance(storage_id, bool) or not isinstance(storage_id, int):
            return "LoggingStorageZoneId", "an integer"
        now = self.emulator.clock.now_ms()
        if not enabled:
            self.emulator.archive.disable(zone, now)
            return None
        if storage_id not in self.emulator.storage_zones.zones:
            return "LoggingStorageZoneId", f"storage zone {storage_id} does not exist"
        self.emulator.archive.enable(zone, storage_id, now)
        return None


def _forwarding_problem(settings: dict[str, object]) -> tuple[str, str] | None:
    """(field, message) of the first setting the provider would refuse, if any."""
    enabled = settings["LogForwardingEnabled"]
    if not isinstance(enabled, bool):
        return "LogForwardingEnabled", "true or false"
    log_format = settings["LogForwardingFormat"]
    if log_format is not None and (isinstance(log_format, bool) or log_format not in (PLAIN, JSON)):
        return "LogForwardingFormat", "0 (Plain) or 1 (JSON)"
    if not enabled:
        return None
    host, port = settings["LogForwardingHostname"], settings["LogForwardingPort"]
    protocol = settings["LogForwardingProtocol"]
    if not isinstance(host, str) or not host:
        return "LogForwardingHostname", "required when forwarding is enabled"
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        return "LogForwardingPort", "an integer within 1..65535"
    if isinstance(protocol, bool) or protocol not in range(UDP, TLS + 1):
        return "LogForwardingProtocol", "0 (UDP), 1 (TCP) or 2 (TCPEncrypted)"
    return None
