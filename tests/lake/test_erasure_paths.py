"""An erasure holds in the paths review 3 (finding 7) found tested in-process only, through
the command line against the loopback emulator (issue 48, "fail closed" and "erasures are
explained"): ``maintain --restore`` of a quarantined file, ``backfill`` from the archive,
the daemon's log-forwarding receiver, ``import-v1`` of an erased address, and the rejected
lines of a later pass of a pull zone and of a shield zone (under the same setting, and
keep -> truncate). Each stores none of the erased client's rows again and counts them
"held back (erased)" where it counts rows. And what forget says under ``ip = "drop"`` and
for ``--request-id``; and a rotated erasure key, refused until the retired key is kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from cdnlake.emulator import Emulator, Faults
from cdnlake.emulator.archive import ArchiveLimits
from cdnlake.emulator.shield import ShieldRoutes
from cdnlake.emulator.state import is_bad_record
from cdnlake.lake.log.progress import to_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.zone.damage import set_aside
from cdnlake.lake.zone.erasure_key import RETIRED_FILE
from tests.cli.test_backfill_cli import archive_config
from tests.cli.test_backfill_cli import cli as archive_cli
from tests.conftest import NOW, free_port, lake_frame, lake_of, load_test_config, start_emulator
from tests.forwarding.helpers import send_tcp, synthetic, syslog
from tests.forwarding.test_daemon import daemon_config
from tests.lake.test_erasure_holds import (
    HASH,
    KEY,
    ZONE,
    busiest,
    cli,
    config,
    held_back,
    refusal,
    span,
)
from tests.test_scheduler import spawn_daemon, stop, wait_for_line

SHIELD_ZONE = 5001
RATE = 0.05  # of the records and events the emulator serves spoiled: rejected lines


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = start_emulator(f"{ZONE}:fullip", rpm=1, now=datetime.now(UTC))
    yield emu
    emu.stop()


def ids_of(path: Path) -> set[str]:
    return set(lake_frame(load_test_config(path))["request_id"].to_list())


def no_rewind(*_: object) -> None:
    pass


def test_restore_holds_back_the_erased_rows_of_a_quarantined_file(tmp_path, emulator):
    """A file set aside (damaged, as a refused read leaves it) is not searched by forget;
    ``maintain --restore`` puts it back without the erased client's rows, and says so."""
    path = config(tmp_path, emulator, 'ip = "keep"')
    cli(path, "ingest")
    lake = lake_of(load_test_config(path))
    table = lake.open(REQUESTS)
    files = pa.table(table.get_add_actions(flatten=True))["path"].to_pylist()
    root = load_test_config(path).storage.root / "lake" / "requests"
    frames = {f: pl.read_parquet(root / f) for f in files}
    victim = max(files, key=lambda f: frames[f].height)
    address = frames[victim]["remote_ip"].value_counts(sort=True)["remote_ip"][0]
    held = frames[victim].filter(pl.col("remote_ip") == address)
    assert held.height >= 2, "the test has nothing to erase"
    set_aside(lake, REQUESTS, table, victim, "a test's damage", no_rewind)
    table.repair(dry_run=False)

    out = cli(path, "forget", "--ip", address)
    assert "NOT SEARCHED: 1 damaged file(s)" in out, out
    out = cli(path, "maintain", "--restore")
    kept = frames[victim].height - held.height
    assert f"{kept} rows added, 0 already in the table, {held.height} held back (erased)" in out
    rows = lake_frame(load_test_config(path))
    assert rows.filter(pl.col("remote_ip") == address).height == 0
    restored = set(frames[victim]["request_id"]) - set(held["request_id"])
    assert restored <= set(rows["request_id"])


def test_backfill_after_a_forget_holds_back_the_erased_rows(tmp_path):
    emu = start_emulator(
        f"{ZONE}:archived:fullip",
        rpm=1,
        archive_days=2,
        archive_limits=ArchiveLimits(max_open_seconds=86400, idle_seconds=86400),
    )
    try:
        path = archive_config(tmp_path, emu)
        day = (NOW - timedelta(days=1)).date()
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        address, ids = busiest(emu, ZONE, start, start + timedelta(days=1))
        on_day = {
            r.wire.requestId
            for r in emu.traffic.records(ZONE, to_ms(start), to_ms(start + timedelta(days=1)))
            if r.wire.remoteIp == address
        }
        assert len(on_day) >= 2, "the test has nothing to erase"
        done = archive_cli(path, "forget", "--ip", address)
        assert done.returncode == 0, done.stdout + done.stderr
        done = archive_cli(
            path, "backfill", "--zone", str(ZONE), "--from", str(day), "--to", str(day)
        )
        assert done.returncode == 0, done.stdout + done.stderr
        (summary,) = [x for x in done.stdout.splitlines() if x.startswith("backfill zone")]
        assert held_back(summary) == len(on_day), summary
        stored = ids_of(path)
        assert stored and not ids & stored
    finally:
        emu.stop()


def test_forwarded_rows_after_a_forget_are_held_back_by_the_daemons_receiver(tmp_path, emulator):
    port = free_port()
    path = daemon_config(tmp_path, emulator, f"127.0.0.1:{port}", flush=600)
    done = cli(path, "forget", "--ip", "198.51.100.7")  # the client of line 7
    assert "198.51.100.7" not in done
    lines = [
        synthetic(i, start_ms=to_ms(datetime.now(UTC) - timedelta(hours=1))) for i in range(20)
    ]
    proc = spawn_daemon(path)
    wait_for_line(proc, f"forwarding: receiving tcp syslog on 127.0.0.1:{port}")
    send_tcp(("127.0.0.1", port), b"".join(syslog(line) + b"\n" for line in lines))
    code, _took, err = stop(proc)
    assert code == 0, err
    # line 7, and line 0: 198.51.100.0 is the client's /24 as an anonymising provider
    # stores it, which the erasure holds back too
    assert "forwarding stopped: 20 messages, 18 new rows, 0 known, 2 held back (erased)" in err
    stored = ids_of(path)
    assert {f"req{i:08d}" for i in range(20)} - stored == {"req00000000", "req00000007"}


def test_import_v1_holds_back_an_erased_address(tmp_path, emulator):
    path = config(tmp_path, emulator, 'ip = "keep"')
    now_ms = to_ms(datetime.now(UTC))
    address = "192.0.2.77"
    clients = [address if i % 2 else f"198.51.100.{i + 1}" for i in range(8)]
    lines = [
        f"MISS|200|{now_ms - 60_000 + i}|512|{ZONE}|{clients[i]}|-|"
        f"https://h/{i}|WA|curl/8|{i:032x}|DE"
        for i in range(8)
    ]
    source = tmp_path / "day.log"
    source.write_text("\n".join(lines) + "\n")
    cli(path, "import-v1", str(source), "--zone", str(ZONE))
    out = cli(path, "forget", "--ip", address)
    assert "4 request(s) of that address removed" in out, out
    out = cli(path, "import-v1", str(source), "--zone", str(ZONE))  # exit 0: nothing failed
    (summary,) = [x for x in out.splitlines() if x.startswith("imported 1 file(s)")]
    assert held_back(summary) == 4 and "0 new rows, 4 duplicates dropped" in summary, out
    assert ids_of(path) == {f"{i:032x}" for i in range(0, 8, 2)}


@pytest.fixture
def spoiling() -> Iterator[Emulator]:
    emu = start_emulator(
        f"{ZONE}:fullip", rpm=1, now=datetime.now(UTC), faults=Faults(bad_record_rate=RATE)
    )
    yield emu
    emu.stop()


def naming(address: str) -> object:
    """The shield's ``day_events`` with two more each day: one spoiled (a rejected line)
    whose log names ``address`` (a WAF log naming the client), one that decodes (a day of
    nothing but rejects fails its pass)."""
    original = ShieldRoutes.day_events
    labels = {
        "asn": "3320",
        "country": "DE",
        "ruleId": "x",
        "severity": "NOTICE",
        "method": "GET",
        "ruleGroup": "SCANNER",
        "status": "logged",
        "serverZone": "DE",
    }

    def day_events(self: ShieldRoutes, zone: int, day: datetime) -> list[dict[str, object]]:
        ms, tag = to_ms(day) + 1000, f"{zone}-{day:%Y%m%d}"
        log = json.dumps({"rule": "x", "client": address})
        spoiled = {"logId": f"{tag}-erased", "timestamp": "not-a-time", "log": log}
        good = {"logId": f"{tag}-kept", "timestamp": ms, "log": json.dumps({"rule": "x"})}
        return [
            {**spoiled, "labels": labels},
            {**good, "labels": labels},
            *original(self, zone, day),
        ]

    return day_events


@pytest.mark.parametrize(
    ("zone", "later"),
    [(ZONE, "keep"), (SHIELD_ZONE, "keep"), (ZONE, "truncate"), (SHIELD_ZONE, "truncate")],
    ids=["pull", "shield", "pull-keep-truncate", "shield-keep-truncate"],
)
def test_a_later_pass_stores_no_rejected_line_of_the_erased_address(
    tmp_path, spoiling, monkeypatch, zone, later
):
    """Pull zone: a record the provider serves spoiled (a rejected line) holding the erased
    address, read again by ``ingest --from/--to``. Shield zone: today's events are read
    again by every pass, the spoiled one naming the erased address with them. Erased under
    ``keep``, read again under ``truncate``: not stored truncated either (held before it
    is scrubbed)."""
    start, end, reread = span(spoiling)
    bad = [
        r.wire
        for r in spoiling.traffic.records(ZONE, to_ms(start), to_ms(end))
        if is_bad_record(r.wire.requestId, RATE) and ":" not in r.wire.remoteIp
    ]
    assert bad, "the test has no spoiled record"
    address = bad[0].remoteIp
    erased = [w.requestId for w in bad if w.remoteIp == address]
    monkeypatch.setattr(ShieldRoutes, "day_events", naming(address))

    def configured(ip: str) -> Path:
        path = config(tmp_path, spoiling, f'ip = "{ip}"')
        path.write_text(path.read_text() + f"[[shield_zones]]\nid = {SHIELD_ZONE}\n")
        return path

    path = configured("keep")
    source = "shield" if zone == SHIELD_ZONE else "v2"

    def holding() -> int:
        rejected = lake_frame(load_test_config(path), "rejected_lines")
        mine = rejected.filter((pl.col("zone") == zone) & (pl.col("source") == source))
        hit = pl.col("raw_line").str.contains(address, literal=True)
        hit = (
            hit | pl.col("request_id").is_in(erased) | pl.col("request_id").str.ends_with("-erased")
        )
        return mine.filter(hit).height

    cli(path, "ingest")
    assert holding() > 0, "the test has nothing to erase"
    out = cli(path, "forget", "--ip", address)
    assert re.search(r"[1-9]\d* rejected line\(s\)", out), out
    assert holding() == 0
    path = configured(later)
    if zone == SHIELD_ZONE:
        out = cli(path, "ingest", "--zone", str(SHIELD_ZONE))
    else:
        out = cli(path, "ingest", "--zone", str(ZONE), *reread)
    assert holding() == 0, out
    assert lake_frame(load_test_config(path), "rejected_lines").height > 0  # the others stay


def test_forget_under_drop_and_of_a_request_id_says_what_it_did(tmp_path, emulator):
    """Under ``ip = "drop"`` no stored row holds an address: forget says so, not just 0;
    ``--request-id`` says the request id is recorded as a keyed hash, naming no address."""
    path = config(tmp_path, emulator, 'ip = "drop"')
    cli(path, "ingest")
    start, end, _ = span(emulator)
    address, ids = busiest(emulator, ZONE, start, end)
    stored = sorted(ids & ids_of(path))
    assert stored, "the test has nothing to erase"
    out = cli(path, "forget", "--ip", address)
    assert "0 request(s) of that address removed" in out, out
    assert 'ip = "drop": client addresses are not stored' in out and address not in out
    out = cli(path, "forget", "--request-id", stored[0])
    assert "1 request removed" in out and "keyed hash of the request id" in out, out
    assert "address" not in out
    assert stored[0] not in ids_of(path)


def test_a_rotated_key_refuses_until_the_retired_key_is_kept(tmp_path, emulator):
    """``hash_key_env`` rotated after a forget: a re-read refuses the zone's rows in one
    line until the old key is in ``<root>/work/erasure-retired.keys``; then it holds the
    erased rows back again."""
    path = config(tmp_path, emulator, f'ip = "keep"\n{HASH}')
    cli(path, "ingest")
    start, end, reread = span(emulator)
    address, ids = busiest(emulator, ZONE, start, end)
    cli(path, "forget", "--ip", address)
    new = "rotated-key-" + "n" * 32
    out = cli(path, "ingest", "--zone", str(ZONE), *reread, code=1, key=new)
    assert "privacy.hash_key_env" in refusal(out) and address not in out
    retired = load_test_config(path).storage.root / "work" / RETIRED_FILE
    retired.write_text(KEY.encode().hex() + "\n")
    out = cli(path, "ingest", "--zone", str(ZONE), *reread, key=new)
    assert held_back(out) > 0, out
    assert not ids & ids_of(path)
