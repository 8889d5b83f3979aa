"""Pull zones: add a custom hostname."""

from __future__ import annotations

from cdnlake.client.area import Area, check_id
from cdnlake.client.error_bodies import field_error
from cdnlake.errors import RequestValidationError


class PullZoneApi(Area):
    def add_hostname(self, pull_zone_id: int, hostname: str) -> None:
        """Add ``hostname``; the seed shows no response body, so nothing is returned."""
        check_id("id", pull_zone_id)
        if not isinstance(hostname, str) or len(hostname) < 1:
            raise RequestValidationError("Hostname", "at least 1 character")
        self._call(
            "POST",
            f"/pullzone/{pull_zone_id}/addHostname",
            None,
            parser=field_error,
            json={"Hostname": hostname},
        )
