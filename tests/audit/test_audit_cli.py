"""`cdnlake audit` through the CLI against the emulator: a lost hour is found, complete
days pass, and statistics that cannot be read give one line and no verdict."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from cdnlake.emulator import Emulator, Faults
from cdnlake.emulator.state import is_bad_record
from tests.conftest import free_port, run_cli, start_emulator, write_config

ZONES = [(1234, "v2"), (1235, "v1"), (1236, "v2"), (1237, "v1")]


@dataclass
class Setup:
    emu: Emulator
    config: Path
    day: date


def audited_day() -> date:
    """Yesterday, as the audit will judge it: a day wholly behind ``lag_seconds`` (300) of
    the ingest that follows, even when the test starts just after midnight UTC (its last
    hour would still be pending then)."""
    return (datetime.now(UTC) - timedelta(minutes=10)).date() - timedelta(days=1)


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """Four zones ingested once; the logging API lost yesterday 05:00 of v2 zone 1234 and
    09:00 of v1 zone 1235, which the statistics still count."""
    day = audited_day()
    faults = Faults(lose_hours=f"1234@{day}T05,1235@{day}T09")
    emu = start_emulator("1234,1235:v1,1236,1237:v1", rpm=2, now=None, frozen=False, faults=faults)
    try:
        config = write_config(tmp_path_factory.mktemp("audit"), emu, ZONES)
        ingest = run_cli("--config", str(config), "ingest", timeout=300)
        assert ingest.returncode == 0, ingest.stdout + ingest.stderr
        yield Setup(emu, config, day)
    finally:
        emu.stop()


def audit_json(setup: Setup, *args: str) -> tuple[int, list[dict[str, object]], str]:
    r = run_cli("--config", str(setup.config), "audit", "--format", "json", *args)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else [], r.stderr


def failed(rows: list[dict[str, object]]) -> list[tuple[object, object, object]]:
    return [
        (row["zone"], row["hour"], row["verdict"])
        for row in rows
        if row["verdict"] in ("short", "missing")
    ]


def test_a_lost_hour_of_one_zone_is_found_exactly(ingested: Setup) -> None:
    code, rows, err = audit_json(ingested, "--date", str(ingested.day))
    assert code == 1, err
    assert failed(rows) == [
        (1234, f"{ingested.day}T05:00Z", "missing"),
        (1235, f"{ingested.day}T09:00Z", "missing"),
    ]
    assert len(rows) == 4 * 24
    for lost in (r for r in rows if r["verdict"] == "missing"):
        assert lost["lake_requests"] == 0 and lost["provider_requests"] == lost["difference"]
        assert isinstance(lost["provider_requests"], int) and lost["provider_requests"] > 0
        # Ingestion has read past it: only reading it again brings it back.
        assert "still serves this hour" in str(lost["advice"]), lost
    # Every other hour agrees with the provider in all four measures.
    for r in rows:
        if r["verdict"] == "ok":
            assert r["provider_requests"] == r["lake_requests"]
            assert (r["provider_4xx"], r["provider_5xx"], r["provider_bytes"]) == (
                r["lake_4xx"],
                r["lake_5xx"],
                r["lake_bytes"],
            )

    # The table names the hour and what to do about it, and exits 1 too.
    table = run_cli("--config", str(ingested.config), "audit", "--date", str(ingested.day))
    assert table.returncode == 1
    assert f"zone 1234 {ingested.day} 05:00: missing: " in table.stdout


@pytest.mark.parametrize("zone", ["1236", "1237"], ids=["v2", "v1"])
def test_a_complete_day_passes(ingested: Setup, zone: str) -> None:
    code, rows, err = audit_json(ingested, "--date", str(ingested.day), "--zone", zone)
    assert code == 0, err
    assert len(rows) == 24 and {r["verdict"] for r in rows} == {"ok"}
    assert sum(int(str(r["provider_requests"])) for r in rows) > 0


def test_the_hour_in_progress_is_pending_never_short(ingested: Setup) -> None:
    now = datetime.now(UTC)
    _, rows, _ = audit_json(ingested, "--date", str(now.date()), "--zone", "1236")
    current = f"{now:%Y-%m-%dT%H}:00Z"
    assert rows and rows[-1]["hour"] == current and rows[-1]["verdict"] == "pending"


def test_statistics_unreachable_is_one_line_and_no_verdict(ingested: Setup, tmp_path: Path) -> None:
    text = ingested.config.read_text()
    dead = f"http://127.0.0.1:{free_port()}"
    config = tmp_path / "config.toml"
    config.write_text(text.replace(f'base_url = "{ingested.emu.url}"', f'base_url = "{dead}"'))
    (tmp_path / "data").symlink_to(ingested.config.parent / "data")
    r = run_cli("--config", str(config), "audit", "--date", str(ingested.day))
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "statistics could not be read" in lines[0] and "connection refused" in lines[0]
    assert "test-key" not in r.stderr


def test_bad_usage_is_one_line_exit_2(ingested: Setup) -> None:
    for args in (
        ["--date", "2026-13-01"],
        ["--from", "2026-11-01"],
        ["--date", "2026-11-01", "--from", "2026-11-01", "--to", "2026-11-02"],
        ["--zone", "999"],
    ):
        r = run_cli("--config", str(ingested.config), "audit", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_emulator_lose_hour_flag_is_checked() -> None:
    r = run_cli("emulator", "--port", "0", "--lose-hour", "1234@2026-11-20T25")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "cdnlake: error: --lose-hour: hour 25 in '1234@2026-11-20T25' is not 00..23"
    ]


def test_date_in_the_future_is_refused(ingested: Setup) -> None:
    tomorrow = (datetime.now(UTC) + timedelta(days=2)).date()
    r = run_cli("--config", str(ingested.config), "audit", "--date", str(tomorrow))
    assert r.returncode == 2 and "in the future" in r.stderr


def test_a_lake_not_yet_ingested_is_pending_not_missing_and_says_ingest_reads_it(
    ingested: Setup, tmp_path: Path
) -> None:
    """Nothing is lost while the zone is only behind: its hours are pending, no day kept."""
    config = write_config(tmp_path, ingested.emu, ZONES)
    code, rows, _ = audit_json(Setup(ingested.emu, config, ingested.day), "--zone", "1236")
    assert code == 0
    assert len(rows) == 24 and {r["verdict"] for r in rows} == {"pending"}
    assert all("not ingested yet" in str(r["advice"]) for r in rows)
    assert not (tmp_path / "data" / "lake" / "audit_days").exists()


def spoiled_shares(emu: Emulator, zone: int, day: date, rate: float) -> dict[str, float]:
    """Per hour of ``day`` (``2026-11-20T05:00Z``), the largest share of a measure
    (requests, 4xx, 5xx, bytes) that the records the emulator serves spoiled hold: what
    the lake, which rejects them, lacks of the provider's count."""
    shares = {}
    for n in range(24):
        hour = datetime(day.year, day.month, day.day, n, tzinfo=UTC)
        start = int(hour.timestamp() * 1000)
        totals, lost = [0, 0, 0, 0], [0, 0, 0, 0]
        for record in emu.traffic.records(zone, start, start + 3_600_000):
            code = record.wire.statusCode
            measures = (1, 400 <= code <= 499, 500 <= code <= 599, record.wire.bytesSent)
            for k, value in enumerate(measures):
                totals[k] += value
                if is_bad_record(record.wire.requestId, rate):
                    lost[k] += value
        shares[f"{hour:%Y-%m-%dT%H:%MZ}"] = max(
            (gone / total for gone, total in zip(lost, totals, strict=True) if total),
            default=0.0,
        )
    return shares


def test_records_the_lake_rejected_make_hours_short_beyond_the_tolerance_only(
    tmp_path: Path,
) -> None:
    """Records served spoiled are rejected, so the lake holds a little less than the
    provider counted: short at tolerance 0, and at any tolerance exactly the hours whose
    spoiled records hold more than it of a measure. Bytes are heavy-tailed (one spoiled
    video download can be a quarter of an hour's bytes), so that share is worked out from
    the emulator's records of the day, not assumed to be the spoiled 1% of requests."""
    day = audited_day()
    rate = 0.01
    emu = start_emulator("1236", rpm=4, now=None, frozen=False, faults=Faults(bad_record_rate=rate))
    try:
        config = write_config(tmp_path, emu, [(1236, "v2")])
        ingest = run_cli("--config", str(config), "ingest", timeout=300)
        assert ingest.returncode == 0, ingest.stderr
        shares = spoiled_shares(emu, 1236, day, rate)
        base = config.read_text()

        def short_hours(tolerance: float) -> set[str]:
            config.write_text(base + f"[audit]\ntolerance = {tolerance}\n")
            code, rows, err = audit_json(Setup(emu, config, day), "--date", str(day))
            assert len(rows) == 24 and {r["verdict"] for r in rows} <= {"ok", "short"}, err
            short = {str(r["hour"]): r for r in rows if r["verdict"] == "short"}
            assert code == (1 if short else 0), err
            assert all("rejected_lines WHERE pull_zone_id = 1236" in str(r["advice"])
                       for r in short.values())  # fmt: skip
            if tolerance == 0:
                assert all(0.9 < float(str(r["ratio"])) < 1 for r in short.values())
            return set(short)

        assert short_hours(0) == {hour for hour, share in shares.items() if share > 0}
        worst, *others = sorted(set(shares.values()), reverse=True)
        assert 0 < worst < 0.9 and others, shares
        between = round((worst + others[0]) / 2, 6)  # short: the worst hour(s) alone
        assert short_hours(between) == {hour for hour, share in shares.items() if share > between}
        assert short_hours(round(worst + 0.01, 6)) == set()
    finally:
        emu.stop()


def test_audit_is_listed_and_has_help() -> None:
    assert "audit" in run_cli("--help").stdout
    r = run_cli("audit", "--help")
    assert r.returncode == 0 and "--from" in r.stdout and "verdict" in r.stdout


def test_hours_before_cdnlake_started_are_not_audited_nor_kept(ingested: Setup) -> None:
    """The first, partial day (ingestion began 3 days back) and a day years before: their
    hours before the zones' first read are 'before', never short, and no day is kept."""
    first = ingested.day - timedelta(days=2)
    code, rows, err = audit_json(ingested, "--from", str(first), "--to", str(first))
    assert code == 0, err
    before = [row for row in rows if row["verdict"] == "before"]
    assert before and all("before cdnlake started" in str(r["advice"]) for r in before)
    assert not failed(rows), failed(rows)
    assert "before cdnlake started (not audited)" in err
    code, rows, err = audit_json(ingested, "--date", "2020-01-01", "--zone", "1236")
    assert code == 0, err
    assert {row["verdict"] for row in rows} == {"before"}
    kept = run_cli(
        "--config", str(ingested.config), "sql", "--format", "json",
        "SELECT count(*) AS n FROM audit_days WHERE day IN (DATE '2020-01-01', $first)"
        .replace("$first", f"DATE '{first}'"),
    )  # fmt: skip
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout) == [{"n": 0}]
