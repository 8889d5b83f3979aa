"""The daily report's clients: how client addresses were stored ([privacy], as each zone's
marks say) and the day's distinct clients where addresses or their hashes are kept.

The count is the overview's ``count(DISTINCT remote_ip)`` over the day: exact. Under
``truncate`` it counts networks (/24, /64), not hosts; under ``hash`` the hashes of one
key (a key change splits a client in two); under ``drop`` there is nothing to count. For
ranges or days too large to count exactly, the named query ``distinct_clients`` counts
approximately (``--param counted=approximate``).
"""

from __future__ import annotations

from typing import Any

from cdnlake.lake.log.progress import describe_stored, stored_settings
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import held_zones
from cdnlake.lake.zone.session import LakeSession
from cdnlake.reports.data import Table

COLUMNS = ["zones", "addresses_stored", "distinct_clients", "counted"]
TITLE = "Clients (addresses as [privacy] stored them)"


def clients(session: LakeSession, zones: list[int], overview: dict[str, Any]) -> Table:
    """The report's zones grouped by how their addresses were stored, and the day's
    distinct clients of them all (where some zone kept addresses or their hashes)."""
    table = session.reader(REQUESTS)
    groups: dict[str, list[int]] = {}
    kinds: set[str] = set()
    held = set(held_zones(REQUESTS, table)) if table is not None else set()
    for zone in zones if table is not None else []:
        if zone not in held:
            continue  # no rows yet: nothing stored to describe (whatever its marks say)

        def versions(mark: str, zone: int = zone) -> int | None:
            assert table is not None
            return table.transaction_version(REQUESTS.app_id(zone, mark))

        settings = stored_settings(versions)
        if settings:
            groups.setdefault(describe_stored(versions), []).append(zone)
            kinds |= {
                "hashed networks" if s.ip == "hash" and s.holds_networks else s.ip for s in settings
            }
    if not groups:
        return Table(TITLE, list(COLUMNS), [])
    distinct = None if kinds == {"drop"} else overview.get("distinct_clients")
    rows: list[tuple[Any, ...]] = [
        (", ".join(map(str, ids)), stored, None, None) for stored, ids in groups.items()
    ]
    if len(rows) == 1:
        rows[0] = (*rows[0][:2], distinct, _counted(kinds))
    else:
        rows.append(("all", "as above", distinct, _counted(kinds)))
    return Table(TITLE, list(COLUMNS), rows)


def _counted(kinds: set[str]) -> str:
    """What a distinct count of addresses stored under these treatments counts."""
    if kinds == {"drop"}:
        return "not counted: addresses not stored"
    if "truncate" in kinds:
        return "exact, networks (truncated addresses)"
    if "hashed networks" in kinds:
        return "exact, networks (keyed hashes of truncated addresses), not clients"
    if "hash" in kinds:
        return "exact, by keyed hash"
    return "exact"
