"""The management API areas beyond logging, with state that behaves.

Shield zones, compute scripts, video libraries and DNS zones exist with fixed ids (see
``ManagementFixtures``); pull zones are the logging zones. Each endpoint answers errors in
its own shape from the seed. Secrets are stored but never echoed back.
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cdnlake.emulator.http import Request, Response, json_response

if TYPE_CHECKING:
    from cdnlake.emulator.server import Emulator

EVENT_PAGE_SIZE = 10
INT32_MAX = 2_147_483_647


@dataclass(frozen=True)
class ManagementFixtures:
    shield_zones: tuple[int, ...] = (5001, 5002)
    scripts: tuple[int, ...] = (3001, 3002)
    libraries: tuple[int, ...] = (7001,)
    dns_zones: tuple[int, ...] = (9001,)
    videos_per_library: int = 23
    collections_per_library: int = 7
    records_per_dns_zone: int = 23
    events_per_day: int = 27
    node_ips: tuple[str, ...] = tuple(f"198.51.100.{i}" for i in range(1, 13))
    rules: tuple[str, ...] = ("930100", "941100", "942100", "949110", "913100")


# -- error shapes ----------------------------------------------------------------------
def status_only(status: int) -> Response:
    return json_response(status, {"statusCode": status})


def problem(status: int, title: str, detail: str, instance: str = "") -> Response:
    return json_response(
        status,
        {
            "type": f"https://httpstatuses.io/{status}",
            "title": title,
            "status": status,
            "detail": detail,
            "instance": instance,
        },
        content_type="application/problem+json",
    )


def field_error(status: int, key: str, field_name: str, message: str) -> Response:
    return json_response(status, {"ErrorKey": key, "Field": field_name, "Message": message})


def generic(status: int, key: str, message: str) -> Response:
    return json_response(
        status, {"statusCode": status, "success": False, "message": message, "errorKey": key}
    )


def container_error(status: int, title: str, detail: str, errors: list[dict[str, str]]) -> Response:
    return json_response(
        status,
        {
            "title": title,
            "status": status,
            "detail": detail,
            "instance": "/mc/nodes/plain",
            "errors": errors,
            "id": "err-" + str(status),
        },
    )


# The 401/403 answer of each endpoint, in its own error shape.
def _problem_auth(status: int) -> Response:
    return problem(status, "Unauthorized" if status == 401 else "Forbidden", "credentials")


def _field_auth(status: int) -> Response:
    return field_error(status, "unauthorized", "AccessKey", "invalid or missing")


def _generic_auth(status: int) -> Response:
    return generic(status, "unauthorized", "invalid or missing AccessKey")


def _container_auth(status: int) -> Response:
    title = "Unauthorized" if status == 401 else "Forbidden"
    return container_error(status, title, "a valid personal API key is required", [])


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


Route = Callable[[Request, re.Match[str]], Response]


@dataclass
class _Secret:
    id: int
    name: str
    value: str
    modified: datetime


@dataclass
class ManagementState:
    secrets: dict[int, dict[int, _Secret]] = field(default_factory=dict)
    next_secret_id: int = 1
    hostnames: dict[int, list[str]] = field(default_factory=dict)
    reviews: dict[tuple[int, str], int] = field(default_factory=dict)
    specs: dict[int, dict[str, Any]] = field(default_factory=dict)


class ManagementApi:
    def __init__(self, emulator: Emulator, fixtures: ManagementFixtures | None = None) -> None:
        self.emulator = emulator
        self.fx = fixtures or ManagementFixtures()
        self.state = ManagementState()
        self._lock = threading.Lock()
        # (method, path pattern, route, error shape for 401/403)
        self.routes: list[tuple[str, re.Pattern[str], Route, Callable[[int], Response]]] = [
            (
                "POST",
                re.compile(r"^/shield/waf/rules/review-triggered/(\d+)$"),
                self.review,
                status_only,
            ),
            (
                "PATCH",
                re.compile(r"^/shield/shield-zone/(\d+)/api-guardian/spec$"),
                self.spec,
                _problem_auth,
            ),
            (
                "GET",
                re.compile(r"^/shield/metrics/shield-zone/(\d+)/upload-scanning$"),
                self.metrics,
                status_only,
            ),
            (
                "GET",
                re.compile(r"^/shield/event-logs/(\d+)/([^/]+)/([^/]+)$"),
                self.event_logs,
                _problem_auth,
            ),
            ("GET", re.compile(r"^/shield/waf/enums$"), self.enums, status_only),
            (
                "POST",
                re.compile(r"^/compute/script/(\d+)/secrets$"),
                self.add_secret,
                _field_auth,
            ),
            (
                "POST",
                re.compile(r"^/compute/script/(\d+)/secrets/(\d+)$"),
                self.update_secret,
                _field_auth,
            ),
            (
                "POST",
                re.compile(r"^/pullzone/(\d+)/addHostname$"),
                self.add_hostname,
                _field_auth,
            ),
            (
                "GET",
                re.compile(r"^/library/(\d+)/videos$"),
                self.videos,
                _generic_auth,
            ),
            (
                "GET",
                re.compile(r"^/library/(\d+)/collections$"),
                self.collections,
                _generic_auth,
            ),
            (
                "GET",
                re.compile(r"^/library/(\d+)/videos/([^/]+)/resolutions$"),
                self.resolutions,
                _generic_auth,
            ),
            ("GET", re.compile(r"^/OEmbed$"), self.oembed, status_only),
            (
                "GET",
                re.compile(r"^/dnszone/(\d+)/records$"),
                self.dns_records,
                _field_auth,
            ),
            (
                "GET",
                re.compile(r"^/mc/nodes/plain$"),
                self.node_ips,
                _container_auth,
            ),
        ]

    def dispatch(self, req: Request) -> Response:
        for method, pattern, route, auth_error in self.routes:
            match = pattern.match(req.path)
            if not match:
                continue
            if req.method != method:
                return status_only(405)
            if route != self.oembed:
                problem_ = self.emulator.check_credentials(req, allow_bearer=False)
                if problem_ == "missing":
                    return auth_error(401)
                if problem_ == "invalid":
                    return auth_error(403)
            try:
                return route(req, match)
            except (ValueError, TypeError, KeyError) as exc:
                return json_response(400, {"statusCode": 400, "message": f"bad request: {exc}"})
        return status_only(404)

    # -- shield ------------------------------------------------------------------------
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
            "createdAt": _iso(now),
            "updatedAt": _iso(now),
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
                "createdAt": _iso(now),
                "updatedAt": _iso(now),
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
                    "log": json.dumps({"rule": rule, "match": payload, "uri": "/login"}),
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
        if not re.fullmatch(r"\d+", m.group(3)):
            return problem(400, "Bad Request", "unknown continuation token", req.path)
        offset = int(m.group(3))
        events = self.day_events(zone, day)
        page = events[offset : offset + EVENT_PAGE_SIZE]
        more = offset + EVENT_PAGE_SIZE < len(events)
        return json_response(
            200,
            {
                "logs": page,
                "hasMoreData": more,
                "continuationToken": str(offset + EVENT_PAGE_SIZE) if more else None,
                "startToken": "0",
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

    # -- compute -----------------------------------------------------------------------
    def _secret_body(self, req: Request) -> dict[str, Any] | Response:
        try:
            body = req.json()
        except ValueError:
            return field_error(400, "body.invalid", "body", "not JSON")
        if not isinstance(body, dict):
            return field_error(400, "body.invalid", "body", "expected an object")
        secret = body.get("Secret")
        if not isinstance(secret, str) or not secret:
            return field_error(400, "secret.required", "Secret", "is required")
        if len(secret) > 4096:
            return field_error(400, "secret.too_long", "Secret", "at most 4096 characters")
        return body

    def add_secret(self, req: Request, m: re.Match[str]) -> Response:
        script = int(m.group(1))
        if script not in self.fx.scripts:
            return field_error(404, "script.not_found", "id", f"script {script} does not exist")
        body = self._secret_body(req)
        if isinstance(body, Response):
            return body
        name = body.get("Name")
        if not isinstance(name, str) or not name.strip():
            return field_error(400, "name.required", "Name", "is required")
        with self._lock:
            secrets = self.state.secrets.setdefault(script, {})
            if any(s.name == name for s in secrets.values()):
                return field_error(409, "name.taken", "Name", f"a secret named {name} exists")
            sid = self.state.next_secret_id
            self.state.next_secret_id += 1
            secret = _Secret(sid, name, body["Secret"], self.emulator.clock.now())
            secrets[sid] = secret
        return json_response(201, {"Id": sid, "Name": name, "LastModified": _iso(secret.modified)})

    def update_secret(self, req: Request, m: re.Match[str]) -> Response:
        script, sid = int(m.group(1)), int(m.group(2))
        if script not in self.fx.scripts:
            return field_error(404, "script.not_found", "id", f"script {script} does not exist")
        body = self._secret_body(req)
        if isinstance(body, Response):
            return body
        with self._lock:
            secret = self.state.secrets.get(script, {}).get(sid)
            if secret is None:
                return field_error(404, "secret.not_found", "secretId", f"no secret {sid}")
            secret.value = body["Secret"]
            secret.modified = self.emulator.clock.now()
        return json_response(
            200, {"Id": sid, "Name": secret.name, "LastModified": _iso(secret.modified)}
        )

    # -- pull zone ---------------------------------------------------------------------
    def add_hostname(self, req: Request, m: re.Match[str]) -> Response:
        zone = int(m.group(1))
        if zone not in self.emulator.zones:
            return field_error(404, "pullzone.not_found", "id", f"pull zone {zone} does not exist")
        try:
            body = req.json()
        except ValueError:
            return field_error(400, "body.invalid", "body", "not JSON")
        hostname = body.get("Hostname") if isinstance(body, dict) else None
        if not isinstance(hostname, str) or len(hostname) < 1:
            return field_error(400, "hostname.required", "Hostname", "at least 1 character")
        with self._lock:
            names = self.state.hostnames.setdefault(zone, [])
            if hostname.lower() in names:
                return field_error(409, "hostname.taken", "Hostname", f"{hostname} is in use")
            names.append(hostname.lower())
        return Response(204, b"", "application/json")

    # -- video -------------------------------------------------------------------------
    def _paging(self, req: Request) -> tuple[int, int] | Response:
        try:
            page = int(req.arg("page") or 1)
            per = int(req.arg("itemsPerPage") or 100)
        except ValueError:
            return generic(400, "paging.invalid", "page and itemsPerPage must be integers")
        if not 1 <= page <= INT32_MAX or not 1 <= per <= 1000:
            return generic(400, "paging.invalid", "page >= 1 and itemsPerPage 1..1000")
        return page, per

    def _video(self, library: int, i: int) -> dict[str, Any]:
        rng = random.Random(f"video:{library}:{i}")
        guid = f"{rng.getrandbits(128):032x}"
        guid = f"{guid[:8]}-{guid[8:12]}-{guid[12:16]}-{guid[16:20]}-{guid[20:]}"
        uploaded = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=rng.randrange(7000))
        return {
            "videoLibraryId": library,
            "guid": guid,
            "title": f"Video {i + 1}",
            "dateUploaded": _iso(uploaded),
            "views": rng.randint(0, 50000),
            "isPublic": True,
            "length": rng.randint(10, 3600),
            "status": 4,
            "framerate": 29.97,
            "width": 1920,
            "height": 1080,
            "outputCodecs": "x264",
            "thumbnailCount": 12,
            "encodeProgress": 100,
            "storageSize": rng.randint(10**6, 10**9),
            "hasMP4Fallback": True,
            "averageWatchTime": rng.randint(5, 600),
            "totalWatchTime": rng.randint(100, 10**6),
            "description": "",
            "rotation": 0,
            "availableResolutions": "360p,720p,1080p",
            "captions": [{"srclang": "en", "label": "English", "version": 1}],
            "collectionId": "",
            "thumbnailFileName": "thumbnail.jpg",
            "thumbnailUrl": f"https://vz-{library}.example-cdn.net/{guid}/thumbnail.jpg",
            "thumbnailBlurhash": "LEHV6nWB2yk8pyo0adR*.7kCMdnj",
            "category": "other",
            "chapters": [{"title": "Intro", "start": 0, "end": 10}],
            "moments": [{"label": "Highlight", "timestamp": 5}],
            "metaTags": [{"property": "description", "value": "demo"}],
            "transcodingMessages": [],
            "jitEncodingEnabled": False,
            "smartGenerateStatus": 0,
            "smartGenerateFeaturesStatus": {
                "title": 0,
                "description": 0,
                "chapters": 0,
                "moments": 0,
            },
            "hasOriginal": True,
            "originalHash": f"{rng.getrandbits(64):016x}",
            "hasHighQualityPreview": False,
        }

    def _page(self, req: Request, items: list[dict[str, Any]]) -> Response:
        paging = self._paging(req)
        if isinstance(paging, Response):
            return paging
        page, per = paging
        chunk = items[(page - 1) * per : page * per]
        return json_response(
            200,
            {"totalItems": len(items), "currentPage": page, "itemsPerPage": per, "items": chunk},
        )

    def videos(self, req: Request, m: re.Match[str]) -> Response:
        library = int(m.group(1))
        if library not in self.fx.libraries:
            return generic(404, "library.not_found", f"video library {library} does not exist")
        items = [self._video(library, i) for i in range(self.fx.videos_per_library)]
        search = (req.arg("search") or "").lower()
        if search:
            items = [v for v in items if search in v["title"].lower()]
        return self._page(req, items)

    def collections(self, req: Request, m: re.Match[str]) -> Response:
        library = int(m.group(1))
        if library not in self.fx.libraries:
            return generic(404, "library.not_found", f"video library {library} does not exist")
        items = [
            {
                "videoLibraryId": library,
                "guid": f"c0{library}-{i:04d}",
                "name": f"Collection {i + 1}",
                "videoCount": 3,
                "totalSize": 3_000_000 * (i + 1),
                "previewVideoIds": "",
                "previewImageUrls": [],
            }
            for i in range(self.fx.collections_per_library)
        ]
        return self._page(req, items)

    def resolutions(self, req: Request, m: re.Match[str]) -> Response:
        library, video_id = int(m.group(1)), m.group(2)
        videos = [self._video(library, i) for i in range(self.fx.videos_per_library)]
        if library not in self.fx.libraries or video_id not in {v["guid"] for v in videos}:
            return generic(404, "video.not_found", f"video {video_id} does not exist")
        res = ["360p", "720p", "1080p"]
        return json_response(
            200,
            {
                "success": True,
                "message": "OK",
                "statusCode": 200,
                "data": {
                    "videoId": video_id,
                    "videoLibraryId": library,
                    "availableResolutions": res,
                    "configuredResolutions": res,
                    "playlistResolutions": [
                        {"resolution": r, "path": f"{r}/video.m3u8"} for r in res
                    ],
                    "storageResolutions": [{"resolution": r, "path": f"{r}/"} for r in res],
                    "mp4Resolutions": [{"resolution": "720p", "path": "play_720p.mp4"}],
                    "storageObjects": [],
                    "oldResolutions": [],
                    "hasBothOldAndNewResolutionFormat": False,
                    "hasOriginal": True,
                },
            },
        )

    def oembed(self, req: Request, m: re.Match[str]) -> Response:
        url = req.arg("url")
        if not url:
            return status_only(400)
        width = int(req.arg("maxWidth") or 640)
        height = int(req.arg("maxHeight") or 360)
        return json_response(
            200,
            {
                "version": "1.0",
                "title": "Video",
                "type": "video",
                "thumbnail_url": "https://vz.example-cdn.net/thumbnail.jpg",
                "thumbnail_width": 1280,
                "thumbnail_height": 720,
                "html": f'<iframe src="{url}" width="{width}" height="{height}"></iframe>',
                "width": width,
                "height": height,
                "provider_name": "Example CDN Stream",
                "provider_url": "https://example-cdn.net",
            },
        )

    # -- DNS ---------------------------------------------------------------------------
    def _dns_record(self, zone: int, i: int) -> dict[str, Any]:
        rtype = i % 16
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
            "EnviromentalVariables": [{"Name": "REGION", "Value": "eu"}] if rtype == 11 else [],
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
                "Items": chunk,
                "CurrentPage": page,
                "TotalItems": len(records),
                "HasMoreItems": page * per < len(records),
            },
        )

    # -- containers --------------------------------------------------------------------
    def node_ips(self, req: Request, m: re.Match[str]) -> Response:
        return json_response(200, list(self.fx.node_ips))


def parse_openapi_operations(content: str) -> list[tuple[str, str]] | None:
    """(method, path) pairs of an OpenAPI document in JSON or (simple) YAML."""
    methods = {"get", "put", "post", "delete", "patch", "head", "options"}
    try:
        doc = json.loads(content)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        paths = doc.get("paths")
        if not isinstance(paths, dict) or not ("openapi" in doc or "swagger" in doc):
            return None
        return [
            (m, p)
            for p, ops in paths.items()
            if isinstance(ops, dict)
            for m in ops
            if m.lower() in methods
        ]
    if not re.search(r"^(openapi|swagger)\s*:", content, re.M):
        return None
    out: list[tuple[str, str]] = []
    in_paths, path, path_indent = False, None, 0
    for line in content.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        key = line.strip().split(":", 1)[0].strip("'\"")
        if indent == 0:
            in_paths = key == "paths"
            continue
        if not in_paths:
            continue
        if key.startswith("/"):
            path, path_indent = key, indent
        elif path and indent > path_indent and key.lower() in methods:
            out.append((key, path))
    return out
