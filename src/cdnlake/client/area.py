"""What every management API area shares: typed decoding and limit checks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

import httpx
import msgspec

from cdnlake.client.core import ApiClient, Auth, ErrorParser, read_body
from cdnlake.errors import MalformedResponseError, RequestValidationError

T = TypeVar("T")
INT32_MAX = 2_147_483_647


class Model(msgspec.Struct):
    """Base of the typed response models: a time the provider sends without an offset is
    UTC (its documents give times in UTC), so no model ever holds a naive datetime."""

    _time_fields: ClassVar[tuple[str, ...] | None] = None

    def __post_init__(self) -> None:
        cls = type(self)
        if cls._time_fields is None:
            cls._time_fields = tuple(
                f.name for f in msgspec.structs.fields(cls) if "datetime" in str(f.type)
            )
        for name in cls._time_fields:
            value = getattr(self, name)
            if isinstance(value, datetime) and value.tzinfo is None:
                setattr(self, name, value.replace(tzinfo=UTC))


def decode_model(response: httpx.Response, content: bytes, model: type[T]) -> T:
    """A 2xx body as its typed model; one that does not fit is a malformed answer."""
    try:
        return msgspec.json.decode(content, type=model, strict=False)
    except msgspec.DecodeError as exc:
        raise MalformedResponseError(
            f"unexpected response body: {exc}",
            status=response.status_code,
            request_line=f"{response.request.method} {response.request.url}",
        ) from None


def check_range(field: str, value: int, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise RequestValidationError(field, f"must be an integer within {lo}..{hi}, got {value!r}")
    return value


def check_id(field: str, value: int) -> int:
    return check_range(field, value, 1, 2**63 - 1)


class Area:
    """Base of one API area: a thin typed layer over the shared :class:`ApiClient`."""

    base_attr = "base_url"

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.base = str(getattr(api.api, self.base_attr)).rstrip("/")

    def _call(
        self,
        method: str,
        path: str,
        model: type[T] | None,
        *,
        parser: ErrorParser,
        params: dict[str, Any] | None = None,
        json: Any = None,
        auth: Auth = "key",
    ) -> T:
        def handle(response: httpx.Response) -> Any:
            content = read_body(response)
            return None if model is None else decode_model(response, content, model)

        result: T = self.api.call(
            method,
            f"{self.base}{path}",
            params={k: v for k, v in (params or {}).items() if v is not None},
            json=json,
            auth=auth,
            parser=parser,
            handle=handle,
        )
        return result
