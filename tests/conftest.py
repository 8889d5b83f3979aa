"""Shared fixtures: a real loopback emulator, configs pointing at it, and ground truth."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cdnlake.client import ApiClient, BudgetRegistry, LoggingClient, RetryPolicy
from cdnlake.config import Config, load_config
from cdnlake.emulator import Emulator, EmulatorConfig, Faults, parse_zones

NOW = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)
KEY = "test-key"
FAST_RETRY = RetryPolicy(max_attempts=8, base_delay=0.01, max_delay=0.05, max_total_seconds=20)
# Under fault injection about half of all attempts fail, so 8 attempts leave a ~0.4% chance
# that one of a run's hundreds of requests gives up: a flaky test. 40 attempts make that
# ~1e-12 per request while a test that wants a give-up still narrows the policy itself.
FAULT_RETRY = RetryPolicy(max_attempts=40, base_delay=0.01, max_delay=0.05, max_total_seconds=60)
REPO = Path(__file__).resolve().parents[1]


def start_emulator(
    zones: str = "1234:extended,1235:v1,1236",
    *,
    rpm: float = 5.0,
    rate: tuple[int, float] = (1000, 10.0),
    now: datetime | None = NOW,
    frozen: bool = True,
    faults: Faults | None = None,
    seed: int = 7,
) -> Emulator:
    config = EmulatorConfig(
        port=0,
        seed=seed,
        access_key=KEY,
        zones=parse_zones(zones),
        rate_limit=rate[0],
        rate_window=rate[1],
        rpm=rpm,
        now=now,
        frozen=frozen,
        faults=faults or Faults(),
    )
    return Emulator(config).start()


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = start_emulator()
    yield emu
    emu.stop()


def write_config(
    tmp_path: Path,
    emu: Emulator,
    zones: list[tuple[int, str]] | None = None,
    **ingest: Any,
) -> Path:
    """A config.toml in tmp_path pointing at ``emu``; ingest keys override defaults."""
    zones = zones or [(1234, "v2"), (1235, "v1"), (1236, "v2")]
    settings = {
        "lag_seconds": 300,
        "overlap_seconds": 600,
        "page_size": 2000,
        "requests_per_window": 1000,
        "window_seconds": 10,
        "max_window_seconds": 21600,
    }
    settings.update(ingest)
    lines = [
        "[api]",
        f'base_url = "{emu.url}"',
        f'video_url = "{emu.url}"',
        f'logging_url = "{emu.url}"',
        "timeout_seconds = 10",
        "retry_attempts = 8",
        "retry_max_seconds = 20",
        "[storage]",
        'root = "data"',
        "[ingest]",
        *(f"{k} = {v}" for k, v in settings.items()),
        "[schedule]",
        "poll_seconds = 1",
    ]
    for zid, source in zones:
        lines += ["[[zones]]", f"id = {zid}", f'name = "z{zid}"', f'source = "{source}"']
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def load_test_config(path: Path) -> Config:
    return load_config(path, env={"CDNLAKE_ACCESS_KEY": KEY})


def make_client(config: Config, **kwargs: Any) -> ApiClient:
    budgets = BudgetRegistry(config.ingest.requests_per_window, config.ingest.window_seconds)
    return ApiClient(config.api, retry=kwargs.pop("retry", FAST_RETRY), budgets=budgets, **kwargs)


def logging_client(config: Config, retry: RetryPolicy = FAST_RETRY) -> LoggingClient:
    return LoggingClient(make_client(config, retry=retry))


def truth_ids(
    emu: Emulator, zone: int, start: datetime, end: datetime, at: datetime | None = None
) -> set[str]:
    """Request ids the provider holds for ``[start, end)`` that are visible at ``at``."""
    at_ms = int((at or emu.clock.now()).timestamp() * 1000)
    return {
        r.wire.requestId
        for r in emu.traffic.records(
            zone, int(start.timestamp() * 1000), int(end.timestamp() * 1000)
        )
        if r.visible_ms <= at_ms
    }


def lake_ids(root: Path, zone: int) -> list[str]:
    import polars as pl

    files = sorted((root / "lake" / "requests" / f"pull_zone_id={zone}").glob("*/*.parquet"))
    if not files:
        return []
    return pl.concat([pl.read_parquet(f, columns=["request_id"]) for f in files])[
        "request_id"
    ].to_list()


def spawn_cli(
    *args: str, stdout: Any = subprocess.DEVNULL, stderr: Any = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    """`cdnlake ARGS` in the background, with the test access key."""
    return subprocess.Popen(
        [sys.executable, "-m", "cdnlake", *args],
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
        stdout=stdout,
        stderr=stderr,
        text=True,
    )


def ingest_all(config: Config, emu: Emulator) -> list[Any]:
    """One ingestion pass over every configured zone, on the emulator's clock."""
    from cdnlake.ingest.runner import Ingestor

    return Ingestor(config, logging_client(config), clock=emu.clock.now).run(config.zones)


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "CDNLAKE_ACCESS_KEY": KEY, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "cdnlake", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


__all__ = ["NOW", "timedelta"]


def lake_text_contains(root: Path, needle: str) -> list[str]:
    """Every lake file and text column holding ``needle`` (files are compressed: read them)."""
    import polars as pl

    hits = []
    for f in (root / "lake").rglob("*.parquet"):
        frame = pl.read_parquet(f)
        for name, dtype in frame.schema.items():
            if dtype == pl.String and frame[name].str.contains(needle, literal=True).any():
                hits.append(f"{f.name}:{name}")
    return hits
