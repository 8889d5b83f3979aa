"""Builds a small lake from tests/fixtures/requests.csv with the real lake writer."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from cdnlake.config import Config, build_config
from cdnlake.lake.log.schema import REQUEST_SCHEMA, REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.writer import ZoneWriter
from tests.sessions import session_of

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_config(root: Path, zones: tuple[int, ...] = (1, 2)) -> Config:
    raw = {
        "storage": {"root": str(root)},
        "zones": [{"id": z, "name": f"z{z}"} for z in zones],
    }
    return build_config(raw, base_dir=root, env={"CDNLAKE_ACCESS_KEY": "k"})


def build_fixture_lake(root: Path) -> Config:
    frame = pl.read_csv(FIXTURES / "requests.csv", infer_schema=False)
    frame = frame.with_columns(
        pl.col("ts").str.to_datetime(time_unit="ms", time_zone="UTC"),
        pl.col("status_code").cast(pl.Int32),
        pl.col("bytes_sent").cast(pl.Int64),
        pl.col("body_bytes_sent").cast(pl.Int64),
        pl.col("asn").cast(pl.Int32),
        pl.col("pull_zone_id").cast(pl.Int64),
    )
    config = fixture_config(root)
    lake = Lake.from_config(config.storage)
    for (zone,), part in frame.partition_by(["pull_zone_id"], as_dict=True).items():
        ZoneWriter(session_of(lake), REQUESTS, int(zone)).commit(
            part.select(list(REQUEST_SCHEMA)), {}
        )
    return config
