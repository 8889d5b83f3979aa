"""Issue 48's smaller points, through the command line against the loopback emulator:
what ``status`` and the report say was stored (keyed hashes of networks; nothing for a
zone without rows), ``forget --from/--to`` and rejected lines, and a ``forget`` beside a
daemon committing every second or two, which waits its turn and finishes.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from cdnlake.emulator import Emulator, EmulatorConfig, ZoneSpec
from tests.conftest import KEY as TEST_KEY
from tests.conftest import lake_frame, load_test_config, run_cli, spawn_cli, start_emulator
from tests.conftest import write_config as emulator_config

ZONE, IDLE = 1234, 1236
KEY_ENV, KEY = "FORGET_CLI_KEY", "forget-cli-key-" + "x" * 32


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = start_emulator(f"{ZONE},{IDLE}", rpm=5, now=datetime.now(UTC), frozen=True)
    yield emu
    emu.stop()


def config(tmp_path: Path, emu: Emulator, privacy: str, zones=((ZONE, "v2"),)) -> Path:
    """The emulator's config with ``[privacy]`` lines ``privacy`` (rewritten in place)."""
    path = emulator_config(tmp_path, emu, list(zones))
    text = path.read_text()
    if "[privacy]" in text:  # the same file, another setting
        text = text[: text.index("[privacy]")]
    path.write_text(text + f"[privacy]\n{privacy}\n")
    return path


def cli(path: Path, *args: str, code: int = 0) -> str:
    done = run_cli("--config", str(path), *args, env={KEY_ENV: KEY}, timeout=300)
    assert done.returncode == code, done.stdout + done.stderr
    return done.stdout


def status_json(path: Path) -> dict[int, dict[str, object]]:
    done = run_cli("--config", str(path), "status", "--format", "json", env={KEY_ENV: KEY})
    return {z["zone_id"]: z for z in json.loads(done.stdout)}


def clients_row(path: Path, tmp_path: Path, day: str) -> list[dict[str, object]]:
    out = tmp_path / f"report-{time.monotonic_ns()}"
    cli(path, "report", "--date", day, "--format", "json", "--out", str(out))
    (report,) = out.glob("*.json")
    rows: list[dict[str, object]] = json.loads(report.read_text())["sections"]["clients"]["rows"]
    return rows


def test_truncated_then_hashed_rows_are_called_keyed_hashes_of_networks(tmp_path, emulator):
    """Stored under truncate, then ``ip = "hash"`` and ``--apply-privacy``: status and the
    report say keyed hashes of /24 networks (never "by keyed hash", never asking for an
    apply-privacy that has nothing to do); forget of one address of a network finds its
    rows and names the network."""
    path = config(tmp_path, emulator, 'ip = "truncate"')
    cli(path, "ingest")
    stored = lake_frame(load_test_config(path))
    network = stored["remote_ip"].value_counts(sort=True)["remote_ip"][0]  # e.g. a.b.c.0
    busy = stored.filter(pl.col("remote_ip") == network).height
    day = str(stored["date"].max())

    path = config(tmp_path, emulator, f'ip = "hash"\nhash_key_env = "{KEY_ENV}"')
    cli(path, "maintain", "--apply-privacy")
    zone = status_json(path)[ZONE]
    assert "keyed hashes of /24 (IPv4) and /64 (IPv6) networks" in str(zone["privacy"])
    shown = cli(path, "status", code=0 if zone["healthy"] else 1)
    assert "stored: ip keyed hashes of /24" in shown and "apply-privacy" not in shown
    (row,) = clients_row(path, tmp_path, day)
    assert str(row["addresses_stored"]).startswith("ip keyed hashes of /24 (IPv4)")
    assert "by keyed hash" not in str(row["counted"]) and "networks" in str(row["counted"])
    again = cli(path, "maintain", "--apply-privacy")
    assert "stored under this setting already" in again  # nothing it could rewrite

    one = network.rsplit(".", 1)[0] + ".77"
    out = cli(path, "forget", "--ip", one)
    prefix = network.rsplit(".", 1)[0]
    assert f"removed (zone {ZONE}: {busy})" in out, out
    assert f"the keyed hash of network {network}/24" in out
    assert f"the rows held the network {network}/24" in out and one not in out
    assert f"every request stored as the network {network}/24 or its keyed hash" in out
    assert prefix + "." not in out.replace(f"{network}/24", "")


def test_a_zone_without_rows_is_neither_described_nor_sent_to_apply_privacy(tmp_path, emulator):
    """Zone 1236 is configured but never ingested; an erasure of every zone gives it a
    mark. Status and the report do not say its rows were stored "ip keep, URLs whole",
    nor ask for --apply-privacy."""
    path = config(tmp_path, emulator, 'ip = "truncate"', zones=((ZONE, "v2"), (IDLE, "v2")))
    cli(path, "ingest", "--zone", str(ZONE))
    cli(path, "forget", "--ip", "192.0.2.44")
    zones = status_json(path)
    assert zones[IDLE]["privacy"] is None and zones[IDLE]["privacy_pending"] is False
    shown = run_cli("--config", str(path), "status").stdout
    assert f"zone {IDLE} (v2) stored" not in shown and "apply-privacy" not in shown, shown
    assert "stored under this setting already" in cli(path, "maintain", "--apply-privacy")
    day = str(lake_frame(load_test_config(path))["date"].max())
    (row,) = clients_row(path, tmp_path, day)
    assert row["zones"] == str(ZONE) and str(row["addresses_stored"]).startswith("ip truncate")


def test_forget_from_to_limits_its_removal_of_rejected_lines(tmp_path, emulator):
    """A rejected line of today's import holding the address stays when the erasure's days
    are last week's, and goes with an erasure of every day."""
    path = config(tmp_path, emulator, 'ip = "keep"')
    address = "192.0.2.55"
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    good = f"MISS|200|{now_ms - 60_000}|512|{ZONE}|{address}|-|https://h/a|WA|curl/8|rq-1|DE"
    bad = f"MISS|200|not-a-time|512|{ZONE}|{address}|-|https://h/b|WA|curl/8|rq-2|DE"
    source = tmp_path / "day.log"
    source.write_text(f"{good}\n{bad}\n")
    # Both lines rejected ("rq-1" is too short for a request id): a file that gives no row
    # fails (exit 1); one that gives some is done (0), its rejects kept all the same.
    cli(path, "import-v1", str(source), "--zone", str(ZONE), code=1)
    week = datetime.now(UTC).date() - timedelta(days=8)
    days = ["--from", str(week), "--to", str(week + timedelta(days=1))]
    out = cli(path, "forget", "--ip", address, *days)
    assert "0 rejected line(s)" in out, out
    rejected = lake_frame(load_test_config(path), "rejected_lines")["raw_line"].to_list()
    assert any(address in line for line in rejected)
    held = sum(address in line for line in rejected)
    out = cli(path, "forget", "--ip", address)
    assert f"{held} rejected line(s)" in out, out
    rejected = lake_frame(load_test_config(path), "rejected_lines")["raw_line"].to_list()
    assert not any(address in line for line in rejected)


def test_forget_ip_removes_rejected_lines_holding_the_address_written_otherwise(tmp_path, emulator):
    """``forget --ip`` given in one IPv6 spelling removes the rejected lines (``ip =
    "keep"``: raw text as the source wrote it) holding the same address in others: upper
    case, leading zeros, expanded, bracketed with a port, with a zone index; a line of
    the neighbouring address stays."""
    path = config(tmp_path, emulator, 'ip = "keep"')
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    spellings = [
        "2001:DB8:0:0:0:0:0:A",
        "2001:0db8:0000:0000:0000:0000:0000:000a",
        "2001:db8::a%eth0",
        "-|https://[2001:db8:0::a]:8443/b",
    ]
    line = "MISS|200|{ms}|512|" + str(ZONE) + "|{ip}|-|https://h/a|WA|curl/8|{n:032x}|DE"
    lines = [line.format(ms=now_ms - 60_000, ip="2001:db8::a", n=0)]  # stored
    lines += [line.format(ms="bad", ip=ip, n=n) for n, ip in enumerate(spellings, 1)]
    lines.append(line.format(ms="bad", ip="2001:db8::a0", n=9))  # not the address
    source = tmp_path / "day.log"
    source.write_text("\n".join(lines) + "\n")
    cli(path, "import-v1", str(source), "--zone", str(ZONE))  # five lines rejected
    config_now = load_test_config(path)
    assert lake_frame(config_now, "rejected_lines").height == 5
    out = cli(path, "forget", "--ip", "2001:db8:0::000A")
    assert "4 rejected line(s)" in out, out
    (kept,) = lake_frame(config_now, "rejected_lines")["raw_line"].to_list()
    assert "|2001:db8::a0|" in kept
    assert lake_frame(config_now).filter(pl.col("remote_ip") == "2001:db8::a").is_empty()


def test_forget_beside_a_daemon_committing_every_second_finishes(tmp_path):
    """A daemon polls a live emulator every second and commits each pass; ``forget``
    beside it waits its turn for each zone (its lock) and finishes: exit 0, the rows of
    the address up to the erasure gone, every other request still there once."""
    now = datetime.now(UTC)
    # 10 requests/s from two minutes ago on (not three days of history at that rate).
    since = int((now - timedelta(minutes=2)).timestamp() * 1000)
    live = {ZONE: ZoneSpec(ZONE, per_second=10, since_ms=since)}
    emu = Emulator(
        EmulatorConfig(port=0, access_key=TEST_KEY, zones=live, rate_limit=1000, now=now)
    ).start()
    try:
        path = emulator_config(tmp_path, emu, [(ZONE, "v2")], lag_seconds=1, overlap_seconds=5)
        cli(path, "ingest")
        before = lake_frame(load_test_config(path))
        address = before["remote_ip"].value_counts(sort=True)["remote_ip"][0]
        log = tmp_path / "daemon.log"
        with log.open("w") as out:
            daemon = spawn_cli("--config", str(path), "--log-level", "INFO", "daemon", stderr=out)
            try:
                deadline = time.monotonic() + 60
                while log.read_text().count(f"zone {ZONE}") < 3 and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert log.read_text().count(f"zone {ZONE}") >= 3, log.read_text()[-2000:]
                acknowledged = lake_frame(load_test_config(path))  # the daemon's commits
                started = datetime.now(UTC)
                done = run_cli("--config", str(path), "forget", "--ip", address, timeout=120)
                took = (datetime.now(UTC) - started).total_seconds()
                assert daemon.poll() is None, "the daemon stopped beside forget"
            finally:
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "request(s) of that address removed" in done.stdout
        after = lake_frame(load_test_config(path))
        assert after.filter((pl.col("remote_ip") == address) & (pl.col("ts") < started)).is_empty()
        ids = after["request_id"].to_list()
        assert len(ids) == len(set(ids))
        kept = acknowledged.filter(pl.col("remote_ip") != address)["request_id"].to_list()
        assert set(kept) <= set(ids)
        assert took < 60, f"forget took {took:.0f} s"
    finally:
        emu.stop()


def test_a_waiter_gets_its_turn_beside_passes_that_take_the_lock_again_at_once(tmp_path):
    """Passes that take the zone's lock again the moment they let go (no gap to catch)
    do not keep a waiting ``forget`` out: while it waits, a pass about to start finds the
    zone busy, naming it, so it waits for the pass in flight only."""
    from cdnlake.errors import ZoneBusyError
    from cdnlake.lake.zone.lock import zone_lock

    stop, busy, passes = threading.Event(), [], [0]

    def daemon() -> None:
        while not stop.is_set():
            try:
                with zone_lock(tmp_path, "requests", ZONE):
                    passes[0] += 1
                    stop.wait(0.05)  # the pass's work
            except ZoneBusyError as exc:
                busy.append(str(exc))

    running = threading.Thread(target=daemon)
    running.start()
    try:
        while passes[0] < 3:  # the daemon is taking turns
            time.sleep(0.01)
        with zone_lock(tmp_path, "requests", ZONE, wait=10):
            during = passes[0]
            stop.wait(0.3)
            assert passes[0] == during  # no pass while it holds the zone
    finally:
        stop.set()
        running.join()
    assert busy and f"pull zone {ZONE} is" in busy[0]
