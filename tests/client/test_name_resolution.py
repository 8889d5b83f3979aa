"""A host name that does not resolve fails at once, naming the host: waiting never heals a
typo (``.invalid`` is reserved never to resolve, RFC 6761)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from cdnlake.client import ApiClient, LoggingClient, V2Query
from cdnlake.client.retry import RetryPolicy
from cdnlake.config import ApiConfig, Secret
from cdnlake.errors import TerminalError, UnresolvableHostError
from tests.conftest import KEY, run_cli

HOST = "logging.cdnlake-typo.invalid"
# The policy that made a typo cost 32-50 s per zone.
SLOW = RetryPolicy(max_attempts=8, base_delay=0.5, max_delay=30.0, max_total_seconds=120.0)


def test_an_unknown_host_is_terminal_and_named():
    api = ApiConfig(logging_url=f"http://{HOST}", access_key=Secret(KEY), timeout_seconds=5)
    client = LoggingClient(ApiClient(api, retry=SLOW))
    now = datetime.now(UTC)
    started = time.monotonic()
    with pytest.raises(UnresolvableHostError) as info:
        client.query_v2(1234, V2Query(from_=now - timedelta(hours=1), to=now))
    assert time.monotonic() - started < 5  # one attempt, not the whole backoff
    assert isinstance(info.value, TerminalError) and not info.value.transient
    assert f"the host name '{HOST}' does not resolve" in str(info.value)


def test_ingest_with_a_mistyped_host_fails_fast(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[api]\nlogging_url = "http://{HOST}"\nbase_url = "http://{HOST}"\n'
        f'[storage]\nroot = "{tmp_path / "data"}"\n'
        '[[zones]]\nid = 1\n[[zones]]\nid = 2\nsource = "v1"\n'
    )
    started = time.monotonic()
    result = run_cli("--config", str(cfg), "ingest")
    assert time.monotonic() - started < 30, result.stdout  # 86 s before
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = [line for line in result.stdout.splitlines() if "does not resolve" in line]
    assert len(lines) == 2 and all(HOST in line for line in lines), result.stdout
