"""Proof by bytes: after ``cdnlake forget --ip ... --vacuum-now`` no file under the storage
root or the lake holds the address or a URL token of its requests: Parquet data files read
decompressed, the Delta log and its checkpoints, the quarantine, work files, the reports
written after it, and the daemon's log output (at DEBUG). A re-read of the span the
provider still serves, and the daemon's passes, store none of them again, and exactly once
still holds: every other request id is there, once, untouched.

The real command line over the loopback emulator: ``ingest``, ``import-v1`` (rows and a
rejected line holding the address), ``maintain`` (compaction: older copies and log
statistics), ``forget``, ``ingest --from/--to`` (a re-read), ``daemon``, ``report``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from cdnlake.emulator import Emulator
from tests.conftest import (
    lake_frame,
    load_test_config,
    run_cli,
    spawn_cli,
    start_emulator,
    write_config,
)

ZONE = 1234
TOKEN = "sig=SIGTOKEN4242abc"


def holders(root: Path, needles: list[str]) -> list[str]:
    """Every file under ``root`` whose bytes, or (Parquet) whose decompressed values,
    hold one of ``needles``."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        texts = [data.decode("utf-8", "replace")]
        if data[:4] == b"PAR1":
            table = pq.read_table(path)
            texts += [str(column.to_pylist()) for column in table.columns]
        for needle in needles:
            if any(needle in text for text in texts):
                found.append(f"{path.relative_to(root)}: {needle}")
    return found


def v1_lines(address: str, day_ms: int) -> str:
    good = [
        f"MISS|200|{day_ms + i * 1000}|512|{ZONE}|{address}|-|"
        f"https://cdn.example.net/f{i}.zip?{TOKEN}|WA|curl/8|erased-{i:04d}|DE"
        for i in range(20)
    ]
    bad = f"MISS|200|not-a-time|512|{ZONE}|{address}|-|https://cdn.example.net/x?{TOKEN}|WA|curl/8|bad-1|DE"
    return "\n".join([*good, bad]) + "\n"


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    # Frozen at now: the provider serves the last 3 days and no request comes after the
    # erasure (one of the client's after it would be new data, stored as it should be).
    emu = start_emulator(str(ZONE), rpm=5, now=datetime.now(UTC), frozen=True)
    yield emu
    emu.stop()


def test_after_forget_and_vacuum_no_byte_holds_the_address(tmp_path, emulator):
    path = write_config(tmp_path, emulator, [(ZONE, "v2")])
    config = load_test_config(path)
    root = config.storage.root
    assert run_cli("--config", str(path), "ingest").returncode == 0
    frame = lake_frame(config)
    address = frame["remote_ip"].value_counts(sort=True)["remote_ip"][0]
    day = (datetime.now(UTC) - timedelta(hours=6)).replace(minute=0, second=0, microsecond=0)
    v1 = tmp_path / "extra.log"
    v1.write_text(v1_lines(address, int(day.timestamp() * 1000)))
    imported = run_cli("--config", str(path), "import-v1", str(v1), "--zone", str(ZONE))
    assert imported.returncode in (0, 1), imported.stderr
    assert run_cli("--config", str(path), "maintain").returncode == 0
    before = lake_frame(config)
    assert holders(root, [address, TOKEN]), "the test has nothing to find"
    erased = set(before.filter(pl.col("remote_ip") == address)["request_id"].to_list())
    assert len(erased) > 20

    done = run_cli("--config", str(path), "forget", "--ip", address, "--vacuum-now")
    assert done.returncode == 0, done.stderr
    assert f"{len(erased)} request(s) of that address removed" in done.stdout
    assert "1 rejected line(s)" in done.stdout

    # The same file imported again, the span the provider still serves read again, and the
    # daemon's passes: none of them stores the rows again.
    again = run_cli("--config", str(path), "import-v1", str(v1), "--zone", str(ZONE))
    assert again.returncode in (0, 1), again.stderr
    v1.unlink()  # the operator's input, not cdnlake's
    span = [
        "--from",
        f"{day - timedelta(hours=2):%Y-%m-%dT%H:%MZ}",
        "--to",
        f"{day:%Y-%m-%dT%H:%MZ}",
    ]
    reread = run_cli("--config", str(path), "ingest", "--zone", str(ZONE), *span)
    assert reread.returncode == 0, reread.stderr
    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        daemon = spawn_cli("--config", str(path), "--log-level", "DEBUG", "daemon", stderr=out)
        try:
            deadline = time.monotonic() + 60
            while "zone 1234" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
    assert "zone 1234" in log.read_text(), log.read_text()[-2000:]
    reported = run_cli("--config", str(path), "report", "--date", f"{day:%Y-%m-%d}")
    assert reported.returncode == 0, reported.stderr

    assert holders(tmp_path, [address, TOKEN]) == []
    after = lake_frame(config)
    ids = after["request_id"].to_list()
    assert len(ids) == len(set(ids)), "a request was stored twice"
    assert set(before["request_id"].to_list()) - erased <= set(ids)
    assert not erased & set(ids)


def test_after_apply_privacy_no_byte_holds_a_whole_address(tmp_path):
    """The same proof after ``[privacy] ip`` changes from keep to truncate and
    ``maintain --apply-privacy --vacuum-now``."""
    path = tmp_path / "config.toml"
    base = '[storage]\nroot = "data"\n[[zones]]\nid = 1234\n'
    path.write_text(base)
    address = "203.0.113.77"
    start = datetime.now(UTC) - timedelta(hours=5)
    lines = [
        f"MISS|200|{int(start.timestamp() * 1000) + i * 1000}|512|{ZONE}|"
        f"{address if i % 3 else '198.51.100.9'}|-|https://cdn.example.net/f{i}.zip|WA|curl/8|"
        f"apply-{i:04d}|DE"
        for i in range(60)
    ]
    v1 = tmp_path / "day.log"
    for half in (lines[:30], lines[30:]):  # two files in the day: maintain compacts them
        v1.write_text("\n".join(half) + "\n")
        assert (
            run_cli("--config", str(path), "import-v1", str(v1), "--zone", str(ZONE)).returncode
            == 0
        )
    v1.unlink()
    assert run_cli("--config", str(path), "maintain").returncode == 0
    path.write_text(base + '[privacy]\nip = "truncate"\n')
    applied = run_cli("--config", str(path), "maintain", "--apply-privacy", "--vacuum-now")
    assert applied.returncode == 0, applied.stderr
    assert "the old bytes have left storage" in applied.stdout
    assert holders(tmp_path, [address]) == []
    after = lake_frame(load_test_config(path))
    assert sorted(after["request_id"].to_list()) == [f"apply-{i:04d}" for i in range(60)]
    assert set(after["remote_ip"].to_list()) == {"203.0.113.0", "198.51.100.0"}
