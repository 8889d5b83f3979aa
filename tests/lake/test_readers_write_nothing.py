"""Readers write nothing (review finding 18): ``cdnlake top`` and the metrics' watermarks
follow ``requests`` through the session's state of it, but on a lake made by an older
cdnlake (a column missing) or lacking a table, neither evolves nor creates one: the
table's log folder is as it was."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from cdnlake.config import build_config
from cdnlake.lake.log.files import prepare
from cdnlake.lake.log.schema import REQUESTS, SHIELD_EVENTS
from cdnlake.lake.log.store import TABLE_CONFIGURATION
from cdnlake.status import zone_watermarks
from tests.conftest import run_cli
from tests.lake.test_commit import rows
from tests.sessions import session_for

ZONE = 7
OLD = ("asn", "asn_organization")  # columns a newer cdnlake added


def older_lake(lake: Path) -> Path:
    """A ``requests`` table without the newer columns, holding a minute of rows; its
    log folder."""
    uri = str(lake / REQUESTS.name)
    whole = pa.schema(REQUESTS.delta_schema().to_arrow())
    schema = pa.schema([f for f in whole if f.name not in OLD])
    DeltaTable.create(
        uri, schema, partition_by=REQUESTS.partition_by, configuration=TABLE_CONFIGURATION
    )
    now = datetime.now(UTC).replace(microsecond=0)
    frame = prepare(REQUESTS, ZONE, rows(0, 20, now)).drop(*OLD)
    write_deltalake(uri, frame.to_arrow().cast(schema), mode="append")
    return lake / REQUESTS.name / "_delta_log"


def listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_top_once_on_an_older_lake_writes_nothing(tmp_path):
    (tmp_path / "config.toml").write_text(
        f'[storage]\nroot = "{tmp_path / "data"}"\n[[zones]]\nid = {ZONE}\n'
    )
    log = older_lake(tmp_path / "data" / "lake")
    before = listing(log)
    r = run_cli("--config", str(tmp_path / "config.toml"), "top", "--once")
    assert "Traceback" not in r.stderr, r.stderr
    assert listing(log) == before  # no metadata commit: the columns were not added
    assert {f.name for f in DeltaTable(str(log.parent)).schema().fields}.isdisjoint(OLD)


def test_the_metrics_watermarks_create_and_evolve_nothing(tmp_path):
    raw = {
        "storage": {"root": str(tmp_path / "data")},
        "zones": [{"id": ZONE}],
        "shield_zones": [{"id": 5001}],
    }
    config = build_config(raw, base_dir=tmp_path, env={})
    log = older_lake(tmp_path / "data" / "lake")
    before = listing(log)
    with session_for(config) as session:
        assert zone_watermarks(session, config) == {}  # no zone has a watermark yet
        assert listing(log) == before
        # A writer of the same process asking for the table then makes it ready.
        session.log_table(REQUESTS)
        assert set(OLD) <= {f.name for f in DeltaTable(str(log.parent)).schema().fields}
    assert not (tmp_path / "data" / "lake" / SHIELD_EVENTS.name).exists()
