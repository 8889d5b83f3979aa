"""Tiny request/response types shared by the emulator's route modules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import msgspec


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes = b""

    @classmethod
    def build(cls, method: str, target: str, headers: dict[str, str], body: bytes) -> Request:
        path, _, qs = target.partition("?")
        return cls(
            method=method,
            path=path,
            query=parse_qs(qs, keep_blank_values=True),
            headers={k.lower(): v for k, v in headers.items()},
            body=body,
        )

    def arg(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def json(self) -> Any:
        return msgspec.json.decode(self.body) if self.body else None


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    gzip_ok: bool = False  # the route allows Content-Encoding: gzip
    # A fault: the (gzipped) body is cut in half and sent with the cut length, so that
    # HTTP sees a whole body and only the gzip stream shows that it ends early.
    cut_short: bool = False
    # A fault: the body is sent with its whole length but the connection is cut after
    # this many bytes of it (a download broken off half way).
    cut_at: int | None = None


def json_response(status: int, payload: Any, **kwargs: Any) -> Response:
    return Response(status, msgspec.json.encode(payload), **kwargs)


def logging_error(status: int, code: str, message: str, **kwargs: Any) -> Response:
    """The logging API's error body (the contract's chosen shape)."""
    return json_response(status, {"error": {"code": code, "message": message}}, **kwargs)


class HttpProblem(Exception):
    """Raised by a route to answer with a prepared error response."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response
