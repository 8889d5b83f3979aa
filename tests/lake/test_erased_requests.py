"""``erased_requests`` keeps no timeline of the erased client (issue 48): each request an
erasure removed or held back is kept as the keyed hash of its id and the hour it was
made in, once; its rows expire with ``bookkeeping_days``; rows an earlier cdnlake wrote
with the raw id and instant are rewritten so by ``maintain``. The audit still counts them
per hour, and a re-read still tells them apart from duplicates.

Real Delta tables on local disk, real commits of :class:`ZoneWriter`.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import polars as pl
import pytest

from cdnlake.config import build_config
from cdnlake.errors import ConfigError
from cdnlake.lake.log.progress import WATERMARK, to_ms
from cdnlake.lake.log.schema import ERASED_REQUESTS, REQUESTS, conform
from cdnlake.lake.log.table import Merge
from cdnlake.lake.personal.forget import Target, forget
from cdnlake.lake.upkeep.maintain import maintain
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter
from tests.lake.test_forget import (
    ADDRESS,
    END,
    GONE,
    START,
    config_at,
    requests,
    seed,
    table_rows,
    with_gone,
)
from tests.sessions import session_for


def _held_back(session: LakeSession, day: date) -> dict[tuple[int, datetime], int]:
    from cdnlake.audit.run import _held_back

    return _held_back(session, [7, 8, 11], day, day)


def test_erased_requests_hold_no_request_id_and_no_instant(tmp_path):
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session)
        erased_ids = set(
            table_rows(session).filter(pl.col("remote_ip") == ADDRESS)["request_id"].to_list()
        )
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
        rows = table_rows(session, ERASED_REQUESTS)
        assert rows.height == 24 and set(rows["kind"]) == {"removed"}
        assert all(text.startswith("hmac-sha256:") for text in rows["request_id"])
        kept = {str(value) for row in rows.iter_rows() for value in row}
        assert not any(rid in text for rid in erased_ids for text in kept)
        assert rows["ts"].dt.truncate("1h").equals(rows["ts"])  # the hour, never the instant
        # Read again: held back (erased), not duplicates, and each request still once.
        again = ZoneWriter(session, REQUESTS, 7).commit(requests(7), {})
        assert (again.new, again.duplicates, again.erased) == (0, 108, 12)
        assert table_rows(session, ERASED_REQUESTS).height == 24
    with session_for(config) as later:  # a zone configured later: its rows held, counted
        written = ZoneWriter(later, REQUESTS, 11).commit(requests(11), {WATERMARK: to_ms(END)})
        assert written.erased == 12
        again = ZoneWriter(later, REQUESTS, 11).commit(requests(11), {})
        assert (again.new, again.erased) == (0, 12)
        rows = table_rows(later, ERASED_REQUESTS).filter(pl.col("zone") == 11)
        assert rows.height == 12 and set(rows["kind"]) == {"held"}
        assert all(text.startswith("hmac-sha256:") for text in rows["request_id"])
        hour = START.replace(minute=0)
        assert _held_back(later, START.date()) == {(11, hour): 12}


def test_a_held_request_id_is_hashed_in_any_case(tmp_path):
    """A request-id erasure made no key: the one that hashes what it holds back is made
    then, and the id is hashed lowercased (one row however a source spells it)."""
    config = config_at(tmp_path)
    with session_for(config) as session:
        ZoneWriter(session, REQUESTS, 7).commit(with_gone(requests(7)), {WATERMARK: to_ms(END)})
        forget(session, Target(request_id=GONE, zones=(7,)), datetime.now(UTC))
        upper = with_gone(requests(7)).with_columns(pl.col("request_id").str.to_uppercase())
        ZoneWriter(session, REQUESTS, 7).commit(upper, {})
        rows = table_rows(session, ERASED_REQUESTS)
        assert rows.height == 1 and GONE not in rows["request_id"][0].lower()


def test_no_key_to_hash_with_refuses_the_rows(tmp_path):
    """A process with no erasure key (no work folder, no hash_key_env) cannot record what
    it holds back without the raw id: it commits nothing of the zone."""
    config = config_at(tmp_path)
    with session_for(config) as session:
        ZoneWriter(session, REQUESTS, 7).commit(with_gone(requests(7)), {WATERMARK: to_ms(END)})
        forget(session, Target(request_id=GONE, zones=(7,)), datetime.now(UTC))
        lake = session.lake
    with LakeSession(lake) as keyless:
        later = END + timedelta(minutes=1)
        with pytest.raises(ConfigError) as refused:
            ZoneWriter(keyless, REQUESTS, 7).commit(
                with_gone(requests(7, START, later)), {WATERMARK: to_ms(later)}
            )
        assert "privacy.hash_key_env" in str(refused.value)
        assert table_rows(keyless).height == 119


NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)


def erased(ids: list[str], at: list[datetime], kind: str = "held") -> pl.DataFrame:
    return pl.DataFrame(
        {"request_id": ids, "ts": at}, schema={"request_id": pl.String, "ts": ERASED_TS}
    ).with_columns(pl.lit(kind).alias("kind"))


ERASED_TS = pl.Datetime("us", "UTC")


def test_erased_requests_expire_with_bookkeeping_days(tmp_path):
    raw = {"storage": {"root": str(tmp_path / "data")}, "retention": {"bookkeeping_days": 5}}
    config = build_config(raw, base_dir=tmp_path, env={})
    with session_for(config) as session:
        book = Bookkeeping(session)
        for day in (10, 20, 25):
            at = datetime(2026, 11, day, 3, 17, 5, tzinfo=UTC)
            book.record_erased(7, erased([f"{day:032x}"], [at]), "held")
        report = maintain(session, retention=config.retention, now=NOW)
        line = next(t.line() for t in report.tables if t.table == "erased_requests")
        assert "2 row(s) expired" in line
        rows = table_rows(session, ERASED_REQUESTS)
        assert rows["ts"].to_list() == [datetime(2026, 11, 25, 3, tzinfo=UTC)]


def test_maintain_rewrites_the_raw_rows_of_an_earlier_cdnlake(tmp_path):
    """Rows with the raw id and instant (as cdnlake wrote them before) become the keyed
    hash and the hour, each request once ("removed" over "held"), whatever retention
    says; the audit counts the same requests per hour."""
    config = config_at(tmp_path)
    ids = [f"{n:032x}" for n in range(4)]
    at = [datetime(2026, 11, 20, 10, 5 * n, 7, tzinfo=UTC) for n in range(4)]
    with session_for(config) as session:
        now = datetime(2026, 11, 20, 12, tzinfo=UTC)
        old = pl.concat([erased(ids[:3], at[:3]), erased(ids[3:], at[3:], "removed")])
        frame = conform(
            old.with_columns(pl.lit(7, pl.Int64).alias("zone"), pl.lit(now).alias("recorded_at")),
            ERASED_REQUESTS.schema,
        )
        table = session.merge_table(ERASED_REQUESTS)
        table.committer.run(Merge(lambda: frame, "t.request_id = s.request_id", [7]))
        # the same removed request recorded since, hashed, as "held" (read again meanwhile)
        Bookkeeping(session).record_erased(7, erased(ids[3:], at[3:]), "held")
        before = _held_back(session, date(2026, 11, 20))
        assert before == {(7, datetime(2026, 11, 20, 10, tzinfo=UTC)): 4}
        maintain(session, retention=config.retention)
        rows = table_rows(session, ERASED_REQUESTS).sort("kind")
        assert rows["kind"].to_list() == ["held"] * 3 + ["removed"]
        assert all(text.startswith("hmac-sha256:") for text in rows["request_id"])
        assert set(rows["ts"]) == {datetime(2026, 11, 20, 10, tzinfo=UTC)}
        after = _held_back(session, date(2026, 11, 20))
        assert after == {(7, datetime(2026, 11, 20, 10, tzinfo=UTC)): 3}
        assert Bookkeeping(session).hash_erased_ids() == 0  # nothing raw is left
