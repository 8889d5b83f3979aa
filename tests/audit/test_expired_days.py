"""A day ``[retention]`` removed is ``expired`` in the audit and in the reports' notes,
never ``missing`` or ``short``: its rows are gone on purpose."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from cdnlake.audit.compare import Counts, audit_hour
from cdnlake.audit.days import summarize, unkept
from cdnlake.audit.run import judge
from cdnlake.config import build_config
from cdnlake.reports.completeness import completeness, headline
from cdnlake.reports.partial import partial_days
from tests.sessions import session_for

NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)


def config_at(tmp_path, days: int):
    raw = {"storage": {"root": str(tmp_path / "data")}, "retention": {"requests_days": days}}
    return build_config(raw, base_dir=tmp_path, env={})


def test_an_expired_hour_is_never_missing(tmp_path):
    config = config_at(tmp_path, 3)
    kept_from = config.retention.first_kept(NOW)
    assert kept_from == date(2026, 11, 24)
    old = datetime(2026, 11, 20, 5, tzinfo=UTC)
    hour = audit_hour(
        7, old, Counts(100), Counts(0), tolerance=0.001, now=NOW,
        lag=timedelta(minutes=5), watermark=NOW, kept_from=kept_from,
    )  # fmt: skip
    assert hour.verdict == "expired" and not hour.failed
    assert "expired" in hour.advice
    provider = {(7, old.replace(hour=h)): Counts(100) for h in range(24)}
    hours = judge(config, [7], old.date(), old.date(), provider, {}, now=NOW, marks={7: NOW})
    assert {h.verdict for h in hours} == {"expired"}
    assert summarize(hours) == []  # not kept as a day's verdict
    assert "expired" in unkept(hours)[0][2]


def test_without_retention_the_same_hour_is_missing(tmp_path):
    config = config_at(tmp_path, 0)
    old = datetime(2026, 11, 20, tzinfo=UTC)
    provider = {(7, old + timedelta(hours=h)): Counts(100) for h in range(24)}
    hours = judge(config, [7], old.date(), old.date(), provider, {}, now=NOW, marks={7: NOW})
    assert {h.verdict for h in hours} == {"missing"}


def test_reports_say_expired(tmp_path):
    config = config_at(tmp_path, 3)
    kept_from = config.retention.first_kept(NOW)
    notes = partial_days([], (date(2026, 11, 22), date(2026, 11, 25)), NOW, [], kept_from)
    assert set(notes) == {date(2026, 11, 22), date(2026, 11, 23)}
    assert all(n.startswith("expired") for n in notes.values())
    table = completeness(config, session_for(config), date(2026, 11, 20), [7, 8], now=NOW)
    assert [r["verdict"] for r in table.records()] == ["expired", "expired"]
    assert headline(table)[0] == "expired"
