"""``cdnlake forget``: the rows of an address (or a request id) leave the lake by a fenced
rewrite of the files holding them, the erasure is recorded with the address as a keyed
hash, and no later commit of the zone (a re-read, another process, a pass in flight while
the erasure lands) stores them again.

Real Delta tables (on local disk and in moto's S3), real commits of :class:`ZoneWriter`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs
import pytest

from cdnlake.cli.main import main
from cdnlake.config import Config, build_config
from cdnlake.lake.log.progress import WATERMARK, to_ms
from cdnlake.lake.log.schema import ERASURES, REJECTED_LINES, REQUESTS
from cdnlake.lake.personal.forget import Target, forget, leaves_storage
from cdnlake.lake.zone.bookkeeping import Bookkeeping, rejects_frame
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.privacy import PrivacyPolicy
from tests.conftest import s3_lake_lines
from tests.lake.test_fencing import provider, watermark
from tests.sessions import session_for

ADDRESS = "203.0.113.7"
OTHER = "198.51.100.1"
START = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
END = START + timedelta(minutes=2)


def config_at(root: Path, s3=None, **privacy: object) -> Config:
    storage: dict[str, object] = {"root": str(root / "data")}
    if s3 is not None:
        lines = s3_lake_lines(s3)
        storage["lake_uri"] = lines[0].split('"')[1]
        storage["s3"] = {"endpoint_url": s3.url, "allow_http": True}
    raw = {"storage": storage, "privacy": privacy}
    env = {"CDNLAKE_TEST_KEY": "k" * 32} if privacy.get("hash_key_env") else {}
    return build_config(raw, base_dir=root, env=env)


def requests(zone: int, start: datetime = START, end: datetime = END) -> pl.DataFrame:
    """The provider's records, one a second; every tenth from ADDRESS, with a token."""
    frame = provider(zone, start, end)
    tenth = pl.int_range(pl.len()) % 10 == 0
    return frame.with_columns(
        pl.when(tenth).then(pl.lit(ADDRESS)).otherwise(pl.lit(OTHER)).alias("remote_ip"),
        pl.lit("https://cdn.example/a.js").alias("url"),
    )


def table_rows(session: LakeSession, spec=REQUESTS) -> pl.DataFrame:
    table = session.lake.open(spec)
    assert table is not None
    frame = pl.from_arrow(table.to_pyarrow_table())
    assert isinstance(frame, pl.DataFrame)
    return frame


def seed(session: LakeSession, zones=(7, 8)) -> None:
    for zone in zones:
        ZoneWriter(session, REQUESTS, zone).commit(requests(zone), {WATERMARK: to_ms(END)})
    raw = f"HIT|200|bad-time|321|7|{ADDRESS}|-|https://cdn.example/x|FR|-|rid-1|FR"
    rejects = pl.DataFrame(
        {"line_number": [1, 2], "reason": ["bad timestamp"] * 2, "kind": ["bad timestamp"] * 2},
        schema={"line_number": pl.Int64, "reason": pl.String, "kind": pl.String},
    ).with_columns(
        pl.Series("raw_line", [raw, raw.replace(ADDRESS, OTHER)]),
        pl.lit(None, pl.String).alias("request_id"),
    )
    frame = rejects_frame(
        7, rejects, source="v1-file", file="day.log", rejected_at=START, run_id="run-1"
    )
    Bookkeeping(session).record_rejects([frame], patient=False)


def test_forget_an_address_rewrites_records_and_nothing_comes_back(tmp_path, lake_kind, request):
    s3 = request.getfixturevalue("s3_server") if lake_kind == "s3" else None
    config = config_at(tmp_path, s3)
    with session_for(config) as session:
        seed(session)
        marks = {zone: watermark(session.lake, zone) for zone in (7, 8)}
        now = datetime.now(UTC)
        report = forget(session, Target(ip=ADDRESS), now, vacuum_now=True)
        assert report.requests == {7: 12, 8: 12} and report.vacuumed
        assert report.rejected == 1
        assert report.days == {START.date()}
        rows = table_rows(session)
        assert ADDRESS not in rows["remote_ip"].to_list()
        assert rows.height == 2 * 108 and rows["request_id"].n_unique() == rows.height
        assert {zone: watermark(session.lake, zone) for zone in (7, 8)} == marks
        rejected = table_rows(session, REJECTED_LINES)
        assert rejected.height == 1 and ADDRESS not in rejected["raw_line"][0]
        erasure = table_rows(session, ERASURES)
        assert erasure.height == 1 and erasure["zone"][0] == 0
        assert erasure["filter"][0].startswith("hmac-sha256:")
        assert erasure["requests_removed"][0] == 24 and erasure["rejected_removed"][0] == 1
        for value in erasure.row(0):  # never the address, in any column
            assert ADDRESS not in str(value)
        assert erasure["vacuumed_at"][0] is not None
        # Vacuumed: the table's files are exactly those it names, its log starts anew.
        table = session.lake.open(REQUESTS)
        assert table is not None
        named = {uri.rsplit("/", 1)[-1] for uri in table.file_uris()}
        stored = {
            info.base_name
            for info in session.lake.filesystem().get_file_info(
                pafs.FileSelector("requests", recursive=True)
            )
            if info.base_name.endswith(".parquet") and "_delta_log" not in info.path
        }
        assert stored == named
        assert table.history(1)  # the table still opens from its new checkpoint
        # The same span read again, in this process and in another: nothing comes back.
        again = ZoneWriter(session, REQUESTS, 7).commit(requests(7), {})
        assert (again.new, again.erased) == (0, 12)
    with session_for(config) as other:
        later = END + timedelta(minutes=1)
        written = ZoneWriter(other, REQUESTS, 8).commit(requests(8, START, later), {})
        assert written.erased == 18  # the requests before the erasure, none after
        assert written.new == 54
        rows = table_rows(other)
        assert ADDRESS not in rows["remote_ip"].to_list()
        assert rows["request_id"].n_unique() == rows.height


def test_a_pass_in_flight_while_the_erasure_lands_does_not_store_the_rows(tmp_path):
    """A pass prepared its commit before the erasure landed: the erasure's commit touches
    the zone, the pass prepares again, and then holds its rows against the erasure."""
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        with session_for(config) as daemon:  # another process, its pass re-reading
            writer = ZoneWriter(daemon, REQUESTS, 7)
            prepare = writer._prepare
            calls: list[int] = []

            def prepared_then_forgotten(*args, **kwargs):
                attempt = prepare(*args, **kwargs)
                if not calls:
                    forget(session, Target(ip=ADDRESS), datetime.now(UTC))
                calls.append(1)
                return attempt

            writer._prepare = prepared_then_forgotten  # type: ignore[method-assign]
            later = END + timedelta(seconds=30)
            written = writer.commit(requests(7, START, later), {WATERMARK: to_ms(later)})
            assert len(calls) == 2, "the pass was not prepared again"
            assert written.erased == 15 and written.new == 27
        rows = table_rows(session)
        assert ADDRESS not in rows["remote_ip"].to_list()
        assert rows["request_id"].n_unique() == rows.height == 108 + 27
        assert watermark(session.lake, 7) == later


GONE = "322b688bd63fb63f2babe9de30a5d262"  # a request id as the provider writes them


def with_gone(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` whose sixth request has the provider's form of id, ``GONE``."""
    ids = frame["request_id"].to_list()
    ids[5] = GONE
    return frame.with_columns(pl.Series("request_id", ids))


def test_forget_a_request_id_keeps_it_out_exactly_once(tmp_path):
    config = config_at(tmp_path)
    with session_for(config) as session:
        ZoneWriter(session, REQUESTS, 7).commit(with_gone(requests(7)), {WATERMARK: to_ms(END)})
        gone = GONE.upper()  # in any case
        report = forget(session, Target(request_id=gone, zones=(7,)), datetime.now(UTC))
        assert report.requests == {7: 1}
        erasure = table_rows(session, ERASURES)
        assert erasure["zone"].to_list() == [7] and erasure["kind"][0] == "request_id"
        written = ZoneWriter(session, REQUESTS, 7).commit(with_gone(requests(7)), {})
        assert (written.new, written.duplicates, written.erased) == (0, 119, 1)
        ids = table_rows(session)["request_id"].to_list()
        assert GONE not in ids and len(ids) == len(set(ids)) == 119


def test_forget_matches_the_address_as_truncate_stores_it(tmp_path):
    config = config_at(tmp_path, ip="truncate")
    with session_for(config) as session:
        seed(session, zones=(7,))
        assert "203.0.113.0" in table_rows(session)["remote_ip"].to_list()
        policy = PrivacyPolicy.from_config(config.privacy)
        report = forget(session, Target(ip=ADDRESS), datetime.now(UTC), stored=policy.stored_as)
        assert report.requests == {7: 12}
        assert "203.0.113.0" not in table_rows(session)["remote_ip"].to_list()


def test_forget_within_days_and_zones_leaves_the_rest(tmp_path):
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session)
        day = START.date()
        outside = Target(
            ip=ADDRESS, from_day=day + timedelta(days=1), to_day=day + timedelta(days=2)
        )
        assert forget(session, outside, datetime.now(UTC)).requests == {}
        report = forget(session, Target(ip=ADDRESS, zones=(8,)), datetime.now(UTC))
        assert report.requests == {8: 12}
        rows = table_rows(session)
        left = rows.filter(pl.col("remote_ip") == ADDRESS)["pull_zone_id"].unique().to_list()
        assert left == [7]


def test_the_old_bytes_leave_at_the_first_maintenance_past_vacuum_hours():
    erased = datetime(2026, 11, 20, 15, 0, tzinfo=UTC)
    assert leaves_storage(erased, 168, "01:30") == datetime(2026, 11, 28, 1, 30, tzinfo=UTC)
    assert leaves_storage(erased, 0, "16:00") == datetime(2026, 11, 20, 16, 0, tzinfo=UTC)


def _config_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'[storage]\nroot = "data"\n{extra}\n[[zones]]\nid = 7\n')
    return path


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], "one of the arguments --ip --request-id is required"),
        (["--ip", ADDRESS, "--request-id", "x"], "not allowed with argument"),
        (["--ip", "not-an-address"], "forget --ip: not an IPv4 or IPv6 address"),
        (["--ip", ADDRESS, "--from", "2026-13-01"], "forget --from: expected a day"),
        (["--ip", ADDRESS, "--zone", "99"], "zone 99 is not configured"),
        (
            ["--ip", ADDRESS, "--from", "2026-11-20", "--to", "2026-11-19"],
            "--from is after --to",
        ),
    ],
)
def test_bad_usage_is_one_line_exit_2(tmp_path, capsys, args, words):
    path = _config_file(tmp_path)
    assert main(["--config", str(path), "forget", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and ADDRESS not in err


def test_in_a_fleet_an_address_needs_a_shared_key(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TEST_DSN", "postgresql://x")
    path = _config_file(
        tmp_path, '[coordination]\npostgres_dsn_env = "TEST_DSN"\n[privacy]\nhash_key_env = "UNSET"'
    )
    assert main(["--config", str(path), "forget", "--ip", ADDRESS]) == 2
    assert "privacy.hash_key_env: forget in a fleet" in capsys.readouterr().err


def test_a_fleet_without_hash_key_env_is_a_config_error(tmp_path, capsys, monkeypatch):
    """Every command of a fleet refuses its config: a daemon without the shared key
    could not match an erasure made on another machine."""
    monkeypatch.setenv("TEST_DSN", "postgresql://x")
    path = _config_file(tmp_path, '[coordination]\npostgres_dsn_env = "TEST_DSN"')
    for command in (["status"], ["daemon"], ["forget", "--request-id", GONE]):
        assert main(["--config", str(path), *command]) == 2
        err = capsys.readouterr().err
        assert "privacy.hash_key_env: a fleet" in err and err.count("\n") == 1, err


def test_forget_from_the_command_line(tmp_path, capsys):
    path = _config_file(tmp_path)
    config = build_config({"storage": {"root": str(tmp_path / "data")}}, base_dir=tmp_path, env={})
    with session_for(config) as session:
        seed(session, zones=(7,))
    assert main(["--config", str(path), "forget", "--ip", ADDRESS]) == 0
    out = capsys.readouterr().out
    assert "12 request(s) of that address removed (zone 7: 12)" in out
    assert "1 rejected line(s)" in out
    assert "leave storage at the first `cdnlake maintain` from" in out
    assert ADDRESS not in out
    assert main(["--config", str(path), "sql", "SELECT kind, requests_removed FROM erasures"]) == 0
    shown = capsys.readouterr().out
    assert "ip" in shown and "12" in shown
    assert (tmp_path / "data" / "work" / "erasure.key").stat().st_mode & 0o077 == 0


def test_a_compaction_landing_while_forget_prepares_sends_it_back(tmp_path, monkeypatch):
    """maintain rewrites the day (its files replaced by one) after forget read them: the
    erasure's files are no longer all in the table, so it is prepared again on the
    compacted file; nothing is doubled, nothing of the address is left."""
    from cdnlake.lake.upkeep import rewrite as rewrite_module
    from cdnlake.lake.upkeep.maintain import maintain

    config = config_at(tmp_path)
    with session_for(config) as session:
        writer = ZoneWriter(session, REQUESTS, 7)
        for k in range(3):  # three files in the day: something to compact
            start = START + timedelta(minutes=2 * k)
            end = start + timedelta(minutes=2)
            writer.commit(requests(7, start, end), {WATERMARK: to_ms(end)})
        prepare = rewrite_module.Rewriter._prepare
        compacted: list[int] = []

        def prepared_then_compacted(self, *args, **kwargs):
            attempt = prepare(self, *args, **kwargs)
            if not compacted:
                with session_for(config) as other:
                    report = maintain(other)
                compacted.append(next(t.compacted for t in report.tables if t.table == "requests"))
            return attempt

        monkeypatch.setattr(rewrite_module.Rewriter, "_prepare", prepared_then_compacted)
        report = forget(session, Target(ip=ADDRESS), datetime.now(UTC))
        assert compacted == [3]
        assert report.requests == {7: 36}
        rows = table_rows(session)
        assert ADDRESS not in rows["remote_ip"].to_list()
        assert rows.height == rows["request_id"].n_unique() == 3 * 108


def shield_events(start: datetime, count: int) -> pl.DataFrame:
    from cdnlake.lake.log.schema import SHIELD_SCHEMA, polars_schema

    rows = [
        {
            "log_id": f"ev-{i}",
            "ts": start + timedelta(seconds=i),
            "log": f'{{"match": "from {ADDRESS if i % 2 else OTHER}", "uri": "/login"}}',
        }
        for i in range(count)
    ]
    frame = pl.DataFrame(
        rows, schema={"log_id": pl.String, "ts": pl.Datetime("us", "UTC"), "log": pl.String}
    )
    columns = polars_schema(SHIELD_SCHEMA)
    missing = [pl.lit(None, t).alias(c) for c, t in columns.items() if c not in frame.columns]
    return frame.with_columns(missing).select(list(SHIELD_SCHEMA))


def test_shield_events_holding_the_address_go_and_stay_out(tmp_path):
    from cdnlake.lake.log.schema import SHIELD_EVENTS

    config = config_at(tmp_path)
    with session_for(config) as session:
        ZoneWriter(session, SHIELD_EVENTS, 5001).commit(shield_events(START, 10), {})
        report = forget(session, Target(ip=ADDRESS), datetime.now(UTC))
        assert report.shield == 5
        logs = table_rows(session, SHIELD_EVENTS)["log"].to_list()
        assert len(logs) == 5 and not any(ADDRESS in text for text in logs)
    with session_for(config) as other:  # the day's event log read again
        written = ZoneWriter(other, SHIELD_EVENTS, 5001).commit(shield_events(START, 10), {})
        assert (written.new, written.erased) == (0, 5)


def test_damaged_files_set_aside_are_named_not_searched(tmp_path):
    config = config_at(tmp_path)
    kept = tmp_path / "data" / "lake" / "_quarantine" / "requests" / "pull_zone_id=7"
    (kept / "date=2026-11-20").mkdir(parents=True)
    (kept / "date=2026-11-20" / "part-1.zstd.parquet.20261120T010203").write_bytes(b"junk")
    with session_for(config) as session:
        seed(session, zones=(7,))
        assert forget(session, Target(ip=ADDRESS), datetime.now(UTC)).quarantined == 1
        assert forget(session, Target(ip=ADDRESS, zones=(8,)), datetime.now(UTC)).quarantined == 0


def test_a_new_fleet_holder_taking_the_zone_fences_forget_which_begins_again(tmp_path, monkeypatch):
    """A daemon of a fleet takes the zone (a newer lease: a new fence token) while forget
    prepares: forget's commit is refused by the fence, begun again under the new token,
    and lands; the holder's token and watermark stay as the holder left them."""
    from cdnlake.lake.log.progress import FENCE, taken_by
    from cdnlake.lake.upkeep import rewrite as rewrite_module
    from tests.sessions import mark_of

    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        prepare = rewrite_module.Rewriter._prepare
        taken: list[ZoneWriter] = []

        def prepared_then_taken(self, *args, **kwargs):
            attempt = prepare(self, *args, **kwargs)
            if not taken:
                with session_for(config) as fleet_daemon:
                    taken.append(ZoneWriter(fleet_daemon, REQUESTS, 7, holder=3))
            return attempt

        monkeypatch.setattr(rewrite_module.Rewriter, "_prepare", prepared_then_taken)
        report = forget(session, Target(ip=ADDRESS), datetime.now(UTC))
        assert taken and report.requests == {7: 12}
        writer = ZoneWriter(session, REQUESTS, 7)
        assert mark_of(writer, FENCE) == taken_by(3)
        assert watermark(session.lake, 7) == END
        assert ADDRESS not in table_rows(session)["remote_ip"].to_list()


def test_stopped_between_zones_the_erasure_is_kept(tmp_path):
    from cdnlake.errors import StopRequested

    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session)
        with pytest.raises(StopRequested):
            forget(session, Target(ip=ADDRESS), datetime.now(UTC), stop=lambda: True)
        assert table_rows(session, ERASURES).height == 1  # recorded first: never lost
        assert ADDRESS in table_rows(session)["remote_ip"].to_list()  # nothing half done
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))  # run again: finished
        assert ADDRESS not in table_rows(session)["remote_ip"].to_list()


def test_the_forwarding_receivers_flush_stores_none_of_them(tmp_path):
    """The receiver commits several zones at once (``commit_together``): the same writer's
    preparation holds each zone's rows against the erasures."""
    from cdnlake.lake.zone.writer import commit_together

    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session)
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
    with session_for(config) as receiver:
        later = END + timedelta(seconds=20)
        writes = [(ZoneWriter(receiver, REQUESTS, z), requests(z, START, later)) for z in (7, 8)]
        outcomes = commit_together(writes)
        assert [(w.new, w.erased) for w in outcomes] == [(18, 14), (18, 14)]  # type: ignore[union-attr]
        assert ADDRESS not in table_rows(receiver)["remote_ip"].to_list()


def test_a_rejected_line_holding_it_is_not_kept_again(tmp_path):
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
        assert table_rows(session, REJECTED_LINES).height == 1
    with session_for(config) as other:  # the same bad lines read again, by another process
        seed(other, zones=(7,))
        rejected = table_rows(other, REJECTED_LINES)
        assert rejected.height == 1 and ADDRESS not in rejected["raw_line"][0]


@pytest.mark.parametrize(
    ("stored", "given"),
    [
        ("::ffff:203.0.113.7", ADDRESS),  # an IPv4-mapped spelling stored, the IPv4 given
        (ADDRESS, "::ffff:203.0.113.7"),  # and the other way round
        ("2001:DB8::7", "2001:db8:0::7"),  # upper case stored, another spelling given
    ],
)
def test_forget_finds_every_spelling_of_the_address(tmp_path, stored, given):
    """Under ``ip = "keep"`` an address is stored as the source wrote it: forget finds its
    rows and its rejected lines however either side spells it, and keeps them out after."""
    config = config_at(tmp_path)
    spelled = requests(7).with_columns(pl.col("remote_ip").replace(ADDRESS, stored))
    raw = f"HIT|200|bad-time|321|7|{stored.upper()}|-|https://cdn.example/x|FR|-|rid-1|FR"
    rejects = pl.DataFrame(
        {"line_number": [1], "reason": ["bad timestamp"], "kind": ["bad timestamp"]},
    ).with_columns(pl.lit(raw).alias("raw_line"), pl.lit(None, pl.String).alias("request_id"))
    with session_for(config) as session:
        ZoneWriter(session, REQUESTS, 7).commit(spelled, {WATERMARK: to_ms(END)})
        Bookkeeping(session).record_rejects(
            [rejects_frame(7, rejects, source="v1-file", file="d", rejected_at=START, run_id="r")],
            patient=False,
        )
        report = forget(session, Target(ip=given), datetime.now(UTC))
        assert report.requests == {7: 12} and report.rejected == 1
        assert stored not in table_rows(session)["remote_ip"].to_list()
    with session_for(config) as other:
        again = ZoneWriter(other, REQUESTS, 7).commit(spelled, {})
        assert (again.new, again.erased) == (0, 12)


def test_a_rejected_line_holding_its_ipv4_mapped_spelling_is_not_kept_again(tmp_path):
    """Read again, a bad line naming the erased address as ``::ffff:a.b.c.d`` is held
    against the erasure too (the address-looking token taken whole)."""
    config = config_at(tmp_path)
    raw = f"HIT|200|bad-time|321|7|::ffff:{ADDRESS}|-|https://cdn.example/x|FR|-|rid-1|FR"
    rejects = pl.DataFrame(
        {"line_number": [1], "reason": ["bad timestamp"], "kind": ["bad timestamp"]},
    ).with_columns(pl.lit(raw).alias("raw_line"), pl.lit(None, pl.String).alias("request_id"))
    frame = rejects_frame(7, rejects, source="v1-file", file="d", rejected_at=START, run_id="r")
    with session_for(config) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
    with session_for(config) as other:
        Bookkeeping(other).record_rejects([frame], patient=False)
        assert ADDRESS not in "".join(table_rows(other, REJECTED_LINES)["raw_line"].to_list())


@pytest.mark.parametrize("named", [True, False])
def test_a_zone_with_no_rows_yet_does_not_store_them_later(tmp_path, named):
    """A zone named (or configured) whose first pass has not stored yet: its erasure mark
    is committed all the same, so the pass reading the provider's span drops the rows."""
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        target = Target(ip=ADDRESS, zones=(9,) if named else ())
        forget(session, target, datetime.now(UTC), zones_known=(7, 9))
    with session_for(config) as daemon:
        written = ZoneWriter(daemon, REQUESTS, 9).commit(requests(9), {WATERMARK: to_ms(END)})
        assert (written.new, written.erased) == (108, 12)
        nine = table_rows(daemon).filter(pl.col("pull_zone_id") == 9)
        assert nine.height == 108 and ADDRESS not in nine["remote_ip"].to_list()


def test_a_shield_events_labels_are_stored_as_privacy_allows(tmp_path):
    """The provider's labels of an event are free-form (``labels_json``, the labels as
    sent): an address or a signed URL there is treated as in the event's ``log`` text."""
    from cdnlake.lake.log.schema import SHIELD_EVENTS

    config = config_at(tmp_path, ip="truncate", strip_query=["token"])
    labels = json.dumps({"clientIp": ADDRESS, "uri": "/a.js?token=s3cr3t&v=1"})
    events = shield_events(START, 2).with_columns(pl.lit(labels).alias("labels_json"))
    with session_for(config) as session:
        ZoneWriter(session, SHIELD_EVENTS, 5001).commit(events, {})
        stored = "".join(table_rows(session, SHIELD_EVENTS)["labels_json"].to_list())
        assert ADDRESS not in stored and "s3cr3t" not in stored
        assert "203.0.113.0" in stored and "v=1" in stored


def test_an_erasure_outlives_bookkeeping_retention(tmp_path):
    """The provider's archive serves a zone's old days for as long as it keeps them, so a
    ``backfill`` can read an erased request again at any time: the erasure (a keyed hash,
    the operator's record of it too) is not expired with the bookkeeping rows."""
    from cdnlake.lake.upkeep.maintain import maintain

    raw = {"storage": {"root": str(tmp_path / "data")}, "retention": {"bookkeeping_days": 3}}
    config = build_config(raw, base_dir=tmp_path, env={})
    with session_for(config) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
        later = datetime.now(UTC) + timedelta(days=30)
        maintain(session, retention=config.retention, now=later)
        assert table_rows(session, ERASURES).height == 1
    with session_for(config) as backfill:  # the archived day imported again
        written = ZoneWriter(backfill, REQUESTS, 7).commit(requests(7), {})
        assert written.erased == 12
        assert ADDRESS not in table_rows(backfill)["remote_ip"].to_list()


@pytest.mark.parametrize("ip", ["truncate", "hash"])
def test_rows_stored_before_a_privacy_change_are_found_too(tmp_path, ip):
    """Rows stored under ``keep`` and not yet rewritten by ``maintain --apply-privacy``
    hold the address as received: forget under the new setting removes them as well."""
    with session_for(config_at(tmp_path)) as session:
        seed(session, zones=(7,))  # stored under keep
    config = config_at(tmp_path, ip=ip, hash_key_env="CDNLAKE_TEST_KEY")
    policy = PrivacyPolicy.from_config(config.privacy)
    with session_for(config) as session:
        report = forget(session, Target(ip=ADDRESS), datetime.now(UTC), stored=policy.stored_as)
        assert report.requests == {7: 12}
        assert ADDRESS not in table_rows(session)["remote_ip"].to_list()


@pytest.mark.parametrize("ip", ["truncate", "hash"])
def test_an_erasure_made_before_a_privacy_change_still_keeps_the_rows_out(tmp_path, ip):
    """Erased under ``keep`` (the erasure names the address as received), then ``[privacy]
    ip`` changed: the span read again is stored truncated or hashed, and the erased
    client's rows are still not stored, in no form."""
    with session_for(config_at(tmp_path, hash_key_env="CDNLAKE_TEST_KEY")) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
    config = config_at(tmp_path, ip=ip, hash_key_env="CDNLAKE_TEST_KEY")
    with session_for(config) as daemon:
        written = ZoneWriter(daemon, REQUESTS, 7).commit(requests(7), {})
        assert (written.new, written.erased) == (0, 12)
        forgotten = PrivacyPolicy.from_config(config.privacy).stored_as(ADDRESS)
        assert forgotten not in table_rows(daemon)["remote_ip"].to_list()


def test_erasures_made_before_hash_key_env_was_set_still_match(tmp_path):
    """Forget ran with the storage root's own key (``<root>/work/erasure.key``); the
    operator then set ``[privacy] hash_key_env`` (for ``ip = "hash"``, or a fleet): the
    earlier erasures still keep their rows out."""
    with session_for(config_at(tmp_path)) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
    config = config_at(tmp_path, ip="hash", hash_key_env="CDNLAKE_TEST_KEY")
    with session_for(config) as daemon:
        written = ZoneWriter(daemon, REQUESTS, 7).commit(requests(7), {})
        assert (written.new, written.erased) == (0, 12)


def test_apply_privacy_treats_a_shield_events_labels(tmp_path):
    """Labels stored under ``keep`` are rewritten by ``maintain --apply-privacy``."""
    from cdnlake.lake.log.schema import SHIELD_EVENTS
    from cdnlake.lake.personal.apply_privacy import apply_privacy

    labels = json.dumps({"clientIp": ADDRESS})
    events = shield_events(START, 2).with_columns(
        pl.lit(labels).alias("labels_json"), pl.lit("blocked").alias("log")
    )
    with session_for(config_at(tmp_path)) as session:
        ZoneWriter(session, SHIELD_EVENTS, 5001).commit(events, {})
    with session_for(config_at(tmp_path, ip="truncate")) as session:
        apply_privacy(session)
        stored = "".join(table_rows(session, SHIELD_EVENTS)["labels_json"].to_list())
        assert ADDRESS not in stored and "203.0.113.0" in stored


def test_a_shield_zone_with_no_events_yet_does_not_store_them_later(tmp_path):
    from cdnlake.lake.log.schema import SHIELD_EVENTS

    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        forget(
            session,
            Target(ip=ADDRESS, zones=(7, 5001)),
            datetime.now(UTC),
            zones_known=(7,),
            shield_zones_known=(5001,),
        )
        assert session.lake.open(SHIELD_EVENTS) is not None  # the mark's commit
    with session_for(config) as daemon:
        written = ZoneWriter(daemon, SHIELD_EVENTS, 5001).commit(shield_events(START, 10), {})
        assert (written.new, written.erased) == (5, 5)


def test_forget_removes_raw_files_a_killed_read_left_behind(tmp_path, capsys):
    """A v1 day file under ``<work>/downloads`` outlives a process killed mid-read; forget
    removes those over a day old (a read in flight is younger: kept)."""
    import os
    import time

    path = _config_file(tmp_path)
    config = build_config({"storage": {"root": str(tmp_path / "data")}}, base_dir=tmp_path, env={})
    with session_for(config) as session:
        seed(session, zones=(7,))
    folder = tmp_path / "data" / "work" / "downloads" / "7"
    folder.mkdir(parents=True)
    old, fresh = folder / "2026-11-20-0.log", folder / "2026-11-27-0.log"
    for file in (old, fresh):
        file.write_text(f"HIT|200|1|321|7|{ADDRESS}|-|https://cdn.example/x|FR|-|r|FR\n")
    two_days_ago = time.time() - 2 * 86400
    os.utime(old, (two_days_ago, two_days_ago))
    assert main(["--config", str(path), "forget", "--ip", ADDRESS]) == 0
    assert "removed 1 raw log file(s) a killed read left" in capsys.readouterr().out
    assert not old.exists() and fresh.exists()


V6 = "2001:db8::7"
V6_SPELLINGS = [  # the same address as sources write it
    "2001:DB8:0:0::7",
    "[2001:0db8::0007]:443",
    "2001:db8:0:0:0:0:0:7%eth0",
    "https://h/?ip=2001%3Adb8%3A%3A7&x=1",
]


def test_shield_text_and_rejected_lines_holding_another_spelling_go_and_stay_out(tmp_path):
    """``forget --ip 2001:db8::7`` finds the address by its parsed value however a shield
    event's text or a rejected line writes it, and keeps them out when read again; the
    neighbour ``2001:db8::70`` and a time of day are no match."""
    from cdnlake.lake.log.schema import SHIELD_EVENTS

    texts = [f"from {s} at 12:34:56" for s in V6_SPELLINGS] + ["from 2001:db8::70 at 12:34:56"]
    events = shield_events(START, len(texts)).with_columns(pl.Series("log", texts))
    rejects = pl.DataFrame(
        {"line_number": list(range(len(texts))), "raw_line": texts},
        schema={"line_number": pl.Int64, "raw_line": pl.String},
    ).with_columns(
        pl.lit("bad").alias("reason"),
        pl.lit("bad").alias("kind"),
        pl.lit(None, pl.String).alias("request_id"),
    )
    frame = rejects_frame(7, rejects, source="v1-file", file="d", rejected_at=START, run_id="r")
    config = config_at(tmp_path)
    with session_for(config) as session:
        ZoneWriter(session, SHIELD_EVENTS, 5001).commit(events, {})
        Bookkeeping(session).record_rejects([frame], patient=False)
        report = forget(session, Target(ip=V6), datetime.now(UTC))
        assert (report.shield, report.rejected) == (4, 4)
        assert table_rows(session, SHIELD_EVENTS)["log"].to_list() == texts[-1:]
        assert table_rows(session, REJECTED_LINES)["raw_line"].to_list() == texts[-1:]
    with session_for(config) as other:  # the event log and the bad lines read again
        written = ZoneWriter(other, SHIELD_EVENTS, 5001).commit(events, {})
        assert (written.new, written.erased) == (0, 4)
        Bookkeeping(other).record_rejects([frame], patient=False)
        assert table_rows(other, REJECTED_LINES)["raw_line"].to_list() == texts[-1:]
