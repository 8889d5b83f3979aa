"""What every emulated management area shares: fixtures, state, and the error shapes.

Each area (``shield``, ``compute``, ``pullzone``, ``video``, ``dns``, ``containers``,
mirroring ``cdnlake.client``) is a mixin of :class:`cdnlake.emulator.management.ManagementApi`
that lists its routes in ``ROUTES``; each endpoint answers errors in its own shape.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cdnlake.emulator.http import Response, json_response

if TYPE_CHECKING:
    from cdnlake.emulator.forwarding import Forwarder
    from cdnlake.emulator.state import Provider

INT32_MAX = 2_147_483_647
# Where the provider's documents mark a value nullable, the emulator sends null for this
# share of items (chosen by a seeded draw), so that clients are tested against it.
NULL_SHARE = 0.2


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
    node_ips_format: str = "text"  # "text" (prose documentation) or "json" (OpenAPI page)


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
def problem_auth(status: int) -> Response:
    return problem(status, "Unauthorized" if status == 401 else "Forbidden", "credentials")


def field_auth(status: int) -> Response:
    return field_error(status, "unauthorized", "AccessKey", "invalid or missing")


def generic_auth(status: int) -> Response:
    return generic(status, "unauthorized", "invalid or missing AccessKey")


def container_auth(status: int) -> Response:
    title = "Unauthorized" if status == 401 else "Forbidden"
    return container_error(status, title, "a valid personal API key is required", [])


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Secret:
    id: int
    name: str
    value: str
    modified: datetime


@dataclass
class ManagementState:
    secrets: dict[int, dict[int, Secret]] = field(default_factory=dict)
    next_secret_id: int = 1
    hostnames: dict[int, list[str]] = field(default_factory=dict)
    reviews: dict[tuple[int, str], int] = field(default_factory=dict)
    specs: dict[int, dict[str, Any]] = field(default_factory=dict)
    forwarding: dict[int, dict[str, Any]] = field(default_factory=dict)  # LogForwarding*


# (method, path pattern, name of the route method, error shape for 401/403)
RouteSpec = tuple[str, str, str, Callable[[int], Response]]


class AreaBase:
    """The attributes every area mixin relies on (set by ``ManagementApi``)."""

    emulator: Provider
    fx: ManagementFixtures
    state: ManagementState
    forwarder: Forwarder
    _lock: threading.Lock


def sometimes_null(key: str, value: Any) -> Any:
    """``value``, or None for about ``NULL_SHARE`` of keys (the same answer for a key)."""
    return None if random.Random(f"null:{key}").random() < NULL_SHARE else value
