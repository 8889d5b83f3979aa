"""What every command does first: read the config once, set up logging, build the client."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from cdnlake.config import Config, load_config
from cdnlake.errors import ConfigError

if TYPE_CHECKING:
    from cdnlake.client.core import ApiClient, RetryNotice

T = TypeVar("T")


def load(
    args: argparse.Namespace,
    *,
    default_level: str | None = None,
    legacy_ok: bool = False,
    lake: bool = True,
) -> Config:
    """Read the config; log level from --log-level, else ``default_level``, else config.

    A lake in the hour-file layout of an earlier cdnlake is refused (exit 2) by every
    command but ``migrate-lake`` (``legacy_ok``), which converts it. So is an ``s3://``
    lake that no AWS credentials can reach, by every command that uses the lake
    (``lake``), in one line rather than the lake libraries' error chain.
    """
    from cdnlake.cli.s3_credentials import require_credentials
    from cdnlake.lake.upkeep.legacy import legacy_lake

    config = load_config(args.config)
    setup_logging(
        args.log_level or default_level or config.log.level,
        getattr(args, "log_format", None) or config.log.format,
    )
    if lake:
        require_credentials(config.storage)
    old = None if legacy_ok else legacy_lake(config.storage)
    if old is not None:
        raise ConfigError(
            f"storage: {old} holds the hour-file lake of an earlier cdnlake; "
            "run `cdnlake migrate-lake` once to convert it to Delta tables"
        )
    return config


def require_writable_root(config: Config) -> None:
    """For the commands that write the lake: the storage root (and a local lake) must be
    folders this process can create files in, said in one line naming the path (exit 2)
    rather than a traceback from deep in the Delta writer."""
    import tempfile
    from pathlib import Path

    storage = config.storage
    folders = [storage.root, storage.work]
    if not storage.lake_location.startswith("s3://"):
        folders.append(Path(storage.lake_location))
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ConfigError(
                f"storage.root: cannot create or write to {folder} ({reason.lower()}); "
                "set [storage] root to a folder cdnlake may write"
            ) from None


def open_api(
    config: Config, *, require_key: bool = True, abort: threading.Event | None = None
) -> ApiClient:
    """``abort``: set, every request stops at its next attempt or wait (StopRequested)."""
    from cdnlake.client import ApiClient, BudgetRegistry

    if require_key:
        config.api.require_access_key()
    # Each zone's recent sends are kept under the work folder, so that a process started
    # right after another (a crash, a restart) still leaves room for that one's requests.
    budgets = BudgetRegistry(
        config.ingest.requests_per_window,
        config.ingest.window_seconds,
        folder=config.storage.work / "budget",
    )
    client = ApiClient(config.api, budgets=budgets, abort=abort)
    client.on_retry = say_retry  # a terminal's live display may show them its own way
    return client


def say_retry(notice: RetryNotice) -> None:
    """A request about to be retried after a wait: a line on stderr, so that waiting is
    never silent (a refused connection retried at once is said by its error alone)."""
    if notice.slow:
        say(f"cdnlake: {notice.text()}")


def is_tty() -> bool:
    return sys.stdout.isatty()


def setup_logging(level: str, fmt: str = "text") -> None:
    """cdnlake's own lines at ``level``; the libraries' chatter only when debugging.

    ``fmt`` "json": one JSON object per line (python-json-logger), with a pass's zone,
    source, run id and outcome as fields of their own.
    """
    numeric = getattr(logging, level.upper(), logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "{levelname}{name}{message}",
                style="{",
                timestamp="time",
                rename_fields={"levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=numeric, handlers=[handler], force=True)
    quiet = logging.DEBUG if numeric <= logging.DEBUG else logging.WARNING
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(quiet)
    # A pass longer than poll_seconds makes APScheduler skip runs by design (max_instances=1).
    logging.getLogger("apscheduler").setLevel(
        logging.DEBUG if numeric <= logging.DEBUG else logging.ERROR
    )


# After a first SIGINT / SIGTERM, work that has not ended in this many seconds (a request
# waiting on a silent provider, a query) is abandoned: the process exits 1 there and then.
# The lake stays whole (a Delta commit is whole or absent); what was not committed is read
# again by the next run.
STOP_GRACE_SECONDS = 5.0


class Interrupt:
    """SIGINT and SIGTERM of a command that does bulk work (``ingest``, ``import-v1``,
    ``maintain``, ``audit``): the first sets :attr:`event` (the passes stop at their next
    page, the API client at its next attempt or wait) and says so on stderr; a second one
    exits at once (exit 1). Installed by :func:`interruptible`."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.event = threading.Event()
        self.signal: str | None = None
        self.at: float | None = None

    def is_set(self) -> bool:
        return self.event.is_set()

    def on_signal(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self.event.is_set():
            say(f"cdnlake: {name} again: exiting at once (every commit made is whole)")
            os._exit(1)
        self.signal, self.at = name, time.monotonic()
        self.event.set()
        say(
            f"cdnlake: {name}: stopping {self.what}; what is committed stays, the rest is "
            "read again next time (send it again to exit at once)"
        )

    def run(self, work: Callable[[], T], *, on_abandon: Callable[[], None] | None = None) -> T:
        """``work()`` on a thread of its own, while this one stays free to hear signals;
        once stopped, work that does not end within :data:`STOP_GRACE_SECONDS` is
        abandoned: ``on_abandon()`` (say what was kept), then exit 1 at once."""
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = work()
            except BaseException as exc:  # handed to the caller's thread below
                box["error"] = exc

        thread = threading.Thread(target=target, name="work", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
            late = self.at is not None and time.monotonic() - self.at > STOP_GRACE_SECONDS
            if late and thread.is_alive():
                if on_abandon is not None:
                    on_abandon()
                say(
                    f"cdnlake: {self.what} did not stop within {STOP_GRACE_SECONDS:g}s "
                    "(waiting on the provider or the store): exiting; nothing it had "
                    "not committed was stored"
                )
                os._exit(1)
        if "error" in box:
            raise box["error"]
        value: T = box["value"]
        return value


def say(line: str) -> None:
    """One line on stderr, now (signal handlers and progress lines)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


@contextmanager
def interruptible(what: str) -> Iterator[Interrupt]:
    """SIGINT and SIGTERM stop ``what`` (see :class:`Interrupt`) while the block runs; the
    previous handlers are put back after it."""
    interrupt = Interrupt(what)
    if threading.current_thread() is not threading.main_thread():  # (tests calling main)
        yield interrupt
        return
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, interrupt.on_signal) for s in signals}
    try:
        yield interrupt
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
