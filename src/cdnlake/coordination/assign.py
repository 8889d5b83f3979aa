"""Which live daemon should ingest which zone: a pure function every daemon computes alike.

Rendezvous hashing ranks the daemons for each zone (stable: a daemon joining or leaving
moves few zones); a quota of ``ceil(zones / daemons)`` keeps the shares fair. A zone
goes only to daemons whose configuration names it.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Mapping, Set


def _weight(zone: str, daemon: str) -> int:
    digest = hashlib.blake2b(f"{zone}\0{daemon}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def share(zones_by_daemon: Mapping[str, Set[str]]) -> dict[str, str]:
    """``zone -> daemon`` for every zone some live daemon is configured for."""
    if not zones_by_daemon:
        return {}
    candidates: dict[str, list[str]] = {}
    for daemon in sorted(zones_by_daemon):
        for zone in zones_by_daemon[daemon]:
            candidates.setdefault(zone, []).append(daemon)
    quota = math.ceil(len(candidates) / len(zones_by_daemon))
    load: Counter[str] = Counter()
    owners = {}
    # Zones with fewest candidates first, so that a zone only one daemon can take is
    # not left to it after its quota is spent on zones others could have had.
    for zone in sorted(candidates, key=lambda z: (len(candidates[z]), z)):
        ranked = sorted(candidates[zone], key=lambda d: _weight(zone, d), reverse=True)
        under = [d for d in ranked if load[d] < quota]
        chosen = under[0] if under else min(ranked, key=lambda d: load[d])
        owners[zone] = chosen
        load[chosen] += 1
    return owners
