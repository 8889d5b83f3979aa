"""make bench cannot rot: every benchmark runs end to end on tiny data.

Only that they run and report a figure beside its reference is checked; how fast is for
``make bench`` on full sizes, never for a test.
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

BENCHMARKS = [
    "--help start-up",
    "import-v1 of 1,000 lines",
    "import-v1,",
    "backfill, ",
    "peak memory",
    "ingest",
    "backlog",
    "report",
    "--engine spark",
    "range report",
    "commit of 60 s of new rows on a zone",
    "counting the traffic of a commit",
    "commit of 60 s of new rows on a table",
    "status on",
    "busy zone",
    "quiet zones on one daemon: commits per poll",
    "quiet zones on one daemon for",
    "quiet zones on one daemon: its CPU",
    "quiet zones on one daemon for",  # twice the zones: the lag bound alone
    "forwarded request to queryable row",
    "forwarded rows one daemon commits",
    "forwarded JSON rows one daemon commits",
    "top: CPU of one refresh of the last 1m",
    "top: CPU of one refresh of the last 1h",
]


def test_every_benchmark_runs_on_tiny_data():
    proc = subprocess.run(
        [sys.executable, "tests/bench/bench.py", "--small"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.count(" | ") == 6]
    figures = rows[1:]  # the first row is the header
    assert len(figures) == len(BENCHMARKS), proc.stdout
    for name, figure in zip(BENCHMARKS, figures, strict=True):
        what, ours = figure[0], figure[1]
        assert name in what, (name, what)
        assert float(ours.split()[0].replace(",", "")) > 0, figure
        assert figure[5] in ("ok", "MISSED"), figure
    assert f"of {len(BENCHMARKS)} targets met" in proc.stdout
