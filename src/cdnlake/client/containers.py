"""Container network: the node IP list."""

from __future__ import annotations

import httpx

from cdnlake.client.area import Area, decode_model
from cdnlake.client.core import read_body
from cdnlake.client.error_bodies import container_node_error


def node_ips_from(response: httpx.Response) -> list[str]:
    """Plain text, one IP per line (the provider's prose documentation), or a JSON array
    of strings (its OpenAPI page): told apart by the content type."""
    content = read_body(response)
    kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if kind == "text/plain":
        lines = content.decode("utf-8", "replace").splitlines()
        return [line.strip() for line in lines if line.strip()]
    return decode_model(response, content, list[str])


class ContainersApi(Area):
    def list_node_ips(self) -> list[str]:
        """A flat list of node IP addresses (needs a personal API key)."""
        result: list[str] = self.api.call(
            "GET",
            f"{self.base}/mc/nodes/plain",
            parser=container_node_error,
            handle=node_ips_from,
        )
        return result
