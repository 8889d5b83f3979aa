"""A request an erasure covers is counted "held back (erased)" only where the lake does not
hold it, and once (issue 48, "erasures are explained, not lost"; review 3, finding 1): a
re-read's dedup decides first, so a covered request still stored counts as a duplicate,
and the audit of its hour counts it once, not in the lake and again as erased. Through the
command line against the loopback emulator (test_erasure_holds' fixtures)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from tests.conftest import lake_frame, load_test_config, run_cli
from tests.lake.test_erasure_holds import ZONE, busiest, cli, config, emulator, held_back, span

__all__ = ["emulator"]  # the fixture, imported for pytest


def counted(out: str) -> tuple[int, int, int]:
    """A re-read's new rows, duplicates dropped and requests held back (erased)."""
    found = re.search(r"(\d+) rows, (\d+) duplicates dropped", out)
    assert found is not None, out
    return int(found[1]), int(found[2]), held_back(out)


def audited(path: Path, hour: datetime) -> dict[str, object]:
    """The audit's row of ``hour`` in the zone."""
    done = run_cli("--config", str(path), "audit", "--format", "json", "--date", f"{hour:%F}")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(done.stdout)
    (row,) = [r for r in rows if r["hour"] == f"{hour:%Y-%m-%dT%H:%MZ}" and r["zone"] == ZONE]
    return row


def test_a_covered_request_still_stored_counts_as_a_duplicate(tmp_path, emulator):
    """Under ``ip = "drop"`` forget --ip removes nothing (no stored row holds an address),
    yet holds the client's requests read again by their address as received: those the
    lake holds are duplicates, not held back, and the audit counts them once."""
    path = config(tmp_path, emulator, 'ip = "drop"')
    cli(path, "ingest")
    start, end, reread = span(emulator)
    address, ids = busiest(emulator, ZONE, start, end)
    before = lake_frame(load_test_config(path))
    mine = before.filter(pl.col("request_id").is_in(list(ids)))
    assert mine.height > 5, "the test has nothing to erase"
    out = cli(path, "forget", "--ip", address)
    assert "0 request(s) of that address removed" in out, out

    out = cli(path, "ingest", "--zone", str(ZONE), *reread)
    new, duplicates, held = counted(out)
    assert (new, held) == (0, 0) and duplicates > 0, out
    assert lake_frame(load_test_config(path)).height == before.height
    row = audited(path, start)
    assert row["erased_requests"] == 0, row
    assert row["lake_requests"] == row["provider_requests"] and row["verdict"] == "ok", row


def test_a_request_erased_and_read_again_twice_counts_once(tmp_path, emulator):
    """forget --request-id, then the span read again twice: the request is held back
    each time (the summary adds up: the rest are duplicates), and its hour counts it once."""
    path = config(tmp_path, emulator, 'ip = "keep"')
    cli(path, "ingest")
    start, end, reread = span(emulator)
    stored = lake_frame(load_test_config(path))
    hour = stored.filter((pl.col("ts") >= start) & (pl.col("ts") < start + timedelta(hours=1)))
    assert hour.height > 1, "the test has nothing to erase"
    request_id = str(hour["request_id"][0])
    out = cli(path, "forget", "--request-id", request_id)
    assert "1 request removed" in out, out
    in_span = stored.filter((pl.col("ts") >= start) & (pl.col("ts") <= end)).height
    for _ in range(2):
        out = cli(path, "ingest", "--zone", str(ZONE), *reread)
        new, duplicates, held = counted(out)
        assert (new, held) == (0, 1) and duplicates >= in_span - 1, out
    row = audited(path, start)
    assert row["erased_requests"] == 1, row
    assert row["lake_requests"] == row["provider_requests"] - 1 and row["verdict"] == "ok", row
