"""An erasure holds in every path (issue 48, "fail closed"), through the command line
against the loopback emulator (``fullip`` zones: whole client addresses):

- after ``[privacy] ip`` changes (truncate -> keep, hash -> truncate, another prefix), a
  re-read of the span the provider still serves stores none of the erased rows again and
  counts them "held back (erased)";
- an erasure of an address whose rows the provider stored as its network (anonymised)
  holds that network's rows, as it removed them;
- a zone configured after the ``forget`` stores none of them on its first pass;
- a process without the erasure's key, or whose ``erasures`` lost the row its erasure
  mark names (a power loss), refuses the zone's rows in one line, naming no address;
- ``--request-id`` matches a request id stored in capitals.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from cdnlake.emulator import Emulator
from cdnlake.lake.log.progress import WATERMARK, to_ms
from cdnlake.lake.log.schema import ERASURES, REQUESTS
from cdnlake.lake.personal.forget import Target, forget, record
from cdnlake.lake.zone.writer import ZoneWriter
from tests.conftest import lake_frame, load_test_config, run_cli, start_emulator
from tests.conftest import write_config as emulator_config
from tests.lake.test_forget import ADDRESS, END, config_at, requests, seed, table_rows
from tests.sessions import session_for

ZONE, LATER, ANON = 1234, 1236, 1235  # ANON: addresses anonymised by the provider
KEY_ENV, KEY = "ERASURE_HOLDS_KEY", "erasure-holds-key-" + "k" * 32


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = start_emulator(f"{ZONE}:fullip,{LATER}:fullip,{ANON}", rpm=1, now=datetime.now(UTC))
    yield emu
    emu.stop()


def config(tmp_path: Path, emu: Emulator, privacy: str, zones: tuple[int, ...] = (ZONE,)) -> Path:
    path = emulator_config(tmp_path, emu, [(zone, "v2") for zone in zones])
    path.write_text(path.read_text() + f"[privacy]\n{privacy}\n")
    return path


def cli(path: Path, *args: str, code: int = 0, key: str = KEY) -> str:
    done = run_cli("--config", str(path), *args, env={KEY_ENV: key}, timeout=300)
    assert done.returncode == code, done.stdout + done.stderr
    return done.stdout + done.stderr


def busiest(emu: Emulator, zone: int, start: datetime, end: datetime) -> tuple[str, set[str]]:
    """The IPv4 client with most requests in ``[start, end)``, and every request id of its
    the provider holds."""
    now = emu.clock.now()
    records = emu.traffic.records(
        zone, int((now - timedelta(days=4)).timestamp() * 1000), int(now.timestamp() * 1000)
    )
    lo, hi = int(start.timestamp() * 1000), int(end.timestamp() * 1000)
    counts = Counter(
        r.wire.remoteIp for r in records if lo <= r.ts_ms < hi and ":" not in r.wire.remoteIp
    )
    address = counts.most_common(1)[0][0]
    return address, {r.wire.requestId for r in records if r.wire.remoteIp == address}


def held_back(out: str) -> int:
    found = re.search(r"(\d[\d,]*) held back \(erased\)", out)
    return 0 if found is None else int(found[1].replace(",", ""))


def span(emu: Emulator) -> tuple[datetime, datetime, list[str]]:
    """A few hours the provider still serves, and ``ingest``'s options reading them."""
    end = emu.clock.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(hours=4)
    return start, end, ["--from", f"{start:%Y-%m-%dT%H:%MZ}", "--to", f"{end:%Y-%m-%dT%H:%MZ}"]


HASH = f'hash_key_env = "{KEY_ENV}"'


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ('ip = "truncate"', 'ip = "keep"'),
        (f'ip = "hash"\n{HASH}', f'ip = "truncate"\n{HASH}'),
        ('ip = "truncate"', 'ip = "truncate"\nipv4_prefix = 16'),
    ],
    ids=["truncate-keep", "hash-truncate", "prefix-24-16"],
)
def test_an_erasure_holds_after_the_privacy_setting_changes(tmp_path, emulator, before, after):
    path = config(tmp_path, emulator, before)
    cli(path, "ingest")
    start, end, reread = span(emulator)
    address, ids = busiest(emulator, ZONE, start, end)
    stored = set(lake_frame(load_test_config(path))["request_id"].to_list())
    assert len(ids & stored) > 5, "the test has nothing to erase"
    out = cli(path, "forget", "--ip", address)
    assert address not in out
    if "truncate" in before:  # the rows were stored as the network: everyone in it
        assert "every request stored as the network" in out, out
    assert not ids & set(lake_frame(load_test_config(path))["request_id"].to_list())

    path = config(tmp_path, emulator, after)
    out = cli(path, "ingest", "--zone", str(ZONE), *reread)
    assert held_back(out) > 0, out
    after_rows = lake_frame(load_test_config(path))
    assert not ids & set(after_rows["request_id"].to_list())
    assert after_rows.filter(pl.col("remote_ip") == address).height == 0
    assert after_rows.filter(pl.col("date") >= start.date()).height > 0


def test_an_erasure_holds_rows_the_provider_stored_as_the_network(tmp_path, emulator):
    """Under keep, the provider's anonymised addresses are networks: forget of one address
    in one removes its rows, names it, and a re-read stores none of them again."""
    path = config(tmp_path, emulator, 'ip = "keep"', zones=(ANON,))
    cli(path, "ingest")
    start, end, reread = span(emulator)
    network, ids = busiest(emulator, ANON, start, end)  # a.b.c.0
    out = cli(path, "forget", "--ip", network[:-1] + "77")
    assert f"the rows held the network {network}/24" in out, out
    assert f"requests received as the network {network}/24 (anonymised by the provider)" in out
    assert not ids & set(lake_frame(load_test_config(path))["request_id"].to_list())
    out = cli(path, "ingest", "--zone", str(ANON), *reread)
    assert held_back(out) > 0, out
    rows = lake_frame(load_test_config(path))
    assert rows.height > 0 and not ids & set(rows["request_id"].to_list())


def test_a_zone_configured_after_the_forget_stores_none_of_the_rows(tmp_path, emulator):
    """No ``--zone``: zone 1236 was not configured when forget ran; its first pass
    stores none of the erased client's rows and counts them held back."""
    path = config(tmp_path, emulator, 'ip = "keep"')
    start, end, _ = span(emulator)
    address, ids = busiest(emulator, LATER, start, end)
    cli(path, "forget", "--ip", address)
    path = config(tmp_path, emulator, 'ip = "keep"', zones=(ZONE, LATER))
    out = cli(path, "ingest", "--zone", str(LATER))
    assert held_back(out) >= len(ids) // 2, out
    rows = lake_frame(load_test_config(path))
    assert rows.height > 0 and not ids & set(rows["request_id"].to_list())


def refusal(out: str) -> str:
    """The one line of ``out`` that refuses the zone's rows."""
    (line,) = [line for line in out.splitlines() if "rows are not stored" in line]
    return line


def test_a_process_without_the_erasure_key_refuses_the_zones_rows(tmp_path, emulator):
    path = config(tmp_path, emulator, f'ip = "keep"\n{HASH}')
    start, end, _ = span(emulator)
    address, _ids = busiest(emulator, ZONE, start, end)
    cli(path, "forget", "--ip", address)
    out = cli(path, "ingest", code=1, key="another-key-" + "o" * 32)
    line = refusal(out)
    assert "privacy.hash_key_env" in line and f"zone {ZONE}" in line and address not in out
    assert lake_frame(load_test_config(path)).height == 0


def test_a_mark_naming_a_lost_erasure_refuses_the_zones_rows(tmp_path, emulator):
    """The ``erasures`` row is gone (an older backup of the table put back), its marks
    stay: the zone's rows are refused, not stored as if the erasure had expired; the same
    forget run again with --replaces-lost lets them in, without the erased client's."""
    path = config(tmp_path, emulator, 'ip = "keep"')
    start, end, _ = span(emulator)
    address, ids = busiest(emulator, ZONE, start, end)
    cli(path, "forget", "--ip", address)
    shutil.rmtree(load_test_config(path).storage.root / "lake" / "erasures")
    out = cli(path, "ingest", code=1)
    line = refusal(out)
    assert "erasures does not hold" in line and address not in out
    assert lake_frame(load_test_config(path)).height == 0
    out = cli(path, "forget", "--ip", address, "--replaces-lost")
    assert "recorded in place of the lost erasure-" in out, out
    out = cli(path, "ingest")
    assert held_back(out) > 0, out
    rows = lake_frame(load_test_config(path))
    assert rows.height > 0 and not ids & set(rows["request_id"].to_list())


def test_forget_request_id_matches_an_id_stored_in_capitals(tmp_path, emulator):
    path = config(tmp_path, emulator, 'ip = "keep"')
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    ids = [f"{i:x}" * 32 for i in (10, 11, 12)]  # "aaaa...", "bbbb...", "cccc..."
    lines = [
        f"MISS|200|{now_ms - 60_000 + i}|512|{ZONE}|192.0.2.{i}|-|https://h/{i}|WA|curl/8|"
        f"{rid.upper()}|DE"
        for i, rid in enumerate(ids)
    ]
    source = tmp_path / "day.log"
    source.write_text("\n".join(lines) + "\n")
    cli(path, "import-v1", str(source), "--zone", str(ZONE))
    out = cli(path, "forget", "--request-id", ids[1])
    assert "1 request removed" in out, out
    out = cli(path, "import-v1", str(source), "--zone", str(ZONE))
    assert held_back(out) == 1, out
    kept = {rid.lower() for rid in lake_frame(load_test_config(path))["request_id"].to_list()}
    assert kept == {ids[0], ids[2]}


def test_an_erasure_recorded_in_the_old_form_still_holds(tmp_path):
    """A row of ``erasures`` recorded before holds one keyed hash, of the address as the
    setting then stored it: it still matches what it matched."""
    config = config_at(tmp_path, ip="truncate")
    with session_for(config) as session:
        seed(session, zones=(7,))
        forget(session, Target(ip=ADDRESS), datetime.now(UTC), zones_known=(7,))
        key = session.erasure_keys.get()
        assert key is not None
        (row,) = table_rows(session, ERASURES).to_dicts()
        assert key.digest(ADDRESS) in row["filter"].split()  # the new form: several
        record(session, [{**row, "filter": key.digest("203.0.113.0")}])
    with session_for(config) as daemon:
        written = ZoneWriter(daemon, REQUESTS, 7).commit(requests(7), {WATERMARK: to_ms(END)})
        assert (written.new, written.erased) == (0, 12)
