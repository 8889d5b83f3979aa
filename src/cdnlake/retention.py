"""How long the provider serves a zone's logs, and how close to that edge cdnlake reads.

The one place for the span: the passes (where a read starts, what is claimed lost), a
re-read's check, the rewind of a damaged file, ``maintain``'s check of what can still be
read again, and the audit (what the provider can still serve) all ask here.
"""

from __future__ import annotations

from datetime import datetime, timedelta

RETENTION = timedelta(hours=72)  # logging API v1 and v2 alike
RETENTION_SECONDS = int(RETENTION.total_seconds())
# Never ask for the very edge of retention: the provider's clock and ours differ a little.
MARGIN = timedelta(minutes=2)


def oldest_served(now: datetime) -> datetime:
    """The first instant the provider still serves at ``now``, less the margin."""
    return now - RETENTION + MARGIN
