"""Nothing is lost in silence: damaged files, wholly rejected input, every v2 reject kept."""

from __future__ import annotations

import gzip
import io
import json
from datetime import timedelta

import httpx

from cdnlake.emulator import Faults
from cdnlake.emulator.logging_routes import bad_record_kind
from cdnlake.emulator.state import is_bad_record
from cdnlake.ingest.passes import Ingestor
from cdnlake.ingest.v1_parser import LogStream, iter_parsed
from cdnlake.lake.log.schema import INGEST_GAPS
from cdnlake.warehouse.db import Warehouse
from tests.conftest import (
    FAULT_RETRY,
    KEY,
    NOW,
    lake_ids,
    lake_of,
    load_test_config,
    logging_client,
    run_cli,
    start_emulator,
    truth_ids,
    write_config,
)
from tests.sessions import session_for

DAY = (NOW - timedelta(days=1)).date()


def day_text(emu, zone: int = 1234) -> str:
    return httpx.get(f"{emu.url}/{DAY:%m-%d-%y}/{zone}.log", headers={"AccessKey": KEY}).text


def query(config, sql: str) -> list[tuple]:
    with Warehouse(config.storage).connect() as con:
        return con.execute(sql).fetchall()


def test_a_truncated_gzip_keeps_its_whole_lines_and_fails_loudly(tmp_path, emulator):
    path = write_config(tmp_path, emulator, zones=[(1234, "v2")])
    text = day_text(emulator)
    packed = gzip.compress(text.encode())
    src = tmp_path / "cut.log.gz"
    src.write_bytes(packed[: len(packed) * 2 // 3])
    # What the cut file still holds, read the forgiving way: its whole lines.
    held = gzip.GzipFile(fileobj=io.BytesIO(src.read_bytes()))
    salvaged = b""
    try:
        while chunk := held.read(1):
            salvaged += chunk
    except EOFError:
        pass
    whole = salvaged[: salvaged.rfind(b"\n") + 1].decode().splitlines()
    assert 100 < len(whole) < len(text.splitlines())

    result = run_cli("--config", str(path), "import-v1", str(src), "--zone", "1234")
    assert result.returncode == 1, result.stdout + result.stderr
    line = (
        "cut.log.gz is damaged: the gzip stream ends early (the file was cut short); "
        f"it ends after line {len(whole)}"
    )
    assert line in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert sorted(lake_ids(tmp_path / "data", 1234)) == sorted(w.split("|")[10] for w in whole)

    config = load_test_config(path)
    ((kind, number, reason),) = query(
        config, "SELECT kind, line_number, reason FROM rejected_lines"
    )
    assert kind == "damaged file" and number == len(whole) + 1 and "cut short" in reason
    (gap_reason,) = query(config, "SELECT reason FROM ingest_gaps")[0]
    assert f"damaged after line {len(whole)}" in gap_reason
    status = run_cli("--config", str(path), "status", "--format", "json")
    zone = json.loads(status.stdout)[0]
    assert status.returncode == 1 and zone["last_outcome"] == "failed"
    assert "damaged" in zone["problem"] and zone["gaps_7d"] == 1


def test_a_truncated_copy_of_a_day_the_lake_holds_fails_and_claims_nothing_lost(tmp_path, emulator):
    """Re-importing a cut copy of a day file already imported: its lines past the cut are
    in the lake, so nothing is lost: the import fails (exit 1), and no gap is claimed,
    however often it is tried."""
    path = write_config(tmp_path, emulator, zones=[(1234, "v2")])
    text = day_text(emulator)
    whole = tmp_path / "day.log"
    whole.write_text(text)
    first = run_cli("--config", str(path), "import-v1", str(whole), "--zone", "1234")
    assert first.returncode == 0, first.stdout + first.stderr
    packed = gzip.compress(text.encode())
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    for _attempt in range(2):
        result = run_cli("--config", str(path), "import-v1", str(cut), "--zone", "1234")
        out = result.stdout + result.stderr
        assert result.returncode == 1, out
        assert "cut.log.gz is damaged" in out and "nothing lost" in out, out
        assert "data lost" not in out
    config = load_test_config(path)
    assert sorted(lake_ids(tmp_path / "data", 1234)) == sorted(
        line.split("|")[10] for line in text.splitlines()
    )
    gaps = lake_of(config).open(INGEST_GAPS)
    assert gaps is None or gaps.to_pyarrow_table().num_rows == 0
    status = run_cli("--config", str(path), "status", "--format", "json")
    zone = json.loads(status.stdout)[0]
    assert zone["last_outcome"] == "failed" and zone["gaps_7d"] == 0


def test_a_truncated_file_of_a_day_the_provider_still_serves_claims_nothing_lost(tmp_path):
    """Yesterday's file cut short: its rest is not in the lake, but the provider still
    serves that day, so nothing is lost yet: the import fails and says so."""
    emu = start_emulator("1234", now=None, frozen=False)
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v1")])
        yesterday = (emu.clock.now() - timedelta(days=1)).date()
        text = httpx.get(
            f"{emu.url}/{yesterday:%m-%d-%y}/1234.log", headers={"AccessKey": KEY}
        ).text
        packed = gzip.compress(text.encode())
        cut = tmp_path / "cut.log.gz"
        cut.write_bytes(packed[: len(packed) // 2])
        result = run_cli("--config", str(path), "import-v1", str(cut), "--zone", "1234")
        out = result.stdout + result.stderr
        assert result.returncode == 1, out
        assert "the provider still serves it" in out and "data lost" not in out, out
        gaps = lake_of(load_test_config(path)).open(INGEST_GAPS)
        assert gaps is None or gaps.to_pyarrow_table().num_rows == 0
    finally:
        emu.stop()


def test_a_corrupt_gzip_block_ends_the_file_where_the_damage_starts(tmp_path, emulator):
    text = day_text(emulator).encode()
    packed = bytearray(gzip.compress(text, compresslevel=1))
    middle = len(packed) // 2
    packed[middle : middle + 64] = b"\xff" * 64
    src = tmp_path / "corrupt.log.gz"
    src.write_bytes(bytes(packed))
    taken = 0
    try:
        for good, _, _ in iter_parsed(src, 1234):
            taken += good.height
        raise AssertionError("a corrupt file must not end quietly")
    except Exception as exc:
        assert "corrupt.log.gz is damaged: the gzip stream is corrupt" in str(exc)
    assert 0 < taken < len(text.splitlines())


def test_concatenated_gzip_members_and_zero_padding_are_whole(tmp_path, emulator):
    text = day_text(emulator).encode()
    half = text.index(b"\n", len(text) // 2) + 1
    src = tmp_path / "two-members.log.gz"
    src.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]) + b"\x00" * 512)
    with LogStream(src) as stream:
        assert stream.read(1 << 30) == text and stream.damage is None
    rows = sum(good.height for good, _, _ in iter_parsed(src, 1234, block_bytes=4096))
    assert rows == len(text.splitlines())


def test_a_file_whose_every_line_is_rejected_fails(tmp_path, emulator):
    path = write_config(tmp_path, emulator, zones=[(1234, "v2")])
    good = day_text(emulator).splitlines()[:149]
    bad = [line.replace(line.split("|")[2], "yesterday", 1) for line in good]
    src = tmp_path / "all-bad.log"
    src.write_text("\n".join([*bad, "one field only", ""]) + "\n")
    result = run_cli("--config", str(path), "import-v1", str(src), "--zone", "1234")
    assert result.returncode == 1
    assert "all 150 lines rejected: 149 bad timestamp, 1 wrong field count" in result.stdout
    assert "150 rejected (149 bad timestamp, 1 wrong field count)" in result.stdout
    status = run_cli("--config", str(path), "status", "--format", "json")
    zone = json.loads(status.stdout)[0]
    assert status.returncode == 1 and not zone["healthy"]
    assert zone["last_rejected"] == 150 and "all 150 lines rejected" in zone["problem"]
    table = run_cli("--config", str(path), "status")
    assert "rejected" in table.stdout and "150" in table.stdout


def test_seconds_timestamps_are_read_as_seconds(tmp_path, emulator):
    config_path = write_config(tmp_path, emulator, zones=[(1234, "v2")])
    lines = day_text(emulator).splitlines()[:50]
    seconds = []
    for line in lines:
        fields = line.split("|")
        fields[2] = str(int(fields[2]) // 1000)  # 10 digits
        seconds.append("|".join(fields))
    src = tmp_path / "seconds.log"
    src.write_text("\n".join(seconds) + "\n")
    result = run_cli("--config", str(config_path), "import-v1", str(src), "--zone", "1234")
    assert result.returncode == 0, result.stdout
    config = load_test_config(config_path)
    stored = query(config, "SELECT request_id, epoch_ms(ts) FROM requests")
    expected = {ln.split("|")[10]: int(ln.split("|")[2]) // 1000 * 1000 for ln in lines}
    assert dict(stored) == expected


def test_every_v2_reject_is_kept_once_with_what_finds_it_again(tmp_path):
    emu = start_emulator("1234", faults=Faults(bad_record_rate=0.01))
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1234, "v2")]))
        start = NOW - timedelta(days=3) + timedelta(minutes=2)
        for _ in range(2):  # the second pass re-reads its overlap: nothing twice
            Ingestor(config, logging_client(config), session_for(config), clock=emu.clock.now).run(
                config.zones
            )
            emu.clock.advance(900)
        end = emu.clock.now() - timedelta(seconds=900 + 300)
        truth = truth_ids(emu, 1234, start, end)
        bad = {rid for rid in truth if is_bad_record(rid, 0.01)}
        assert len(bad) > 100
        rows = query(
            config,
            "SELECT request_id, file, line_number, kind FROM rejected_lines ORDER BY 1",
        )
        assert {r[0] for r in rows} >= bad
        assert len(rows) == len({r[0] for r in rows})  # each once
        assert all(r[1].startswith("api:v2?from=") for r in rows)
        kinds = {r[0]: r[3] for r in rows}
        assert {kinds[rid] for rid in bad} == {"bad timestamp", "undecodable record"}
        for rid in bad:  # a status code of the wrong type fails its record, not its page
            wrong_type = bad_record_kind(rid) == "wrong type"
            assert kinds[rid] == ("undecodable record" if wrong_type else "bad timestamp")
        assert len({r[2] for r in rows}) > 100  # offsets in their query, not row numbers
        stored = set(lake_ids(tmp_path / "data", 1234))
        assert not bad & stored and truth - bad <= stored
    finally:
        emu.stop()


def test_a_v1_body_that_ends_early_is_fetched_again(tmp_path):
    """Gzip bodies cut in half arrive with a matching Content-Length: only the stream shows it."""
    emu = start_emulator("1235:v1", faults=Faults(truncate_rate=0.4, seed=3))
    try:
        config = load_test_config(write_config(tmp_path, emu, zones=[(1235, "v1")]))
        client = logging_client(config, retry=FAULT_RETRY)
        (result,) = Ingestor(config, client, session_for(config), clock=emu.clock.now).run(
            config.zones
        )
        assert result.ok, result.error
        assert result.stats.retries > 0 and result.stats.transport_errors > 0
        end = NOW - timedelta(seconds=300)
        truth = truth_ids(emu, 1235, NOW - timedelta(days=3), end)
        assert set(lake_ids(tmp_path / "data", 1235)) >= truth
        assert len(lake_ids(tmp_path / "data", 1235)) == len(set(lake_ids(tmp_path / "data", 1235)))
    finally:
        emu.stop()


def test_the_cut_gzip_body_is_whole_by_http_and_damaged_as_gzip():
    emu = start_emulator("1235:v1", faults=Faults(truncate_rate=1.0))
    try:
        with httpx.stream(
            "GET",
            f"{emu.url}/{DAY:%m-%d-%y}/1235.log",
            headers={"AccessKey": KEY, "Accept-Encoding": "gzip"},
        ) as response:
            raw = b"".join(response.iter_raw())
        assert response.headers["Content-Encoding"] == "gzip"
        assert int(response.headers["Content-Length"]) == len(raw)
        try:
            gzip.decompress(raw)
            raise AssertionError("the body should end early")
        except EOFError:
            pass
    finally:
        emu.stop()
