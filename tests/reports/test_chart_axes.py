"""Chart axes fitted to the data: a hit ratio near 76 % is drawn as the change it is, not
as a flat line under a fixed 0-100 % axis (issue 31)."""

from __future__ import annotations

import re

import pytest

from cdnlake.reports import svg
from cdnlake.reports.html import whole_percent


@pytest.mark.parametrize(
    ("low", "high", "axis"),
    [
        (70.0, 80.0, (70.0, 80.0)),
        (74.0, 78.0, (72.0, 80.0)),
        (76.0, 76.5, (72.0, 80.0)),  # at least 5 points: noise is not drawn as a swing
        (40.0, 98.0, (20.0, 100.0)),  # never above 100 %
        (0.5, 3.0, (0.0, 8.0)),  # never below 0 for values that are not
        (0.0, 100.0, (0.0, 100.0)),
    ],
)
def test_the_axis_spans_the_values(low, high, axis):
    assert svg.nice_range(low, high, ceiling=100.0, min_span=5.0) == axis


def axis_labels(chart: str) -> list[str]:
    return re.findall(r'text-anchor="end"[^>]*>([^<]*)</text>', chart)


def test_a_hit_ratio_chart_is_fitted_and_its_points_spread():
    hours = [f"{h:02d}" for h in range(4)]
    series = [("by requests", "#1565c0", [75.0, 76.0, 77.5, 76.5]),
              ("by bytes", "#2e7d32", [78.0, 79.0, 79.5, 78.5])]  # fmt: skip
    chart = str(svg.lines(hours, series, whole_percent, "hit ratio", fit=True, ceiling=100.0))
    assert axis_labels(chart) == ["74 %", "76 %", "78 %", "80 %", "82 %"]
    ys = [float(y) for y in re.findall(r'cy="([0-9.]+)"', chart)]
    assert max(ys) - min(ys) > 0.5 * (svg.HEIGHT - svg.TOP - svg.BOTTOM)  # not flat
    fixed = str(svg.lines(hours, series, whole_percent, "error rates"))
    assert axis_labels(fixed)[0] == "0 %"  # rates still start at zero
