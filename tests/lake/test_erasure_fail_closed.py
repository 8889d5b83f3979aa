"""Erasure fails closed and finds what was stored (issue 48): an erasure of every zone
holds for zones that came after it, in every path; a process that cannot match an
erasure stores nothing of the zone it concerns; the key file is whole and long enough;
``forget --ip`` finds the address in every form the zone's data went through.

Real Delta tables on local disk, real commits of :class:`ZoneWriter`.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import polars as pl
import pytest

from cdnlake.cli.main import main
from cdnlake.config import build_config
from cdnlake.errors import ConfigError
from cdnlake.lake.log.progress import WATERMARK, to_ms
from cdnlake.lake.log.schema import ERASURES, REJECTED_LINES, REQUESTS, SHIELD_EVENTS
from cdnlake.lake.personal.apply_privacy import apply_privacy
from cdnlake.lake.personal.forget import Target, forget
from cdnlake.lake.zone.bookkeeping import Bookkeeping, rejects_frame
from cdnlake.lake.zone.erasure_key import KEY_FILE, RETIRED_FILE, KeySource
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.privacy import PrivacyPolicy
from tests.lake.test_forget import (
    ADDRESS,
    END,
    GONE,
    OTHER,
    START,
    config_at,
    requests,
    seed,
    shield_events,
    table_rows,
    with_gone,
)
from tests.sessions import session_for


def rejected(zone: int, source: str, address: str) -> pl.DataFrame:
    """One rejected line of ``zone`` holding ``address``."""
    if source == "shield":
        raw = json.dumps({"logId": "ev-x", "log": f"blocked {address}"})
    else:
        raw = f"HIT|200|bad-time|321|{zone}|{address}|-|https://cdn.example/x|FR|-|rid-9|FR"
    rejects = pl.DataFrame(
        {"line_number": [1], "reason": ["bad timestamp"], "kind": ["bad timestamp"]},
        schema={"line_number": pl.Int64, "reason": pl.String, "kind": pl.String},
    ).with_columns(pl.Series("raw_line", [raw]), pl.lit(None, pl.String).alias("request_id"))
    return rejects_frame(
        zone, rejects, source=source, file="day.log", rejected_at=START, run_id="run-2"
    )


def test_an_erasure_of_every_zone_holds_for_a_zone_configured_later(tmp_path):
    """No ``--zone``: zone 11 was neither configured nor held rows when forget ran; its
    first pass, in another process, stores none of the erased client's rows."""
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC), zones_known=(7,))
    with session_for(config) as daemon:
        written = ZoneWriter(daemon, REQUESTS, 11).commit(requests(11), {WATERMARK: to_ms(END)})
        assert (written.new, written.erased) == (108, 12)
        shield = ZoneWriter(daemon, SHIELD_EVENTS, 5002).commit(shield_events(START, 10), {})
        assert (shield.new, shield.erased) == (5, 5)


@pytest.mark.parametrize("source", ["v1-file", "shield"])
def test_a_rejected_line_of_a_zone_configured_later_is_not_kept(tmp_path, source):
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC), zones_known=(7,))
    with session_for(config) as daemon:
        Bookkeeping(daemon).record_rejects([rejected(12, source, ADDRESS)], patient=False)
        lines = table_rows(daemon, REJECTED_LINES)
        assert not any(ADDRESS in text for text in lines["raw_line"].to_list())
        assert 12 not in lines["zone"].to_list()


def test_a_rejected_line_is_held_against_erasures_before_it_is_scrubbed(tmp_path):
    """Erased under ``keep`` (the address as received), then ``ip = "truncate"``: the
    line read again is not kept, truncated."""
    with session_for(config_at(tmp_path)) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
    with session_for(config_at(tmp_path, ip="truncate")) as daemon:
        Bookkeeping(daemon).record_rejects([rejected(7, "v1-file", ADDRESS)], patient=False)
        lines = table_rows(daemon, REJECTED_LINES)["raw_line"].to_list()
        assert not any("203.0.113.0" in text for text in lines), lines


def test_a_process_without_the_key_refuses_to_store_the_zones_rows(tmp_path):
    """The erasure was made under the root's key file; a process holding another key
    (its own hash_key_env, the file elsewhere) cannot tell which rows are erased: it
    stores none of the zone's rows and says which key to set, in one line."""
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
        lake = session.lake
    elsewhere = LakeSession(lake, erasure_keys=KeySource(tmp_path / "other", b"o" * 32))
    with elsewhere:
        with pytest.raises(ConfigError) as refused:
            ZoneWriter(elsewhere, REQUESTS, 7).commit(requests(7), {})
        message = str(refused.value)
        assert "privacy.hash_key_env" in message and "zone 7" in message
        assert "\n" not in message and ADDRESS not in message
        with pytest.raises(ConfigError):
            Bookkeeping(elsewhere).record_rejects([rejected(7, "v1-file", ADDRESS)])
    with session_for(config) as session:  # nothing of it was stored
        assert table_rows(session).height == 108


def test_the_key_file_is_whole_private_and_long_enough(tmp_path):
    keys = KeySource(tmp_path / "work")
    key = keys.get(create=True)
    assert key is not None and len(key.secret) == 32
    path = tmp_path / "work" / KEY_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path / "work") == [KEY_FILE]  # no temporary file left
    again = KeySource(tmp_path / "work").get(create=True)
    assert again is not None and again.key_id == key.key_id


@pytest.mark.parametrize("text", ["", "abcd\n", "zz" * 32, "00" * 31])
def test_a_short_or_unreadable_key_file_is_an_error(tmp_path, text):
    (tmp_path / KEY_FILE).write_text(text)
    with pytest.raises(ConfigError) as failed:
        KeySource(tmp_path).get(create=True)
    assert str(failed.value).startswith(str(tmp_path / KEY_FILE))
    assert "\n" not in str(failed.value)


def test_forget_finds_hashes_of_networks_after_truncate_then_hash(tmp_path):
    """Stored under ``truncate``, then ``ip = "hash"`` and rewritten by apply-privacy:
    the rows hold keyed hashes of /24 networks. ``forget --ip`` of the address finds
    them, says it matched the hash of its network, and names the network."""
    with session_for(config_at(tmp_path, ip="truncate")) as session:
        seed(session, zones=(7,))
    config = config_at(tmp_path, ip="hash", hash_key_env="CDNLAKE_TEST_KEY")
    policy = PrivacyPolicy.from_config(config.privacy)
    with session_for(config) as session:
        apply_privacy(session)
        network_hash = policy.stored_as("203.0.113.0")
        assert network_hash in table_rows(session)["remote_ip"].to_list()
        report = forget(session, Target(ip=ADDRESS), datetime.now(UTC), stored=policy.stored_as)
        assert report.requests == {7: 12}
        assert report.matched == {"the keyed hash of network 203.0.113.0/24"}
        assert report.networks == {"203.0.113.0/24"}
        assert network_hash not in table_rows(session)["remote_ip"].to_list()


def test_forget_under_truncate_names_the_network(tmp_path):
    config = config_at(tmp_path, ip="truncate")
    policy = PrivacyPolicy.from_config(config.privacy)
    with session_for(config) as session:
        seed(session, zones=(7,))
        report = forget(session, Target(ip="203.0.113.99"), datetime.now(UTC))
        assert report.requests == {7: 12}
        assert report.matched == {"its network 203.0.113.0/24"}
        assert report.networks == {"203.0.113.0/24"}
        assert policy.stored_as(ADDRESS) not in table_rows(session)["remote_ip"].to_list()


def test_the_requests_removed_are_recorded_per_zone_and_hour(tmp_path):
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7, 8))
        report = forget(session, Target(ip=ADDRESS), datetime.now(UTC))
        hour = f"{START:%Y-%m-%dT%H}"
        assert report.hours == {7: {hour: 12}, 8: {hour: 12}}
        row = table_rows(session, ERASURES).row(0, named=True)
        assert json.loads(row["hours_removed"]) == {"7": {hour: 12}, "8": {hour: 12}}


def _cli_config(tmp_path, privacy: str = ""):
    path = tmp_path / "config.toml"
    path.write_text(f'[storage]\nroot = "data"\n[privacy]\n{privacy}\n[[zones]]\nid = 7\n')
    return path, build_config(
        {"storage": {"root": str(tmp_path / "data")}}, base_dir=tmp_path, env={}
    )


def test_forget_under_truncate_names_the_network_on_the_command_line(tmp_path, capsys):
    path, _ = _cli_config(tmp_path, 'ip = "truncate"')
    with session_for(config_at(tmp_path, ip="truncate")) as session:
        seed(session, zones=(7,))
    assert main(["--config", str(path), "forget", "--ip", "203.0.113.200"]) == 0
    out = capsys.readouterr().out
    assert "12 request(s) of that address's network removed (zone 7: 12)" in out
    assert "matched as stored: its network 203.0.113.0/24" in out
    assert "the rows held the network 203.0.113.0/24" in out
    assert "every client in it" in out and "203.0.113.200" not in out


def test_forget_under_drop_says_addresses_are_not_stored(tmp_path, capsys):
    path, _ = _cli_config(tmp_path, 'ip = "drop"')
    with session_for(config_at(tmp_path, ip="drop")) as session:
        seed(session, zones=(7,))
    assert main(["--config", str(path), "forget", "--ip", ADDRESS]) == 0
    out = capsys.readouterr().out
    assert "0 request(s) of that address removed" in out
    assert 'ip = "drop": client addresses are not stored' in out


def test_forget_of_a_request_id_mentions_no_address_hash(tmp_path, capsys):
    path, config = _cli_config(tmp_path)
    with session_for(config) as session:
        ZoneWriter(session, REQUESTS, 7).commit(with_gone(requests(7)), {})
    assert main(["--config", str(path), "forget", "--request-id", GONE]) == 0
    out = capsys.readouterr().out
    assert "1 request removed (zone 7: 1)" in out
    assert "as a keyed hash of the request id (never the id itself)" in out
    assert "address" not in out and GONE not in out.lower()


def test_a_shield_rejected_line_is_held_before_it_is_scrubbed(tmp_path):
    """The same for a shield zone's undecodable event: erased under ``keep``, read again
    under ``truncate``, it is not kept (truncated)."""
    with session_for(config_at(tmp_path)) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
    with session_for(config_at(tmp_path, ip="truncate")) as daemon:
        Bookkeeping(daemon).record_rejects([rejected(5002, "shield", ADDRESS)], patient=False)
        lines = table_rows(daemon, REJECTED_LINES)
        assert 5002 not in lines["zone"].to_list()
        assert not any("203.0.113.0" in text for text in lines["raw_line"].to_list())


def test_shield_events_are_held_before_they_are_scrubbed(tmp_path):
    """Shield events whose log text names the erased address, erased under ``keep`` and
    read again under ``truncate``: none is stored, not even with the network in it."""
    with session_for(config_at(tmp_path)) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
    with session_for(config_at(tmp_path, ip="truncate")) as daemon:
        written = ZoneWriter(daemon, SHIELD_EVENTS, 5002).commit(shield_events(START, 10), {})
        assert (written.new, written.erased) == (5, 5)
        logs = table_rows(daemon, SHIELD_EVENTS)["log"].to_list()
        assert not any("203.0.113.0" in text for text in logs), logs


def test_a_retired_hash_key_still_matches_the_erasures_made_under_it(tmp_path):
    """``hash_key_env`` rotated: the erasures made under the old key refuse every zone's
    rows until the old key is kept in ``<root>/work/erasure-retired.keys``; then they
    match again, and a new erasure is made under the new key."""
    old, new = "k" * 32, "n" * 32

    def keyed(secret: str):
        raw = {"storage": {"root": str(tmp_path / "data")}, "privacy": {"hash_key_env": "KEY"}}
        return build_config(raw, base_dir=tmp_path, env={"KEY": secret})

    with session_for(keyed(old)) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC))
    with session_for(keyed(new)) as rotated, pytest.raises(ConfigError):
        ZoneWriter(rotated, REQUESTS, 7).commit(requests(7), {})
    retired = tmp_path / "data" / "work" / RETIRED_FILE
    retired.parent.mkdir(parents=True, exist_ok=True)
    retired.write_text(f"{('x' * 40).encode().hex()}\n{old.encode().hex()}\n")
    with session_for(keyed(new)) as rotated:
        written = ZoneWriter(rotated, REQUESTS, 7).commit(requests(7), {})
        assert (written.new, written.erased) == (0, 12)
        report = forget(rotated, Target(ip=OTHER), datetime.now(UTC))
        erasures = table_rows(rotated, ERASURES)
        made = erasures.filter(pl.col("erasure_id") == report.erasure_id)["key_id"][0]
        assert made == KeySource(None, new.encode()).every()[0].key_id
    retired.write_text("abcd\n")  # a short key there is an error, never a key
    with session_for(keyed(new)) as rotated, pytest.raises(ConfigError):
        ZoneWriter(rotated, REQUESTS, 7).commit(requests(7), {})
