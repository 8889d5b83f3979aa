"""A bookkeeping table's rows are deleted through its committer (review finding 13): a
delete that meets a concurrent MERGE of the same table (a daemon recording rejected lines
of the zone at that moment) is tried again on the table as it is then, as a MERGE is,
instead of failing the erasure after its requests were rewritten."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import polars as pl
from deltalake import DeltaTable

from cdnlake.lake.log.schema import REJECTED_LINES
from cdnlake.lake.log.table import Merge
from cdnlake.lake.personal.forget import Target, forget
from cdnlake.lake.zone.bookkeeping import rejects_frame
from cdnlake.lake.zone.session import LakeSession
from tests.lake.test_forget import ADDRESS, OTHER, START, config_at, seed, table_rows
from tests.sessions import session_for


def rejected_line(zone: int, n: int) -> pl.DataFrame:
    raw = f"HIT|200|bad-time|321|{zone}|{OTHER}|-|https://cdn.example/y{n}|FR|-|rid-{n}|FR"
    frame = pl.DataFrame(
        {
            "line_number": [n],
            "reason": ["bad timestamp"],
            "kind": ["bad timestamp"],
            "raw_line": [raw],
            "request_id": [None],
        },
        schema={
            "line_number": pl.Int64,
            "reason": pl.String,
            "kind": pl.String,
            "raw_line": pl.String,
            "request_id": pl.String,
        },
    )
    return rejects_frame(
        zone, frame, source="v1-file", file="other.log", rejected_at=START, run_id=f"run-{n}"
    )


def relabel(daemon: LakeSession) -> None:
    """The daemon's MERGE of zone 7's rejected lines that updates those it matches (as
    apply-privacy's does): it rewrites their file, and adds a line of its own."""
    seeded = table_rows(daemon, REJECTED_LINES).filter(pl.col("zone") == 7)
    rows = pl.concat(
        [seeded.with_columns(pl.lit("relabelled").alias("reason")), rejected_line(7, 50)],
        how="diagonal_relaxed",
    ).select(seeded.columns)
    merge = Merge(lambda: rows, "t.record_key = s.record_key", [7], update={"reason": "s.reason"})
    daemon.merge_table(REJECTED_LINES).committer.run(merge, patient=False)


def merge_lands_first(session: LakeSession, daemon: LakeSession, monkeypatch) -> list[int]:
    """The next time ``session`` brings ``rejected_lines`` up to date for a change, the
    ``daemon``'s MERGE of zone 7's rejected lines lands right after: the change's snapshot
    is one version behind when it commits, and the file it rewrites is gone. The versions
    that MERGE landed at."""
    table = session.merge_table(REJECTED_LINES)
    original = table.current
    landed: list[int] = []

    @contextmanager
    def current() -> Iterator[DeltaTable]:
        with original() as delta:
            if not landed:
                relabel(daemon)
                landed.append(daemon.lake.open(REJECTED_LINES).version())  # type: ignore[union-attr]
            yield delta

    monkeypatch.setattr(table, "current", current)
    return landed


def test_forget_deletes_its_rejected_lines_beside_a_concurrent_merge(tmp_path, monkeypatch):
    config = config_at(tmp_path)
    with session_for(config) as session, session_for(config) as daemon:
        seed(session)
        landed = merge_lands_first(session, daemon, monkeypatch)
        report = forget(session, Target(ip=ADDRESS), datetime.now(UTC))
        assert landed, "the concurrent MERGE did not run"
        assert report.rejected == 1
        rows = table_rows(session, REJECTED_LINES)
        assert not any(ADDRESS in line for line in rows["raw_line"].to_list())
        assert rows.height == 2  # the other seeded line, and the daemon's, both kept
        assert any("y50" in line for line in rows["raw_line"].to_list())
