"""``cdnlake maintain --restore``: what was set aside comes back if it decodes, never twice."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdnlake.lake.log.progress import rewind
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.zone.damage import set_aside
from cdnlake.lake.zone.writer import ZoneWriter
from tests.conftest import (
    ingest_all,
    lake_ids,
    lake_of,
    load_test_config,
    run_cli,
    start_emulator,
    write_config,
)
from tests.sessions import session_of


@pytest.fixture
def emu():
    e = start_emulator("1234", rpm=5)
    yield e
    e.stop()


def data_files(config) -> list[tuple[str, object, int]]:
    """(path, min ts, rows) of every data file the requests table names, oldest first."""
    table = DeltaTable(config.storage.lake_location + "/requests")
    actions = pa.table(table.get_add_actions(flatten=True))
    found = actions.select(["path", "min.ts", "num_records"]).to_pylist()
    return sorted(((r["path"], r["min.ts"], r["num_records"]) for r in found), key=lambda r: r[1])


def no_rewind(*_: object) -> None:
    pass


def test_restore_puts_back_what_decodes_without_doubling_a_row(tmp_path, emu):
    path = write_config(tmp_path, emu, zones=[(1234, "v2")], max_window_seconds=6 * 3600)
    config = load_test_config(path)
    assert ingest_all(config, emu)[0].ok
    stored = set(lake_ids(config, 1234))
    files = data_files(config)
    assert len(files) >= 4
    (lost, _, lost_rows), (reread, reread_from, reread_rows) = files[1], files[-2]
    # What a refused HEAD did before: two healthy files set aside and dropped from the table.
    lake = lake_of(config)
    table = lake.open(REQUESTS)
    for victim in (lost, reread):
        # (as the old code did: no rewind first)
        set_aside(lake, REQUESTS, table, victim, "AWS Error UNKNOWN (HTTP status 503)", no_rewind)
    table.repair(dry_run=False)
    # The span of the second was read again since (the zone was rewound): its rows are back.
    rewind(ZoneWriter(session_of(lake), REQUESTS, 1234), reread_from)
    assert ingest_all(config, emu)[0].ok
    missing = len(stored - set(lake_ids(config, 1234)))  # of the first (the rewind overlaps)
    assert 0 < missing <= lost_rows
    truth = stored | set(lake_ids(config, 1234))
    quarantine = config.storage.root / "lake" / "_quarantine" / "requests"
    garbage = quarantine / "pull_zone_id=1234" / "date=2026-11-19" / "x.parquet.20261120T000000"
    garbage.write_bytes(b"not parquet at all")  # damage indeed: it stays

    first = run_cli("--config", str(path), "maintain", "--restore")
    assert first.returncode == 1, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    assert len(lines) == 3, first.stdout
    back = f"{missing} rows added, {lost_rows - missing} already"
    assert any(f"{lost}." in n and back in n for n in lines)
    assert any(f"{reread}." in n and f"0 rows added, {reread_rows} already" in n for n in lines)
    assert any(n.startswith("NOT RESTORED") and "does not decode" in n for n in lines)
    ids = lake_ids(config, 1234)
    assert len(ids) == len(set(ids)) and set(ids) == truth  # every row, once
    assert [p for p in quarantine.rglob("*") if p.is_file()] == [garbage]

    again = run_cli("--config", str(path), "maintain", "--restore")
    refused = [n for n in lines if n.startswith("NOT RESTORED")]
    assert again.returncode == 1 and again.stdout.splitlines() == refused, again.stdout
    garbage.unlink()
    done = run_cli("--config", str(path), "maintain", "--restore")
    assert done.returncode == 0 and "nothing to restore" in done.stdout, done.stdout + done.stderr
    assert sorted(lake_ids(config, 1234)) == sorted(ids)
