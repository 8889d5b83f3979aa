"""The delta-rs refusals cdnlake tells apart, provoked for real on the pinned deltalake.

``lake.store.commit_refusal`` reads delta-rs's messages: a new deltalake that words them
otherwise fails here, not in a daemon that then treats a race as a failure (or the reverse).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from cdnlake.lake.store import commit_refusal


def refused(table: DeltaTable, **properties: object) -> CommitFailedError:
    with pytest.raises(CommitFailedError) as caught:
        write_deltalake(
            table,
            pa.table({"a": [9]}),
            mode="append",
            commit_properties=CommitProperties(**properties),  # type: ignore[arg-type]
        )
    return caught.value


def two_handles(tmp_path):  # type: ignore[no-untyped-def]
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"a": [1]}))
    return DeltaTable(uri), DeltaTable(uri)


def test_retries_run_out_behind_unrelated_commits_is_outpaced(tmp_path):
    first, stale = two_handles(tmp_path)
    write_deltalake(first, pa.table({"a": [2]}), mode="append")
    exc = refused(stale, max_commit_retries=0)
    assert commit_refusal(exc) == "outpaced", str(exc)


def test_a_commit_naming_an_app_id_another_just_set_is_a_conflict(tmp_path):
    first, stale = two_handles(tmp_path)
    write_deltalake(
        first,
        pa.table({"a": [2]}),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction("zone", 1)]),
    )
    exc = refused(stale, app_transactions=[Transaction("zone", 2)])
    assert commit_refusal(exc) == "conflict", str(exc)


def test_a_changed_schema_is_a_conflict(tmp_path):
    """As when a newer cdnlake adds a column to a bookkeeping table beside running writers."""
    first, stale = two_handles(tmp_path)
    write_deltalake(first, pa.table({"a": [2], "b": ["x"]}), mode="append", schema_mode="merge")
    exc = refused(stale)
    assert commit_refusal(exc) == "conflict", str(exc)


def test_anything_else_is_not_a_race():
    assert commit_refusal(CommitFailedError("Failed to commit transaction: Kernel")) == "other"


def test_a_table_object_keeps_its_snapshot_after_its_own_commit(tmp_path):
    """delta-rs leaves the object at the snapshot it committed on: the process's shared
    snapshot (``lake.shared``) learns its own group commits, like any other, by reading
    each version after the one it last read."""
    from cdnlake.lake.commit import ZoneWriter
    from cdnlake.lake.schema import REQUESTS
    from cdnlake.lake.store import Lake
    from tests.lake.test_commit import BASE, rows

    lake = Lake(str(tmp_path / "lake"), {})
    writer = ZoneWriter(lake, REQUESTS, 7)
    writer.commit(rows(0, 10, BASE), {"": 1})
    writer.table.update_incremental()
    before = writer.table.version()
    writer.table.create_write_transaction(
        [], mode="append", schema=writer.table.schema(), partition_by=REQUESTS.partition_by
    )
    assert writer.table.version() == before  # the object stays where it committed from
    assert DeltaTable(lake.table_uri(REQUESTS)).version() == before + 1
