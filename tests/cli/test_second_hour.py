"""What a new user tripped on in the second hour (issue #49): summaries that add up, an
import of another zone's file refused up front, shield zones named rightly."""

from __future__ import annotations

import gzip
import re
import signal
from datetime import UTC, datetime

from cdnlake.cli.common import Interrupt
from cdnlake.cli.ingest_cmd import interrupted_line
from cdnlake.ingest.result import ZoneResult
from tests.cli.test_loud_cli import fixture_config, one_line_error
from tests.conftest import lake_frame, run_cli


def v1_line(zone: int, i: int) -> str:
    ms = 1_795_132_800_000 + i * 1000
    return f"HIT|200|{ms}|100|{zone}|10.0.0.0|-|https://cdn.example.com/a{i}|DE|agent|{i:032x}|DE"


def test_an_interrupted_ingest_summary_adds_up():
    """Three zones stopped before their pass completed and one not started: the line
    says so, not '0 done, 0 stopped part way, 4 with nothing new'."""
    stop = Interrupt("ingest")
    stop.signal = signal.Signals.SIGINT.name
    results = []
    for zone, rows in ((1, 0), (2, 0), (3, 5)):
        r = ZoneResult(zone_id=zone, source="v2", rows=rows)
        r.outcome, r.error, r.finished = (
            "stopped",
            "stopped before the pass completed",
            (datetime.now(UTC)),
        )
        results.append(r)
    line = interrupted_line(stop, results, 4)
    assert (
        "of 4 zone(s), 1 stopped part way (their rows kept), 2 stopped before storing "
        "anything, 1 not started; 5 new rows" in line
    ), line
    counts = [int(n) for n in re.findall(r"(\d+) (?:done|stopped|failed|skipped|not)", line)]
    assert sum(counts) == 4, line
    running = ZoneResult(zone_id=9, source="v2")  # abandoned mid-pass: not "done"
    assert "of 1 zone(s), 1 stopped before storing anything" in interrupted_line(stop, [running], 1)


def test_import_v1_refuses_a_file_of_another_zone_up_front(tmp_path):
    cfg = fixture_config(tmp_path)
    other = tmp_path / "day1236.log.gz"
    other.write_bytes(gzip.compress("".join(v1_line(2, i) + "\n" for i in range(50)).encode()))
    before = lake_frame(tmp_path / "root", "rejected_lines").height
    result = run_cli("--config", str(cfg), "import-v1", "--zone", "1", str(other))
    one_line_error(
        result,
        f"import-v1: {other} holds the logs of pull zone 2 (50 of its first lines), not of "
        "zone 1: give --zone 2",
    )
    assert lake_frame(tmp_path / "root", "rejected_lines").height == before  # nothing stored
    empty = tmp_path / "empty.log"
    empty.write_text("\n\n")
    said = run_cli("--config", str(cfg), "import-v1", "--zone", "1", str(empty))
    assert said.returncode == 0, said.stderr
    assert "the file holds no log line: nothing to import" in said.stdout, said.stdout


def test_audit_of_a_shield_zone_says_it_is_one(tmp_path):
    cfg = fixture_config(tmp_path)
    result = run_cli("--config", str(cfg), "audit", "--zone", "5001")
    one_line_error(result, "5001 is a shield zone ([[shield_zones]])")
    assert "not configured" not in result.stderr
