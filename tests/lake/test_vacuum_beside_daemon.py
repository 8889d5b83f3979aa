"""The operator's scenario of issue #47: a daemon polls three v2 zones every 2 s, and beside
it ``forget --ip ... --vacuum-now`` (again and again), ``maintain --apply-privacy
--vacuum-now``, ``maintain`` and retention expiry run. ``--vacuum-now`` never deletes a
file under a running daemon: it refuses in one line naming it. Once the daemon is stopped
it runs, and the daemon started again carries on.

Afterwards every request the daemon acknowledged (up to each zone's watermark in the log),
less the erased ones, is read exactly once by delta-rs and by delta-kernel; each zone's
watermark in the log is the daemon's latest; no pass failed for a missing file twice.

Run on local disk and on S3 (moto's server on 127.0.0.1): the same steps, the same checks.
delta-kernel reads the S3 lake from a copy of its bucket (the kernel reader's DuckDB has no
S3 access offline), delta-rs reads it on S3 itself and must agree with the copy.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cdnlake.config import Config
from cdnlake.emulator import Emulator
from cdnlake.lake.log.progress import from_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.retention import oldest_served
from cdnlake.scheduler import wait_for
from tests.conftest import (
    S3Server,
    lake_frame,
    lake_of,
    load_test_config,
    run_cli,
    spawn_cli,
    start_emulator,
    truth_ids,
    write_config,
)

ZONES = [7501, 7502, 7503]
LAG = timedelta(seconds=300)  # write_config's lag_seconds
REACHED = re.compile(r" ok: reached (\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ)")


def spawn_daemon(path: Path, name: str) -> subprocess.Popen[str]:
    log = path.parent / f"{name}.log"
    proc = spawn_cli("--config", str(path), "--log-format", "json", "daemon", stderr=open(log, "w"))
    proc.log = log  # type: ignore[attr-defined]
    return proc


def records(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """The daemon's JSON log records of its passes."""
    found = []
    for line in proc.log.read_text().splitlines():  # type: ignore[attr-defined]
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "zone" in record and "outcome" in record:
            found.append(record)
    return found


def passes(proc: subprocess.Popen[str], zone: int) -> int:
    return sum(1 for r in records(proc) if r["zone"] == zone and r["outcome"] == "ok")


def watermark(where: Config, zone: int) -> datetime | None:
    table = lake_of(where).open(REQUESTS)
    return None if table is None else from_ms(table.transaction_version(REQUESTS.app_id(zone)))


def caught_up(where: Config) -> bool:
    now = datetime.now(UTC)
    marks = [watermark(where, z) for z in ZONES]
    return all(m is not None and m > now - LAG - timedelta(seconds=30) for m in marks)


def more_passes(proc: subprocess.Popen[str], n: int = 2) -> None:
    """Until every zone has had ``n`` more passes (readiness, no fixed sleep)."""
    done = {z: passes(proc, z) for z in ZONES}
    assert wait_for(lambda: all(passes(proc, z) >= done[z] + n for z in ZONES), 60), (
        proc.log.read_text()[-3000:]
    )  # type: ignore[attr-defined]


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, proc.log.read_text()[-3000:]  # type: ignore[attr-defined]


def refused(result: subprocess.CompletedProcess[str], daemon: subprocess.Popen[str]) -> None:
    """Exit 1, one line, naming the daemon that writes (host:pid)."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f":{daemon.pid}" in lines[0] and "refused" in lines[0], lines[0]


def old_day(path: Path, at: datetime) -> Path:
    """A v1 day file of zone ZONES[0] ten days back: retention expires it."""
    lines = [
        f"MISS|200|{int(at.timestamp() * 1000) + i * 1000}|512|{ZONES[0]}|198.51.100.{i}|-|"
        f"https://cdn.example.net/old{i}.zip|WA|curl/8|old-{i:04d}|DE"
        for i in range(30)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.timeout(300)
def test_forget_maintain_and_expiry_beside_a_daemon_lose_nothing_it_acknowledged(
    tmp_path, lake_kind, request
):
    emu = start_emulator(",".join(map(str, ZONES)), rpm=2, now=None, frozen=False)
    procs: list[subprocess.Popen[str]] = []
    s3 = request.getfixturevalue("s3_server") if lake_kind == "s3" else None
    try:
        path = write_config(
            tmp_path,
            emu,
            zones=[(z, "v2") for z in ZONES],
            s3=s3,
            page_size=2000,
            window_seconds=10,
        )
        text = path.read_text().replace("poll_seconds = 1", "poll_seconds = 2")
        # Passes alone: no daily job is due before 23:59.
        text = text.replace(
            "[schedule]\n", '[schedule]\nreport_at = "23:59"\nmaintain_at = "23:59"\n'
        )
        path.write_text(text + "[retention]\nrequests_days = 4\n")
        where = load_test_config(path)
        ten_days_ago = datetime.now(UTC) - timedelta(days=10)
        imported = run_cli(
            "--config", str(path), "import-v1", str(old_day(tmp_path / "old.log", ten_days_ago)),
            "--zone", str(ZONES[0]),
        )  # fmt: skip
        assert imported.returncode == 0, imported.stderr
        launched = datetime.now(UTC)
        first = spawn_daemon(path, "first")
        procs.append(first)
        assert wait_for(lambda: caught_up(where), 120), first.log.read_text()[-3000:]
        frame = lake_frame(where).filter(pl.col("pull_zone_id").is_in(ZONES))
        common = frame["remote_ip"].value_counts(sort=True)["remote_ip"].to_list()
        address_a, address_b = common[0], common[1]

        # Beside the daemon: --vacuum-now refuses, naming it; the rest runs.
        erased_a = datetime.now(UTC)
        for _ in range(3):
            refused(
                run_cli("--config", str(path), "forget", "--ip", address_a, "--vacuum-now"), first
            )
        forgot = run_cli("--config", str(path), "forget", "--ip", address_a)
        assert forgot.returncode == 0, forgot.stderr
        erased_a_end = datetime.now(UTC)
        more_passes(first, 1)
        refused(
            run_cli("--config", str(path), "maintain", "--apply-privacy", "--vacuum-now"), first
        )
        refused(run_cli("--config", str(path), "maintain", "--vacuum-now"), first)
        maintained = run_cli("--config", str(path), "maintain")
        assert maintained.returncode == 0, maintained.stderr
        assert "1 day partition(s) expired" in maintained.stdout, maintained.stdout
        refused(run_cli("--config", str(path), "forget", "--ip", address_a, "--vacuum-now"), first)
        more_passes(first)
        stop(first)

        # No daemon: --vacuum-now holds every writer off and deletes the removed files.
        erased_b = datetime.now(UTC)
        gone = run_cli("--config", str(path), "forget", "--ip", address_b, "--vacuum-now")
        assert gone.returncode == 0, gone.stderr
        assert "the old bytes have left storage" in gone.stdout
        erased_b_end = datetime.now(UTC)
        applied = run_cli("--config", str(path), "maintain", "--apply-privacy", "--vacuum-now")
        assert applied.returncode == 0, applied.stderr
        assert "the old bytes have left storage" in applied.stdout

        # The daemon again: it carries on from the lake as the vacuum left it.
        second = spawn_daemon(path, "second")
        procs.append(second)
        more_passes(second)
        stop(second)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        emu.stop()

    assert_nothing_lost(
        tmp_path,
        where,
        emu,
        launched,
        [first, second],
        [(address_a, erased_a, erased_a_end), (address_b, erased_b, erased_b_end)],
        s3,
    )
    assert (
        not lake_frame(where)
        .filter(pl.col("remote_ip").is_in([address_a, address_b]))
        .filter(pl.col("ts") < erased_a)
        .height
    )


Erasure = tuple[str, datetime, datetime]  # an address, when its forget began and ended


def assert_nothing_lost(
    tmp_path: Path,
    where: Config,
    emu: Emulator,
    launched: datetime,
    daemons: list[subprocess.Popen[str]],
    erasures: list[Erasure],
    s3: S3Server | None = None,
) -> None:
    """Each zone's watermark in the log is the last daemon's latest; no pass of any failed
    twice for the same missing file; every request acknowledged (up to each zone's
    watermark, from the first pass on), less the erased, is read once by delta-rs and by
    delta-kernel; something was erased."""
    daemon_records = [r for proc in daemons for r in records(proc)]
    for zone in ZONES:
        reached = [
            datetime.strptime(found[1], "%Y-%m-%d %H:%M:%SZ").replace(tzinfo=UTC)
            for r in records(daemons[-1])
            if r["zone"] == zone and (found := REACHED.search(r["message"]))
        ]
        assert reached, f"zone {zone}: no pass of the last daemon reached anything"
        mark = watermark(where, zone)
        assert mark is not None and mark.replace(microsecond=0) == max(reached), zone
    missing = Counter(
        r["error"] for r in daemon_records if r.get("error") and "not found" in r["error"]
    )
    assert all(n < 2 for n in missing.values()), missing

    # Every acknowledged request, less the erased, exactly once (delta-rs).
    stored = lake_frame(where).filter(pl.col("pull_zone_id").is_in(ZONES))
    ids = stored["request_id"].to_list()
    assert len(ids) == len(set(ids)), "a request stored twice"
    runs = lake_frame(where, "ingest_runs")
    erased_anywhere = 0
    for zone in ZONES:
        start = runs.filter(pl.col("zone") == zone)["window_from"].min()
        assert isinstance(start, datetime)
        start = max(start, oldest_served(launched) + timedelta(seconds=5))
        end = watermark(where, zone)
        assert end is not None
        span = (int(start.timestamp() * 1000), int(end.timestamp() * 1000))
        held = {
            r.wire.requestId: (r.wire.remoteIp, r.ts_ms) for r in emu.traffic.records(zone, *span)
        }
        truth = truth_ids(emu, zone, start, end, at=emu.clock.now())

        def erased(rid: str, held: dict[str, tuple[str, int]] = held) -> bool | None:
            """True: erased; False: kept; None: either (it came during the forget)."""
            ip, ts_ms = held[rid]
            for address, began, ended in erasures:
                if ip == address:
                    if ts_ms < began.timestamp() * 1000:
                        return True
                    if ts_ms <= ended.timestamp() * 1000:
                        return None
            return False

        mine = set(stored.filter(pl.col("pull_zone_id") == zone)["request_id"].to_list())
        kept = {rid for rid in truth if erased(rid) is False}
        gone_ids = {rid for rid in truth if erased(rid) is True}
        erased_anywhere += len(gone_ids)
        assert kept <= mine, f"zone {zone}: {len(kept - mine)} acknowledged request(s) lost"
        assert not gone_ids & mine, f"zone {zone}: erased requests still stored"
    assert erased_anywhere, "nothing erased: the test proves nothing"
    assert_kernel_reads_alike(tmp_path, where, s3)


def assert_kernel_reads_alike(tmp_path: Path, where: Config, s3: S3Server | None) -> None:
    """delta-kernel reads the requests table as delta-rs does: the same rows, once. On S3
    the kernel reads a copy of the bucket, which delta-rs must read as it reads S3.

    Without ``.venv-kernel`` (``make kernel`` could not install it) the test is skipped
    here, saying why: every check before has passed, this one was not made."""
    from tests.lake.test_other_readers import READER, as_delta_rs_reads, kernel_python

    kernel = kernel_python()
    lake = lake_of(where)
    columns = ["ts", "bytes_sent", "pull_zone_id"]
    want = as_delta_rs_reads(
        lake.table_uri(REQUESTS), "request_id", columns, None, lake.storage_options
    )
    uri = lake.table_uri(REQUESTS) if s3 is None else mirror(s3, lake.table_uri(REQUESTS), tmp_path)
    if s3 is not None:
        copy = as_delta_rs_reads(uri, "request_id", columns, None)
        assert copy["digest"] == want["digest"], "the bucket's copy is not the table on S3"
    request = {
        "tables": [{"uri": uri, "key": "request_id", "columns": columns, "versions": [None]}]
    }
    path = tmp_path / "kernel-request.json"
    path.write_text(json.dumps(request))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(kernel), str(READER), str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (seen,) = json.loads(done.stdout)["tables"]
    assert "error" not in seen, seen.get("error")
    got = seen["seen"][0]
    assert (got["rows"], got["distinct"], got["digest"]) == (
        want["rows"],
        want["distinct"],
        want["digest"],
    )
    assert got["rows"] == got["distinct"], "delta-kernel reads a request twice"


def mirror(s3: S3Server, uri: str, tmp_path: Path) -> str:
    """Every object under the S3 table ``uri`` copied to a local folder: its path."""
    import boto3

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    client = boto3.client("s3", endpoint_url=s3.url, region_name="us-east-1")
    local = tmp_path / "bucket-copy" / prefix
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            target = local / item["Key"].removeprefix(prefix).lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, item["Key"], str(target))
    return str(local)
