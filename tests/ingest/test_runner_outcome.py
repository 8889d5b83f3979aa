"""A pass's outcome is decided by what its own work raised, never by an exception its
caller happens to be handling."""

from __future__ import annotations

import threading

import pytest

from cdnlake.config import build_config
from cdnlake.errors import StorageError
from cdnlake.ingest.runner import Runner
from cdnlake.lake.zone.writer import ZoneWriter
from tests.ingest.test_passes_in_flight import START, QuietZone
from tests.sessions import session_for


def failing_commit(self: ZoneWriter, *args: object, **kwargs: object) -> object:
    raise StorageError("cannot write to the lake: the disk is full")


@pytest.mark.parametrize("inside_an_except", [False, True])
def test_a_pass_whose_only_commit_failed_has_failed(tmp_path, monkeypatch, inside_an_except):
    """Before, the runner asked ``sys.exc_info()`` in a ``finally``: called from inside an
    ``except`` block, it saw the caller's exception and took the pass's own failed commit
    for what remained of a failure elsewhere, and the pass came back ``ok``."""
    config = build_config({"storage": {"root": str(tmp_path / "data")}}, base_dir=tmp_path, env={})
    runner = Runner(config, session_for(config), clock=lambda: START)
    monkeypatch.setattr(ZoneWriter, "commit", failing_commit)
    source = QuietZone([0, 0], threading.Lock())
    if inside_an_except:
        try:
            raise KeyError("the caller's own trouble, being handled")
        except KeyError:
            result = runner.run(1, source)
    else:
        result = runner.run(1, source)
    assert result.outcome == "failed"
    assert "disk is full" in (result.error or "")
    assert result.rows == 0


def test_a_pass_whose_bookkeeping_cannot_be_read_has_failed_and_raises_nothing(
    tmp_path, monkeypatch
):
    """A burst of S3 errors while the pass opens ``ingest_runs`` used to escape the
    runner and end every zone's pass of the run (tests/reliability/test_s3_faults.py)."""
    config = build_config({"storage": {"root": str(tmp_path / "data")}}, base_dir=tmp_path, env={})
    session = session_for(config)
    runner = Runner(config, session, clock=lambda: START)

    def unreadable(spec: object) -> object:
        raise StorageError("lake table ingest_runs cannot be read: 503 SlowDown")

    monkeypatch.setattr(session, "merge_table", unreadable)
    result = runner.run(1, QuietZone([0, 0], threading.Lock()))
    assert result.outcome == "failed"
    assert "ingest_runs cannot be read" in (result.error or "")
