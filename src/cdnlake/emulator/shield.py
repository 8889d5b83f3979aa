"""Shield (WAF): rule review, API guardian spec, metrics, event logs, enums."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime
from typing import Any, ClassVar

import yaml

from cdnlake.emulator.area import (
    AreaBase,
    RouteSpec,
    iso,
    problem,
    problem_auth,
    status_only,
)
from cdnlake.emulator.http import Request, Response, json_response
from cdnlake.emulator.state import is_bad_record
from cdnlake.emulator.traffic import signed

EVENT_PAGE_SIZE = 10


class ShieldRoutes(AreaBase):
    ROUTES: ClassVar[list[RouteSpec]] = [
        ("POST", r"^/shield/waf/rules/review-triggered/(\d+)$", "review", status_only),
        ("PATCH", r"^/shield/shield-zone/(\d+)/api-guardian/spec$", "spec", problem_auth),
        (
            "GET",
            r"^/shield/metrics/shield-zone/(\d+)/upload-scanning$",
            "metrics",
            status_only,
        ),
        ("GET", r"^/shield/event-logs/(\d+)/([^/]+)(?:/([^/]*))?$", "event_logs", problem_auth),
        ("GET", r"^/shield/waf/enums$", "enums", status_only),
    ]

    def _shield_zone(self, match: re.Match[str]) -> int | None:
        zone = int(match.group(1))
        return zone if zone in self.fx.shield_zones else None

    def review(self, req: Request, m: re.Match[str]) -> Response:
        zone = self._shield_zone(m)
        if zone is None:
            return status_only(404)
        try:
            body = req.json()
        except ValueError:
            return status_only(400)
        if not isinstance(body, dict) or set(body) - {"ruleId", "action"}:
            return status_only(400)  # no unknown properties are allowed
        action = body.get("action")
        if isinstance(action, bool) or action not in (0, 1, 2):
            return status_only(400)
        rule = body.get("ruleId")
        if rule not in self.fx.rules:
            return json_response(
                200,
                {
                    "success": False,
                    "errorResponse": {
                        "statusCode": 404,
                        "success": False,
                        "message": f"rule {rule} has not been triggered in zone {zone}",
                        "errorKey": "rule_not_found",
                    },
                },
            )
        with self._lock:
            self.state.reviews[(zone, str(rule))] = int(action)
        return json_response(
            200,
            {
                "success": True,
                "errorResponse": {
                    "statusCode": 200,
                    "success": True,
                    "message": "review applied",
                    "errorKey": None,
                },
            },
        )

    def spec(self, req: Request, m: re.Match[str]) -> Response:
        zone = self._shield_zone(m)
        instance = req.path
        if zone is None:
            return problem(404, "Not Found", f"shield zone {m.group(1)} does not exist", instance)
        try:
            body = req.json()
        except ValueError:
            return problem(400, "Bad Request", "body is not JSON", instance)
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            return problem(400, "Bad Request", "content (string) is required", instance)
        enforce = bool(body.get("enforceAuthorizationValidation", False))
        endpoints = parse_openapi_operations(body["content"])
        if endpoints is None:
            return problem(400, "Bad Request", "content is not an OpenAPI document", instance)
        now = self.emulator.clock.now()
        title = "API"
        match = re.search(r'"?title"?\s*:\s*"?([^"\n,}]+)', body["content"])
        if match:
            title = match.group(1).strip()
        config = {
            "shieldZoneId": zone,
            "isEnabled": True,
            "executionMode": 1,
            "bodyLimitAction": 0,
            "unmatchedPathAction": 0,
            "title": title,
            "version": "1",
            "maxEndpoints": 500,
            "maxFieldsPerType": 200,
            "maxNestingDepth": 16,
            "maxTotalSchemaNodes": 10000,
            "maxTotalRegexLength": 4096,
            "createdAt": iso(now),
            "updatedAt": iso(now),
        }
        items = [
            {
                "apiGuardianEndpointId": i + 1,
                "shieldZoneId": zone,
                "requestMethod": method.upper(),
                "requestPath": path,
                "validateRequestBodySchema": method.lower() in ("post", "put", "patch"),
                "validateResponseBodySchema": False,
                "validateAuthorization": enforce,
                "isEnabled": True,
                "authSchemes": [],
                "requestBodySchemaYaml": "",
                "responseBodySchemasYaml": {},
                "availableParameters": {"Path": [], "Query": [], "Header": [], "Cookie": []},
                "injectionDetectionParameters": {
                    "Path": [],
                    "Query": [],
                    "Header": [],
                    "Cookie": [],
                },
                "detectParameterXss": True,
                "detectParameterSqli": True,
                "rateLimitingEnabled": False,
                "rateLimitingType": "none",
                "rateLimitingRequestCount": 0,
                "rateLimitingTimeframe": 0,
                "createdAt": iso(now),
                "updatedAt": iso(now),
            }
            for i, (method, path) in enumerate(endpoints)
        ]
        with self._lock:
            self.state.specs[zone] = config
        return json_response(
            200,
            {
                "error": {"statusCode": 200, "success": True, "message": None, "errorKey": None},
                "data": {"configuration": config, "endpoints": items},
            },
        )

    def metrics(self, req: Request, m: re.Match[str]) -> Response:
        zone = self._shield_zone(m)
        if zone is None:
            return status_only(404)
        rng = random.Random(f"metrics:{zone}")
        logged = rng.randint(1000, 90000)
        return json_response(
            200,
            {
                "error": {"statusCode": 200, "success": True, "message": None, "errorKey": None},
                "data": {
                    "overviewPastTwentyEightDays": {"scanned": logged, "blocked": logged // 50},
                    "totalLoggedRequests": logged,
                    "totalBlockedRequests": logged // 50,
                    "totalFilesScanned": logged // 3,
                },
            },
        )

    def day_events(self, zone: int, day: datetime) -> list[dict[str, Any]]:
        """A day's shield events that have happened by the emulator's now, in order."""
        rng = random.Random(f"events:{zone}:{day.date().isoformat()}")
        now_ms = self.emulator.clock.now_ms()
        start_ms = int(day.timestamp() * 1000)
        events: list[dict[str, Any]] = []
        for i in range(self.fx.events_per_day):
            ts = start_ms + rng.randrange(86_400_000)
            rule = rng.choice(self.fx.rules)
            labels = {
                "asn": str(rng.choice([3320, 7922, 16509])),
                "country": rng.choice(["DE", "US", "CN", "BR"]),
                "ruleId": rule,
                "severity": rng.choice(["CRITICAL", "WARNING", "NOTICE"]),
                "method": rng.choice(["GET", "POST"]),
                "ruleGroup": rng.choice(["SQLI", "XSS", "SCANNER"]),
                "status": rng.choice(["blocked", "logged"]),
                "serverZone": rng.choice(["DE", "NY", "SG"]),
            }
            payload = rng.choice(["' OR 1=1 --", "<script>alert(1)</script>", "../../etc/passwd"])
            events.append(
                {
                    "logId": f"{zone}-{day:%Y%m%d}-{i:04d}-{rng.getrandbits(32):08x}",
                    "timestamp": ts,
                    "log": json.dumps({"rule": rule, "match": payload, "uri": _uri(zone, ts)}),
                    "labels": labels,
                }
            )
        visible = [e for e in events if e["timestamp"] <= now_ms]
        return sorted(visible, key=lambda e: (e["timestamp"], e["logId"]))

    def event_logs(self, req: Request, m: re.Match[str]) -> Response:
        zone = self._shield_zone(m)
        if zone is None:
            return problem(404, "Not Found", f"shield zone {m.group(1)} does not exist", req.path)
        try:
            day = datetime.strptime(m.group(2), "%m-%d-%Y").replace(tzinfo=UTC)
        except ValueError:
            return problem(400, "Bad Request", "date must be MM-dd-yyyy", req.path)
        # The first page is asked for without a token; later ones with the opaque token
        # of the page before. The last page's token is "" (as the provider sends it).
        token = m.group(3) or ""
        if token and not re.fullmatch(r"next-[0-9a-f]+", token):
            return problem(400, "Bad Request", "unknown continuation token", req.path)
        offset = int(token.removeprefix("next-"), 16) if token else 0
        events = self.day_events(zone, day)
        page = events[offset : offset + EVENT_PAGE_SIZE]
        rate = self.emulator.faults.bad_record_rate
        if rate:  # spoiled events: a timestamp of the wrong type (always the same ones)
            page = [
                {**e, "timestamp": "not-a-time"} if is_bad_record(e["logId"], rate) else e
                for e in page
            ]
        more = offset + EVENT_PAGE_SIZE < len(events)
        return json_response(
            200,
            {
                "logs": page or None,  # nullable in the provider's documents
                "hasMoreData": more,
                "continuationToken": f"next-{offset + EVENT_PAGE_SIZE:x}" if more else "",
                "startToken": None,
                "errorResponse": None,
            },
        )

    def enums(self, req: Request, m: re.Match[str]) -> Response:
        def value(name: str, v: int, options: list[str]) -> dict[str, Any]:
            return {
                "optionalInput": False,
                "isPremium": v > 2,
                "name": name,
                "value": v,
                "supportedValues": {"values": options, "editable": not options},
                "recommendedOperator": {"operator": 0, "values": options[:1]},
            }

        data = [
            {
                "enumName": "WafRuleAction",
                "enumValues": [
                    value(n, i, []) for i, n in enumerate(["Block", "Log", "Challenge"])
                ],
            },
            {
                "enumName": "WafVariable",
                "enumValues": [
                    value("REQUEST_URI", 0, []),
                    value("REQUEST_METHOD", 1, ["GET", "POST", "PUT", "DELETE"]),
                    value("REMOTE_ADDR", 2, []),
                    value("GEO_COUNTRY", 3, ["DE", "US"]),
                ],
            },
        ]
        return json_response(200, {"data": data})


def parse_openapi_operations(content: str) -> list[tuple[str, str]] | None:
    """(method, path) pairs of an OpenAPI document in JSON or YAML (JSON is YAML too)."""
    methods = {"get", "put", "post", "delete", "patch", "head", "options"}
    try:
        doc = yaml.safe_load(content)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, dict) or not ("openapi" in doc or "swagger" in doc):
        return None
    paths = doc.get("paths")
    if not isinstance(paths, dict):
        return None
    return [
        (str(m), str(p))
        for p, ops in paths.items()
        if isinstance(ops, dict)
        for m in ops
        if str(m).lower() in methods
    ]


def _uri(zone: int, ts: int) -> str:
    """The path an event blocked: a fifth of them signed, as the provider signs URLs."""
    url, _ = signed("https://shield.example/login", "/login", zone, ts)
    return url.removeprefix("https://shield.example")
