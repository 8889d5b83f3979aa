"""The one shared client for every area of the provider's API.

``ApiClient`` (``core``) owns the HTTP pool, credentials, request budgets and retries;
each area module wraps it with typed methods. Build it once at the entry point with
:func:`open_client` and pass it down.
"""

from cdnlake.client.budget import BudgetRegistry, RequestBudget
from cdnlake.client.core import ApiClient, RequestStats
from cdnlake.client.logging_api import LoggingClient, V2Page, V2Query, V2Record
from cdnlake.client.retry import RetryPolicy

__all__ = [
    "ApiClient",
    "BudgetRegistry",
    "LoggingClient",
    "RequestBudget",
    "RequestStats",
    "RetryPolicy",
    "V2Page",
    "V2Query",
    "V2Record",
]
