"""The shared HTTP core every API area goes through.

One ``httpx.Client`` (connection reuse, gzip, timeouts), credentials, the per-zone request
budget, and the one retry policy. Transient failures (connect errors, timeouts, dropped
connections, cut bodies, undecodable 2xx bodies, 5xx, 429) are retried with backoff;
terminal ones (400, 401, 403, 404, and any other 4xx) raise at once. Errors never carry
a credential: the request line is method and URL, and credentials travel in headers.
"""

from __future__ import annotations

import email.utils
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import msgspec

from cdnlake import __version__
from cdnlake.client.budget import BudgetRegistry, RequestBudget
from cdnlake.client.retry import RetryPolicy
from cdnlake.client.stats import RequestStats
from cdnlake.config import ApiConfig, Secret
from cdnlake.errors import (
    ApiError,
    CdnlakeError,
    ForbiddenError,
    HttpError,
    InvalidRequestError,
    LoggingDisabledError,
    MalformedResponseError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    StopRequested,
    TransportError,
    UnauthorizedError,
    UnreachableError,
    UnresolvableHostError,
)

log = logging.getLogger("cdnlake.client")
Auth = Literal["key", "logging", "none"]
USER_AGENT = f"cdnlake/{__version__}"
MAX_REQUEST_LINE = 300
# A refused connection is tried once more, not through the whole backoff: nobody listens
# there, and a daemon's next pass tries again anyway.
REFUSED_ATTEMPTS = 2
# A retry after this long of waiting on one request is said on a pipe (RetryNotice.slow).
SLOW_RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class ErrorBody:
    """What an endpoint's error body says: provider code, message, and the typed body."""

    code: str | None = None
    message: str | None = None
    details: Any = None


ErrorParser = Callable[[Any], ErrorBody]


@dataclass(frozen=True)
class RetryNotice:
    """A request that failed in a way worth trying again, about to wait and retry: what
    :attr:`ApiClient.on_retry` hears (a terminal's display, a line on a pipe)."""

    zone: int | None
    retry: int  # this is retry ``retry`` of ``retries``
    retries: int
    delay: float  # seconds until it
    timeout: float  # seconds each attempt waits for an answer
    reason: str  # the failure, short: no URL
    waited: float = 0.0  # seconds since the request's first attempt was sent

    @property
    def slow(self) -> bool:
        """Worth saying on a pipe: the provider kept it waiting (a timeout, or a second
        gone), not a refused connection retried at once."""
        return self.waited >= SLOW_RETRY_SECONDS or "timed out" in self.reason

    def text(self) -> str:
        where = f"zone {self.zone}" if self.zone is not None else "the provider"
        return (
            f"{where}: {self.reason}; retry {self.retry} of {self.retries} in "
            f"{self.delay:.1f}s (timeout {self.timeout:g}s a request)"
        )


def logging_error_body(body: Any) -> ErrorBody:
    """``{"error": {"code": ..., "message": ...}}`` (the logging API's chosen shape)."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        code = err.get("code")
        msg = err.get("message")
        return ErrorBody(
            code if isinstance(code, str) else None,
            msg if isinstance(msg, str) else None,
            err,
        )
    return ErrorBody()


def parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    value = value.strip()
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


_STATUS_ERRORS: dict[int, type[ApiError]] = {
    400: InvalidRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
}


def error_for_status(
    status: int,
    body: Any,
    request_line: str,
    *,
    retry_after: float | None = None,
    parser: ErrorParser = logging_error_body,
) -> CdnlakeError:
    """Map an HTTP error answer to the error tree: status first, then the body's code."""
    parsed = parser(body)
    code, message = parsed.code, parsed.message
    text = message or f"HTTP {status}"
    if code:
        text = f"{code}: {text}"
    kwargs: dict[str, Any] = {
        "status": status,
        "code": code,
        "request_line": request_line,
        "body": body,
        "retry_after": retry_after,
        "details": parsed.details,
    }
    if status == 429:
        return RateLimitedError(text, **kwargs)
    if status >= 500:
        return ServerError(text, **kwargs)
    if status == 404 and code == "logging_disabled":
        return LoggingDisabledError(text, **kwargs)
    cls = _STATUS_ERRORS.get(status, ApiError)
    return cls(text, **kwargs)


def _decode_body(content: bytes) -> Any:
    if not content:
        return None
    try:
        return msgspec.json.decode(content)
    except msgspec.DecodeError:
        return content[:500].decode("utf-8", "replace")


class ApiClient:
    """Sends requests for every API area; owns the connection pool."""

    def __init__(
        self,
        api: ApiConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        retry: RetryPolicy | None = None,
        budgets: BudgetRegistry | None = None,
        abort: threading.Event | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.api = api
        self.retry = retry or RetryPolicy(
            max_attempts=api.retry_attempts, max_total_seconds=api.retry_max_seconds
        )
        self.budgets = budgets or BudgetRegistry()
        self.abort = abort or threading.Event()
        # Told of every retry before its wait (from the thread that sends); the CLI shows it.
        self.on_retry: Callable[[RetryNotice], None] | None = None
        self._sleep = sleep
        self._http = httpx.Client(
            timeout=httpx.Timeout(api.timeout_seconds),
            transport=transport,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip"},
            follow_redirects=False,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- credentials -------------------------------------------------------------------
    def _auth_headers(self, auth: Auth) -> dict[str, str]:
        if auth == "none":
            return {}
        if auth == "logging" and self.api.bearer_token is not None:
            return {"Authorization": f"Bearer {self.api.bearer_token.reveal()}"}
        key: Secret | None = self.api.access_key
        return {"AccessKey": key.reveal()} if key is not None else {}

    # -- the retry loop ----------------------------------------------------------------
    def _wait(self, seconds: float) -> None:
        if self._sleep is not None:
            self._sleep(seconds)
        elif self.abort.wait(seconds):
            raise StopRequested()

    def call(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        auth: Auth = "key",
        zone: int | None = None,
        stats: RequestStats | None = None,
        parser: ErrorParser = logging_error_body,
        idempotent: bool | None = None,
        handle: Callable[[httpx.Response], Any] | None = None,
        headers: dict[str, str] | Callable[[], dict[str, str]] | None = None,
    ) -> Any:
        """Send one logical request, retrying transient failures; return ``handle(resp)``.

        ``handle`` turns a 2xx answer into the result (default: decoded JSON). It may raise
        a transient error (say, a cut body) to have the whole request retried.
        ``headers`` are added to the credentials ``auth`` picks; a callable is asked again
        before each attempt (a download resuming with ``Range`` from where it broke off).
        """
        stats = stats or RequestStats()
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "PUT", "DELETE")
        budget: RequestBudget | None = self.budgets.for_zone(zone) if zone is not None else None
        auth_headers = self._auth_headers(auth)

        def build() -> httpx.Request:
            extra = headers() if callable(headers) else headers or {}
            return self._http.build_request(
                method, url, params=params, json=json, headers={**auth_headers, **extra}
            )

        request = build()
        line = f"{method} {request.url}"[:MAX_REQUEST_LINE]
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            if self.abort.is_set():
                raise StopRequested()
            if attempt > 1 and callable(headers):
                request = build()
            error: CdnlakeError | None = None
            sent = False
            if budget is not None:
                before = time.monotonic()
                if not budget.acquire(self.abort):
                    raise StopRequested()
                stats.add("budget_wait_seconds", time.monotonic() - before)
            try:
                stats.add("requests")
                response = self._http.send(request, stream=True)
                sent = True
                try:
                    if response.is_success:
                        return (handle or json_body)(response)
                    read_body(response)
                    error = error_for_status(
                        response.status_code,
                        _decode_body(response.content),
                        line,
                        retry_after=parse_retry_after(response.headers.get("Retry-After")),
                        parser=parser,
                    )
                finally:
                    response.close()
            except CdnlakeError as exc:
                error = exc
            except httpx.TimeoutException as exc:
                error = TransportError(
                    f"timed out: no answer within {self.api.timeout_seconds:g}s "
                    f"({type(exc).__name__})",
                    request_line=line,
                )
            except httpx.ConnectError as exc:
                error = connect_error(exc, request, line)
            except (httpx.HTTPError, OSError) as exc:
                sent = True
                error = TransportError(
                    f"connection failed: {type(exc).__name__}: {exc}", request_line=line
                )
            finally:
                if budget is not None:
                    budget.release()
            assert error is not None
            self._count(stats, error)
            if self.abort.is_set():  # stopping: no retry, and a failure it caused is none
                raise StopRequested()
            if isinstance(error, TransportError) and error.progressed:
                attempt, started = 1, time.monotonic()
            retry_ok = error.transient and (
                idempotent or not sent or isinstance(error, RateLimitedError)
            )
            attempts = self.retry.max_attempts
            if isinstance(error, UnreachableError):
                attempts = min(attempts, REFUSED_ATTEMPTS)
            if not retry_ok or attempt >= attempts:
                raise gave_up(error, attempt, started)
            delay = self.retry.delay(attempt, getattr(error, "retry_after", None))
            if time.monotonic() - started + delay > self.retry.max_total_seconds:
                raise gave_up(error, attempt, started)
            stats.add("retries")
            notice = RetryNotice(
                zone,
                attempt,
                attempts - 1,
                delay,
                self.api.timeout_seconds,
                getattr(error, "detail", str(error)),
                time.monotonic() - started,
            )
            log.debug("%s", notice.text())
            if self.on_retry is not None:
                self.on_retry(notice)
            self._wait(delay)

    @staticmethod
    def _count(stats: RequestStats, error: CdnlakeError) -> None:
        if isinstance(error, RateLimitedError):
            stats.add("rate_limited")
        elif isinstance(error, ServerError):
            stats.add("server_errors")
        elif isinstance(error, (TransportError, MalformedResponseError)):
            stats.add("transport_errors")

    def download(
        self,
        url: str,
        dest: Path,
        *,
        params: dict[str, Any] | None = None,
        auth: Auth = "logging",
        zone: int | None = None,
        stats: RequestStats | None = None,
    ) -> int:
        """Stream a body to ``dest`` (via a temporary sibling); return its size in bytes.

        A connection that breaks mid-body raises a transient error, so the whole download
        is retried from the start: a partial file never takes ``dest``'s name. A gzip
        ``Content-Encoding`` is kept as it came (the file is then a .gz): decoding on the
        fly would hide a stream that ends early, which the file's reader detects.
        """
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")

        def handle(response: httpx.Response) -> int:
            size = 0
            try:
                encoding = response.headers.get("Content-Encoding", "identity").lower()
                keep_raw = encoding in ("gzip", "identity")
                chunks = response.iter_raw if keep_raw else response.iter_bytes
                with open(tmp, "wb") as out:
                    for chunk in chunks(1 << 20):
                        out.write(chunk)
                        size += len(chunk)
                        if self.abort.is_set():
                            raise StopRequested()
                os.replace(tmp, dest)
            except (httpx.HTTPError, OSError) as exc:
                tmp.unlink(missing_ok=True)
                raise TransportError(
                    f"download broke off after {size} bytes: {type(exc).__name__}",
                    request_line=f"GET {response.request.url}"[:MAX_REQUEST_LINE],
                ) from None
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            return size

        result: int = self.call(
            "GET", url, params=params, auth=auth, zone=zone, stats=stats, handle=handle
        )
        return result


def gave_up(error: CdnlakeError, attempts: int, started: float) -> CdnlakeError:
    """``error`` as the last of ``attempts``: a transient one says how long it was tried."""
    if attempts > 1 and isinstance(error, HttpError):
        error.tried(attempts, time.monotonic() - started)
    return error


def connect_error(
    exc: httpx.ConnectError, request: httpx.Request, line: str
) -> TransportError | UnresolvableHostError:
    """A refused connection says where nobody listened, a host name that does not resolve
    which name (neither heals by waiting); other connect failures retry."""
    origin = f"{request.url.scheme}://{request.url.netloc.decode()}"
    if _name_unknown(exc):
        return UnresolvableHostError(
            f"cannot connect to {origin}: the host name {request.url.host!r} does not resolve "
            "(is the address right?)",
            request_line=line,
        )
    if "refused" in str(exc).lower():
        return UnreachableError(
            f"cannot connect to {origin}: connection refused (is the address right and the "
            "service running?)",
            request_line=line,
        )
    return TransportError(f"cannot connect to {origin}: {exc}", request_line=line)


# The resolver's answers that a host name has no address (as opposed to EAI_AGAIN, a
# resolver that could not be asked: that one may heal).
_NO_SUCH_NAME = {
    getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name)
}


def _name_unknown(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return seen.errno in _NO_SUCH_NAME
        seen = seen.__cause__ or seen.__context__
    return False


def json_body(response: httpx.Response) -> Any:
    """Default success handler: the whole body, decoded as JSON."""
    content = read_body(response)
    try:
        return msgspec.json.decode(content)
    except msgspec.DecodeError as exc:
        raise MalformedResponseError(
            f"undecodable JSON body: {exc}",
            status=response.status_code,
            request_line=f"{response.request.method} {response.request.url}"[:MAX_REQUEST_LINE],
        ) from None


def read_body(response: httpx.Response) -> bytes:
    """Read a whole body, turning a cut connection into a transient error."""
    try:
        return response.read()
    except httpx.HTTPError as exc:
        raise TransportError(
            f"body cut off: {type(exc).__name__}",
            request_line=f"{response.request.method} {response.request.url}"[:MAX_REQUEST_LINE],
        ) from None
