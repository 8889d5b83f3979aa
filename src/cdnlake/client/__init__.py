"""The one shared client for every area of the provider's API.

``ApiClient`` (``core``) owns the HTTP pool, credentials, request budgets and retries;
each area module wraps it with typed methods. Build one ``ApiClient`` at the entry point
and reach every area through :class:`CdnApi`.
"""

from cdnlake.client.budget import BudgetRegistry, RequestBudget
from cdnlake.client.compute import ComputeApi
from cdnlake.client.containers import ContainersApi
from cdnlake.client.core import ApiClient, RequestStats
from cdnlake.client.dns import DnsApi
from cdnlake.client.logging_api import LoggingClient, V2Page, V2Query, V2Record
from cdnlake.client.pullzone import PullZoneApi
from cdnlake.client.retry import RetryPolicy
from cdnlake.client.shield import ShieldApi
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


__all__ = [
    "ApiClient",
    "BudgetRegistry",
    "CdnApi",
    "ComputeApi",
    "ContainersApi",
    "DnsApi",
    "LoggingClient",
    "PullZoneApi",
    "RequestBudget",
    "RequestStats",
    "RetryPolicy",
    "ShieldApi",
    "V2Page",
    "V2Query",
    "V2Record",
    "VideoApi",
]
