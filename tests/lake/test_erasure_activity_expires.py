"""An erasure's activity expires, the erasure does not (review 3, finding 5): ``maintain``
removes from ``erasures`` the hours (``hours_removed``) and days it removed requests from
that are older than ``[retention] bookkeeping_days``; the row stays and still holds the
erased client's rows back, and the audit of a recent day still explains its erased hours.
Through the command line against the loopback emulator; old rows come by ``import-v1``.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from cdnlake.lake.log.progress import to_ms
from cdnlake.lake.upkeep.expire import _hours_from
from tests.conftest import lake_frame, load_test_config, run_cli, start_emulator
from tests.lake.test_erasure_holds import ZONE, busiest, cli, config, held_back

BOOKKEEPING_DAYS = 3


def sql(path: Path, query: str) -> list[dict[str, Any]]:
    done = run_cli("--config", str(path), "sql", "--format", "json", query)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def v1_lines(address: str, day: date) -> list[str]:
    """Eight v1 lines of ``day`` at 10:00, every other one from ``address``."""
    start = to_ms(datetime(day.year, day.month, day.day, 10, tzinfo=UTC))
    return [
        f"MISS|200|{start + i * 1000}|512|{ZONE}|{address if i % 2 else f'198.51.100.{i + 1}'}|-|"
        f"https://h/{i}|WA|curl/8|{i:032x}|DE"
        for i in range(8)
    ]


def test_maintain_expires_an_erasures_old_hours_and_it_still_holds(tmp_path):
    emu = start_emulator(f"{ZONE}:fullip", rpm=1, now=None, frozen=False)
    try:
        retention = f"[retention]\nbookkeeping_days = {BOOKKEEPING_DAYS}"
        path = config(tmp_path, emu, f'ip = "keep"\n{retention}')
        cli(path, "ingest")
        today = datetime.now(UTC).date()
        recent = (datetime.now(UTC) - timedelta(minutes=10)).date() - timedelta(days=1)
        start = datetime(recent.year, recent.month, recent.day, tzinfo=UTC)
        address, _ids = busiest(emu, ZONE, start, start + timedelta(days=1))
        old = today - timedelta(days=10)
        source = tmp_path / "old.log"
        source.write_text("\n".join(v1_lines(address, old)) + "\n")
        cli(path, "import-v1", str(source), "--zone", str(ZONE))

        cli(path, "forget", "--ip", address)
        (before,) = sql(path, "SELECT * FROM erasures")
        hours = json.loads(before["hours_removed"])[str(ZONE)]
        assert hours[f"{old}T10"] == 4
        kept = {h: n for h, n in hours.items() if h >= f"{today - timedelta(BOOKKEEPING_DAYS)}"}
        on_recent = {h: n for h, n in kept.items() if h.startswith(str(recent))}
        assert on_recent, hours
        assert str(old) in before["days"].split(",")

        cli(path, "maintain")
        (after,) = sql(path, "SELECT * FROM erasures")
        assert json.loads(after["hours_removed"]) == {str(ZONE): kept}
        assert str(old) not in after["days"].split(",") and str(recent) in after["days"]
        same = ("erasure_id", "filter", "from_day", "to_day", "requests_removed")
        assert {c: after[c] for c in same} == {c: before[c] for c in same}

        # the erasure still holds back the old rows (hours gone) and the recent ones
        out = cli(path, "import-v1", str(source), "--zone", str(ZONE))
        assert held_back(out) == 4, out
        reread = [
            "--from",
            f"{start:%Y-%m-%dT%H:%MZ}",
            "--to",
            f"{start + timedelta(1):%Y-%m-%dT%H:%MZ}",
        ]
        out = cli(path, "ingest", "--zone", str(ZONE), *reread)
        assert held_back(out) == sum(on_recent.values()), out
        rows = lake_frame(load_test_config(path))
        assert rows.filter(pl.col("remote_ip") == address).height == 0

        # the audit of the recent day explains the erased hours
        done = run_cli("--config", str(path), "audit", "--format", "json", "--date", str(recent))
        assert done.returncode == 0, done.stdout + done.stderr
        audited = json.loads(done.stdout)
        assert {row["verdict"] for row in audited} == {"ok"}, done.stdout
        erased = {
            row["hour"][:13]: row["erased_requests"] for row in audited if row["erased_requests"]
        }
        assert erased == on_recent, erased
    finally:
        emu.stop()


def test_hours_of_zones_not_maintained_are_left():
    text = '{"7":{"2026-11-01T10":2,"2026-11-20T03":1},"8":{"2026-11-01T11":5}}'
    first = date(2026, 11, 10)
    assert _hours_from(text, first, None) == '{"7":{"2026-11-20T03":1}}'
    assert _hours_from(text, first, [8]) == '{"7":{"2026-11-01T10":2,"2026-11-20T03":1}}'
    assert _hours_from('{"7":{"2026-11-01T10":2}}', first, None) is None
    assert _hours_from(text, date(2026, 10, 1), None) == text
