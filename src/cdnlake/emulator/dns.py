"""DNS zones: records, paged, with the provider's parameter names."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from cdnlake.emulator.area import (
    INT32_MAX,
    AreaBase,
    RouteSpec,
    field_auth,
    field_error,
    sometimes_null,
)
from cdnlake.emulator.http import Request, Response, json_response

# page and perPage as the provider's OpenAPI document names them on GET /dnszone; the
# record type filter is named nowhere in its documents.
DNS_RECORD_PARAMS = {"page", "perPage", "type"}


class DnsRoutes(AreaBase):
    ROUTES: ClassVar[list[RouteSpec]] = [
        ("GET", r"^/dnszone/(\d+)/records$", "dns_records", field_auth),
    ]

    def _dns_record(self, zone: int, i: int) -> dict[str, Any]:
        rtype = i % 17  # 16 (SOA) is a type newer than our client's enum
        return {
            "Id": zone * 1000 + i + 1,
            "Type": rtype,
            "Ttl": 300,
            "Value": f"value-{i}",
            "Name": f"r{i}",
            "Weight": 100,
            "Priority": 10 if rtype == 4 else 0,
            "Port": 443 if rtype == 8 else 0,
            "Flags": 0,
            "Tag": "",
            "Accelerated": rtype == 7,
            "AcceleratedPullZoneId": 1234 if rtype == 7 else 0,
            "LinkName": "",
            "IPGeoLocationInfo": {
                "CountryCode": "DE",
                "Country": "Germany",
                "OrganizationName": "Example",
                "City": "Falkenstein",
                "ASN": 24940,
            },
            "GeolocationInfo": {
                "Country": "DE",
                "City": "Falkenstein",
                "Latitude": 50.47,
                "Longitude": 12.37,
            },
            "MonitorStatus": 0,
            "MonitorType": 0,
            "GeolocationLatitude": 50.47,
            "GeolocationLongitude": 12.37,
            "EnviromentalVariables": sometimes_null(
                f"dns-env:{zone}:{i}", [{"Name": "REGION", "Value": "eu"}] if rtype == 11 else []
            ),
            "LatencyZone": "",
            "SmartRoutingType": 0,
            "Disabled": False,
            "Comment": "",
            "AutoSslIssuance": True,
            "AccelerationStatus": 0,
        }

    def dns_records(self, req: Request, m: re.Match[str]) -> Response:
        zone = int(m.group(1))
        if zone not in self.fx.dns_zones:
            return field_error(
                404, "dnszone.not_found", "zoneId", f"DNS zone {zone} does not exist"
            )
        unknown = set(req.query) - DNS_RECORD_PARAMS
        if unknown:
            return field_error(400, "query.unknown", sorted(unknown)[0], "unknown parameter")
        try:
            page = int(req.arg("page") or 1)
            per = int(req.arg("perPage") or 100)
            rtype = None if req.arg("type") is None else int(req.arg("type") or "")
        except ValueError:
            return field_error(400, "query.invalid", "page", "page, perPage and type are integers")
        if not 1 <= page <= INT32_MAX:
            return field_error(400, "page.out_of_range", "page", "1..2147483647")
        if not 5 <= per <= 1000:
            return field_error(400, "perPage.out_of_range", "perPage", "5..1000")
        if rtype is not None and not 0 <= rtype <= 15:
            return field_error(400, "type.out_of_range", "type", "0..15")
        records = [self._dns_record(zone, i) for i in range(self.fx.records_per_dns_zone)]
        if rtype is not None:
            records = [r for r in records if r["Type"] == rtype]
        chunk = records[(page - 1) * per : page * per]
        return json_response(
            200,
            {
                "Items": chunk or sometimes_null(f"dns-page:{zone}:{page}", []),
                "CurrentPage": page,
                "TotalItems": len(records),
                "HasMoreItems": page * per < len(records),
            },
        )
