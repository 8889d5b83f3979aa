"""cdnlake: a CDN's request logs as an analytics lake (Delta Lake tables + DuckDB).

``import cdnlake`` stays cheap: :func:`connect` imports DuckDB and the lake when called.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

from cdnlake.version import __version__

__all__ = ["__version__", "connect"]


def connect(config_path: str | os.PathLike[str] | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every relation of ``cdnlake sql`` defined (``requests``,
    ``requests_hourly``, ``ingest_runs``, ...), over the lake that the configuration names:
    ``config_path``, else ``$CDNLAKE_CONFIG``, else ``./config.toml``. For notebooks,
    pandas (``.df()``) and polars (``.pl()``)::

        import cdnlake
        con = cdnlake.connect()
        con.sql("SELECT count(*) FROM requests").pl()

    The connection reads the lake's tables as they were when it was made (each view is
    over the files of the tables' snapshot then): make a new one to see later commits,
    and close it when done. Raises :class:`cdnlake.errors.ConfigError` for a bad
    configuration and :class:`cdnlake.errors.NoLakeError` where no lake was written.
    """
    from cdnlake.config import load_config
    from cdnlake.errors import ConfigError
    from cdnlake.lake.upkeep.legacy import legacy_lake
    from cdnlake.warehouse.db import Warehouse

    config = load_config(config_path)
    old = legacy_lake(config.storage)
    if old is not None:
        raise ConfigError(
            f"storage: {old} holds the hour-file lake of an earlier cdnlake; "
            "run `cdnlake migrate-lake` once to convert it to Delta tables"
        )
    return Warehouse(config.storage).open_connection(require_lake=True)
