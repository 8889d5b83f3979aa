"""Container network: the node IP list."""

from __future__ import annotations

from cdnlake.client.area import Area
from cdnlake.client.error_bodies import container_node_error


class ContainersApi(Area):
    def list_node_ips(self) -> list[str]:
        """A flat list of node IP addresses (needs a personal API key)."""
        return self._call("GET", "/mc/nodes/plain", list[str], parser=container_node_error)
