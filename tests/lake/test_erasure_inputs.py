"""Erasure inputs refused in one line rather than erasing the wrong thing or nothing
(review findings 3, 11, 25): a short key of ``hash_key_env``, rows hashed under a key this
process does not hold, a request id that is not the provider's."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest

from cdnlake.cli.main import main
from cdnlake.lake.log.schema import ERASURES, REJECTED_LINES
from cdnlake.lake.personal.forget import Target, forget
from cdnlake.lake.zone.bookkeeping import Bookkeeping, rejects_frame
from tests.lake.test_forget import ADDRESS, GONE, START, config_at, seed, table_rows
from tests.sessions import session_for

SHORT = "abc"


def _config_file(tmp_path, privacy: str = "") -> str:
    path = tmp_path / "config.toml"
    path.write_text(f'[storage]\nroot = "data"\n[privacy]\n{privacy}\n[[zones]]\nid = 7\n')
    return str(path)


def test_a_short_key_from_the_environment_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SHORT_KEY", SHORT)
    path = _config_file(tmp_path, 'hash_key_env = "SHORT_KEY"')
    assert main(["--config", path, "forget", "--ip", ADDRESS]) == 2
    err = capsys.readouterr().err
    assert "privacy.hash_key_env" in err and "fewer than 32" in err, err
    assert err.count("\n") == 1 and SHORT not in err and ADDRESS not in err
    with session_for(config_at(tmp_path)) as session:  # nothing recorded
        assert session.lake.open(ERASURES) is None


def test_rows_hashed_under_a_key_not_held_are_refused_not_missed(tmp_path, capsys):
    hashed = config_at(tmp_path, ip="hash", hash_key_env="CDNLAKE_TEST_KEY")
    with session_for(hashed) as session:
        seed(session, zones=(7,))
    path = _config_file(tmp_path)  # ip back to keep; hash_key_env no longer named
    assert main(["--config", path, "forget", "--ip", ADDRESS]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # (a line before it: the file key made)
    assert last.startswith("cdnlake: error: privacy.hash_key_env") and "does not hold" in last
    assert "Traceback" not in err and ADDRESS not in err
    with session_for(hashed) as session:  # nothing removed, nothing recorded
        assert table_rows(session).height == 120
        assert session.lake.open(ERASURES) is None


@pytest.mark.parametrize("given", ["1", "rid-1", GONE + "0", "x" * 32])
def test_a_request_id_not_of_the_providers_form_is_refused(tmp_path, capsys, given):
    path = _config_file(tmp_path)
    assert main(["--config", path, "forget", "--request-id", given]) == 2
    err = capsys.readouterr().err
    assert "forget --request-id: not a request id of the provider" in err
    assert err.count("\n") == 1


def test_a_request_id_matches_rejected_lines_as_a_whole_token(tmp_path, capsys):
    """Only the line naming the id goes; one holding it inside a longer token stays, now
    and when read again."""
    longer = "a" + GONE + "b"
    lines = [f"HIT|200|bad-time|321|7|{ADDRESS}|-|/x|FR|-|{rid}|FR" for rid in (GONE, longer)]

    def frame() -> pl.DataFrame:
        rejects = pl.DataFrame(
            {"line_number": [1, 2], "reason": ["bad"] * 2, "kind": ["bad timestamp"] * 2}
        ).with_columns(pl.Series("raw_line", lines), pl.lit(None, pl.String).alias("request_id"))
        return rejects_frame(
            7, rejects, source="v1-file", file="d.log", rejected_at=START, run_id="r"
        )

    config = config_at(tmp_path)
    with session_for(config) as session:
        Bookkeeping(session).record_rejects([frame()], patient=False)
        report = forget(session, Target(request_id=GONE), datetime.now(UTC))
        assert report.rejected == 1
        Bookkeeping(session).record_rejects([frame()], patient=False)  # read again
        kept = table_rows(session, REJECTED_LINES)["raw_line"].to_list()
        assert kept == [lines[1]]
