"""The verdict of a zone-hour, and the statistics body as the provider's documents give it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from cdnlake.audit.compare import Counts, audit_hour, verdict
from cdnlake.client.statistics import StatisticsModel, hourly

HOUR = datetime(2026, 11, 20, 5, tzinfo=UTC)
LATER = datetime(2026, 11, 20, 12, tzinfo=UTC)
LAG = timedelta(seconds=300)


def judge(provider: Counts, lake: Counts, now: datetime = LATER, tolerance: float = 0.001) -> str:
    return verdict(HOUR, provider, lake, tolerance=tolerance, now=now, lag=LAG, watermark=now)


def test_tolerance_is_the_share_the_lake_may_lack() -> None:
    assert judge(Counts(10_000), Counts(9_990)) == "ok"  # 0.1 % short
    assert judge(Counts(10_000), Counts(9_989)) == "short"
    assert judge(Counts(10_000), Counts(9_989), tolerance=0.01) == "ok"
    assert judge(Counts(10), Counts(0)) == "missing"
    assert judge(Counts(0), Counts(0)) == "ok"


@pytest.mark.parametrize("measure", ["errors_4xx", "errors_5xx", "bytes"])
def test_4xx_5xx_and_bytes_are_held_the_same_way(measure: str) -> None:
    provider = Counts(100, 10, 10, 1_000_000)
    values = {"requests": 100, "errors_4xx": 10, "errors_5xx": 10, "bytes": 1_000_000}
    values[measure] = values[measure] // 2
    assert judge(provider, Counts(**values)) == "short"


def test_an_hour_not_closed_or_inside_the_lag_is_pending_never_short() -> None:
    assert judge(Counts(100), Counts(0), now=HOUR + timedelta(minutes=30)) == "pending"
    assert judge(Counts(100), Counts(0), now=HOUR + timedelta(minutes=64)) == "pending"
    assert judge(Counts(100), Counts(0), now=HOUR + timedelta(minutes=66)) == "missing"


def test_an_hour_the_zones_watermark_has_not_passed_is_pending_never_short() -> None:
    # The zone is only behind (not read yet): nothing is lost, so nothing is short.
    def at(watermark: datetime | None) -> str:
        return verdict(
            HOUR, Counts(100), Counts(0), tolerance=0.001, now=LATER, lag=LAG, watermark=watermark
        )

    assert at(None) == "pending"
    assert at(HOUR) == "pending"
    assert at(HOUR + timedelta(minutes=59)) == "pending"  # inside the hour: not all of it read
    assert at(HOUR + timedelta(hours=1)) == "missing"
    found = audit_hour(
        1, HOUR, Counts(100), Counts(0), tolerance=0.001, now=LATER, lag=LAG, watermark=HOUR
    )
    assert found.verdict == "pending" and not found.failed
    assert "not ingested yet (zone 1's watermark is at 2026-11-20 05:00 UTC)" in found.advice


def test_a_short_hour_says_what_to_do_next() -> None:
    def short(now: datetime, watermark: datetime | None) -> str:
        found = audit_hour(
            1, HOUR, Counts(100), Counts(50), tolerance=0.001, now=now, lag=LAG, watermark=watermark
        )
        assert found.verdict == "short"
        return found.advice

    assert "still serves this hour until 2026-11-23 05:00" in short(LATER, LATER)
    gone = HOUR + timedelta(days=4)
    assert "past the provider's 3-day log retention" in short(gone, gone)
    ok = audit_hour(1, HOUR, Counts(1), Counts(1), tolerance=0, now=LATER, lag=LAG, watermark=LATER)
    assert ok.advice == ""


def test_chart_keys_and_cache_hit_rate_in_either_documented_form() -> None:
    body = {
        "RequestsServedChart": {
            "2026-11-20T05:00:00Z": 120.0,
            "2026-11-20T06:00:00": 80,  # no offset: UTC
            "2026-11-20T07:00:00+00:00": 5.0,
            "2026-11-21T00:00:00Z": 9.0,  # dateTo may be inclusive: outside the range
        },
        "Error4xxChart": {"2026-11-20T05:00:00Z": 3.0},
        "Error5xxChart": None,
        "BandwidthUsedChart": {"2026-11-20T05:00:00Z": 1.5e6},
        "CacheHitRate": {"2026-11-20T05:00:00Z": 70.5},
    }
    model = msgspec.json.decode(msgspec.json.encode(body), type=StatisticsModel, strict=False)
    start = datetime(2026, 11, 20, tzinfo=UTC)
    stats = hourly(model, 1234, start, start + timedelta(days=1))
    five = stats.hour(HOUR)
    assert (five.requests, five.errors_4xx, five.errors_5xx, five.bytes) == (120, 3, 0, 1_500_000)
    assert five.cache_hit_rate == 70.5
    assert stats.hour(HOUR + timedelta(hours=1)).requests == 80
    assert stats.hour(HOUR + timedelta(hours=2)).requests == 5
    assert len(stats.hours) == 3
    # CacheHitRate as the range's average (core.json) decodes too.
    plain = msgspec.json.decode(b'{"CacheHitRate": 71.2}', type=StatisticsModel)
    assert hourly(plain, 1234, start, start + timedelta(days=1)).hours == {}


@pytest.mark.parametrize(
    "chart", [{"yesterday": 1.0}, {"2026-11-20T05:00:00Z": -1.0}], ids=["key", "negative"]
)
def test_a_chart_that_is_no_count_by_instant_is_refused(chart: dict[str, float]) -> None:
    model = StatisticsModel(RequestsServedChart=chart)
    start = datetime(2026, 11, 20, tzinfo=UTC)
    with pytest.raises(ValueError):
        hourly(model, 1234, start, start + timedelta(days=1))
