"""The container platform: node IP addresses."""

from __future__ import annotations

import re
from typing import ClassVar

from cdnlake.emulator.area import (
    AreaBase,
    RouteSpec,
    container_auth,
)
from cdnlake.emulator.http import Request, Response, json_response


class ContainerRoutes(AreaBase):
    ROUTES: ClassVar[list[RouteSpec]] = [
        ("GET", r"^/mc/nodes/plain$", "node_ips", container_auth),
    ]

    def node_ips(self, req: Request, m: re.Match[str]) -> Response:
        if self.fx.node_ips_format == "json":  # as the provider's OpenAPI page says
            return json_response(200, list(self.fx.node_ips))
        # As the provider's prose documentation says: plain text, one IP per line.
        text = "".join(f"{ip}\n" for ip in self.fx.node_ips)
        return Response(200, text.encode(), "text/plain; charset=utf-8")
