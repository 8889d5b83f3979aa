"""The lake's own Delta log (``lake/log/delta_log.py``), held against two other Delta
implementations: delta-kernel (through DuckDB's delta extension) and delta-rs (the
``deltalake`` package).

A lake is written by the CLI alone, by every path that writes ``requests`` and
``shield_events``: ``import-v1`` of many small files (more than one checkpoint interval of
versions), passes of v1, v2 and shield zones, two ``ingest`` processes of two "machines"
racing on the same zones, the daemon's forwarding receiver, a rewind (a damaged file set
aside by ``maintain``, then read again) and ``maintain``'s compaction and vacuum. Both
readers must then see the same version, the same data files (those a replay of the JSON
entries alone names: a wrong checkpoint would fool both readers alike) and the same rows,
each key once, at the latest version and at older ones (the interval's checkpoint and
around it). (delta-rs 1.x replays the log with delta-kernel-rs too, of another release
and through other code; DuckDB reads the data files with its own Parquet reader.)

The kernel reader runs in the test-only ``.venv-kernel`` (``make kernel``: the DuckDB its
extension's pip package is built for, which is not the project's): without it, the test
is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from cdnlake.lake.log.schema import REQUESTS, SHIELD_EVENTS
from cdnlake.scheduler import wait_for
from tests.conftest import REPO, free_port, run_cli, spawn_cli, start_emulator, write_config
from tests.forwarding.helpers import send_tcp, synthetic, syslog, v1_lines
from tests.test_scheduler import spawn_daemon, stop, wait_for_line

KERNEL_PYTHON = Path(
    os.environ.get("CDNLAKE_KERNEL_PYTHON", str(REPO / ".venv-kernel" / "bin" / "python"))
)
READER = Path(__file__).with_name("kernel_reader.py")
CHECKPOINT_INTERVAL = 100  # the tables are created with delta.checkpointInterval = 100
IMPORTS = CHECKPOINT_INTERVAL + 4  # one commit to requests each: past the first checkpoint
FORWARDED = 150  # requests only the forwarding receiver sees
# The columns each table's rows are compared on, besides the key.
COLUMNS = {REQUESTS.name: ["ts", "bytes_sent", "pull_zone_id"], SHIELD_EVENTS.name: ["ts"]}


def kernel_python() -> Path:
    if not KERNEL_PYTHON.exists():
        pytest.skip(
            f"no DuckDB delta extension to read with: {KERNEL_PYTHON} is missing "
            "(make test builds .venv-kernel with `make kernel`; it needs PyPI)"
        )
    return KERNEL_PYTHON


def ok(result: subprocess.CompletedProcess[str], *, codes: tuple[int, ...] = (0,)) -> str:
    assert result.returncode in codes, (result.returncode, result.stdout, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stdout


def lake_config(tmp_path: Path, emu: Any, root: str, lake: Path, port: int) -> Path:
    """A config whose storage root is ``root`` (its own locks: another machine) and whose
    lake is ``lake``; one v2, one v1 and one shield zone, and a forwarding receiver."""
    folder = tmp_path / root
    folder.mkdir()
    path = write_config(
        folder,
        emu,
        zones=[(1234, "v2"), (1235, "v1")],
        page_size=500,
        max_window_seconds=3600,
        flush_rows=250,
    )
    text = path.read_text().replace('root = "data"', f'root = "data"\nlake_uri = "{lake}"')
    extra = (
        f'[forwarding]\nlisten = "127.0.0.1:{port}"\nflush_seconds = 0.2\n'
        # no daily job due at start: the daemon only passes and receives
        + '[schedule]\npoll_seconds = 1\nreport_at = "23:59"\nmaintain_at = "23:59"\n'
    )
    text = text.replace("[schedule]\npoll_seconds = 1\n", extra)
    path.write_text(text + "[[shield_zones]]\nid = 5001\n")
    return path


def cli(config: Path, *args: str, codes: tuple[int, ...] = (0,)) -> str:
    return ok(run_cli("--config", str(config), *args, timeout=300), codes=codes)


def table_uri(lake: Path, name: str) -> str:
    return str(lake / name)


def digest(rows: list[tuple[Any, ...]]) -> str:
    """As the kernel reader digests its rows: sorted, values as text, one row a line."""
    text = "\n".join("|".join(str(v) for v in row) for row in sorted(rows))
    return hashlib.sha256(text.encode()).hexdigest()


def as_delta_rs_reads(
    uri: str,
    key: str,
    columns: list[str],
    version: int | None,
    options: dict[str, str] | None = None,
) -> Any:
    table = DeltaTable(uri, version=version, storage_options=options)
    data = table.to_pyarrow_table(columns=[key, *columns])
    values = []
    for name in [key, *columns]:
        column = data[name]
        if name == "ts":  # microseconds since the epoch, as DuckDB's epoch_us
            column = pc.cast(pc.cast(column, pa.timestamp("us", "UTC")), pa.int64())
        values.append(column.to_pylist())
    rows = list(zip(*values, strict=True))
    paths = pa.table(table.get_add_actions(flatten=True))["path"].to_pylist()
    return {
        "version": table.version(),
        "rows": len(rows),
        "distinct": len({r[0] for r in rows}),
        "digest": digest(rows),
        "files": sorted(unquote(p) for p in paths),
    }


def replayed(uri: str, version: int) -> tuple[set[str], set[str]]:
    """The data files live at ``version``, and every file ever added up to it, from the
    JSON entries 0 to ``version`` alone: both readers start from the newest checkpoint, so
    a checkpoint written wrong would fool them alike, and not this replay (the lake is
    young: no entry has expired)."""
    live: set[str] = set()
    added: set[str] = set()
    for number in range(version + 1):
        entry = Path(uri) / "_delta_log" / f"{number:020d}.json"
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live.add(unquote(action["add"]["path"]))
                added.add(unquote(action["add"]["path"]))
            elif "remove" in action:
                live.discard(unquote(action["remove"]["path"]))
    return live, added


def as_kernel_reads(tmp_path: Path, lake: Path, versions: dict[str, list[int | None]]) -> Any:
    """What delta-kernel reads of each table, at each version (None: its latest), with no
    network: the extension comes from its pip package (see kernel_reader.py)."""
    request = {
        "tables": [
            {
                "uri": table_uri(lake, name),
                "key": spec.key,
                "columns": COLUMNS[name],
                "versions": versions[name],
            }
            for name, spec in ((REQUESTS.name, REQUESTS), (SHIELD_EVENTS.name, SHIELD_EVENTS))
        ]
    }
    path = tmp_path / "kernel-request.json"
    path.write_text(json.dumps(request))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(kernel_python()), str(READER), str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    return {t["uri"]: t for t in answer["tables"]}


def readers_agree(tmp_path: Path, lake: Path, versions: dict[str, list[int | None]]) -> Any:
    """delta-kernel and delta-rs see each table alike at each version; returns the
    kernel's latest version of each."""
    kernel = as_kernel_reads(tmp_path, lake, versions)
    latest = {}
    for name, spec in ((REQUESTS.name, REQUESTS), (SHIELD_EVENTS.name, SHIELD_EVENTS)):
        uri = table_uri(lake, name)
        assert spec.key is not None
        seen = kernel[uri]
        if "error" in seen:
            try:
                rs = f"delta-rs reads version {DeltaTable(uri).version()}"
            except Exception as exc:
                rs = f"delta-rs fails too: {str(exc).splitlines()[0]}"
            pytest.fail(f"{name}: delta-kernel cannot read it: {seen['error']}; {rs}")
        # The kernel's latest version is delta-rs's, and reading it pinned is reading it.
        newest = DeltaTable(uri).version()
        assert seen["latest"] == newest, (name, seen["latest"], newest)
        assert {**seen["pinned"], "version": newest} == {**seen["seen"][0], "version": newest}
        for version, got in zip(versions[name], seen["seen"], strict=True):
            want = as_delta_rs_reads(uri, spec.key, COLUMNS[name], version)
            where = f"{name} at version {got['version']}"
            assert got["version"] == want["version"], where
            assert got["files"] == want["files"], where
            live, _added = replayed(uri, want["version"])
            assert got["files"] == sorted(live), f"{where}: not the JSON entries' files"
            assert (got["rows"], got["distinct"]) == (want["rows"], want["distinct"]), where
            assert got["digest"] == want["digest"], where
            assert got["rows"] == got["distinct"], f"{where}: a key stored twice"
        latest[name] = newest
    return latest


def data_files(uri: str, zone: int) -> list[tuple[str, Any]]:
    """(path, max ts) of a zone's data files, as delta-rs reads the log, newest last."""
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    rows = actions.select(["path", "partition.pull_zone_id", "max.ts"]).to_pylist()
    mine = [(r["path"], r["max.ts"]) for r in rows if int(r["partition.pull_zone_id"]) == zone]
    return sorted(mine, key=lambda r: r[1])


def test_delta_kernel_and_delta_rs_read_what_every_writer_wrote(tmp_path):
    kernel_python()  # skip before writing anything
    started = time.monotonic()
    emu = start_emulator("1234:extended,1235:v1", rpm=2, now=None, frozen=False)
    lake = tmp_path / "lake"
    port = free_port()
    try:
        config = lake_config(tmp_path, emu, "one", lake, port)
        twin = lake_config(tmp_path, emu, "two", lake, port)  # another machine, same lake
        now = datetime.now(UTC)

        # import-v1: many small files, one commit each, past a checkpoint interval.
        first = now - timedelta(hours=60)
        files = []
        for i in range(IMPORTS):
            lines = v1_lines(emu, 1235, first + timedelta(minutes=20 * i), 20)
            files.append(tmp_path / f"part-{i:03d}.log")
            files[-1].write_text("".join(line + "\n" for line in lines))
        assert all(f.stat().st_size for f in files)
        cli(config, "import-v1", "--zone", "1235", *map(str, files))
        requests_uri = table_uri(lake, REQUESTS.name)
        assert DeltaTable(requests_uri).version() >= CHECKPOINT_INTERVAL
        log = lake / REQUESTS.name / "_delta_log"
        assert (log / f"{CHECKPOINT_INTERVAL:020d}.checkpoint.parquet").exists()

        # Two machines' first passes of every zone, v1, v2 and shield, racing.
        racing = [
            spawn_cli("--config", str(c), "ingest", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for c in (config, twin)
        ]
        for proc in racing:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode in (0, 1), (out, err[-3000:])
            assert "Traceback" not in err, err[-3000:]

        # The daemon: its passes, and its forwarding receiver's commits.
        own = [synthetic(i, start_ms=int((now - timedelta(hours=1)).timestamp() * 1000))
               for i in range(FORWARDED)]  # fmt: skip
        real = v1_lines(emu, 1234, now - timedelta(minutes=40), 30)
        daemon = spawn_daemon(config)
        try:
            wait_for_line(daemon, f"forwarding: receiving tcp syslog on 127.0.0.1:{port}")
            wait_for_line(daemon, "daemon started")
            send_tcp(("127.0.0.1", port), b"".join(syslog(x) + b"\n" for x in real + own))

            def forwarded() -> int:
                table = DeltaTable(requests_uri).to_pyarrow_table(columns=["request_id"])
                ids = table["request_id"]
                return int(pc.sum(pc.starts_with(ids, "req")).as_py() or 0)

            assert wait_for(lambda: forwarded() == FORWARDED, 60), forwarded()
        finally:
            code, _took, err = stop(daemon)
        assert code == 0 and "Traceback" not in err, err[-3000:]

        # Both readers agree, at the latest version and at older ones: the interval's
        # checkpoint and around it, and versions written by each path.
        latest = DeltaTable(requests_uri).version()
        middle = (CHECKPOINT_INTERVAL + latest) // 2
        older = sorted({1, *range(CHECKPOINT_INTERVAL - 1, CHECKPOINT_INTERVAL + 2), middle})
        shield_uri = table_uri(lake, SHIELD_EVENTS.name)
        shield_older = [max(DeltaTable(shield_uri).version() - 1, 0)]
        readers_agree(
            tmp_path,
            lake,
            {REQUESTS.name: [None, *older], SHIELD_EVENTS.name: [None, *shield_older]},
        )

        # A rewind: the v2 zone's newest file damaged, set aside by maintain (so the
        # versions before no longer read), and its span read again.
        victim, _ = data_files(requests_uri, 1234)[-1]
        damaged = lake / REQUESTS.name / unquote(victim)
        lost = set(pq.read_table(damaged, columns=["request_id"])["request_id"].to_pylist())
        damaged.write_bytes(damaged.read_bytes()[:100])
        checked = cli(config, "maintain", codes=(0, 1))
        assert victim in checked or unquote(victim) in checked, checked
        assert list((lake / "_quarantine").rglob("*.parquet*"))
        assert unquote(victim) not in {unquote(p) for p, _ in data_files(requests_uri, 1234)}
        maintained = DeltaTable(requests_uri).version()
        cli(config, "ingest")  # the rewound span read again
        again = DeltaTable(requests_uri).to_pyarrow_table(columns=["request_id"])
        served = {i for i in lost if not i.startswith("req")}  # not only forwarded
        assert served and served <= set(again["request_id"].to_pylist())
        readers_agree(
            tmp_path, lake, {REQUESTS.name: [None, maintained], SHIELD_EVENTS.name: [None]}
        )
        latest = DeltaTable(requests_uri).version()

        # maintain: compaction and a vacuum that deletes what no latest version needs.
        cli(config, "maintain", "--retention-hours", "0")
    finally:
        emu.stop()
    versions = readers_agree(tmp_path, lake, {REQUESTS.name: [None], SHIELD_EVENTS.name: [None]})
    assert versions[REQUESTS.name] > latest
    table = DeltaTable(requests_uri)
    operations = {entry.get("operation") for entry in table.history()}
    assert {"WRITE", "OPTIMIZE", "VACUUM END"} <= operations, operations
    # The vacuum deleted every file the log removed (the readers needed none of them),
    # and no file that no entry ever named is left: the losing process of a race took
    # back the files of the commit it did not get.
    on_disk = {
        str(f.relative_to(lake / REQUESTS.name))
        for f in (lake / REQUESTS.name).rglob("*.parquet")
        if "_delta_log" not in f.parts
    }
    live, added = replayed(requests_uri, versions[REQUESTS.name])
    assert len(added) > len(live)
    assert {unquote(p) for p in live} == on_disk, sorted(on_disk ^ {unquote(p) for p in live})
    print(f"readers agree on {versions}; {time.monotonic() - started:.1f} s")
