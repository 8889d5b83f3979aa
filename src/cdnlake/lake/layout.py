"""Where things live in the lake, and the schema of its files.

``lake/requests/pull_zone_id=<id>/date=<YYYY-MM-DD>/part-<HH>.parquet``: one file per UTC
hour of the request's own timestamp. A request's timestamp therefore names exactly one
file, so each ``request_id`` can only ever be in one place, and every change to a file
is a single atomic rename. Partition columns live in the path (hive style), not in the
files.
"""

from __future__ import annotations

import os
import re
import threading
from datetime import date
from pathlib import Path

import polars as pl

REQUEST_SCHEMA: dict[str, pl.DataType] = {
    "ts": pl.Datetime("ms", "UTC"),
    "request_id": pl.String(),
    "cache_status": pl.String(),
    "status_code": pl.Int32(),
    "bytes_sent": pl.Int64(),
    "edge_location": pl.String(),
    "scheme": pl.String(),
    "host": pl.String(),
    "path": pl.String(),
    "url": pl.String(),
    "remote_ip": pl.String(),
    "country_code": pl.String(),
    "user_agent": pl.String(),
    "referer": pl.String(),
    "body_bytes_sent": pl.Int64(),
    "content_range": pl.String(),
    "ja4_fingerprint": pl.String(),
    "asn": pl.Int32(),
    "asn_organization": pl.String(),
    "source": pl.String(),
}
REQUEST_COLUMNS = list(REQUEST_SCHEMA)

SHIELD_SCHEMA: dict[str, pl.DataType] = {
    "log_id": pl.String(),
    "ts": pl.Datetime("ms", "UTC"),
    "asn": pl.String(),
    "country": pl.String(),
    "rule_id": pl.String(),
    "severity": pl.String(),
    "method": pl.String(),
    "rule_group": pl.String(),
    "status": pl.String(),
    "server_zone": pl.String(),
    "labels_json": pl.String(),
    "log": pl.String(),
}

TMP_SUFFIX = ".tmp"
_PART = re.compile(r"^part-(\d{2})\.parquet$")


def requests_root(lake: Path) -> Path:
    return lake / "requests"


PARTITION_KEYS = {"requests": "pull_zone_id", "shield_events": "shield_zone_id"}


def zone_dir(lake: Path, zone_id: int, table: str = "requests") -> Path:
    """The zone's folder; ids are integers, so no name can escape the lake."""
    if isinstance(zone_id, bool) or not isinstance(zone_id, int) or zone_id < 0:
        raise ValueError(f"bad zone id {zone_id!r}")
    return lake / table / f"{PARTITION_KEYS[table]}={zone_id}"


def partition_dir(lake: Path, zone_id: int, day: date, table: str = "requests") -> Path:
    return zone_dir(lake, zone_id, table) / f"date={day.isoformat()}"


def hour_file(lake: Path, zone_id: int, day: date, hour: int, table: str = "requests") -> Path:
    if not 0 <= hour <= 23:
        raise ValueError(f"bad hour {hour}")
    return partition_dir(lake, zone_id, day, table) / f"part-{hour:02d}.parquet"


def glob_for(lake: Path, table: str = "requests") -> str:
    return str(lake / table / "*" / "*" / "*.parquet")


def data_files(lake: Path, table: str = "requests") -> list[Path]:
    return sorted(p for p in (lake / table).glob("*/*/*.parquet") if not p.name.startswith("."))


def tmp_sibling(path: Path) -> Path:
    """A hidden name next to ``path`` that no reader's ``*.parquet`` glob matches."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}{TMP_SUFFIX}")


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
