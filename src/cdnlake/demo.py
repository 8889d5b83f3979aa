"""``cdnlake demo``: the whole product on the embedded default, in well under a minute.

Starts the loopback emulator on a free port, points the configuration at it, ingests its
demo zones (v2 and v1) into the configured storage root, writes the daily report of the
previous UTC day, and summarises.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from cdnlake.config import Config, Secret
from cdnlake.emulator.server import DEMO_ZONES, Emulator, EmulatorConfig, parse_zones
from cdnlake.ingest.passes import Ingestor, ingest_shield_zone
from cdnlake.ingest.result import Reporter, ZoneResult


@dataclass
class DemoResult:
    url: str
    results: list[ZoneResult]
    report_paths: list[Path]
    summary: list[dict[str, Any]]


def demo_config(config: Config, url: str, key: str) -> Config:
    api = msgspec.structs.replace(
        config.api, base_url=url, video_url=url, logging_url=url, access_key=Secret(key)
    )
    return msgspec.structs.replace(config, api=api)


def run_demo(config: Config, reporter: Reporter | None = None, seed: int = 1) -> DemoResult:
    from cdnlake.client import ApiClient, BudgetRegistry, LoggingClient, ShieldApi
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy
    from cdnlake.reports.build import collect, write_reports

    key = os.environ.get(config.api.access_key_env) or "demo-key"
    emulator = Emulator(
        EmulatorConfig(port=0, seed=seed, access_key=key, zones=parse_zones(DEMO_ZONES))
    ).start()
    url = emulator.url
    try:
        cfg = demo_config(config, emulator.url, key)
        # No send log under the work folder: this provider is a new emulator of our own,
        # which has counted no one's requests yet.
        budgets = BudgetRegistry(cfg.ingest.requests_per_window, cfg.ingest.window_seconds)
        with (
            ApiClient(cfg.api, budgets=budgets) as api,
            LakeSession.from_config(
                cfg.storage,
                privacy=PrivacyPolicy.from_config(cfg.privacy),
            ) as session,
        ):
            results = Ingestor(cfg, LoggingClient(api), session, reporter=reporter).run(cfg.zones)
            shield = ShieldApi(api)
            for shield_zone in cfg.shield_zones:
                results.append(
                    ingest_shield_zone(cfg, shield, shield_zone, session, reporter=reporter)
                )
    finally:
        emulator.stop()
    day = (datetime.now(UTC) - timedelta(days=1)).date()
    with LakeSession.from_config(cfg.storage, privacy=PrivacyPolicy.from_config(cfg.privacy)) as s:
        paths = write_reports(cfg, day, session=s)
        zones = collect(cfg, day, session=s).sections["zones"].records()
    return DemoResult(url, results, paths, zones)
