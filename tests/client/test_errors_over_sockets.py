"""Every auth and error case of the logging API maps to its error class (real sockets)."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest

from cdnlake.client import ApiClient, LoggingClient, V2Query
from cdnlake.config import ApiConfig, Secret
from cdnlake.errors import (
    ForbiddenError,
    InvalidRequestError,
    LoggingDisabledError,
    RateLimitedError,
    ServerError,
    TerminalError,
    TransientError,
    TransportError,
    UnauthorizedError,
)
from tests.conftest import FAST_RETRY, KEY, start_emulator


def client_for(url: str, key: str | None = KEY, **kwargs: object) -> LoggingClient:
    api = ApiConfig(logging_url=url, access_key=Secret(key) if key else None, timeout_seconds=2)
    return LoggingClient(ApiClient(api, retry=kwargs.pop("retry", FAST_RETRY), **kwargs))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def emu():
    emulator = start_emulator("1234,1240:disabled,1241:suspended")
    yield emulator
    emulator.stop()


def recent(emu, **kwargs):
    now = emu.clock.now()
    return V2Query(from_=now - timedelta(hours=1), to=now - timedelta(minutes=5), **kwargs)


def test_no_credential_is_unauthorized(emu):
    with pytest.raises(UnauthorizedError) as info:
        client_for(emu.url, key=None).query_v2(1234, recent(emu))
    assert info.value.status == 401 and info.value.code == "unauthorized"
    assert isinstance(info.value, TerminalError)


def test_wrong_key_is_forbidden_and_never_echoed(emu):
    with pytest.raises(ForbiddenError) as info:
        client_for(emu.url, key="not-the-key-s3cret").query_v2(1234, recent(emu))
    assert info.value.status == 403
    assert "s3cret" not in str(info.value) and "s3cret" not in repr(info.value.__dict__)


def test_bearer_token_is_accepted(emu):
    api = ApiConfig(logging_url=emu.url, bearer_token=Secret(KEY))
    page = LoggingClient(ApiClient(api, retry=FAST_RETRY)).query_v2(1234, recent(emu))
    assert page.pagination.returned == len(page.records) > 0


def test_suspended_zone_is_forbidden(emu):
    with pytest.raises(ForbiddenError):
        client_for(emu.url).query_v2(1241, recent(emu))


def test_disabled_zone_is_logging_disabled(emu):
    with pytest.raises(LoggingDisabledError) as info:
        client_for(emu.url).query_v2(1240, recent(emu))
    assert info.value.status == 404 and info.value.code == "logging_disabled"


def test_past_retention_is_invalid_request_and_not_retried(emu):
    client = client_for(emu.url)
    now = emu.clock.now()
    before = emu.counters[1234].requests
    with pytest.raises(InvalidRequestError) as info:
        client.query_v2(1234, V2Query(from_=now - timedelta(hours=73), to=now))
    assert info.value.code == "invalid_request"
    assert (
        "GET " in info.value.request_line and "/v2/pullzones/1234/logs" in info.value.request_line
    )
    assert emu.counters[1234].requests == before + 1  # terminal: exactly one attempt


def test_bad_parameter_is_invalid_request(emu):
    client = client_for(emu.url)
    with pytest.raises(InvalidRequestError):
        client.query_v2(1234, recent(emu, status=["abc"]))


def test_client_checks_limits_before_sending(emu):
    from cdnlake.errors import RequestValidationError

    with pytest.raises(RequestValidationError, match="limit"):
        client_for(emu.url).query_v2(1234, recent(emu, limit=10_001))


def test_persistent_500_gives_server_error_after_retries(emu):
    emu.faults.update({"error_rate": 1.0})
    try:
        with pytest.raises(ServerError) as info:
            client_for(emu.url).query_v2(1234, recent(emu))
    finally:
        emu.faults.update({"error_rate": 0.0})
    assert isinstance(info.value, TransientError) and info.value.status == 500


def test_persistent_429_gives_rate_limited(emu):
    emu.faults.update({"spurious_429_rate": 1.0, "retry_after": "zero"})
    try:
        with pytest.raises(RateLimitedError):
            client_for(emu.url).query_v2(1234, recent(emu))
    finally:
        emu.faults.update({"spurious_429_rate": 0.0, "retry_after": "mixed"})


def test_connection_refused_is_transport_error():
    client = client_for("http://127.0.0.1:9", retry=dataclasses.replace(FAST_RETRY, max_attempts=2))
    with pytest.raises(TransportError):
        client.query_v2(1234, V2Query())


def test_slow_answer_times_out_as_transport_error(emu):
    emu.faults.update({"slow_rate": 1.0, "slow_seconds": 3.0})
    try:
        client = client_for(emu.url, retry=dataclasses.replace(FAST_RETRY, max_attempts=1))
        started = time.monotonic()
        with pytest.raises(TransportError, match="timed out"):
            client.query_v2(1234, recent(emu))
        assert time.monotonic() - started < 3.0
    finally:
        emu.faults.update({"slow_rate": 0.0})
