"""The exactly-once commit rests on the S3 store honouring ``If-None-Match: *`` (review
finding 26): once per process and store, cdnlake puts a scratch object under the lake's
root twice, expects the second refused, and deletes it; a store that overwrote it gets
no write at all, refused in one line naming the store."""

from __future__ import annotations

import obstore
import pytest

from cdnlake.errors import StorageError
from cdnlake.lake.log import delta_log
from cdnlake.lake.log.delta_log import _Entries
from cdnlake.lake.log.progress import WATERMARK, to_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.zone.writer import ZoneWriter
from tests.lake.test_forget import END, config_at, requests
from tests.sessions import session_for

ZONE = 7


def probes_left(entries: _Entries) -> list[str]:
    listed = obstore.list(entries.store(), "_cdnlake/").collect()
    return [item["path"] for item in listed]


def test_moto_honours_the_precondition_and_commits_land(tmp_path, s3_server, monkeypatch):
    monkeypatch.setattr(delta_log, "_PROBED", {})
    config = config_at(tmp_path, s3_server)
    with session_for(config) as session:
        writer = ZoneWriter(session, REQUESTS, ZONE)
        writer.commit(requests(ZONE), {WATERMARK: to_ms(END)})
        assert list(delta_log._PROBED.values()) == [None]  # probed once, honoured
        writer.commit(requests(ZONE + 1), {})
        assert len(delta_log._PROBED) == 1
        assert probes_left(_Entries(session.lake, REQUESTS)) == []  # the scratch deleted
        table = session.lake.open(REQUESTS)
        assert table is not None and len(table.to_pyarrow_table()) == 240


def test_a_store_that_ignores_the_precondition_gets_no_write(tmp_path, s3_server, monkeypatch):
    """An in-process fake of such a store: every put-if-absent a plain PUT, which
    overwrites what is there."""
    monkeypatch.setattr(delta_log, "_PROBED", {})

    def overwrites(self: _Entries, name: str, data: bytes) -> bool:
        obstore.put(self.store(), name, data)
        return True

    monkeypatch.setattr(_Entries, "_put_create", overwrites)
    config = config_at(tmp_path, s3_server)
    with session_for(config) as session:
        table = session.log_table(REQUESTS)  # made by delta-rs (its own conditional PUT)
        before = table.snapshot(ZONE).version
        writer = ZoneWriter(session, REQUESTS, ZONE)
        with pytest.raises(StorageError) as refused:
            writer.commit(requests(ZONE), {WATERMARK: to_ms(END)})
        line = str(refused.value)
        assert "\n" not in line and "If-None-Match" in line, line
        assert s3_server.url in line and "bucket" in line, line
        assert table.snapshot(ZONE).version == before  # nothing landed
        with pytest.raises(StorageError):  # and refused again without a second probe
            writer.commit(requests(ZONE), {WATERMARK: to_ms(END)})
        assert probes_left(_Entries(session.lake, REQUESTS)) == []
