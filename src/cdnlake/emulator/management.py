"""The management API areas beyond logging, with state that behaves.

Shield zones, compute scripts, video libraries and DNS zones exist with fixed ids (see
``ManagementFixtures``); pull zones are the logging zones. Each area lives in its own
module, mirroring ``cdnlake.client``; this one routes a request to the area that owns it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from cdnlake.emulator.area import ManagementFixtures, ManagementState, status_only
from cdnlake.emulator.compute import ComputeRoutes
from cdnlake.emulator.containers import ContainerRoutes
from cdnlake.emulator.dns import DnsRoutes
from cdnlake.emulator.forwarding import Forwarder
from cdnlake.emulator.http import Request, Response, json_response
from cdnlake.emulator.pullzone import PullZoneRoutes
from cdnlake.emulator.shield import ShieldRoutes
from cdnlake.emulator.storagezone import StorageZoneRoutes
from cdnlake.emulator.video import VideoRoutes

if TYPE_CHECKING:
    from cdnlake.emulator.state import Provider

AREAS = (
    ShieldRoutes,
    ComputeRoutes,
    PullZoneRoutes,
    VideoRoutes,
    DnsRoutes,
    ContainerRoutes,
    StorageZoneRoutes,
)
Route = Callable[[Request, re.Match[str]], Response]
PUBLIC_ROUTES = {"oembed"}  # answered without credentials


class ManagementApi(
    ShieldRoutes,
    ComputeRoutes,
    PullZoneRoutes,
    VideoRoutes,
    DnsRoutes,
    ContainerRoutes,
    StorageZoneRoutes,
):
    def __init__(self, emulator: Provider, fixtures: ManagementFixtures | None = None) -> None:
        self.emulator = emulator
        self.fx = fixtures or ManagementFixtures()
        self.state = ManagementState()
        self.forwarder = Forwarder(emulator)  # pushes the logs of zones that forward them
        self._lock = threading.Lock()
        # (method, path pattern, route, its name, error shape for 401/403)
        self.routes: list[tuple[str, re.Pattern[str], Route, str, Callable[[int], Response]]] = [
            (method, re.compile(pattern), getattr(self, name), name, auth_error)
            for area in AREAS
            for method, pattern, name, auth_error in area.ROUTES
        ]

    def dispatch(self, req: Request) -> Response:
        known_path = False
        for method, pattern, route, name, auth_error in self.routes:
            match = pattern.match(req.path)
            if not match:
                continue
            if req.method != method:
                known_path = True  # another route may take this method on the same path
                continue
            if name not in PUBLIC_ROUTES:
                problem_ = self.emulator.check_credentials(req, allow_bearer=False)
                if problem_ == "missing":
                    return auth_error(401)
                if problem_ == "invalid":
                    return auth_error(403)
            try:
                return route(req, match)
            except (ValueError, TypeError, KeyError) as exc:
                return json_response(400, {"statusCode": 400, "message": f"bad request: {exc}"})
        return status_only(405 if known_path else 404)
