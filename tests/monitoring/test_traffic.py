"""The traffic counters count each request once, when a commit that newly stores it has
landed, whoever made the commit: the lake session tells its sink, and only then."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cdnlake.errors import FencedError
from cdnlake.lake.log.progress import rewind
from cdnlake.lake.log.schema import REQUEST_SCHEMA, REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.monitoring.traffic import TrafficCounters
from tests.lake.test_commit import BASE, rows
from tests.lake.test_group_commit import gathered

STATUSES = ["HIT", "MISS", "HIT", "BYPASS", "made-up"]
CODES = [200, 304, 404, 503, 200, 700]


def requests(first: int, n: int, source: str = "v2") -> pl.DataFrame:
    """Requests ``first`` .. of one zone, with cache statuses, codes and sizes that vary
    (one cache status and one code no provider sends)."""
    ids = range(first, first + n)
    return (
        rows(first, n, BASE + timedelta(milliseconds=first))
        .with_columns(
            pl.Series("cache_status", [STATUSES[i % len(STATUSES)] for i in ids]),
            pl.Series("status_code", [CODES[i % len(CODES)] for i in ids], pl.Int32),
            pl.Series("bytes_sent", [100 + i for i in ids], pl.Int64),
            pl.lit(source).alias("source"),
        )
        .select(list(REQUEST_SCHEMA))
    )


def exported(counters: TrafficCounters) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """What /metrics shows of the counters: sample name -> {labels: value}."""
    registry = CollectorRegistry()
    registry.register(counters)
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def expected(frame: pl.DataFrame) -> tuple[dict, dict]:
    """The counters' samples computed from the lake's own rows, per zone."""
    klass = (
        pl.when(pl.col("status_code").is_between(100, 599))
        .then((pl.col("status_code") // 100).cast(pl.String) + "xx")
        .otherwise(pl.lit("other"))
    )
    cache = (
        pl.when(pl.col("cache_status") == "made-up")
        .then(pl.lit("other"))
        .otherwise(pl.col("cache_status"))
    )
    frame = frame.with_columns(
        pl.col("pull_zone_id").cast(pl.String).alias("zone"),
        cache.alias("cache_status"),
        klass.alias("status_class"),
    )
    by_class = frame.group_by("zone", "source", "cache_status", "status_class").len()
    by_cache = frame.group_by("zone", "source", "cache_status").agg(pl.col("bytes_sent").sum())
    requests = {
        (("cache_status", c), ("source", s), ("status_class", k), ("zone", z)): float(n)
        for z, s, c, k, n in by_class.iter_rows()
    }
    sent = {
        (("cache_status", c), ("source", s), ("zone", z)): float(n)
        for z, s, c, n in by_cache.iter_rows()
    }
    return requests, sent


def lake_rows(lake: Lake) -> pl.DataFrame:
    table = lake.open(REQUESTS)
    assert table is not None
    frame = pl.from_arrow(table.to_pyarrow_table())
    assert isinstance(frame, pl.DataFrame)
    return frame


def total(counters: TrafficCounters) -> int:
    return sum(counters.counts()[0].values())


def test_a_commit_sent_back_counts_only_what_it_stored_when_it_landed(tmp_path):
    uri = str(tmp_path / "lake")
    ours, theirs = TrafficCounters(), TrafficCounters()
    mine = ZoneWriter(LakeSession(Lake(uri, {}), traffic=ours), REQUESTS, 1)
    assert mine.commit(requests(0, 30), {}).new == 30
    assert mine.commit(requests(20, 30), {}).new == 20  # 10 read again: not counted
    assert total(ours) == 50
    # Another process's writer on the zone commits 40..69 while our share of 45..79 waits
    # in the committer: ours goes back and is prepared again, storing only 70..79.
    other = ZoneWriter(LakeSession(Lake(uri, {}), traffic=theirs), REQUESTS, 1)
    with gathered(mine.table, 1, lambda: other.commit(requests(40, 30, "forwarded"), {})):
        assert mine.commit(requests(45, 35), {}).new == 10
    assert (total(ours), total(theirs)) == (60, 20)
    # Progress alone and a rewind store nothing; a fenced commit lands nothing.
    mine.commit(mine.empty(), {"": 1})
    rewind(other, BASE)
    with pytest.raises(FencedError):
        mine.commit(requests(80, 5), {})
    assert (total(ours), total(theirs)) == (60, 20)
    # Each process exports what it stored; together, exactly the lake, label by label.
    frame = lake_rows(Lake(uri, {}))
    assert frame.height == 80
    want_requests, want_bytes = expected(frame)
    got = [exported(ours), exported(theirs)]
    summed: dict[str, dict] = {}
    for samples in got:
        for name, values in samples.items():
            for labels, value in values.items():
                summed.setdefault(name, {}).setdefault(labels, 0.0)
                summed[name][labels] += value
    assert summed["cdnlake_requests_total"] == want_requests
    assert summed["cdnlake_bytes_sent_total"] == want_bytes
    assert {dict(k)["source"] for k in got[1]["cdnlake_requests_total"]} == {"forwarded"}
    classes = {dict(k)["status_class"] for k in summed["cdnlake_requests_total"]}
    assert classes == {"2xx", "3xx", "4xx", "5xx", "other"}


def test_a_session_without_a_sink_and_a_failing_sink_leave_commits_alone(tmp_path, caplog):
    uri = str(tmp_path / "lake")
    plain = ZoneWriter(LakeSession(Lake(uri, {})), REQUESTS, 1)
    assert plain.commit(requests(0, 5), {}).new == 5

    class Broken:
        def stored(self, zone_id: int, rows: pl.DataFrame) -> None:
            raise RuntimeError("a counting bug")

    broken = ZoneWriter(LakeSession(Lake(uri, {}), traffic=Broken()), REQUESTS, 1)
    assert broken.commit(requests(5, 5), {}).new == 5  # landed: the commit says so
    assert "5 stored requests not counted" in caplog.text
    assert lake_rows(Lake(uri, {})).height == 10


def test_the_daemons_counters_export_each_zones_series_at_zero_before_its_first_request(
    tmp_path,
):
    # Prometheus takes a series' first sample as its start: a series born with a commit's
    # count would never count that commit (a short outage stored by one pass would not show).
    from cdnlake.cli.daemon_cmd import traffic_counters
    from cdnlake.config import load_config

    path = tmp_path / "config.toml"
    path.write_text(
        f'[storage]\nroot = "{tmp_path / "lake"}"\n'
        '[metrics]\nlisten = "127.0.0.1:9108"\n'
        '[forwarding]\nlisten = "127.0.0.1:6514"\n'
        '[[zones]]\nid = 1\n[[zones]]\nid = 2\nsource = "v1"\n'
    )
    counters = traffic_counters(load_config(path, env={}))
    assert counters is not None
    before = exported(counters)["cdnlake_requests_total"]
    assert set(before.values()) == {0.0}
    five = {
        (dict(k)["zone"], dict(k)["source"]) for k in before if dict(k)["status_class"] == "5xx"
    }
    assert five == {("1", "v2"), ("1", "forwarded"), ("2", "v1"), ("2", "forwarded")}
    sent = exported(counters)["cdnlake_bytes_sent_total"]
    assert (("cache_status", "MISS"), ("source", "v2"), ("zone", "1")) in sent
    # The zone's first 5xx moves a series Prometheus already holds at zero.
    uri = str(tmp_path / "lake")
    writer = ZoneWriter(LakeSession(Lake(uri, {}), traffic=counters), REQUESTS, 1)
    writer.commit(requests(3, 1), {})  # one BYPASS 503
    key = (("cache_status", "BYPASS"), ("source", "v2"), ("status_class", "5xx"), ("zone", "1"))
    assert before[key] == 0.0
    assert exported(counters)["cdnlake_requests_total"][key] == 1.0


def test_a_group_of_zones_counts_each_zone_once_when_one_is_sent_back(tmp_path):
    # The forwarding receiver's flush: several zones in one commit_together; another
    # process commits to one of them meanwhile, so its share goes back and is prepared
    # again: it counts what it stored when it landed, the other zone counts once.
    from cdnlake.lake.zone.writer import commit_together

    uri = str(tmp_path / "lake")
    ours, theirs = TrafficCounters(), TrafficCounters()
    session = LakeSession(Lake(uri, {}), traffic=ours)
    one, two = ZoneWriter(session, REQUESTS, 1), ZoneWriter(session, REQUESTS, 2)
    other = ZoneWriter(LakeSession(Lake(uri, {}), traffic=theirs), REQUESTS, 1)
    with gathered(one.table, 2, lambda: other.commit(requests(0, 10), {})):
        first, second = commit_together(
            [(one, requests(5, 10, "forwarded")), (two, requests(0, 7, "forwarded"))]
        )
    assert not isinstance(first, Exception) and not isinstance(second, Exception)
    assert (first.new, second.new) == (5, 7)
    counted = {
        zone: sum(n for key, n in ours.counts()[0].items() if key[0] == zone) for zone in "12"
    }
    assert counted == {"1": 5, "2": 7}
    assert total(theirs) == 10
    assert lake_rows(Lake(uri, {})).height == 22


def test_the_newest_row_age_gauge_follows_the_lake_and_this_processs_commits(tmp_path):
    """``cdnlake_newest_row_age_seconds{zone}``: from the lake's statistics (rows another
    process stored) at the first scrape, and at once for the rows this process stores."""
    from datetime import UTC, datetime

    from cdnlake.config import build_config
    from cdnlake.monitoring.metrics import DaemonMetrics
    from cdnlake.privacy import PrivacyPolicy
    from cdnlake.status import newest_rows

    config = build_config(
        {"storage": {"root": str(tmp_path / "data")}, "zones": [{"id": 1}, {"id": 2}]},
        base_dir=tmp_path,
        env={},
    )
    policy = PrivacyPolicy.from_config(config.privacy)
    other = ZoneWriter(LakeSession.from_config(config.storage, privacy=policy), REQUESTS, 1)
    other.commit(requests(0, 10), {})  # ts BASE .. BASE + 9 ms, by another process
    counters = TrafficCounters()
    ours = LakeSession.from_config(config.storage, privacy=policy)
    metrics = DaemonMetrics(config, traffic=counters, newest=lambda: newest_rows(config, ours))

    def ages() -> dict[str, float]:
        found = exported_registry(metrics.registry).get("cdnlake_newest_row_age_seconds", {})
        return {dict(labels)["zone"]: value for labels, value in found.items()}

    want = (datetime.now(UTC) - (BASE + timedelta(milliseconds=9))).total_seconds()
    assert set(ages()) == {"1"} and abs(ages()["1"] - want) < 5
    ours = ZoneWriter(
        LakeSession.from_config(config.storage, privacy=policy, traffic=counters), REQUESTS, 2
    )
    recent = datetime.now(UTC) - timedelta(seconds=30)
    ours.commit(
        rows(0, 5, recent)
        .join(requests(0, 5).drop("ts"), on="request_id")
        .select(list(REQUEST_SCHEMA))
        .with_columns(pl.lit(2, pl.Int64).alias("pull_zone_id")),
        {},
    )
    seen = ages()  # before the lake's statistics are read again
    assert 29 <= seen["2"] < 40 and abs(seen["1"] - want) < 5


def exported_registry(registry: CollectorRegistry) -> dict[str, dict]:
    samples: dict[str, dict] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples
