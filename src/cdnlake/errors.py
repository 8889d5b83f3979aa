"""The one exception tree of cdnlake.

Library code raises these; only the CLI turns them into messages and exit codes.
Transient errors are worth retrying later (the same call may succeed); terminal errors
will fail the same way until something is changed by a person.

    CdnlakeError
    ├── TransientError                 retry with backoff, or on the next pass
    │   ├── TransportError             connect / read timeout, dropped connection, cut body
    │   │   └── UnreachableError       nothing listens at the address (connection refused)
    │   ├── MalformedResponseError     a 2xx body that does not decode
    │   ├── RateLimitedError           429 rate_limited
    │   ├── ChecksumMismatchError      a download whose SHA-256 is not the listed one
    │   ├── ServerError                5xx internal_error
    │   ├── CoordinationError          the daemons' PostgreSQL cannot be reached or failed
    │   ├── EngineError                the query engine (Spark Connect) cannot be reached or failed
    │   ├── StorageUnavailableError    the lake's store kept failing (5xx, throttling, timeout)
    │   └── StopRequested              the process is shutting down; nothing was committed
    └── TerminalError                  fix something, then run again
        ├── ConfigError                bad config.toml / environment (exit code 2)
        ├── UsageError                 bad command-line input (exit code 2)
        │   ├── DaemonRunningError     a daemon already runs on this storage root
        │   └── QueryError             the engine refused the SQL (syntax, unknown column)
        ├── RequestValidationError     a request the API would refuse, caught before sending
        ├── ApiError                   a 4xx answer
        │   ├── InvalidRequestError    400 invalid_request
        │   ├── UnauthorizedError      401 unauthorized
        │   ├── ForbiddenError         403 forbidden
        │   └── NotFoundError          404
        │       └── LoggingDisabledError   404 logging_disabled
        ├── ZoneBusyError              another cdnlake process holds the zone
        ├── FencedError                the zone was rewound or taken over since this pass began
        ├── DataError                  damaged lake, state or warehouse file
        │   ├── FileGoneError          a data file a reader's snapshot names has left storage
        │   ├── DamagedInputError      an input file or body that ends early or is corrupt
        │   ├── CorruptDownloadError   a download that kept mismatching its checksum
        │   └── RejectedInputError     input of which not one line or record could be taken
        ├── StorageError               the lake or its staging area cannot be written
        └── NoLakeError                a query of the lake where no lake was written yet

Every error that came from an HTTP answer carries ``status``, ``code`` (the provider's
error code when the body had one), ``message``, ``request_line`` (method and URL, never a
credential), ``body`` (the decoded error body, if any) and ``details`` (that body as the
endpoint's typed error model: Generic result, Problem details, Field error, Container
node error or ``{statusCode}``).
"""

from __future__ import annotations

from typing import Any


class CdnlakeError(Exception):
    """Root of every error cdnlake raises on purpose."""

    transient = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class TransientError(CdnlakeError):
    """The same call may succeed later."""

    transient = True


class TerminalError(CdnlakeError):
    """The same call will fail the same way until something changes."""


class HttpError(CdnlakeError):
    """Fields shared by every error that came from an HTTP exchange (mixed in first)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        request_line: str = "",
        body: Any = None,
        retry_after: float | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(f"{message} ({request_line})" if request_line else message)
        self.details = details  # the endpoint's error body as a typed model, when known
        self.detail = message
        self.status = status
        self.code = code
        self.request_line = request_line
        self.body = body
        self.retry_after = retry_after

    def tried(self, attempts: int, seconds: float) -> None:
        """Say that this is the last of ``attempts`` over ``seconds``."""
        where = f" ({self.request_line})" if self.request_line else ""
        self.message = f"{self.detail}, after {attempts} attempts over {seconds:.0f}s{where}"


class TransportError(HttpError, TransientError):
    # A download that broke off after more of it arrived: its retries start afresh (a
    # long file resumed with Range must not run out of attempts by making progress).
    progressed = False


class UnreachableError(TransportError):
    """Connection refused: retried only briefly, since waiting rarely brings a server up."""


class UnresolvableHostError(HttpError, TerminalError):
    """The host name does not resolve (a typo in an address): waiting will not fix it."""


class MalformedResponseError(HttpError, TransientError):
    pass


class RateLimitedError(HttpError, TransientError):
    pass


class ServerError(HttpError, TransientError):
    pass


class ChecksumMismatchError(HttpError, TransientError):
    """A downloaded file whose SHA-256 is not the one listed: fetched again."""


class CoordinationError(TransientError):
    """The PostgreSQL that several daemons share could not be reached or failed."""


class EngineError(TransientError):
    """The query engine could not be reached, or failed while running a query."""


class StorageUnavailableError(TransientError):
    """The lake's store kept failing to answer (a 5xx or SlowDown, a timeout, a reset, too
    many open files) past the retries: the work stopped, nothing was set aside as damaged."""


class StopRequested(TransientError):
    def __init__(self, message: str = "stop requested") -> None:
        super().__init__(message)


class ConfigError(TerminalError):
    pass


class UsageError(TerminalError):
    pass


class DaemonRunningError(UsageError):
    """Without coordination, one daemon per storage root: this one found another."""


class QueryError(UsageError):
    """The engine refused the SQL it was given: the text must change."""


class RequestValidationError(TerminalError):
    """A request parameter outside the API's documented limits."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class ApiError(HttpError, TerminalError):
    pass


class InvalidRequestError(ApiError):
    pass


class UnauthorizedError(ApiError):
    pass


class ForbiddenError(ApiError):
    pass


class NotFoundError(ApiError):
    pass


class LoggingDisabledError(NotFoundError):
    pass


class ZoneBusyError(TerminalError):
    pass


class FencedError(TerminalError):
    """The zone's fence moved past this writer's token (a rewind, a new owner): its commit
    was refused and wrote nothing. Terminal for this pass; the next one reads anew."""


class DataError(TerminalError):
    pass


class FileGoneError(DataError):
    """A data file the reader's snapshot names has left storage since it was taken (a
    vacuum): the table read as it is now answers."""


class DamagedInputError(DataError):
    """A log file or body that ends early or is corrupt; the lines before it were read."""

    def __init__(self, message: str, *, last_line: int) -> None:
        super().__init__(message)
        self.last_line = last_line  # the last whole line the input still held


class CorruptDownloadError(HttpError, DataError):
    """A file that still did not match its listed checksum after every retry."""


class RejectedInputError(DataError):
    """Lines or records arrived, and every one of them was rejected."""


class StorageError(TerminalError):
    """Disk full, a permission, a file where a folder should be: nothing was half written."""


class NoLakeError(TerminalError):
    """The storage root (or lake_uri) holds no table of the lake: nothing was ever
    ingested there, or the configuration points somewhere else (exit 1, like a zone that
    ``status`` finds never ingested)."""


def first_line(exc: BaseException) -> str:
    """An error's first line (a library's message may run to a chain of lines, a
    traceback's worth): what one line of ours says of it."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
