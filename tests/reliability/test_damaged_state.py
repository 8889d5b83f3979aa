"""Damaged lake files: detected, set aside (never deleted), read again or recorded lost."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.upkeep.maintain import maintain
from cdnlake.retention import oldest_served
from cdnlake.warehouse.db import Warehouse
from tests.conftest import (
    NOW,
    ingest_all,
    lake_ids,
    lake_of,
    load_test_config,
    run_cli,
    start_emulator,
    truth_ids,
    write_config,
)
from tests.sessions import session_of

ingest = ingest_all


def data_files(config) -> list[tuple[str, object, object]]:
    """(path, min ts, max ts) of every data file the requests table names, oldest first."""
    table = DeltaTable(config.storage.lake_location + "/requests")
    actions = pa.table(table.get_add_actions(flatten=True))
    rows = actions.select(["path", "min.ts", "max.ts"]).to_pylist()
    return sorted(((r["path"], r["min.ts"], r["max.ts"]) for r in rows), key=lambda r: r[1])


@pytest.fixture
def emu():
    e = start_emulator("1234", rpm=20)
    yield e
    e.stop()


def test_a_truncated_file_is_set_aside_and_its_span_read_again(tmp_path, emu):
    path = write_config(tmp_path, emu, zones=[(1234, "v2")], max_window_seconds=6 * 3600)
    config = load_test_config(path)
    assert ingest(config, emu)[0].ok
    files = data_files(config)
    victim, start, _end = files[len(files) // 2]
    file = config.storage.root / "lake" / "requests" / victim
    file.write_bytes(file.read_bytes()[:100])  # a disk that lost the tail
    report = maintain(session_of(lake_of(config)), now=emu.clock.now())  # the daemon's daily check
    assert [d.path for t in report.tables for d in t.damaged] == [victim]
    kept = list((config.storage.root / "lake" / "_quarantine").rglob("*.parquet.*"))
    assert len(kept) == 1 and kept[0].stat().st_size == 100  # kept, not deleted
    assert victim not in {p for p, _, _ in data_files(config)}
    with Warehouse(config.storage).connect() as con:  # the table reads again at once
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] > 0
    result = ingest(config, emu)[0]  # the zone was rewound: the span is read again
    assert result.ok, result.error
    ids = lake_ids(config, 1234)
    assert len(ids) == len(set(ids))
    assert set(ids) == truth_ids(emu, 1234, oldest_served(NOW), NOW)
    assert result.window_from <= start


def test_a_damaged_file_in_the_window_being_written_is_met_by_ingest(tmp_path, emu):
    config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")]))
    assert ingest(config, emu)[0].ok
    newest, _, _ = data_files(config)[-1]
    file = config.storage.root / "lake" / "requests" / newest
    file.write_bytes(b"not parquet at all")
    emu.clock.advance(60)  # the next pass's stable read meets the file's rows
    result = ingest(config, emu)[0]
    assert not result.ok  # a damaged file fails the pass loudly (exit 1)...
    assert "did not decode" in (result.error or "") and "rewound" in (result.error or "")
    assert list((config.storage.root / "lake" / "_quarantine").rglob("*.parquet.*"))
    emu.clock.advance(60)
    assert ingest(config, emu)[0].ok
    ids = lake_ids(config, 1234)
    assert len(ids) == len(set(ids))
    assert set(ids) == truth_ids(emu, 1234, oldest_served(NOW), emu.clock.now())


def test_a_damaged_file_past_retention_is_a_recorded_gap(tmp_path, emu):
    path = write_config(tmp_path, emu, zones=[(1234, "v2")])
    config = load_test_config(path)
    assert ingest(config, emu)[0].ok
    oldest, _, _ = data_files(config)[0]
    (config.storage.root / "lake" / "requests" / oldest).write_bytes(b"garbage")
    # Days later (by this machine's clock the emulator's days are long past retention).
    check = run_cli("--config", str(path), "maintain", "--check-all")
    assert check.returncode == 1 and f"DAMAGED {oldest}" in check.stdout, check.stderr
    with Warehouse(config.storage).connect() as con:
        reasons = [r[0] for r in con.execute("SELECT reason FROM ingest_gaps").fetchall()]
    assert any("past retention" in r and "damaged" in r for r in reasons)


def test_a_damaged_log_is_one_line_not_a_traceback(tmp_path, emu):
    path = write_config(tmp_path, emu, zones=[(1234, "v2")])
    config = load_test_config(path)
    assert ingest(config, emu)[0].ok
    log = sorted((config.storage.root / "lake" / "requests" / "_delta_log").glob("*.json"))
    log[-1].write_text("{not json")
    result = run_cli("--config", str(path), "sql", "SELECT count(*) FROM requests")
    assert result.returncode in (1, 2) and "Traceback" not in result.stderr
    assert "requests" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_nothing_lives_only_outside_the_lake(tmp_path, emu):
    """The lake alone answers every relation: moved elsewhere, it reads the same."""
    path = write_config(tmp_path, emu, zones=[(1234, "v2")])
    config = load_test_config(path)
    assert ingest(config, emu)[0].ok
    query = "SELECT (SELECT count(*) FROM requests), (SELECT count(*) FROM ingest_runs)"
    before = run_cli("--config", str(path), "sql", query, "--format", "csv").stdout
    moved = tmp_path / "elsewhere"
    (config.storage.root / "lake").rename(moved / "lake" if moved.mkdir() is None else moved)
    elsewhere = tmp_path / "moved.toml"
    elsewhere.write_text(f'[storage]\nroot = "{moved}"\n[[zones]]\nid = 1234\n')
    after = run_cli("--config", str(elsewhere), "sql", query, "--format", "csv").stdout
    assert before == after and before.splitlines()[1] != "0,0"
    assert REQUESTS.name == "requests"
