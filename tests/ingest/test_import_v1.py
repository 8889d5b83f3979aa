"""import-v1: every bad case of the contract is coped with, counted, never silent."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from cdnlake.ingest.local_import import import_v1_files
from cdnlake.warehouse.db import Warehouse
from tests.conftest import (
    KEY,
    NOW,
    cli_heavy_modules,
    lake_frame,
    lake_ids,
    lake_text_contains,
    load_test_config,
    run_cli,
    write_config,
)
from tests.sessions import session_for

GOOD = (
    "HIT|200|{ts}|412|1234|163.172.53.229|-|https://cdn.example.net/a.m4v|WA|"
    "Mozilla/5.0 (Windows NT 10.0)|{rid}|DE"
)


def write_day_file(emu, path: Path, zone: int) -> Path:
    day = (NOW - timedelta(days=1)).date()
    text = httpx.get(f"{emu.url}/{day:%m-%d-%y}/{zone}.log", headers={"AccessKey": KEY}).text
    path.write_text(text)
    return path


def test_a_file_full_of_bad_cases(tmp_path, emulator):
    config = load_test_config(write_config(tmp_path, emulator, zones=[(1234, "v2")]))
    ts = int((NOW - timedelta(hours=30)).timestamp() * 1000)
    lines = [
        GOOD.format(ts=ts, rid="a" * 32).encode() + b"\r",  # CRLF
        b"",  # blank
        b"   ",  # blank with spaces
        GOOD.format(ts=ts + 1, rid="b" * 32).replace("Mozilla", "Moz\xffilla").encode("latin-1"),
        GOOD.format(ts=ts + 2, rid="c" * 32).replace("163.172.53.229", "2001:db8::").encode(),
        (GOOD.format(ts=ts + 3, rid="d" * 32) + "|1234|bytes=0-99|Bearer TOPSECRET").encode(),
        (GOOD.format(ts=ts + 4, rid="e" * 32) + "|-").encode(),  # 13 fields, '-'
        b"HIT|200|notatime|1|1234|1.2.3.0|-|https://x.example/|WA|-|" + b"f" * 32 + b"|DE",
        b"WARM|200|1|1|1234|1.2.3.0|-|https://x.example/|WA|-|" + b"9" * 32 + b"|DE",
        b"HIT|200|"
        + str(ts).encode()
        + b"|1|999|1.2.3.0|-|https://x.example/|WA|-|"
        + b"8" * 32
        + b"|DE",
        (GOOD.format(ts=ts + 5, rid="7" * 32) + "|1|2|Bearer LEAKED|extra").encode(),  # 16 fields
        b"HIT|200|" + str(ts).encode() + b"|1|1234|1.2.3.0|-|not a url|WA|-|" + b"6" * 32 + b"|DE",
        GOOD.format(ts=ts + 6, rid="g" * 32).encode()[:40],  # truncated last line, no newline
    ]
    src = tmp_path / "bad.log"
    src.write_bytes(b"\n".join(lines))
    result = import_v1_files(config, session_for(config), [src], 1234)
    assert result.rows == 5 and result.rejected == 6 and result.blank == 2
    assert result.lines == len(lines)
    with Warehouse(config.storage).connect() as con:
        rejected = con.execute(
            "SELECT line_number, reason, raw_line FROM rejected_lines ORDER BY line_number"
        ).fetchall()
        rows = con.execute(
            "SELECT request_id, user_agent, remote_ip, body_bytes_sent, content_range "
            "FROM requests ORDER BY request_id"
        ).fetchall()
    assert [r[0] for r in rejected] == [8, 9, 10, 11, 12, 13]
    reasons = " ".join(r[1] for r in rejected)
    for needle in (
        "bad timestamp",
        "unknown cache status",
        "not the imported zone",
        "got 16",
        "not a URL",
        "truncated last line",
    ):
        assert needle in reasons
    assert all("LEAKED" not in r[2] and "TOPSECRET" not in r[2] for r in rejected)
    by_id = {r[0]: r for r in rows}
    assert by_id["b" * 32][1] == "Moz\ufffdilla/5.0 (Windows NT 10.0)"
    assert by_id["c" * 32][2] == "2001:db8::"
    assert by_id["d" * 32][3] == 1234 and by_id["d" * 32][4] == "bytes=0-99"
    assert by_id["e" * 32][3] is None
    assert lake_text_contains(config.storage.root, "TOPSECRET") == []


def test_gzip_and_event_date_partitioning(tmp_path, emulator):
    config = load_test_config(write_config(tmp_path, emulator, zones=[(1234, "v2")]))
    plain = write_day_file(emulator, tmp_path / "day.log", 1234)
    gz = tmp_path / "renamed-2020-01-01.log.gz"  # the name says nothing about the date
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    result = import_v1_files(config, session_for(config), [gz], 1234)
    assert result.rows > 1000 and result.rejected == 0
    day = (NOW - timedelta(days=1)).date().isoformat()
    dates = lake_frame(config)["date"].unique().to_list()
    assert [d.isoformat() for d in dates] == [day]


def test_small_blocks_give_the_same_result(tmp_path, emulator):
    """Streaming in tiny blocks (bounded memory) parses exactly like one big block."""
    from cdnlake.ingest.v1_parser import iter_parsed

    src = write_day_file(emulator, tmp_path / "day.log", 1234)
    big = [r for g, _, _ in iter_parsed(src, 1234) for r in g["request_id"].to_list()]
    small = [
        r for g, _, _ in iter_parsed(src, 1234, block_bytes=4096) for r in g["request_id"].to_list()
    ]
    assert big == small and len(big) > 1000


def test_cli_import_v1_summary_and_exit_code(tmp_path, emulator):
    path = write_config(tmp_path, emulator, zones=[(1234, "v2")])
    src = write_day_file(emulator, tmp_path / "day.log", 1234)
    with open(src, "a") as f:
        f.write("garbage line\n")
    result = run_cli("--config", str(path), "import-v1", str(src), "--zone", "1234")
    assert result.returncode == 0, result.stderr
    assert "1 rejected" in result.stdout
    assert lake_ids(tmp_path / "data", 1234)
    missing = run_cli(
        "--config", str(path), "import-v1", str(tmp_path / "nope.log"), "--zone", "1234"
    )
    assert missing.returncode == 2 and "nope.log" in missing.stderr
    unknown = run_cli("--config", str(path), "import-v1", str(src), "--zone", "999")
    assert unknown.returncode == 2 and "999" in unknown.stderr


@pytest.mark.parametrize(("good", "bad", "code"), [(1, 1, 0), (1, 5, 0), (0, 2, 1)])
def test_the_exit_code_says_whether_a_file_gave_rows_not_how_many_lines_were_bad(
    tmp_path, emulator, good, bad, code
):
    """Rejected lines are kept in rejected_lines and counted, whatever their share: a file
    that gave rows is done (0); one whose every line is rejected failed (1)."""
    path = write_config(tmp_path, emulator, zones=[(1234, "v2")])
    ts = int((NOW - timedelta(hours=30)).timestamp() * 1000)
    lines = [GOOD.format(ts=ts + i, rid=f"{i:032x}") for i in range(good)]
    lines += [GOOD.format(ts="not-a-time", rid=f"{100 + i:032x}") for i in range(bad)]
    src = tmp_path / "day.log"
    src.write_text("\n".join(lines) + "\n")
    result = run_cli("--config", str(path), "import-v1", str(src), "--zone", "1234")
    assert result.returncode == code, result.stdout + result.stderr
    assert f"{good} new rows, 0 duplicates dropped, {bad} rejected ({bad} bad timestamp)" in (
        result.stdout
    )
    assert lake_frame(tmp_path / "data", "rejected_lines").height == bad
    assert len(lake_ids(tmp_path / "data", 1234)) == good


def import_stdin(path: Path, data: bytes, *names: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdnlake", "--config", str(path), "import-v1", *names],
        input=data.decode("latin-1"),
        capture_output=True,
        text=True,
        encoding="latin-1",
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
        timeout=120,
    )


def test_cli_import_v1_reads_standard_input_plain_or_gzip(tmp_path, emulator):
    path = write_config(tmp_path, emulator, zones=[(1234, "v2")])
    src = write_day_file(emulator, tmp_path / "day.log", 1234)
    data = src.read_bytes() + b"garbage line\n"
    lines = data.count(b"\n")
    plain = import_stdin(path, data, "-", "--zone", "1234")
    assert plain.returncode == 0, plain.stderr
    first, summary = plain.stdout.splitlines()
    assert first.startswith(f"-: {lines} lines, {lines - 1} new rows, 0 duplicates dropped, ")
    assert first.endswith(" - ok")
    assert summary.startswith(f"imported 1 file(s) into zone 1234: {lines} lines, ")
    assert "1 rejected" in summary
    ids = lake_ids(tmp_path / "data", 1234)
    assert len(ids) == lines - 1 == len(set(ids))
    rejected = lake_frame(tmp_path / "data", "rejected_lines")
    assert rejected["file"].to_list() == ["-"]
    assert "downloads" not in plain.stdout + plain.stderr
    # The same bytes gzipped (told by their magic bytes: there is no name): nothing new.
    again = import_stdin(path, gzip.compress(data), "-", "--zone", "1234")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"-: {lines} lines, 0 new rows, {lines - 1} duplicates ")
    assert sorted(lake_ids(tmp_path / "data", 1234)) == sorted(ids)
    # The copy is gone; standard input is read once.
    assert not any((tmp_path / "data" / "work" / "downloads").iterdir())
    twice = import_stdin(path, data, "-", str(src), "-", "--zone", "1234")
    assert twice.returncode == 2 and twice.stderr.count("\n") == 1, twice.stderr
    assert "standard input" in twice.stderr


def test_a_lake_that_cannot_be_written_is_one_line_and_exit_code_1(tmp_path, emulator):
    path = write_config(tmp_path, emulator, zones=[(1234, "v2")])
    src = write_day_file(emulator, tmp_path / "day.log", 1234)
    day = (NOW - timedelta(days=1)).date().isoformat()
    blocker = tmp_path / "data" / "lake" / "requests" / "pull_zone_id=1234" / f"date={day}"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the day's folder should be")
    result = run_cli("--config", str(path), "import-v1", str(src), "--zone", "1234")
    assert result.returncode == 1, result.stderr
    output = result.stdout + result.stderr
    assert "cannot write to" in output and "requests" in output
    assert "Traceback" not in output
    with Warehouse(load_test_config(path).storage).connect() as con:
        outcome = con.execute("SELECT outcome, error FROM ingest_runs").fetchall()
    assert outcome and outcome[0][0] == "failed" and "StorageError" not in outcome[0][1]


def test_a_first_import_loads_no_pyarrow(tmp_path):
    """A short import into a new lake needs polars and deltalake only: pyarrow (and numpy
    with it) is loaded by a commit that reads earlier files, a tenth of a second that
    a short import would otherwise pay for nothing."""
    from tests.bench.bench import make_v1_file

    config = tmp_path / "config.toml"
    config.write_text(f'[storage]\nroot = "{tmp_path / "data"}"\n[[zones]]\nid = 1234\n')
    day = make_v1_file(tmp_path / "day.log", 1_000, seed=3)
    proc, heavy = cli_heavy_modules(
        "--config", str(config), "import-v1", str(day), "--zone", "1234"
    )
    assert proc.returncode == 0 and "1000 new rows" in proc.stdout, proc.stdout + proc.stderr
    assert heavy == ["polars"]
    # The rows are there, readable by any Delta reader.
    assert len(lake_frame(tmp_path / "data")) == 1_000
