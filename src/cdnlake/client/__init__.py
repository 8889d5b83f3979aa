"""The one shared client for every area of the provider's API.

``ApiClient`` (``core``) owns the HTTP pool, credentials, request budgets and retries;
each area module wraps it with typed methods. Build one ``ApiClient`` at the entry point
and reach every area through :class:`CdnApi`.

The names below load on first use: a command that never calls the provider (``import-v1``,
``sql``, ``status``) does not pay for the HTTP stack.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdnlake.client.budget import BudgetRegistry, RequestBudget
    from cdnlake.client.cdn import CdnApi
    from cdnlake.client.compute import ComputeApi
    from cdnlake.client.containers import ContainersApi
    from cdnlake.client.core import ApiClient
    from cdnlake.client.dns import DnsApi
    from cdnlake.client.logging_api import LoggingClient
    from cdnlake.client.logging_wire import V2Page, V2Query, V2Record
    from cdnlake.client.pullzone import PullZoneApi
    from cdnlake.client.retry import RetryPolicy
    from cdnlake.client.shield import ShieldApi
    from cdnlake.client.stats import RequestStats
    from cdnlake.client.storage import StorageObject, StorageZoneClient
    from cdnlake.client.storagezone import StorageZone, StorageZoneApi
    from cdnlake.client.video import VideoApi

_HOMES = {
    "ApiClient": "core",
    "BudgetRegistry": "budget",
    "CdnApi": "cdn",
    "ComputeApi": "compute",
    "ContainersApi": "containers",
    "DnsApi": "dns",
    "LoggingClient": "logging_api",
    "PullZoneApi": "pullzone",
    "RequestBudget": "budget",
    "RequestStats": "stats",
    "RetryPolicy": "retry",
    "ShieldApi": "shield",
    "StorageObject": "storage",
    "StorageZone": "storagezone",
    "StorageZoneApi": "storagezone",
    "StorageZoneClient": "storage",
    "V2Page": "logging_wire",
    "V2Query": "logging_wire",
    "V2Record": "logging_wire",
    "VideoApi": "video",
}

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
    "StorageObject",
    "StorageZone",
    "StorageZoneApi",
    "StorageZoneClient",
    "V2Page",
    "V2Query",
    "V2Record",
    "VideoApi",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"cdnlake.client.{home}"), name)
