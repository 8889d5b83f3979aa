"""Every API area over one shared client."""

from __future__ import annotations

from cdnlake.client.compute import ComputeApi
from cdnlake.client.containers import ContainersApi
from cdnlake.client.core import ApiClient
from cdnlake.client.dns import DnsApi
from cdnlake.client.logging_api import LoggingClient
from cdnlake.client.pullzone import PullZoneApi
from cdnlake.client.shield import ShieldApi
from cdnlake.client.storagezone import StorageZoneApi
from cdnlake.client.video import VideoApi


class CdnApi:
    """Every API area over one shared :class:`ApiClient` (one pool, one retry policy)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.logging = LoggingClient(api)
        self.shield = ShieldApi(api)
        self.compute = ComputeApi(api)
        self.pullzone = PullZoneApi(api)
        self.video = VideoApi(api)
        self.dns = DnsApi(api)
        self.containers = ContainersApi(api)
        self.storagezone = StorageZoneApi(api)
