"""Review 3's findings 1 to 3 (issue 48) as the probes it describes, through the command
line against the loopback emulator. Each failed when written.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cdnlake.emulator import Emulator
from cdnlake.lake.log.progress import to_ms
from cdnlake.lake.zone.erasure_key import RETIRED_FILE
from tests.conftest import load_test_config, run_cli, start_emulator
from tests.lake.test_erasure_holds import (
    HASH,
    KEY,
    KEY_ENV,
    LATER,
    ZONE,
    busiest,
    cli,
    config,
    span,
)
from tests.lake.test_erasure_paths import ids_of

A, B = "192.0.2.10", "192.0.2.20"  # two clients of one /24


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = start_emulator(f"{ZONE}:fullip,{LATER}:fullip", rpm=1, now=datetime.now(UTC))
    yield emu
    emu.stop()


def day_file(tmp_path: Path, zone: int) -> tuple[Path, set[str]]:
    """Three requests of A and three of B, in a v1 file of ``zone``; B's request ids."""
    now_ms = to_ms(datetime.now(UTC))
    lines = [
        f"MISS|200|{now_ms - 60_000 + i}|512|{zone}|{A if i < 3 else B}|-|https://h/{i}|WA|"
        f"curl/8|{zone:04d}{i:028x}|DE"
        for i in range(6)
    ]
    source = tmp_path / f"day-{zone}.log"
    source.write_text("\n".join(lines) + "\n")
    return source, {f"{zone:04d}{i:028x}" for i in range(3, 6)}


def test_a_neighbour_in_the_erased_addresses_network_is_stored_after_keep_to_truncate(
    tmp_path, emulator
):
    path = config(tmp_path, emulator, 'ip = "keep"')
    source, _ = day_file(tmp_path, ZONE)
    cli(path, "import-v1", str(source), "--zone", str(ZONE))
    out = cli(path, "forget", "--ip", A)
    assert "3 request(s) of that address removed" in out, out
    path = config(tmp_path, emulator, 'ip = "truncate"', zones=(ZONE, LATER))
    out = cli(path, "import-v1", str(source), "--zone", str(ZONE))
    assert "0 new rows, 3 duplicates dropped" in out and "3 held back (erased)" in out, out
    later, neighbour = day_file(tmp_path, LATER)  # a zone configured after the forget
    out = cli(path, "import-v1", str(later), "--zone", str(LATER))
    assert "3 new rows" in out and "3 held back (erased)" in out, out
    assert neighbour <= ids_of(path)


def test_a_lost_erasure_is_not_hidden_by_a_later_forget(tmp_path, emulator):
    path = config(tmp_path, emulator, 'ip = "keep"')
    start, end, _ = span(emulator)
    address, ids = busiest(emulator, ZONE, start, end)
    cli(path, "forget", "--ip", address)
    # lost: an older backup of the table put back, its folder deleted by hand
    shutil.rmtree(load_test_config(path).storage.root / "lake" / "erasures")
    out = cli(path, "forget", "--ip", "198.51.100.99")  # the next person's request
    assert "LOST: the erasure marks name erasure-" in out, out
    done = run_cli("--config", str(path), "ingest", env={KEY_ENV: KEY}, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a later erasure names erasures the relation erasures does not hold" in (
        done.stdout + done.stderr
    )
    assert address not in done.stdout + done.stderr
    assert not ids & ids_of(path), "the erased client's rows came back"
    cli(path, "forget", "--ip", address, "--replaces-lost")  # the operator runs it again
    cli(path, "ingest")
    stored = ids_of(path)
    assert stored and not ids & stored


def test_forget_under_hash_after_a_rotation_finds_the_rows_with_the_retired_key(tmp_path, emulator):
    path = config(tmp_path, emulator, f'ip = "hash"\n{HASH}')
    cli(path, "ingest")
    start, end, _ = span(emulator)
    address, ids = busiest(emulator, ZONE, start, end)
    assert ids & ids_of(path), "the test has nothing to erase"
    retired = load_test_config(path).storage.root / "work" / RETIRED_FILE
    retired.parent.mkdir(parents=True, exist_ok=True)
    retired.write_text(KEY.encode().hex() + "\n")  # docs/privacy.md's rotation
    new = "rotated-key-" + "n" * 32
    out = cli(path, "forget", "--ip", address, key=new)
    assert address not in out
    assert not ids & ids_of(path)
