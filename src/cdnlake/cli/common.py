"""What every command does first: read the config once, set up logging, build the client."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from cdnlake.config import Config, load_config
from cdnlake.errors import ConfigError

if TYPE_CHECKING:
    from cdnlake.client.core import ApiClient


def load(
    args: argparse.Namespace, *, default_level: str | None = None, legacy_ok: bool = False
) -> Config:
    """Read the config; log level from --log-level, else ``default_level``, else config.

    A lake in the hour-file layout of an earlier cdnlake is refused (exit 2) by every
    command but ``migrate-lake`` (``legacy_ok``), which converts it.
    """
    from cdnlake.lake.legacy import legacy_lake

    config = load_config(args.config)
    setup_logging(
        args.log_level or default_level or config.log.level,
        getattr(args, "log_format", None) or config.log.format,
    )
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


def open_api(config: Config, *, require_key: bool = True) -> ApiClient:
    from cdnlake.client import ApiClient, BudgetRegistry

    if require_key:
        config.api.require_access_key()
    budgets = BudgetRegistry(config.ingest.requests_per_window, config.ingest.window_seconds)
    return ApiClient(config.api, budgets=budgets)


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
