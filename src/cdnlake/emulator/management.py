"""The management API areas beyond logging (shield, compute, pull zone, video, DNS, nodes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdnlake.emulator.http import Request, Response, json_response

if TYPE_CHECKING:
    from cdnlake.emulator.server import Emulator


class ManagementApi:
    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator

    def dispatch(self, req: Request) -> Response:
        return json_response(404, {"statusCode": 404})
