"""What an erasure holds back, and what ``erasures`` keeps (review 3 of issue 48):

- an erasure made under ``keep`` records its network's hash tagged: after a switch to
  ``truncate`` the erased client's requests read again are held back, its neighbours'
  in the same /24 are stored (through the command line, ``import-v1``, emulator config);
- under ``ip = "hash"``, ``forget --ip`` finds rows hashed under a key since retired;
- a ``--request-id`` erasure keeps a keyed hash of the id, never the id, and still holds
  the request back (rows and rejected lines); one recorded before (the id) still holds;
- a rejected line without a ``source`` is held against the erasures (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from cdnlake.emulator import Emulator
from cdnlake.lake.log.progress import WATERMARK, to_ms
from cdnlake.lake.log.schema import ERASURES, REJECTED_LINES, REQUESTS
from cdnlake.lake.personal.forget import Target, forget, record
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.erasures import NETWORK
from cdnlake.lake.zone.writer import ZoneWriter
from tests.conftest import lake_frame, load_test_config, start_emulator
from tests.lake.test_erasure_fail_closed import rejected
from tests.lake.test_erasure_holds import KEY, KEY_ENV, LATER, ZONE, cli, config, held_back
from tests.lake.test_forget import ADDRESS, END, OTHER, config_at, requests, seed, table_rows
from tests.sessions import session_for

A, B = "192.0.2.10", "192.0.2.20"  # one /24: the erased client and its neighbour


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """Only its zones are used (the day files are imported): one shared with the tests
    of :mod:`tests.lake.test_erasure_holds`."""
    emu = start_emulator(f"{ZONE}:fullip,{LATER}:fullip", rpm=1, now=datetime.now(UTC))
    yield emu
    emu.stop()


def day_file(tmp_path: Path, zone: int, tag: int) -> Path:
    """A v1 day file of ``zone``: three requests of A and three of B, two hours ago."""
    now_ms = int(datetime.now(UTC).timestamp() * 1000) - 2 * 3600_000
    lines = [
        f"MISS|200|{now_ms + n}|512|{zone}|{ip}|-|https://h/{n}|WA|curl/8|{tag:02x}{n:030x}|DE"
        for n, ip in enumerate([A, A, A, B, B, B])
    ]
    path = tmp_path / f"{zone}.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_erasure_under_keep_holds_back_no_neighbour_after_a_switch_to_truncate(
    tmp_path, emulator
):
    path = config(tmp_path, emulator, 'ip = "keep"', zones=(ZONE, LATER))
    source, later = day_file(tmp_path, ZONE, 1), day_file(tmp_path, LATER, 2)
    cli(path, "import-v1", str(source), "--zone", str(ZONE))
    out = cli(path, "forget", "--ip", A)
    assert "3 request(s) of that address removed" in out, out
    assert "requests received as the network 192.0.2.0/24 (anonymised by the provider)" in out
    assert "every request stored as the network" not in out and A not in out
    (row,) = lake_frame(load_test_config(path), "erasures").to_dicts()
    assert any(h.startswith(NETWORK) for h in row["filter"].split())

    path = config(tmp_path, emulator, 'ip = "truncate"', zones=(ZONE, LATER))
    out = cli(path, "import-v1", str(source), "--zone", str(ZONE))
    assert held_back(out) == 3, out  # A's, not B's
    out = cli(path, "import-v1", str(later), "--zone", str(LATER))  # configured later
    assert held_back(out) == 3 and "3 new rows" in out, out
    rows = lake_frame(load_test_config(path))
    per_zone = rows.group_by("pull_zone_id").len().sort("pull_zone_id")["len"].to_list()
    assert per_zone == [3, 3]  # B's requests in each zone: kept, stored
    assert A not in rows["remote_ip"].to_list()
    erased = lake_frame(load_test_config(path), "erased_requests")  # removed or held
    assert erased.group_by("zone").len().sort("zone")["len"].to_list() == [3, 3]  # A's only


def test_an_erasure_under_truncate_holds_back_the_network_it_removed(tmp_path, emulator):
    """Stored as the network, everyone in it was removed: read again, all stay out."""
    path = config(tmp_path, emulator, 'ip = "truncate"')
    source = day_file(tmp_path, ZONE, 3)
    cli(path, "import-v1", str(source), "--zone", str(ZONE))
    out = cli(path, "forget", "--ip", A)
    assert "6 request(s) of that address's network removed" in out, out
    assert (
        "every request stored as the network 192.0.2.0/24 or its keyed hash in zone(s) 1234" in out
    )
    (row,) = lake_frame(load_test_config(path), "erasures").to_dicts()
    assert any(h.startswith(f"{NETWORK}@{ZONE}:") for h in row["filter"].split())
    out = cli(path, "import-v1", str(source), "--zone", str(ZONE))
    assert held_back(out) == 6, out
    assert lake_frame(load_test_config(path)).height == 0


def test_forget_ip_under_hash_finds_rows_hashed_under_a_retired_key(tmp_path, emulator):
    hashing = f'ip = "hash"\nhash_key_env = "{KEY_ENV}"'
    path = config(tmp_path, emulator, hashing)
    source = day_file(tmp_path, ZONE, 4)
    cli(path, "import-v1", str(source), "--zone", str(ZONE))
    work = load_test_config(path).storage.work
    work.mkdir(parents=True, exist_ok=True)
    (work / "erasure-retired.keys").write_text(KEY.encode().hex() + "\n")  # as documented
    new_key = "rotated-key-" + "r" * 32
    out = cli(path, "forget", "--ip", A, key=new_key)
    assert "3 request(s) of that address removed" in out, out
    assert "the keyed hash of the address itself (under the retired key" in out
    rows = lake_frame(load_test_config(path))
    assert rows.height == 3
    out = cli(path, "import-v1", str(source), "--zone", str(ZONE), key=new_key)
    assert held_back(out) == 3, out


def test_forget_ip_under_hash_refuses_where_no_key_held_hashed_the_rows(tmp_path, emulator):
    path = config(tmp_path, emulator, f'ip = "hash"\nhash_key_env = "{KEY_ENV}"')
    cli(path, "import-v1", str(day_file(tmp_path, ZONE, 5)), "--zone", str(ZONE))
    out = cli(path, "forget", "--ip", A, code=2, key="another-key-" + "o" * 32)
    assert "erasure-retired.keys" in out and A not in out
    assert lake_frame(load_test_config(path)).height == 6


def test_a_request_id_erasure_keeps_no_id_and_holds_the_request(tmp_path, emulator):
    path = config(tmp_path, emulator, 'ip = "keep"')
    source = day_file(tmp_path, ZONE, 6)
    cli(path, "import-v1", str(source), "--zone", str(ZONE))
    erased = f"{6:02x}{1:030x}"
    out = cli(path, "forget", "--request-id", erased.upper())
    assert "1 request removed" in out and "keyed hash of the request id" in out, out
    (row,) = lake_frame(load_test_config(path), "erasures").to_dicts()
    assert erased not in str(row).lower() and row["filter"].startswith("hmac-sha256:")
    assert row["key_id"]
    out = cli(path, "import-v1", str(source), "--zone", str(ZONE))
    assert held_back(out) == 1, out
    assert erased not in lake_frame(load_test_config(path))["request_id"].to_list()


def test_rejected_lines_are_held_against_request_ids_hashed_and_recorded_before(tmp_path):
    """The raw text's whole 32-hex tokens and the ``request_id`` column, in any case; an
    erasure recorded before (the id itself) still matches."""
    config = config_at(tmp_path)
    hashed, old = "ab" * 16, "cd" * 16
    with session_for(config) as session:
        seed(session, zones=(7,))
        forget(session, Target(request_id=hashed), datetime.now(UTC), zones_known=(7,))
        (row,) = table_rows(session, ERASURES).to_dicts()
        record(session, [{**row, "erasure_id": "erasure-old", "filter": old, "key_id": None}])
    with session_for(config) as daemon:
        line = rejected(7, "v1-file", "198.51.100.5")
        lines = pl.concat(
            [
                line.with_columns(pl.col("raw_line").str.replace("rid-9", hashed.upper())),
                line.with_columns(pl.lit(old).alias("request_id")),
                line.with_columns(pl.col("raw_line").str.replace("rid-9", f"x{hashed}")),
            ]
        ).with_columns(pl.Series("record_key", ["k1", "k2", "k3"]))
        Bookkeeping(daemon).record_rejects([lines], patient=False)
        kept = table_rows(daemon, REJECTED_LINES)["raw_line"].to_list()
        mine = [text for text in kept if "198.51.100.5" in text]
        assert len(mine) == 1 and f"x{hashed}" in mine[0]  # not a whole token: kept


def test_a_rejected_line_without_a_source_is_held_against_the_erasures(tmp_path):
    config = config_at(tmp_path)
    with session_for(config) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC), zones_known=(7,))
    with session_for(config) as daemon:
        line = rejected(7, "v1-file", ADDRESS).with_columns(pl.lit(None, pl.String).alias("source"))
        Bookkeeping(daemon).record_rejects([line], patient=False)
        kept = table_rows(daemon, REJECTED_LINES)["raw_line"].to_list()
        assert not [text for text in kept if ADDRESS in text]


NEIGHBOUR = "203.0.113.8"  # in ADDRESS's /24


def neighbours(zone: int) -> pl.DataFrame:
    """The provider's records of ``zone``: ADDRESS's, and the rest from its neighbour."""
    rows = requests(zone)
    other = pl.when(pl.col("remote_ip") == OTHER).then(pl.lit(NEIGHBOUR))
    return rows.with_columns(other.otherwise(pl.col("remote_ip")).alias("remote_ip"))


def test_a_network_is_held_as_stored_only_in_the_zones_stored_as_it(tmp_path):
    """Zone 7 stored the network (truncate), zone 8 whole addresses (keep): read again
    under truncate, zone 7 holds back everyone in it (forget removed them there), zone 8
    only the erased client's requests."""
    with session_for(config_at(tmp_path, ip="truncate")) as session:
        ZoneWriter(session, REQUESTS, 7).commit(neighbours(7), {WATERMARK: to_ms(END)})
    with session_for(config_at(tmp_path)) as session:
        ZoneWriter(session, REQUESTS, 8).commit(neighbours(8), {WATERMARK: to_ms(END)})
        report = forget(session, Target(ip=ADDRESS), datetime.now(UTC), zones_known=(7, 8))
        assert report.requests == {7: 120, 8: 12}
        assert report.held_as_stored == {"203.0.113.0/24": {7}}
    with session_for(config_at(tmp_path, ip="truncate")) as daemon:
        again = {
            zone: ZoneWriter(daemon, REQUESTS, zone).commit(
                neighbours(zone), {WATERMARK: to_ms(END)}
            )
            for zone in (7, 8)
        }
        assert (again[7].new, again[7].erased) == (0, 120)
        assert (again[8].new, again[8].erased) == (0, 12)  # the neighbour's stored already
        ZoneWriter(daemon, REQUESTS, 9).commit(neighbours(9), {WATERMARK: to_ms(END)})
        rows = table_rows(daemon, REQUESTS).filter(pl.col("pull_zone_id") == 9)
        assert rows.height == 108  # a zone configured later: the neighbour's requests


def test_a_neighbours_rejected_line_is_kept_after_a_switch_to_truncate(tmp_path):
    with session_for(config_at(tmp_path)) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC), zones_known=(7,))
    with session_for(config_at(tmp_path, ip="truncate")) as daemon:
        lines = pl.concat(
            [rejected(7, "v1-file", NEIGHBOUR), rejected(7, "v1-file", ADDRESS)]
        ).with_columns(pl.Series("record_key", ["n", "a"]))
        Bookkeeping(daemon).record_rejects([lines], patient=False)
        kept = table_rows(daemon, REJECTED_LINES).filter(pl.col("record_key").is_in(["n", "a"]))
        assert kept["record_key"].to_list() == ["n"]
        assert "203.0.113.0" in kept["raw_line"][0] and NEIGHBOUR not in kept["raw_line"][0]
