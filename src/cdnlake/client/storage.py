"""A storage zone's own API (Edge Storage): list a folder, download a file.

The provider serves it on the storage zone's host (``https://<StorageHostname>/``), with
the storage zone's password (the read-only one suffices) in the ``AccessKey`` header;
the emulator serves it at ``<emulator url>/storage``. Requests go through the shared
:class:`~cdnlake.client.core.ApiClient` (its pool, retry policy and exception tree).

Downloads stream to disk a chunk at a time into ``<dest>.partial``; a connection that
breaks off is resumed with ``Range`` from what the partial file holds (in the same call,
and in a later one: a partial file left by Ctrl-C or a crash is picked up). A file whose
SHA-256 is not the listed ``Checksum`` is fetched again from the start
(:class:`ChecksumMismatchError`, transient); one that still mismatches after the retries
is :class:`CorruptDownloadError` (terminal). A refused password is one line naming the
storage zone and the environment variable that holds it, never the value.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

import httpx

from cdnlake.client.area import Model, decode_model
from cdnlake.client.core import MAX_REQUEST_LINE, ApiClient, ErrorBody, read_body
from cdnlake.client.stats import RequestStats
from cdnlake.config import Secret
from cdnlake.errors import (
    ApiError,
    ChecksumMismatchError,
    CorruptDownloadError,
    ForbiddenError,
    RequestValidationError,
    StopRequested,
    TransportError,
    UnauthorizedError,
)

CHUNK = 1 << 20


class StorageObject(Model, rename="pascal"):
    """One entry of a folder listing (the seed's storage object)."""

    object_name: str = ""
    path: str = ""  # the folder holding it, "/<storage zone>/<folder>/"
    length: int = 0
    last_changed: datetime | None = None
    is_directory: bool = False
    checksum: str | None = None  # SHA-256 of the content, hex (any case)
    date_created: datetime | None = None
    guid: str | None = None
    storage_zone_name: str | None = None
    storage_zone_id: int | None = None
    server_id: int | None = None
    array_number: int | None = None
    user_id: str | None = None
    content_type: str | None = None
    replicated_zones: str | None = None

    @property
    def relative_path(self) -> str:
        """Its path inside the storage zone (what :meth:`StorageZoneClient.download`
        takes): the folder without the leading storage zone name, then the name."""
        folder = self.path.strip("/").split("/", 1)
        inner = folder[1] + "/" if len(folder) > 1 and folder[1] else ""
        return inner + self.object_name + ("/" if self.is_directory else "")


def storage_error_body(body: Any) -> ErrorBody:
    """``{"HttpCode": 401, "Message": "Unauthorized"}``: the storage API's error body."""
    if isinstance(body, dict) and isinstance(body.get("Message"), str):
        return ErrorBody(None, body["Message"], body)
    return ErrorBody()


def _segments(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise RequestValidationError("path", f"no . or .. segments, got {path!r}")
    return "/".join(quote(p, safe="") for p in parts)


class StorageZoneClient:
    """One storage zone, read through its own API.

    ``base_url`` is where the API answers (``https://<hostname>`` unless given);
    ``password_env`` is the NAME of the environment variable the password came from,
    said in the error when the password is refused.
    """

    def __init__(
        self,
        api: ApiClient,
        zone: str,
        password: Secret,
        *,
        password_env: str,
        hostname: str | None = None,
        base_url: str | None = None,
    ) -> None:
        if not zone or "/" in zone:
            raise RequestValidationError("storage zone", f"a storage zone name, got {zone!r}")
        if (hostname is None) == (base_url is None):
            raise RequestValidationError("storage zone", "give a hostname or a base URL")
        self.api = api
        self.zone = zone
        self.password_env = password_env
        self._password = password
        self.base = (base_url or f"https://{hostname}").rstrip("/")

    def __repr__(self) -> str:
        return f"StorageZoneClient({self.zone!r} at {self.base!r})"

    def url(self, path: str, *, folder: bool = False) -> str:
        inner = _segments(path)
        tail = f"/{inner}" if inner else ""
        return f"{self.base}/{quote(self.zone, safe='')}{tail}{'/' if folder else ''}"

    def _send(
        self,
        url: str,
        handle: Callable[[httpx.Response], Any],
        *,
        headers: dict[str, str] | Callable[[], dict[str, str]] | None = None,
        stats: RequestStats | None = None,
    ) -> Any:
        def with_key() -> dict[str, str]:
            extra = headers() if callable(headers) else headers or {}
            return {"AccessKey": self._password.reveal(), **extra}

        try:
            return self.api.call(
                "GET",
                url,
                auth="none",
                headers=with_key,
                parser=storage_error_body,
                handle=handle,
                stats=stats,
            )
        except (UnauthorizedError, ForbiddenError) as exc:
            raise UnauthorizedError(
                f"storage zone {self.zone}: the password was refused (HTTP {exc.status}); "
                f"{self.password_env} must hold the storage zone's password or read-only "
                "password (and the storage zone must have this name)",
                status=exc.status,
            ) from None

    # -- listing ---------------------------------------------------------------------------
    def list(self, path: str = "", *, stats: RequestStats | None = None) -> list[StorageObject]:
        """The entries of folder ``path`` (relative to the storage zone, "" for its root)."""

        def handle(response: httpx.Response) -> list[StorageObject]:
            return decode_model(response, read_body(response), list[StorageObject])

        result: list[StorageObject] = self._send(self.url(path, folder=True), handle, stats=stats)
        return result

    # -- downloads -------------------------------------------------------------------------
    def download(
        self,
        path: str | StorageObject,
        dest: Path,
        *,
        checksum: str | None = None,
        length: int | None = None,
        resume: bool = True,
        progress: Callable[[int], None] | None = None,
        stats: RequestStats | None = None,
    ) -> int:
        """Stream file ``path`` to ``dest``; return its size in bytes.

        Given a listed :class:`StorageObject`, its ``Checksum`` is verified (or pass
        ``checksum``) and only its listed ``Length`` is asked for (or pass ``length``): a
        part that grew by appending since the listing comes as it was listed. With ``resume``, a
        ``<dest>.partial`` left by an earlier call is continued with ``Range``; ``dest``
        only ever appears whole and verified. ``progress`` hears the size of each chunk
        written.
        """
        if length is not None and length < 0:
            raise RequestValidationError("length", f"must be >= 0, got {length}")
        expected_length = length
        if isinstance(path, StorageObject):
            if path.is_directory:
                raise RequestValidationError("path", f"{path.object_name} is a folder")
            checksum = checksum or path.checksum
            expected_length = path.length if length is None else length
            path = path.relative_path
        if not _segments(path):
            raise RequestValidationError("path", "a file path inside the storage zone")
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(dest.name + ".partial")
        if not resume:
            partial.unlink(missing_ok=True)
        sink = _FileSink(partial)
        if expected_length is not None and sink.size > expected_length:
            sink.reset()  # not a prefix of this file
        url = self.url(path)
        line = f"GET {url}"[:MAX_REQUEST_LINE]

        def finish() -> int:
            sink.close()
            if checksum and sink.hexdigest() != checksum.strip().lower():
                sink.reset()
                raise ChecksumMismatchError(
                    f"{path}: SHA-256 of the download is not the listed checksum",
                    request_line=line,
                )
            os.replace(partial, dest)
            return sink.size

        def handle(response: httpx.Response) -> int:
            _take_body(response, sink, self.api, line, progress, expected_length)
            return finish()

        def ranged() -> dict[str, str]:
            sink.open()
            return _asking(sink.size, expected_length)

        try:
            if expected_length is not None and sink.size == expected_length > 0:
                try:
                    return finish()  # a complete partial file from before: check it
                except ChecksumMismatchError:
                    pass  # fetched anew below
            try:
                result: int = self._send(url, handle, headers=ranged, stats=stats)
            except ChecksumMismatchError as exc:
                raise CorruptDownloadError(
                    f"{exc.detail}, after every retry: the stored file may be damaged",
                    request_line=line,
                ) from None
            except ApiError as exc:
                if exc.status != 416 or sink.size == 0:
                    raise
                sink.reset()  # the partial file no longer fits the stored one
                result = self._send(url, handle, headers=ranged, stats=stats)
            return result
        finally:
            sink.close()

    def download_to(
        self,
        path: str | StorageObject,
        out: BinaryIO,
        *,
        offset: int = 0,
        progress: Callable[[int], None] | None = None,
        stats: RequestStats | None = None,
    ) -> int:
        """Stream file ``path`` from byte ``offset`` into ``out``; return the bytes written.

        A connection that breaks off resumes with ``Range`` after what was written; no
        checksum is verified (the stream cannot be taken back): use :meth:`download`
        for a verified file. A listed entry is read up to its listed ``Length``.
        """
        if offset < 0:
            raise RequestValidationError("offset", f"must be >= 0, got {offset}")
        limit: int | None = None
        if isinstance(path, StorageObject):
            limit = path.length
            path = path.relative_path
        if limit is not None and offset >= limit:
            return 0
        url = self.url(path)
        line = f"GET {url}"[:MAX_REQUEST_LINE]
        sink = _StreamSink(out, offset)

        def handle(response: httpx.Response) -> int:
            _take_body(response, sink, self.api, line, progress, limit)
            return sink.size - offset

        def ranged() -> dict[str, str]:
            return _asking(sink.size, limit)

        result: int = self._send(url, handle, headers=ranged, stats=stats)
        return result


class _FileSink:
    """The partial file and the SHA-256 of what it holds, across attempts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self._hash = hashlib.sha256()
        self._file: BinaryIO | None = None
        if path.exists():
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    self._hash.update(chunk)
                    self.size += len(chunk)

    def open(self) -> None:
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 (closed by close())

    def write(self, chunk: bytes) -> None:
        self.open()
        assert self._file is not None
        self._file.write(chunk)
        self._hash.update(chunk)
        self.size += len(chunk)

    def restart(self) -> None:
        """The server sent the whole file: start the partial file over."""
        self.reset()
        self.open()

    def reset(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self.size = 0
        self._hash = hashlib.sha256()

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class _StreamSink:
    def __init__(self, out: BinaryIO, offset: int) -> None:
        self.out = out
        self.size = offset
        self.start = offset

    def write(self, chunk: bytes) -> None:
        self.out.write(chunk)
        self.size += len(chunk)

    def restart(self) -> None:
        if self.size != 0:
            raise TransportError("the server ignored Range: cannot resume into a stream")


def _asking(start: int, limit: int | None) -> dict[str, str]:
    """The headers of one attempt: the bytes from ``start`` (up to ``limit``), raw."""
    asked = {"Accept-Encoding": "identity"}
    if limit is not None and limit > 0:
        asked["Range"] = f"bytes={start}-{limit - 1}"
    elif start > 0:
        asked["Range"] = f"bytes={start}-"
    return asked


def _take_body(
    response: httpx.Response,
    sink: _FileSink | _StreamSink,
    api: ApiClient,
    line: str,
    progress: Callable[[int], None] | None,
    limit: int | None = None,
) -> None:
    """Append the body to ``sink`` from where it stands, up to ``limit`` bytes of the
    file. A break, or a body that ends before the answer said, is a transient error that
    keeps what arrived."""
    end: int | None = None
    if response.status_code == 206:
        first, last, _ = _content_range(response.headers.get("Content-Range", ""))
        if first != sink.size:
            if first != 0:
                raise TransportError(
                    f"asked for bytes from {sink.size}, got from {first}", request_line=line
                )
            sink.restart()
        end = last + 1
    else:
        sink.restart()  # the whole file, whatever was asked
        length = response.headers.get("Content-Length")
        end = int(length) if length and length.isdigit() else None
    if limit is not None:
        end = limit if end is None else min(end, limit)
    before = sink.size
    try:
        for chunk in response.iter_raw():  # as it arrives: a chunker would lose a tail
            if end is not None and sink.size + len(chunk) > end:
                chunk = chunk[: max(0, end - sink.size)]
            sink.write(chunk)
            if progress is not None:
                progress(len(chunk))
            if api.abort.is_set():
                raise StopRequested()
            if end is not None and sink.size >= end:
                break
    except (httpx.HTTPError, OSError) as exc:
        broke = TransportError(
            f"download broke off after {sink.size - before} bytes: {type(exc).__name__}",
            request_line=line,
        )
        broke.progressed = sink.size > before
        raise broke from None
    if end is not None and sink.size < end:
        short = TransportError(f"download ended at {sink.size} of {end} bytes", request_line=line)
        short.progressed = sink.size > before
        raise short


def _content_range(text: str) -> tuple[int, int, int | None]:
    """``bytes FIRST-LAST/SIZE`` (SIZE may be ``*``)."""
    try:
        unit, _, spec = text.strip().partition(" ")
        bounds, _, size = spec.partition("/")
        first, _, last = bounds.partition("-")
        if unit != "bytes":
            raise ValueError(unit)
        return int(first), int(last), (int(size) if size != "*" else None)
    except ValueError:
        raise TransportError(f"unreadable Content-Range {text[:60]!r}") from None
