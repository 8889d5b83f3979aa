"""Transient failures are retried and succeed; the budget keeps us clear of real 429s."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from cdnlake.client import ApiClient, BudgetRegistry, LoggingClient, RequestStats, V2Query
from cdnlake.config import ApiConfig, Secret
from cdnlake.emulator import Faults
from tests.conftest import FAULT_RETRY, KEY, start_emulator


def make(url: str, limit: int = 30, window: float = 10.0) -> LoggingClient:
    api = ApiConfig(logging_url=url, access_key=Secret(KEY), timeout_seconds=5)
    return LoggingClient(ApiClient(api, retry=FAULT_RETRY, budgets=BudgetRegistry(limit, window)))


def query(emu):
    now = emu.clock.now()
    return V2Query(from_=now - timedelta(hours=2), to=now - timedelta(minutes=5), limit=50)


@pytest.mark.parametrize(
    "switch",
    [
        {"spurious_429_rate": 0.5, "retry_after": "positive"},
        {"spurious_429_rate": 0.5, "retry_after": "zero"},
        {"spurious_429_rate": 0.5, "retry_after": "absent"},
        {"error_rate": 0.5},
        {"drop_rate": 0.5},
        {"truncate_rate": 0.5},
        {"malformed_rate": 0.5},
    ],
    ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()),
)
def test_transient_faults_are_retried_and_pages_complete(switch):
    emu = start_emulator("1234", faults=Faults(seed=3, **switch))
    clean = start_emulator("1234")
    try:
        stats = RequestStats()
        got = [
            r.requestId
            for p in make(emu.url).iter_v2_pages(1234, query(emu), stats)
            for r in p.data
        ]
        want = [
            r.requestId for p in make(clean.url).iter_v2_pages(1234, query(clean)) for r in p.data
        ]
        assert got == want and len(want) > 100
        assert stats.retries > 0
        if "spurious_429_rate" in switch:
            assert stats.rate_limited > 0
    finally:
        emu.stop()
        clean.stop()


def test_retry_after_zero_does_not_spin():
    """Retry-After: 0 falls back to our own backoff instead of retrying instantly."""
    from cdnlake.client.retry import RetryPolicy

    policy = RetryPolicy(base_delay=0.5)
    assert policy.delay(1, 0.0) >= 0.125
    assert policy.delay(1, None) >= 0.125
    assert policy.delay(3, 2.0) == 2.0


def test_hundred_back_to_back_requests_draw_no_429():
    """100 requests, 4 threads, one zone, a tight window: the budget keeps us inside it."""
    emu = start_emulator("1234", rate=(30, 1.0))
    try:
        client = make(emu.url, limit=30, window=1.0)
        stats = RequestStats()
        q = V2Query(limit=1)

        def worker() -> None:
            for _ in range(25):
                client.query_v2(1234, q, stats)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert stats.requests == 100
        assert stats.rate_limited == 0
        assert emu.counters[1234].rate_limited == 0
        assert emu.counters[1234].requests == 100
    finally:
        emu.stop()


@pytest.mark.slow
def test_real_limit_thirty_per_ten_seconds_v1_and_v2_together(tmp_path):
    """35 calls at the contract's own limit, mixing v1 and v2: no 429, and it waited."""
    import time

    emu = start_emulator("1234", rate=(30, 10.0))
    try:
        client = make(emu.url)
        stats = RequestStats()
        started = time.monotonic()
        for i in range(35):
            if i % 2:
                client.download_v1(1234, emu.clock.now().date(), tmp_path / "d.log", stats=stats)
            else:
                client.query_v2(1234, V2Query(limit=1), stats)
        assert time.monotonic() - started >= 10.0
        assert stats.rate_limited == 0 and emu.counters[1234].rate_limited == 0
    finally:
        emu.stop()


def test_emulator_enforces_the_limit_without_a_budget():
    """Sanity check of the emulator itself: an unbudgeted burst does draw 429s."""
    import httpx

    emu = start_emulator("1234", rate=(5, 10.0))
    try:
        codes = [
            httpx.get(f"{emu.url}/v2/pullzones/1234/logs", headers={"AccessKey": KEY}).status_code
            for _ in range(8)
        ]
        assert codes[:5] == [200] * 5 and codes[5:] == [429] * 3
        r = httpx.get(f"{emu.url}/v2/pullzones/1234/logs", headers={"AccessKey": KEY})
        assert r.json()["error"]["code"] == "rate_limited"
        assert int(r.headers["Retry-After"]) >= 1
    finally:
        emu.stop()
