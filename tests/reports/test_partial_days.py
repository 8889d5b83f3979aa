"""Which days of a report cover less than the whole day (issue 31: "requests -97.5 %" for
a day still running, and the first retained day taken for a whole one)."""

from __future__ import annotations

from datetime import UTC, date, datetime

from cdnlake.reports.partial import partial_days

NOW = datetime(2026, 11, 24, 9, 30, tzinfo=UTC)


def test_today_is_partial_and_says_how_far_it_reaches():
    marks = [datetime(2026, 11, 24, 9, 25, tzinfo=UTC), datetime(2026, 11, 24, 9, 20, tzinfo=UTC)]
    got = partial_days([], (date(2026, 11, 23), date(2026, 11, 24)), NOW, marks)
    assert got == {date(2026, 11, 24): "the day is still running, figures up to 09:20 UTC"}
    assert partial_days([], (date(2026, 11, 22), date(2026, 11, 23)), NOW, marks) == {}


def test_a_first_day_is_partial_only_when_its_first_window_began_after_midnight():
    runs = [
        (1, datetime(2026, 11, 21, 14, 5, tzinfo=UTC)),  # retention cut the morning off
        (2, datetime(2026, 11, 20, 0, 0, 3, tzinfo=UTC)),  # a day file from its first line
        (3, None),  # runs that never got a window
    ]
    got = partial_days(runs, (date(2026, 11, 20), date(2026, 11, 22)), NOW)
    assert got == {date(2026, 11, 21): "the lake holds zone 1 from 14:05 UTC on"}
    assert partial_days(runs, (date(2026, 11, 22), date(2026, 11, 23)), NOW) == {}
