"""What every command does first: read the config once, set up logging, build the client."""

from __future__ import annotations

import argparse
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
    from cdnlake.cli.main import setup_logging
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


def open_api(config: Config, *, require_key: bool = True) -> ApiClient:
    from cdnlake.client import ApiClient, BudgetRegistry

    if require_key:
        config.api.require_access_key()
    budgets = BudgetRegistry(config.ingest.requests_per_window, config.ingest.window_seconds)
    return ApiClient(config.api, budgets=budgets)


def is_tty() -> bool:
    return sys.stdout.isatty()
