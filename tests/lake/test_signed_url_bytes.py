"""Proof by bytes for signed URLs (#48): every form the provider signs with (its README,
"Token authentication") leaves no byte of its token under the root.

The real command line over the loopback emulator, whose ``signed`` zones sign a fifth of
their URLs: in the query string (``&`` and ``;`` separated, a JWT) and as directory tokens
(the path's first segment: plain, percent-encoded in upper case, ``HS256-``). ``ingest``
reads a v2 zone (some records spoiled: rejected lines), a v1 zone and a shield zone (its
events' paths signed too); ``import-v1`` a file of signed lines, some rejected; ``report``
writes HTML and CSV. Then no file under the root (Parquet decompressed, Delta logs and
checkpoints, rejected lines, reports) holds a token, the directory form's real path is
kept for analytics, and ``maintain --apply-privacy`` brings a lake stored with URLs whole
to the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from cdnlake.emulator import Emulator, Faults
from cdnlake.emulator.traffic import signed
from tests.cli.test_privacy_cli import stored_bytes, unsigned
from tests.conftest import lake_frame, load_test_config, run_cli, start_emulator, write_config

ZONE, V1_ZONE, SHIELD_ZONE = 1234, 1235, 5001
TOKEN = re.compile(rb"(?i)tk[0-9a-f]{22}")  # every token value the emulator signs with
FORMS = {  # the form of a signed URL, by what tells it
    "query": re.compile(r"[?&]token="),
    "semicolon": re.compile(r";token="),
    "jwt": re.compile(r"=eyJ"),
    "directory": re.compile(r"/bcdn_token=tk"),
    "directory, encoded": re.compile(r"/BCDN_TOKEN%3D"),
    "directory, HS256": re.compile(r"/bcdn_token=HS256-"),
}


def leaks(root: Path) -> list[str]:
    """Every file under ``root`` holding a token value, with the first one it holds."""
    found = []
    for path, data in stored_bytes(root):
        match = TOKEN.search(data)
        if match:
            start = max(0, match.start() - 60)
            found.append(f"{path.relative_to(root)}: {data[start : match.end()]!r}")
    return found


def signed_lines(zone: int, start: datetime, count: int = 600) -> str:
    """v1 lines of ``zone`` whose URLs the emulator signs (a fifth of them), each fifth
    line rejected (its status is no number)."""
    ms = int(start.timestamp() * 1000)
    lines = []
    for i in range(count):
        url, _ = signed(f"https://v.example/v/{i % 7}/seg{i}.ts", f"/v/{i % 7}/seg{i}.ts", 9, i)
        status = "abc" if i % 5 == 0 else "200"
        lines.append(
            f"MISS|{status}|{ms + i}|512|{zone}|198.51.100.{i % 250}|-|{url}|WA|UA|"
            f"signed-{i:05d}|DE"
        )
    return "\n".join(lines) + "\n"


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = start_emulator(
        f"{ZONE}:extended:signed,{V1_ZONE}:v1:signed",
        rpm=3,
        now=datetime.now(UTC),
        frozen=True,
        faults=Faults(bad_record_rate=0.02),
    )
    yield emu
    emu.stop()


def config_of(tmp_path: Path, emu: Emulator, privacy: str = "") -> Path:
    path = write_config(tmp_path, emu, [(ZONE, "v2"), (V1_ZONE, "v1")])
    path.write_text(path.read_text() + f"[[shield_zones]]\nid = {SHIELD_ZONE}\n{privacy}")
    return path


def cli(path: Path, *args: str) -> str:
    done = run_cli("--config", str(path), *args, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_no_byte_of_a_signed_urls_token_is_stored(tmp_path: Path, emulator: Emulator) -> None:
    path = config_of(tmp_path, emulator)
    root = load_test_config(path).storage.root
    now = datetime.now(UTC)
    wire = {
        r.wire.requestId: r.wire
        for zone in (ZONE, V1_ZONE)
        for r in emulator.traffic.records(
            zone, int((now - timedelta(days=4)).timestamp() * 1000), int(now.timestamp() * 1000)
        )
    }
    seen = {form for w in wire.values() for form, tell in FORMS.items() if tell.search(w.url)}
    assert seen == set(FORMS), "the emulator signs in every form"

    cli(path, "ingest")
    imported = tmp_path / "signed.log"
    imported.write_text(signed_lines(ZONE, now - timedelta(hours=3)))
    done = run_cli("--config", str(path), "import-v1", str(imported), "--zone", str(ZONE))
    assert done.returncode in (0, 1), done.stderr  # 1: lines rejected
    imported.unlink()  # the operator's input, not cdnlake's
    for day in (now.date() - timedelta(days=1), now.date()):
        cli(path, "report", "--date", day.isoformat(), "--format", "html,csv")

    # The test has something to find: signed requests, rejected lines, shield events.
    requests = lake_frame(root)
    stored = requests.filter(pl.col("request_id").is_in(list(wire)))
    signed_ids = [r for r in stored["request_id"].to_list() if TOKEN.search(wire[r].url.encode())]
    assert len(signed_ids) > 100
    rejected = lake_frame(root, "rejected_lines")
    assert rejected.filter(pl.col("source") == "v2").height > 0
    assert rejected.filter(pl.col("raw_line").str.contains("/v/")).height >= 100
    events = lake_frame(root, "shield_events")
    assert events.filter(pl.col("log").str.contains("/login")).height > 0
    assert list((root / "reports").rglob("*.csv")) and list((root / "reports").rglob("*.html"))

    assert leaks(tmp_path) == []
    # What is kept: the URL without its signing, the directory form's real path.
    for rid, url, kept_path in stored.select("request_id", "url", "path").iter_rows():
        assert url == unsigned(wire[rid].url)
        if FORMS["directory"].search(wire[rid].url):
            assert kept_path == "/" + wire[rid].path.split("/", 2)[2]
    imported_paths = set(requests.filter(pl.col("request_id").str.starts_with("signed-"))["path"])
    assert imported_paths == {f"/v/{i % 7}/seg{i}.ts" for i in range(600) if i % 5}


def test_apply_privacy_scrubs_signed_urls_stored_whole(tmp_path: Path, emulator: Emulator) -> None:
    """A lake stored with URLs whole (``strip_query = []``), then scrubbed
    (``strip_query`` back to its default): ``maintain --apply-privacy --vacuum-now``
    rewrites url, path, referer, rejected lines and shield events with every form."""
    whole = config_of(tmp_path, emulator, "[privacy]\nstrip_query = []\n")
    imported = tmp_path / "signed.log"
    imported.write_text(signed_lines(ZONE, datetime.now(UTC) - timedelta(hours=3), 200))
    run_cli("--config", str(whole), "import-v1", str(imported), "--zone", str(ZONE))
    imported.unlink()
    cli(whole, "ingest")
    cli(whole, "maintain")
    assert leaks(tmp_path), "stored whole: the test has something to find"

    scrubbed = config_of(tmp_path, emulator)
    out = cli(scrubbed, "maintain", "--apply-privacy", "--vacuum-now")
    assert "the old bytes have left storage" in out, out
    assert leaks(tmp_path) == []
    paths = set(lake_frame(load_test_config(scrubbed))["path"].to_list())
    assert "/v/1/seg1.ts" in paths and not [p for p in paths if "token" in p.lower()]
