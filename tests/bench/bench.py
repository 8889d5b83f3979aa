"""cdnlake benchmarks: each figure beside a reference measured in the same run.

    python tests/bench/bench.py            full size (make bench; a few minutes, 17 more for
                                           the busy zone (6 of warm-up, 10 measured), up to 10
                                           for 1,000 zones and 2 for forwarding)
    python tests/bench/bench.py --small    tiny sizes: proves every benchmark still runs
    python tests/bench/bench.py --only busy --busy-rate 2000 --busy-seconds 240
                                           the busy zone at another rate, for a shorter time
    python tests/bench/bench.py --only zones --zones 300 --zones-seconds 300
                                           fewer quiet zones, for a shorter time
    python tests/bench/bench.py --only backfill --backfill-lines 1000000
                                           the archive's backfill on fewer lines
    python tests/bench/bench.py --only zones --reference f1b7654
                                           the quiet zones, the code of f1b7654 first

Data is generated from a seed. Benchmarks are not tests: only the smoke test runs them,
on tiny data, and it checks that they run, not how fast.
"""

from __future__ import annotations

import argparse
import compileall
import math
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: tests/
from tests.sessions import session_for, session_of

if TYPE_CHECKING:
    import polars as pl

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
KEY = "bench-key"
DAY = date(2026, 11, 20)


def number(value: float) -> str:
    """Three significant digits, or a whole number with thousands separated from 1,000."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


@dataclass
class Figure:
    what: str
    ours: float
    reference: float | None
    unit: str
    target: str
    ok: bool
    note: str = ""

    def row(self) -> list[str]:
        ref = "" if self.reference is None else f"{number(self.reference)} {self.unit}"
        ratio = "" if not self.reference else f"{self.ours / self.reference:.2f}x"
        return [
            self.what,
            f"{number(self.ours)} {self.unit}",
            ref,
            ratio,
            self.target,
            "ok" if self.ok else "MISSED",
            self.note,
        ]


# -- data ------------------------------------------------------------------------------
V1_SQL = """
COPY (
    SELECT concat_ws('|',
        (['HIT','HIT','HIT','HIT','HIT','MISS','MISS','EXPIRED','BYPASS','STALE','-'])[1 + (hash(i, 1) % 11)::BIGINT],
        (['200','200','200','200','206','304','404','500','502'])[1 + (hash(i, 2) % 9)::BIGINT],
        ($start_ms + (i * 86400000 // $n))::VARCHAR,
        (100 + hash(i, 3) % 500000)::VARCHAR,
        '1234',
        ((hash(i, 4) % 223) + 1)::VARCHAR || '.' || (hash(i, 5) % 256)::VARCHAR || '.' || (hash(i, 6) % 256)::VARCHAR || '.0',
        CASE WHEN hash(i, 7) % 3 = 0 THEN '-' ELSE 'https://www.example.com/' END,
        'https://cdn.example.com/static/' || (hash(i, 8) % 50000)::VARCHAR || '.js?v=' || (hash(i, 9) % 9)::VARCHAR,
        (['DE','FR','NY','LA','SG','JP'])[1 + (hash(i, 10) % 6)::BIGINT],
        'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36',
        md5(($seed || ':' || i)::VARCHAR),
        (['US','DE','GB','FR','JP','-'])[1 + (hash(i, 11) % 6)::BIGINT]
    ) AS line
    FROM range($n) t(i)
) TO '{path}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x01')
"""


def make_v1_file(path: Path, lines: int, seed: int = 1, day: date = DAY) -> Path:
    start_ms = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
    sql = V1_SQL.replace("{path}", str(path).replace("'", "''"))
    duckdb.execute(sql, {"start_ms": start_ms, "n": lines, "seed": seed})
    return path


def write_config(root: Path, url: str = "http://127.0.0.1:9", **ingest: object) -> Path:
    lines = [
        "[api]",
        f'base_url = "{url}"',
        f'video_url = "{url}"',
        f'logging_url = "{url}"',
        "[storage]",
        f'root = "{root / "data"}"',
        "[ingest]",
        *(f"{k} = {v}" for k, v in ingest.items()),
        "[[zones]]",
        "id = 1234",
        'source = "v2"',
    ]
    path = root / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def cdnlake(*args: str) -> list[str]:
    """The command as a user runs it: the installed console script."""
    script = Path(sys.executable).with_name("cdnlake")
    return [
        str(script) if script.exists() else sys.executable,
        *([] if script.exists() else ["-m", "cdnlake"]),
        *args,
    ]


def env(src: Path | None = None) -> dict[str, str]:
    """The commands' environment; ``src``: another checkout's ``src`` first on the path
    (the reference code, see ``--reference``)."""
    extra = {} if src is None else {"PYTHONPATH": str(src)}
    return {**os.environ, "CDNLAKE_ACCESS_KEY": KEY, **extra}


def reference_src(work: Path, rev: str) -> Path:
    """``src`` of commit ``rev`` of this repository, unpacked under ``work`` and compiled
    as ``pip install`` leaves it: the code a figure is compared with in the same run."""
    folder = work / "reference"
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    compileall.compile_dir(folder / "src" / "cdnlake", quiet=1)
    return folder / "src"


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# The child reports its own high-water mark (VmHWM) as it exits. wait4's ru_maxrss would
# not do: a forked child starts as a copy of this process, and Linux keeps that copy's
# resident size (the bench's, over 1 GB after the import benchmark) as the child's peak.
PEAK_WRAPPER = """
import atexit, re, runpy, sys
def report():
    status = open("/proc/self/status").read()
    kb = re.search(r"VmHWM:\\s+(\\d+) kB", status)
    sys.stderr.write(f"\\nPEAK_KB={kb.group(1) if kb else -1}\\n")
atexit.register(report)
sys.argv = ["cdnlake", *sys.argv[1:]]
runpy.run_module("cdnlake", run_name="__main__")
"""


def peak_rss_mb(args: list[str]) -> float:
    """Peak resident memory of ``cdnlake *args``, as the process itself saw it."""
    cmd = [sys.executable, "-c", PEAK_WRAPPER, *args]
    proc = subprocess.run(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.decode(errors="replace")
    found = re.search(r"PEAK_KB=(\d+)", err)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"cdnlake {' '.join(args)} failed: {err[-2000:]}")
    return int(found.group(1)) / 1024


# -- benchmarks ------------------------------------------------------------------------
COPY_SCRIPT = """
import duckdb, sys
src, out = sys.argv[1], sys.argv[2]
columns = "{" + ", ".join(f"'c{i}': 'VARCHAR'" for i in range(1, 13)) + "}"
duckdb.execute(
    f"COPY (SELECT * FROM read_csv('{src}', delim='|', header=false, quote='', escape='', "
    f"columns={columns}, null_padding=true)) TO '{out}' (FORMAT parquet)"
)
"""


def bench_import_v1(work: Path, lines: int) -> Figure:
    """Whole processes on both sides, in turns: cdnlake import-v1 into a new lake against
    DuckDB's COPY of the same file to Parquet, run as ``python -c`` in a fresh process."""
    src = make_v1_file(work / "day.log", lines)
    out = work / "ref.parquet"
    copy = [sys.executable, "-c", COPY_SCRIPT, str(src), str(out)]
    (work / "import").mkdir(parents=True, exist_ok=True)
    config = write_config(work / "import")
    command = cdnlake("--config", str(config), "import-v1", str(src), "--zone", "1234")
    ours, reference = in_turns(
        lambda: process_time(
            command, before=lambda: shutil.rmtree(work / "import" / "data", ignore_errors=True)
        ),
        lambda: process_time(copy),
        rounds=3,
    )
    return Figure(
        f"import-v1, {lines:,} lines (Delta lake), whole process",
        ours,
        reference,
        "s",
        "<= 1.5x DuckDB COPY (python -c)",
        ours <= 1.5 * reference,
    )


ARCHIVE_PART_LINES = 2_500_000  # lines per archived part (the provider closes at 5 million)


class LocalArchive:
    """A storage zone's archive as files under ``root`` (the provider's layout), read
    through the backfill's :class:`~cdnlake.ingest.archive_store.ArchiveStore` interface:
    the parts are generated here, not by the emulator's traffic model. A fetch links the
    file into place and checks its SHA-256 as a download does."""

    def __init__(self, root: Path, changed: datetime) -> None:
        self.root = root
        self.changed = changed
        self.sums: dict[str, str] = {}

    def list_folder(self, path: str) -> list[object]:
        from cdnlake.ingest.archive_store import Entry

        folder = self.root / path
        if not folder.is_dir():
            return []
        return [
            Entry(f.name, f.is_dir(), f.stat().st_size, self.changed, self.sums.get(str(f), ""))
            for f in sorted(folder.iterdir())
        ]

    def fetch(self, path: str, dest: Path, *, size: int, checksum: str) -> None:
        import hashlib

        source = self.root / path
        os.link(source, dest)
        digest = hashlib.sha256()
        with dest.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        if digest.hexdigest() != checksum or dest.stat().st_size != size:
            raise RuntimeError(f"{path}: checksum mismatch")


def make_archive(root: Path, lines: int) -> tuple[LocalArchive, list[Path]]:
    """``lines`` v1 lines of one day in gzipped parts of ``ARCHIVE_PART_LINES``, as the
    provider lays them out: newer naming scheme, two writers side by side, each writer's
    parts one after the other in time (so the two writers' parts of an hour overlap, and
    the second one's rows are looked up among the first one's), under
    ``pullzone-logs/www/<YYYY>/<MM>/``."""
    import hashlib

    folder = root / "pullzone-logs" / "www" / f"{DAY:%Y}" / f"{DAY:%m}"
    folder.mkdir(parents=True, exist_ok=True)
    archive = LocalArchive(
        root, datetime(DAY.year, DAY.month, DAY.day, tzinfo=UTC) + timedelta(days=2)
    )
    parts = []
    count = max(1, math.ceil(lines / ARCHIVE_PART_LINES))
    per_writer = math.ceil(count / 2)
    span_ms = 86_400_000 // per_writer  # the part's slice of the day
    day_ms = int(datetime(DAY.year, DAY.month, DAY.day, tzinfo=UTC).timestamp() * 1000)
    for k in range(count):
        n = lines // count + (1 if k < lines % count else 0)
        writer, index = 100 + k % 2, k // 2
        path = folder / f"{DAY:%d}_{writer}-{index}-{k:08x}.gzip"
        sql = (
            V1_SQL.replace("{path}", str(path).replace("'", "''"))
            .replace("(FORMAT csv,", "(FORMAT csv, COMPRESSION gzip,")
            .replace("i * 86400000 // $n", "i * $span_ms // $n")
        )
        start_ms = day_ms + index * span_ms
        duckdb.execute(sql, {"start_ms": start_ms, "n": n, "seed": 100 + k, "span_ms": span_ms})
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        archive.sums[str(path)] = digest
        parts.append(path)
    return archive, parts


READ_CSV_PARTS = """
COPY (SELECT * FROM read_csv($parts, delim='|', header=false, quote='', escape='',
      columns=$columns, null_padding=true, compression='gzip'))
TO '{out}' (FORMAT parquet)
"""


def bench_backfill(work: Path, lines: int) -> Figure:
    """``Backfill`` (listing, fetch with its checksum, parse, exactly-once commits, the
    parts' rows in ``archive_parts``) of gzipped archive parts into a new lake, against
    DuckDB's ``read_csv`` of the same parts into one Parquet file; in one process, in
    turns."""
    from cdnlake.config import build_config
    from cdnlake.ingest.backfill import Backfill

    archive, parts = make_archive(work / "storage", lines)
    root = work / "backfill"
    raw = {
        "storage": {"root": str(root)},
        "zones": [
            {
                "id": 1234,
                "archive": {"storage_zone": "logs", "folder": "www", "password_env": "BENCH_PW"},
            }
        ],
    }
    config = build_config(raw, base_dir=work, env={"BENCH_PW": "x"})
    clock = archive.changed + timedelta(days=1)

    def ours() -> float:
        shutil.rmtree(root, ignore_errors=True)

        def run() -> None:
            with session_for(config) as session:
                job = Backfill(config, session, archive, config.zones[0], clock=lambda: clock)
                done = job.run(job.listing())
                if not done.ok or done.rows != lines:
                    raise RuntimeError(f"backfill: {done.rows} rows of {lines}")

        return timed(run)

    out = work / "archive.parquet"
    columns = {f"c{i}": "VARCHAR" for i in range(1, 13)}
    sql = READ_CSV_PARTS.replace("{out}", str(out).replace("'", "''"))

    def reference() -> float:
        out.unlink(missing_ok=True)
        return timed(
            lambda: duckdb.execute(sql, {"parts": [str(p) for p in parts], "columns": columns})
        )

    rounds = 1 if lines >= 5_000_000 else 3
    mine, theirs = in_turns(ours, reference, rounds=rounds)
    return Figure(
        f"backfill, {lines:,} archived lines in {len(parts)} gzipped parts (Delta lake)",
        mine,
        theirs,
        "s",
        "<= 1.5x DuckDB read_csv to Parquet",
        mine <= 1.5 * theirs,
        f"{lines / mine:,.0f} lines/s",
    )


def bench_import_memory(work: Path, small: int, large: int) -> Figure:
    rss = []
    for n in (small, large):
        d = work / f"mem{n}"
        d.mkdir()
        src = make_v1_file(d / "day.log", n, seed=n)
        cfg = write_config(d)
        rss.append(peak_rss_mb(["--config", str(cfg), "import-v1", str(src), "--zone", "1234"]))
    growth = rss[1] / rss[0]
    ok = rss[1] < 1536 and growth < 1.5
    return Figure(
        f"import-v1 peak memory, {large:,} lines",
        rss[1],
        rss[0],
        "MB",
        "< 1.5 GB, flat with size",
        ok,
        f"{small:,} lines: {rss[0]:.0f} MB",
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout: float = 60) -> None:
    """Until something accepts connections on ``port`` (readiness, not a sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class EmulatorProcess:
    """The emulator in its own process, so it does not share our GIL."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            cdnlake("emulator", "--port", "0", "--access-key", KEY, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env(),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.url = line.strip().rsplit(" ", 1)[-1]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def bench_ingest_v2(work: Path, records: int) -> Figure:
    now = datetime.now(UTC).replace(microsecond=0)
    hours = 48
    rpm = records / (hours * 60) / 0.78  # the traffic model's mean diurnal factor
    emu = EmulatorProcess(
        "--zones",
        "1234",
        "--rpm",
        f"{rpm:.2f}",
        "--rate",
        "100000/10",
        "--now",
        now.isoformat(),
        "--frozen",
    )
    try:
        # A pass stores what the provider serves up to now (its watermark stays 5 min back).
        start, end = now - timedelta(hours=hours), now
        page = 10_000

        def bare_loop() -> int:
            n = 0
            with httpx.Client(headers={"AccessKey": KEY}, timeout=120) as client:
                cursor = start
                while cursor < end:
                    to = min(cursor + timedelta(hours=6), end)
                    offset = 0
                    while True:
                        r = client.get(
                            f"{emu.url}/v2/pullzones/1234/logs",
                            params={
                                "from": cursor.isoformat(),
                                "to": to.isoformat(),
                                "limit": page,
                                "offset": offset,
                                "order": "asc",
                            },
                        )
                        body = r.json()
                        n += len(body["data"])
                        if not body["pagination"]["hasMore"]:
                            break
                        offset += page
                    cursor = to
            return n

        bare_loop()  # warm the emulator's generator cache for both runs
        counted: list[int] = []
        reference = timed(lambda: counted.append(bare_loop()))
        cfg = write_config(
            work,
            emu.url,
            page_size=page,
            requests_per_window=100000,
            max_window_seconds=21600,
            lag_seconds=300,
        )
        # The first pass reads 72h; give it a watermark so both read the same window.
        from cdnlake.lake.log.progress import to_ms
        from cdnlake.lake.log.schema import REQUESTS
        from cdnlake.lake.log.store import Lake
        from cdnlake.lake.zone.writer import ZoneWriter

        writer = ZoneWriter(session_of(Lake(str(work / "data" / "lake"), {})), REQUESTS, 1234)
        writer.commit(writer.empty(), {"": to_ms(start)})
        ours = timed(
            lambda: subprocess.run(
                cdnlake("--config", str(cfg), "ingest"),
                env={**env(), "CDNLAKE_INGEST_OVERLAP_SECONDS": "0"},
                check=True,
                capture_output=True,
            )
        )
    finally:
        emu.stop()
    return Figure(
        f"ingest {counted[0]:,} v2 records from the emulator",
        ours,
        reference,
        "s",
        "<= 1.5x a bare download loop",
        ours <= 1.5 * reference,
    )


def bench_backlog(work: Path, pages: int, rate: tuple[int, float]) -> Figure:
    from cdnlake.client import ApiClient, BudgetRegistry, LoggingClient, RequestStats, V2Query
    from cdnlake.config import ApiConfig, Secret

    limit, window = rate
    now = datetime.now(UTC).replace(microsecond=0)
    emu = EmulatorProcess(
        "--zones",
        "1234",
        "--rpm",
        "5",
        "--rate",
        f"{limit}/{window:g}",
        "--now",
        now.isoformat(),
        "--frozen",
    )
    try:
        api = ApiConfig(logging_url=emu.url, access_key=Secret(KEY))
        client = ApiClient(api, budgets=BudgetRegistry(limit, window))
        logs = LoggingClient(client)
        start, end = now - timedelta(hours=60), now - timedelta(minutes=5)
        probe = V2Query(from_=start, to=end, limit=10_000, order="asc")
        n = sum(len(p.data) for p in logs.iter_v2_pages(1234, probe))
        time.sleep(window + 0.5)  # an empty budget for the measured run
        stats = RequestStats()
        page_size = -(-n // pages)
        query = V2Query(from_=start, to=end, limit=page_size, order="asc")
        count: list[int] = []
        ours = timed(lambda: count.append(sum(1 for _ in logs.iter_v2_pages(1234, query, stats))))
        client.close()
    finally:
        emu.stop()
    bursts = -(-count[0] // limit)
    ideal = (bursts - 1) * window
    ok = ours <= 1.1 * ideal + 0.5 and stats.rate_limited == 0
    return Figure(
        f"{count[0]}-page v2 backlog at {limit}/{window:g}s",
        ours,
        ideal,
        "s",
        "<= 1.1x the minimum, zero 429s",
        ok,
        f"{stats.rate_limited} 429s",
    )


def scrape_lag(url: str, zone: int) -> float | None:
    """The daemon's own ``cdnlake_watermark_lag_seconds`` for ``zone``, as a scrape sees it."""
    try:
        text = httpx.get(url, timeout=10).text
    except httpx.HTTPError:
        return None
    found = re.search(
        rf'^cdnlake_watermark_lag_seconds\{{[^}}]*zone="{zone}"[^}}]*\}} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else None


def scrape_lags(url: str) -> dict[int, float]:
    """Every zone's ``cdnlake_watermark_lag_seconds``, as one scrape sees it."""
    try:
        text = httpx.get(url, timeout=30).text
    except httpx.HTTPError:
        return {}
    return {
        int(zone): float(value)
        for zone, value in re.findall(
            r'^cdnlake_watermark_lag_seconds\{[^}]*zone="(\d+)"[^}]*\} (\S+)$', text, re.M
        )
    }


def daily_out_of_the_way(now: datetime) -> str:
    """A ``report_at``/``maintain_at`` 40 minutes ahead (or 23:59 near midnight), so that
    neither the daily jobs nor their catch-up at start-up runs while a bench measures."""
    ahead = now + timedelta(minutes=40)
    return "23:59" if ahead.date() != now.date() else ahead.strftime("%H:%M")


def daemon_config(
    root: Path,
    api_url: str,
    metrics_port: int,
    zones: list[int],
    *,
    ingest: Sequence[str] = (),
    schedule: Sequence[str] = (),
    more: Sequence[str] = (),
) -> Path:
    """A daemon's ``config.toml`` under ``root``: the emulator at ``api_url``, the lake
    under ``root/data``, /metrics on ``metrics_port``, the daily jobs out of the way, the
    v2 ``zones``; ``ingest``/``schedule`` keys and ``more`` tables added."""
    daily = daily_out_of_the_way(datetime.now(UTC))
    lines = [
        "[api]",
        f'base_url = "{api_url}"',
        f'logging_url = "{api_url}"',
        "[storage]",
        f'root = "{root / "data"}"',
    ]
    lines += ["[ingest]", *ingest] if ingest else []
    lines += ["[schedule]", *schedule, f'report_at = "{daily}"', f'maintain_at = "{daily}"']
    lines += ["[metrics]", f'listen = "127.0.0.1:{metrics_port}"', *more]
    for zone_id in zones:
        lines += ["[[zones]]", f"id = {zone_id}", 'source = "v2"']
    config = root / "config.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


@contextmanager
def running_daemon(config: Path, src: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """The real ``cdnlake daemon`` on ``config`` (of the checkout ``src``, default this
    one), stopped by SIGTERM (killed after 120 s) when the block ends."""
    daemon = subprocess.Popen(
        cdnlake("--config", str(config), "daemon"),
        env=env(src),
        stdout=subprocess.DEVNULL,
        stderr=open(os.environ.get("BENCH_DAEMON_LOG", os.devnull), "w"),
    )
    try:
        yield daemon
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=120)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def delta_versions(table: Path) -> int:
    """The table's latest version, from its log's file names (-1: no table yet)."""
    log = table / "_delta_log"
    names = [p.stem for p in log.glob("*.json")] if log.exists() else []
    return max((int(n) for n in names if n.isdigit()), default=-1)


SCRAPE_SECONDS = 15  # Prometheus's usual scrape interval


@dataclass
class ZonesRun:
    """What one daemon's run on quiet zones showed."""

    worst: dict[int, float]  # each zone's highest lag
    elapsed: float
    cpu: float  # of a core
    commits: dict[str, float]  # per poll, by table
    since: datetime
    lake: Path

    @property
    def busiest(self) -> tuple[str, float]:
        name = max(self.commits, key=lambda n: self.commits[n], default="none")
        return name, self.commits.get(name, 0.0)

    def per_table(self) -> str:
        return ", ".join(f"{name} {n:.0f}" for name, n in self.commits.items()) or "none"


def quiet_zones_run(
    root: Path, zones: int, seconds: float, poll: int, lag: int, src: Path | None = None
) -> ZonesRun:
    """The real ``cdnlake daemon`` (of the checkout ``src``, default this one) on ``zones``
    quiet zones of the emulator (a few requests a minute each), at the provider's real
    limit, for ``seconds`` of steady state: every zone's lag, as /metrics shows it (the lag
    alone every second, all of /metrics every ``SCRAPE_SECONDS`` as Prometheus scrapes
    it), the daemon's CPU and the Delta commits each table took per poll. The daemon
    starts as from a steady state: every zone's watermark at ``now - lag_seconds`` and its
    fresh reads up to now (set in one commit just before it starts), and its first round
    is measured too (the daemon staggers its zones' first passes). It stops early once a
    zone is past ``lag_seconds + 2 x poll_seconds``: the verdict is known."""
    from deltalake import CommitProperties, Transaction

    from cdnlake.lake.log.progress import FENCE, FRESH, WATERMARK, to_ms
    from cdnlake.lake.log.schema import REQUESTS, TABLES
    from cdnlake.lake.log.store import Lake

    ids = list(range(1, zones + 1))
    emu = EmulatorProcess("--zones", ",".join(map(str, ids)), "--rpm", "2", "--rate", "30/10")
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    config = daemon_config(
        root,
        emu.url,
        port,
        ids,
        ingest=[f"lag_seconds = {lag}", f"overlap_seconds = {2 * lag}"],
        schedule=[f"poll_seconds = {poll}"],
    )
    lake_dir = root / "data" / "lake"
    # Every zone's progress in one commit (as a daemon's passes leave it), so that none
    # has aged by the time the daemon starts.
    table = Lake(str(lake_dir), {}).open_or_create(REQUESTS)
    now = datetime.now(UTC)
    mark = {WATERMARK: to_ms(now - timedelta(seconds=lag)), FRESH: to_ms(now), FENCE: 0}
    at = to_ms(now)
    table.create_write_transaction(
        [],
        mode="append",
        schema=table.schema(),
        partition_by=REQUESTS.partition_by,
        commit_properties=CommitProperties(
            app_transactions=[
                Transaction(REQUESTS.app_id(zone_id, part), version, at)
                for zone_id in ids
                for part, version in mark.items()
            ]
        ),
    )

    # The lag every second, alone (/metrics?name[]=...); the whole of /metrics (about 50
    # series a zone) every SCRAPE_SECONDS, as a Prometheus server scrapes it. Scraping
    # all of it every second cost the daemon a third of its GIL time on 1,000 zones.
    metrics = f"http://127.0.0.1:{port}/metrics"
    lags = f"{metrics}?name[]=cdnlake_watermark_lag_seconds"
    try:
        with running_daemon(config, src) as daemon:
            bound = lag + 2 * poll
            names = [spec.name for spec in TABLES]
            versions0 = {name: delta_versions(lake_dir / name) for name in names}
            worst: dict[int, float] = {}
            started, since = time.monotonic(), datetime.now(UTC)
            wait_port(port, timeout=120)
            cpu0 = cpu_seconds(daemon.pid)
            scraped = -math.inf
            while time.monotonic() - started < seconds:
                if time.monotonic() - scraped >= SCRAPE_SECONDS:
                    scraped = time.monotonic()
                    whole = scrape_lags(metrics)  # as Prometheus does
                else:
                    whole = {}
                for zone_id, value in (whole or scrape_lags(lags)).items():
                    worst[zone_id] = max(worst.get(zone_id, 0.0), value)
                if worst and max(worst.values()) > bound:
                    break
                time.sleep(1.0)
            elapsed = time.monotonic() - started
            versions1 = {name: delta_versions(lake_dir / name) for name in names}
            cpu = (cpu_seconds(daemon.pid) - cpu0) / elapsed
    finally:
        emu.stop()
    polls = elapsed / poll
    commits = {
        name: (versions1[name] - versions0[name]) / polls
        for name in names
        if versions1[name] > versions0[name]
    }
    return ZonesRun(worst, elapsed, cpu, commits, since, lake_dir)


# Slack of a daemon figure over the reference code's in the same run: this machine's
# figures move by 10 to 20% from run to run.
REFERENCE_SLACK = 1.2


def bench_many_zones(
    work: Path, zones: int, seconds: float, poll: int, lag: int, reference: Path | None = None
) -> list[Figure]:
    """:func:`quiet_zones_run` of this code: its lag against ``lag_seconds + 2 x
    poll_seconds``, and the Delta commits each table took per poll (the figure group
    commits bring down: without them each zone's pass commits to ``requests`` and to
    ``ingest_runs``) and the daemon's CPU. With ``reference`` (the ``src`` of the code
    before a change, ``--reference``), the same run of that code first: commits and CPU
    are then held to it too (at most ``REFERENCE_SLACK`` times)."""
    before = None
    if reference is not None:
        before = quiet_zones_run(work / "zones-reference", zones, seconds, poll, lag, reference)
    run = quiet_zones_run(work / "zones", zones, seconds, poll, lag)
    bound = lag + 2 * poll
    highest = max(run.worst.values(), default=float("inf"))
    behind = sum(1 for value in run.worst.values() if value > bound)
    ok = len(run.worst) == zones and behind == 0
    # A group commit waits for the passes in flight up to GROUP_WAIT: a table takes at
    # most about a commit a second, whatever the zones.
    busiest, most = run.busiest
    cpu = run.cpu
    ref_most = None if before is None else before.busiest[1]
    ref_cpu = None if before is None else before.cpu
    was = (
        ""
        if before is None
        else f"; the reference code: {before.per_table()}, CPU {before.cpu:.0%} of a core, "
        f"max lag {max(before.worst.values(), default=float('inf')):.0f} s"
    )
    commits_figure = Figure(
        f"{zones:,} quiet zones on one daemon: commits per poll to the busiest table",
        most,
        ref_most,
        "",
        f"<= {poll} (a commit a second of the poll, whatever the zones)"
        + ("" if ref_most is None else f", <= {REFERENCE_SLACK}x the reference code"),
        0 < most <= poll and (ref_most is None or most <= REFERENCE_SLACK * ref_most),
        f"{busiest}; every table: {run.per_table()}" + was,
    )
    cpu_figure = Figure(
        f"{zones:,} quiet zones on one daemon: its CPU",
        cpu,
        ref_cpu,
        " of a core",
        "<= 1 core (1,000 zones)"
        + ("" if ref_cpu is None else f", <= {REFERENCE_SLACK}x the reference code"),
        cpu <= max(1.0, zones / 1_000) and (ref_cpu is None or cpu <= REFERENCE_SLACK * ref_cpu),
        "user and system time of the daemon process over the run, from /proc" + was,
    )
    return [
        commits_figure,
        Figure(
            f"{zones:,} quiet zones on one daemon for {run.elapsed / 60:.1f} min: max lag",
            highest,
            bound,
            "s",
            "every zone's lag <= lag + 2 x poll",
            ok,
            f"{behind} of {zones} zones past it"
            + ("" if run.elapsed >= seconds else " (stopped early: the verdict was known)")
            + f"; commits per poll: {run.per_table()}; "
            + busy_passes(run.lake, run.since).note()
            + f"; daemon CPU {cpu:.0%} of a core"
            + was,
        ),
        cpu_figure,
    ]


def syslog_frame(zone: int, request_id: str, ts_ms: int, as_json: bool = False) -> bytes:
    """One forwarded request as the provider sends it over TCP: an octet-counted RFC 5424
    message whose text is a v1 line, or (``as_json``) the request as a JSON object."""
    stamp = datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    line = (
        f"HIT|200|{ts_ms}|1234|{zone}|192.0.2.1|-|https://cdn.example.com/a.js|DE|"
        f"Mozilla/5.0|{request_id}|US"
    )
    if as_json:
        line = (
            f'{{"timestamp":"{stamp[:23]}Z","pullZoneId":{zone},"requestId":"{request_id}",'
            '"cacheStatus":"HIT","statusCode":200,"bytesSent":1234,"edgeLocation":"DE",'
            '"scheme":"https","host":"cdn.example.com","path":"/a.js",'
            '"url":"https://cdn.example.com/a.js","remoteIp":"192.0.2.1","countryCode":"US",'
            '"userAgent":"Mozilla/5.0","referer":null,"ja4Fingerprint":null,"asn":3320}'
        )
    message = f"<134>1 {stamp} de.edge cdn-logs - - - ".encode() + b"\xef\xbb\xbf" + line.encode()
    return str(len(message)).encode() + b" " + message


class CommitWatch:
    """When each request id became queryable: the bench follows the ``requests`` table's
    Delta log (a commit is visible to readers once its log entry exists) and reads the
    request ids of the files each commit adds."""

    def __init__(self, table: Path, prefix: str) -> None:
        self.table = table
        self.prefix = prefix
        self.seen: dict[str, float] = {}  # request id -> perf_counter when committed
        self._version = delta_versions(table) + 1
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import json
        from urllib.parse import unquote

        import pyarrow.parquet as pq

        while not self._stop:
            entry = self.table / "_delta_log" / f"{self._version:020d}.json"
            if not entry.exists():
                time.sleep(0.02)
                continue
            at = time.perf_counter()
            self._version += 1
            for text in entry.read_text().splitlines():
                add = json.loads(text).get("add")
                if add is None:
                    continue
                ids = pq.read_table(self.table / unquote(add["path"]), columns=["request_id"])
                for request_id in ids.column(0).to_pylist():
                    if request_id.startswith(self.prefix):
                        self.seen.setdefault(request_id, at)

    def stop(self) -> None:
        self._stop = True
        self._thread.join(10)


def scrape_forwarded(url: str) -> int:
    try:
        text = httpx.get(url, timeout=30).text
    except httpx.HTTPError:
        return 0
    return sum(
        int(float(n))
        for n in re.findall(r"^cdnlake_forwarded_rows_total\{[^}]*\} (\S+)$", text, re.M)
    )


def bench_forwarding(
    work: Path, rate: int, seconds: float, burst: int, flush: float
) -> list[Figure]:
    """The real ``cdnlake daemon`` receiving forwarded logs over TCP (``[forwarding]``),
    from a sender in this process that writes octet-counted syslog as the provider does.

    Latency: ``rate`` lines a second for ``seconds``, each line's time from being sent to
    its row being queryable (its commit in the ``requests`` log), median and p99, against
    ``flush_seconds + 2 s``. Throughput: ``burst`` lines sent as fast as the receiver takes
    them (TCP back-pressure), the rows the daemon committed per second until the last one,
    against the issue's busy zone (10,000 requests/s): one daemon can take a busy zone's
    forwarding. The zone's API passes go on beside (a quiet emulator zone)."""
    emu = EmulatorProcess("--zones", "1234", "--rpm", "2", "--rate", "30/10")
    port, listen = free_port(), free_port()
    root = work / "forwarding"
    root.mkdir(parents=True, exist_ok=True)
    config = daemon_config(
        root,
        emu.url,
        port,
        [1234],
        more=["[forwarding]", f'listen = "127.0.0.1:{listen}"', f"flush_seconds = {flush}"],
    )
    try:
        with running_daemon(config):
            metrics = f"http://127.0.0.1:{port}/metrics"
            table = root / "data" / "lake" / "requests"
            wait_port(port, timeout=120)
            wait_port(listen, timeout=60)
            # The first pass creates the table; the watch follows it from then on.
            deadline = time.monotonic() + 120
            while delta_versions(table) < 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            watch = CommitWatch(table, "lat")
            sent: dict[str, float] = {}
            with socket.create_connection(("127.0.0.1", listen), timeout=60) as sock:
                step = 0.05
                per_step = max(1, round(rate * step))
                started = time.perf_counter()
                i = 0
                while time.perf_counter() - started < seconds:
                    ts = int(time.time() * 1000)
                    batch = [f"lat{i + k:012d}" for k in range(per_step)]
                    payload = b"".join(syslog_frame(1234, rid, ts) for rid in batch)
                    at = time.perf_counter()
                    sock.sendall(payload)
                    sent.update(dict.fromkeys(batch, at))
                    i += per_step
                    time.sleep(max(0.0, started + (i / per_step) * step - time.perf_counter()))
                deadline = time.monotonic() + 10 * flush + 60
                while len(watch.seen) < len(sent) and time.monotonic() < deadline:
                    time.sleep(0.1)
                watch.stop()
                latencies = sorted(
                    watch.seen[rid] - at for rid, at in sent.items() if rid in watch.seen
                )
                # Throughput: all at once, the receiver taking them as fast as it commits;
                # plain v1 lines, then JSON objects.
                committed, took = burst_of(sock, metrics, burst, "thr", as_json=False)
                json_committed, json_took = burst_of(sock, metrics, burst, "jsn", as_json=True)
    finally:
        emu.stop()
    lost = len(sent) - len(latencies)
    median = statistics.median(latencies) if latencies else float("inf")
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else median
    bound = flush + 2
    per_second = committed / took if took else 0.0
    json_per_second = json_committed / json_took if json_took else 0.0
    busy = 10_000
    return [
        Figure(
            f"forwarded request to queryable row, {len(sent):,} lines at {rate:,}/s over TCP:"
            " median",
            median,
            bound,
            "s",
            "median and p99 < flush_seconds + 2 s",
            lost == 0 and p99 < bound,
            f"p99 {p99:.2f} s; flush_seconds = {flush:g}"
            + (f"; {lost} lines never committed" if lost else ""),
        ),
        Figure(
            f"forwarded rows one daemon commits, {burst:,} lines sent at once over TCP",
            per_second,
            float(busy),
            "rows/s",
            f">= {busy:,} rows/s (the busy zone's rate)",
            committed >= burst and per_second >= busy,
            f"{committed:,} committed in {took:.1f} s",
        ),
        Figure(
            f"forwarded JSON rows one daemon commits, {burst:,} objects sent at once over TCP",
            json_per_second,
            float(busy),
            "rows/s",
            f">= {busy:,} rows/s (the busy zone's rate)",
            json_committed >= burst and json_per_second >= busy,
            f"{json_committed:,} committed in {json_took:.1f} s",
        ),
    ]


def burst_of(
    sock: socket.socket, metrics: str, burst: int, prefix: str, *, as_json: bool
) -> tuple[int, float]:
    """``burst`` requests sent at once; the rows the daemon committed of them and how long
    that took (until the last, or a deadline)."""
    before = scrape_forwarded(metrics)
    ts = int(time.time() * 1000)
    payload = b"".join(syslog_frame(1234, f"{prefix}{k:012d}", ts, as_json) for k in range(burst))
    started = time.perf_counter()
    sock.sendall(payload)
    deadline = time.monotonic() + max(120.0, burst / 1000)
    committed, took = 0, 0.0
    while committed < burst and time.monotonic() < deadline:
        committed = scrape_forwarded(metrics) - before
        took = time.perf_counter() - started
        time.sleep(0.2)
    return committed, took


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(found.group(1)) / 1024 if found else 0.0


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_busy_zone(work: Path, rate: int, seconds: float, poll: int, lag: int) -> Figure:
    """The real ``cdnlake daemon`` on one zone at a sustained ``rate`` requests/s (the
    emulator's ``--zone-rate``, made on demand) at the provider's real limit (30/10 s),
    for ``seconds`` of steady state: the lag /metrics shows against ``lag_seconds + 2 x
    poll_seconds``, its resident memory at start and end, the 429s it caused, and the read
    amplification (records the emulator served / rows the lake gained). The daemon starts
    as from a steady state: a watermark at ``now - lag_seconds``, its fresh reads up to
    now, and the zone's records since well before it; its first pass is left out.

    ``ingest_runs`` tells each pass's length. Each pass reads its slice of the safety
    margin (``overlap_seconds / 3600`` of its span), so the run's amplification includes
    it."""
    from cdnlake.lake.log.progress import FRESH, WATERMARK, to_ms
    from cdnlake.lake.log.schema import REQUESTS
    from cdnlake.lake.log.store import Lake
    from cdnlake.lake.zone.writer import ZoneWriter

    overlap = 2 * lag
    now = datetime.now(UTC).replace(microsecond=0)
    since = now - timedelta(seconds=2 * (lag + overlap))
    emu = EmulatorProcess(
        "--zones", "1234", "--zone-rate", f"1234={rate}/s@{since.isoformat()}", "--rate", "30/10"
    )
    port = free_port()
    root = work / "busy"
    root.mkdir(parents=True, exist_ok=True)
    config = daemon_config(
        root,
        emu.url,
        port,
        [1234],
        ingest=["page_size = 10000", f"lag_seconds = {lag}", f"overlap_seconds = {overlap}"],
        schedule=[f"poll_seconds = {poll}"],
    )
    lake = Lake(str(root / "data" / "lake"), {})
    writer = ZoneWriter(session_of(lake), REQUESTS, 1234)
    writer.commit(
        writer.empty(), {WATERMARK: to_ms(now - timedelta(seconds=lag)), FRESH: to_ms(now)}
    )

    def served() -> tuple[int, int]:
        stats = httpx.get(f"{emu.url}/_emulator/stats", timeout=30).json()["zones"]["1234"]
        return int(stats.get("records_served", 0)), int(stats.get("rate_limited", 0))

    def stored() -> int:
        from deltalake import DeltaTable

        return int(DeltaTable(str(root / "data" / "lake" / "requests")).count())

    metrics = f"http://127.0.0.1:{port}/metrics"
    try:
        with running_daemon(config) as daemon:
            bound = lag + 2 * poll
            launched = time.monotonic()
            wait_port(port, timeout=120)

            def next_pass(deadline: float) -> float | None:
                """Until the lag drops (a pass has moved the watermark): the highest seen."""
                worst, last = 0.0, None
                while time.monotonic() < deadline:
                    value = scrape_lag(metrics, 1234)
                    if value is not None:
                        worst = max(worst, value)
                        if last is not None and value < last - poll / 2:
                            return worst
                        last = value
                    time.sleep(0.5)
                return None

            # Warm-up: lag_seconds and a poll, so that each stable read meets a span the fresh
            # reads have read as they do in a running daemon (one poll at a time).
            while time.monotonic() - launched < lag + poll:
                if next_pass(time.monotonic() + max(300.0, 10 * poll)) is None:
                    raise RuntimeError("busy zone: the daemon's passes stopped ending")
            served0, limited0 = served()
            stored0, rss0 = stored(), rss_mb(daemon.pid)
            cpu0 = (cpu_seconds(emu.proc.pid), cpu_seconds(daemon.pid))
            steady_from = datetime.now(UTC)
            worst = 0.0
            started = time.monotonic()
            first_half = rss0  # the highest RSS of the first half of the steady state
            while time.monotonic() - started < seconds:
                value = scrape_lag(metrics, 1234)
                worst = max(worst, value or 0.0)
                if time.monotonic() - started < seconds / 2:
                    first_half = max(first_half, rss_mb(daemon.pid))
                time.sleep(1.0)
            last = next_pass(time.monotonic() + max(120.0, 4 * poll))  # end on a pass's end
            worst = max(worst, last if last is not None else float("inf"))
            elapsed = time.monotonic() - started
            served1, limited1 = served()
            stored1, rss1 = stored(), rss_mb(daemon.pid)
            emu_cpu = (cpu_seconds(emu.proc.pid) - cpu0[0]) / elapsed
            emu_rss = rss_mb(emu.proc.pid)
            daemon_cpu = (cpu_seconds(daemon.pid) - cpu0[1]) / elapsed
    finally:
        emu.stop()
    passes = busy_passes(root / "data" / "lake", steady_from)
    new_rows = stored1 - stored0
    amplification = (served1 - served0) / new_rows if new_rows else float("inf")
    limited = limited1 - limited0
    # Flat: the second half ends no higher than the first half reached (the allocators'
    # high-water mark after the first passes is not a leak; growth past it would be).
    flat = rss1 <= 1.1 * first_half + 20
    ok = worst <= bound and flat and limited == 0 and amplification <= 2
    return Figure(
        f"busy zone at {rate:,} requests/s, daemon for {elapsed / 60:.1f} min: max lag",
        worst,
        bound,
        "s",
        "lag <= lag + 2 x poll, flat RSS, 0 429s, read amplification <= 2",
        ok,
        f"read amplification {amplification:.2f}x ({served1 - served0:,} served"
        f" / {new_rows:,} new, the margin's slices included); {passes.note()};"
        f" RSS {rss0:.0f} -> {first_half:.0f} (first half's highest) "
        f"-> {rss1:.0f} MB; {limited} 429s; "
        f"CPU: daemon {daemon_cpu:.0%}, emulator {emu_cpu:.0%} of a core "
        f"(emulator RSS {emu_rss:.0f} MB)",
    )


@dataclass
class Passes:
    """What ``ingest_runs`` recorded of a daemon's passes over a time."""

    count: int
    median_seconds: float
    longest_seconds: float

    def note(self) -> str:
        return (
            f"{self.count} passes, {self.median_seconds:.1f} s median, "
            f"{self.longest_seconds:.1f} s longest"
        )


def busy_passes(lake: Path, since: datetime) -> Passes:
    """The passes ``ingest_runs`` recorded from ``since`` on."""
    from deltalake import DeltaTable

    if not (lake / "ingest_runs" / "_delta_log").exists():  # no pass began (a short run)
        return Passes(0, 0.0, 0.0)
    runs = [
        run
        for run in DeltaTable(str(lake / "ingest_runs")).to_pyarrow_table().to_pylist()
        if run["started"] >= since
    ]
    took = [(r["finished"] - r["started"]).total_seconds() for r in runs] or [0.0]
    return Passes(len(runs), statistics.median(took), max(took))


def make_report_lake(work: Path, rows: int) -> Path:
    """One day of ``rows`` requests as a Delta table under ``work/report`` (made once)."""
    root = work / "report"
    if (root / "lake" / "requests" / "_delta_log").exists():
        return root
    part = root / "lake" / "requests" / "pull_zone_id=1234" / f"date={DAY.isoformat()}"
    part.mkdir(parents=True)
    per_hour = rows // 24
    start_ms = int(datetime(DAY.year, DAY.month, DAY.day, tzinfo=UTC).timestamp() * 1000)
    con = duckdb.connect()
    for hour in range(24):
        con.execute(
            f"""
            COPY (
              SELECT make_timestamptz(($start + $hour * 3600000 + i * 3600000 // $n) * 1000) AS ts,
                     md5(($hour * $n + i)::VARCHAR) AS request_id,
                     (['HIT','HIT','HIT','MISS','EXPIRED','STALE','BYPASS','-'])[1 + (hash(i, 1) % 8)::BIGINT] AS cache_status,
                     (['200','200','200','206','304','404','500','503'])[1 + (hash(i, 2) % 8)::BIGINT]::INTEGER AS status_code,
                     (100 + hash(i, 3) % 500000)::BIGINT AS bytes_sent,
                     (['DE','FR','NY','SG'])[1 + (hash(i, 4) % 4)::BIGINT] AS edge_location,
                     'https' AS scheme, 'cdn.example.com' AS host,
                     '/static/' || (hash(i, 5) % 20000)::VARCHAR || '.js' AS path,
                     'https://cdn.example.com/static/' || (hash(i, 5) % 20000)::VARCHAR || '.js' AS url,
                     (hash(i, 6) % 200000)::VARCHAR AS remote_ip,
                     (['US','DE','GB','FR'])[1 + (hash(i, 7) % 4)::BIGINT] AS country_code,
                     'Mozilla/5.0' AS user_agent, NULL::VARCHAR AS referer, NULL::BIGINT AS body_bytes_sent,
                     NULL::VARCHAR AS content_range, NULL::VARCHAR AS ja4_fingerprint, NULL::INTEGER AS asn,
                     NULL::VARCHAR AS asn_organization, 'v2' AS source
              FROM range($n) t(i)
            ) TO '{part / f"part-{hour:02d}.parquet"}' (FORMAT parquet)
        """,
            {"start": start_ms, "hour": hour, "n": per_hour},
        )
    from deltalake import DeltaTable

    uri = str(root / "lake" / "requests")
    parquet_to_delta(uri)
    assert DeltaTable(uri).count() == per_hour * 24
    return root


def parquet_to_delta(uri: str) -> None:
    """Hive-partitioned Parquet files (zone, date) become a Delta table in place: the
    log names them, nothing is copied."""
    import pyarrow as pa
    from deltalake import Schema, convert_to_deltalake

    partitions = Schema.from_arrow(pa.schema([("pull_zone_id", pa.int64()), ("date", pa.date32())]))
    convert_to_deltalake(uri, partition_by=partitions, partition_strategy="hive")


def bench_report(work: Path, rows: int) -> Figure:
    from cdnlake.config import build_config
    from cdnlake.reports.build import write_reports

    root = make_report_lake(work, rows)
    config = build_config({"storage": {"root": str(root)}}, base_dir=root, env={})
    ours = min(
        timed(lambda: write_reports(config, DAY, session=session_for(config))) for _ in range(2)
    )
    return Figure(
        f"report of one day, {rows // 24 * 24:,} requests, all formats",
        ours,
        None,
        "s",
        "< 5 s",
        ours < 5,
    )


def make_month_lake(root: Path, zones: int, days: int, per_zone_day: int) -> Path:
    """``zones`` x ``days`` partitions of ``per_zone_day`` requests, as one Delta table,
    laid out as ``maintain`` leaves a day: one file sorted by ``ts`` in row groups of
    ``ROW_GROUP_ROWS``."""
    from cdnlake.lake.log.files import ROW_GROUP_ROWS

    lake = root / "lake" / "requests"
    lake.parent.mkdir(parents=True, exist_ok=True)
    first = DAY - timedelta(days=days - 1)
    n = zones * days * per_zone_day
    con = duckdb.connect()
    con.execute(f"SET temp_directory = '{root / 'duckdb-spill'}'")  # not the working folder
    con.execute(
        f"""
        COPY (
          SELECT 1 + (i // $per) % $zones AS pull_zone_id,
                 ($first::DATE + CAST(i // ($per * $zones) AS INTEGER)) AS date,
                 make_timestamptz((epoch_ms(($first::DATE + CAST(i // ($per * $zones) AS INTEGER))::TIMESTAMP)
                                   + (i % $per) * 86400000 // $per) * 1000) AS ts,
                 printf('%016x', i) AS request_id,
                 (['HIT','HIT','HIT','MISS','EXPIRED','STALE','BYPASS','-'])[1 + (hash(i, 1) % 8)::BIGINT] AS cache_status,
                 (['200','200','200','206','304','404','500','503'])[1 + (hash(i, 2) % 8)::BIGINT]::INTEGER AS status_code,
                 (100 + hash(i, 3) % 500000)::BIGINT AS bytes_sent,
                 'DE' AS edge_location, 'https' AS scheme, 'cdn.example.com' AS host,
                 '/a.js' AS path, 'https://cdn.example.com/a.js' AS url, '192.0.2.0' AS remote_ip,
                 'DE' AS country_code, NULL::VARCHAR AS user_agent, NULL::VARCHAR AS referer,
                 NULL::BIGINT AS body_bytes_sent, NULL::VARCHAR AS content_range,
                 NULL::VARCHAR AS ja4_fingerprint, NULL::INTEGER AS asn,
                 NULL::VARCHAR AS asn_organization, 'v2' AS source
          FROM range($n) t(i)
        ) TO '{lake}' (FORMAT parquet, PARTITION_BY (pull_zone_id, date),
               ROW_GROUP_SIZE {ROW_GROUP_ROWS})
        """,
        {"per": per_zone_day, "zones": zones, "first": first.isoformat(), "n": n},
    )
    parquet_to_delta(str(lake))
    return root


def bench_range_report(work: Path, zones: int, days: int, per_zone_day: int) -> Figure:
    """The range report's figures from rollups against a full scan of requests, in-process
    (the same session set-up on both sides); maintain builds the rollups first."""
    from cdnlake.config import build_config
    from cdnlake.lake.upkeep.rollups import refresh
    from cdnlake.reports.build import RANGE_SECTIONS, collect
    from cdnlake.warehouse.db import Warehouse
    from cdnlake.warehouse.named import get_named

    root = make_month_lake(work / "month", zones, days, per_zone_day)
    config = build_config({"storage": {"root": str(root)}}, base_dir=root, env={})
    built = timed(lambda: refresh(session_for(config)))
    first = DAY - timedelta(days=days - 1)
    ours = min(
        timed(lambda: collect(config, first, end=DAY, session=session_for(config)))
        for _ in range(3)
    )
    rows = (
        "FROM (SELECT pull_zone_id, date, hour(ts) AS hour, cache_status, status_code, "
        "count(*) AS requests, sum(bytes_sent) AS bytes FROM requests GROUP BY ALL) AS rows"
    )
    period = {"from_day": first.isoformat(), "to_day": DAY.isoformat()}
    sections = [get_named(query) for _, query, _, _ in RANGE_SECTIONS]

    def scan() -> None:  # every section of the range report, each by a scan of requests
        with Warehouse(config.storage).connect(["requests"]) as con:
            for query in sections:
                con.execute(query.sql.replace("FROM requests_hourly", rows), query.bind(period))
                con.fetchall()

    reference = min(timed(scan) for _ in range(2))
    return Figure(
        f"range report, {days} days x {zones} zones ({zones * days * per_zone_day:,} requests),"
        " from rollups",
        ours,
        reference,
        "s",
        ">= 20x faster than a full scan",
        reference / ours >= 20,
        f"rollups built by maintain in {built:.1f} s",
    )


def requests_window(rows: int, tag: str, day: date = DAY, columns: int = 5) -> pl.DataFrame:
    """``rows`` new requests ``<tag>-<i>`` spread over the minute from 23:58 on ``day``, as a
    pass hands them to the commit; ``columns``: how many carry values (the rest null)."""
    import polars as pl

    from cdnlake.lake.log.schema import REQUEST_SCHEMA, polars_schema

    start = datetime(day.year, day.month, day.day, 23, 58, tzinfo=UTC)
    values = {
        "ts": [start + timedelta(milliseconds=60_000 * i // rows) for i in range(rows)],
        "request_id": [f"{tag}-{i}" for i in range(rows)],
        "cache_status": ["HIT"] * rows,
        "status_code": [200] * rows,
        "bytes_sent": [1000] * rows,
    }
    given = dict(list(values.items())[:columns])
    return (
        pl.DataFrame(given)
        .with_columns(
            [
                pl.lit(None, dtype).alias(c)
                for c, dtype in polars_schema(REQUEST_SCHEMA).items()
                if c not in given
            ]
        )
        .select(list(REQUEST_SCHEMA))
        .with_columns(pl.col("ts").dt.cast_time_unit("us"))
    )


def bench_commit_on_history(work: Path, zones: int, days: int, per_zone_day: int) -> Figure:
    """What a daemon pass adds to the lake (60 s of new requests, the exactly-once commit
    with its deduplication) on a zone with ``days`` days of history, against the same
    commit on an empty zone of the same lake: cdnlake's cost must follow the window, not
    the zone's history. The note gives the same commit on an empty lake too: the rest is
    delta-rs's, whose snapshot grows with the table's files."""
    from cdnlake.lake.log.schema import REQUESTS
    from cdnlake.lake.log.store import Lake
    from cdnlake.lake.zone.writer import ZoneWriter

    root = work / "month"
    if not (root / "lake" / "requests" / "_delta_log").exists():
        make_month_lake(root, zones, days, per_zone_day)
    per_minute = max(1, per_zone_day // 1440)

    def commit(lake: Lake, zone: int, tag: str) -> float:
        writer = ZoneWriter(session_of(lake), REQUESTS, zone)
        return timed(lambda: writer.commit(requests_window(per_minute, tag), {}))

    full = Lake(str(root / "lake"), {})
    new_zone = zones + 1  # no history: its first commit only creates its partition
    empty = Lake(str(work / "empty-lake"), {})
    commit(full, new_zone, "warm")
    commit(empty, 1, "warm")  # the first commit creates the table
    ours, reference, bare = [], [], []
    for i in range(5):  # alternated, so that the machine's moods hit all three alike
        ours.append(commit(full, 1, f"h{i}"))
        reference.append(commit(full, new_zone, f"n{i}"))
        bare.append(commit(empty, 1, f"e{i}"))
    return Figure(
        f"commit of 60 s of new rows on a zone with {days} days of history",
        min(ours),
        min(reference),
        "s",
        "<= 1.2x the same on an empty zone",
        min(ours) <= 1.2 * min(reference),
        f"{per_minute:,} rows; on an empty lake {min(bare) * 1000:.1f} ms",
    )


def bench_traffic_counting(work: Path, rows: int, turns: int = 9) -> Figure:
    """What the traffic counters add to a commit of ``rows`` new requests (the daemon's,
    with /metrics on: its session tells them each landed commit's rows, which they group
    once) against the commit itself: counting must stay a small part of storing."""
    from cdnlake.lake.log.schema import REQUESTS
    from cdnlake.lake.log.store import Lake
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.lake.zone.writer import ZoneWriter
    from cdnlake.monitoring.traffic import TrafficCounters

    writer = ZoneWriter(LakeSession(Lake(str(work / "lake"), {})), REQUESTS, 1)
    writer.commit(requests_window(rows, "warm"), {})  # the first commit creates the table
    counters = TrafficCounters()
    counting, committing = [], []
    for i in range(turns):  # alternated, so that the machine's moods hit both alike
        frame = requests_window(rows, f"w{i}")
        committing.append(timed(lambda frame=frame: writer.commit(frame, {})))
        counting.append(timed(lambda frame=frame: counters.stored(1, frame)))
    assert sum(counters.counts()[0].values()) == turns * rows
    return Figure(
        f"counting the traffic of a commit of {rows:,} new requests",
        min(counting),
        min(committing),
        "s",
        "<= 0.1x the commit",
        min(counting) <= 0.1 * min(committing),
    )


def make_files_lake(root: Path, zones: int, days: int, per_file: int = 100) -> Path:
    """A ``requests`` table of ``zones`` x ``days`` data files (one per zone-day, as the
    daily ``maintain`` leaves them), named in one commit and checkpointed. All zones' files
    of one day are hard links to one real Parquet file of that day's ``per_file``
    requests: the log is as large as the file count, the disk is not."""
    import os

    from deltalake.transaction import AddAction

    from cdnlake.lake.log.files import ROW_GROUP_ROWS, _stats
    from cdnlake.lake.log.schema import REQUESTS
    from cdnlake.lake.log.store import Lake

    lake = Lake(str(root / "lake"), {})
    table = lake.open_or_create(REQUESTS)
    originals = root / "day-files"
    originals.mkdir(parents=True, exist_ok=True)
    actions = []
    for d in range(days):
        day = DAY - timedelta(days=days - 1 - d)
        rows = requests_window(per_file, f"d{d}", day, columns=2)
        original = originals / f"{day}.parquet"
        rows.write_parquet(original, compression="zstd", row_group_size=ROW_GROUP_ROWS)
        stats = _stats(rows, ["ts", "request_id"])
        for zone in range(1, zones + 1):
            folder = f"pull_zone_id={zone}/date={day}"
            (root / "lake" / "requests" / folder).mkdir(parents=True, exist_ok=True)
            os.link(original, root / "lake" / "requests" / folder / "part-0.parquet")
            actions.append(
                AddAction(
                    path=f"{folder}/part-0.parquet",
                    size=original.stat().st_size,
                    partition_values={"pull_zone_id": str(zone), "date": day.isoformat()},
                    modification_time=int(time.time() * 1000),
                    data_change=True,
                    stats=stats,
                )
            )
    table.create_write_transaction(
        actions, mode="append", schema=table.schema(), partition_by=REQUESTS.partition_by
    )
    table.update_incremental()
    table.create_checkpoint()
    return root


def bench_commit_on_files(work: Path, days: int, few: int, many: int) -> Figure:
    """A daemon pass's commit (60 s of one zone's requests, with its deduplication) on a
    ``requests`` table of ``many`` files against the same commit on one of ``few``, the
    zone's own history (``days`` days) alike: the cost of choosing the zone-day's files
    must not grow with the other zones' files. The note splits out that choice."""
    from cdnlake.lake.log.schema import REQUESTS
    from cdnlake.lake.log.store import Lake
    from cdnlake.lake.zone.writer import ZoneWriter

    lakes = {}
    for files in (few, many):
        root = make_files_lake(work / f"files-{files}", files // days, days)
        lakes[files] = Lake(str(root / "lake"), {})
    writers = {files: ZoneWriter(session_of(lake), REQUESTS, 1) for files, lake in lakes.items()}
    times: dict[int, list[float]] = {few: [], many: []}
    for i in range(6):  # alternated, so that the machine's moods hit both alike
        for files, writer in writers.items():
            rows = requests_window(50, f"c{i}")
            took = timed(lambda w=writer, r=rows: w.commit(r, {}))
            if i:  # the first commit of each is a warm-up
                times[files].append(took)
    choose, bare = {}, {}
    for files, writer in writers.items():
        shared, days = writer.table, [DAY.isoformat()]
        choose[files] = min(
            timed(lambda s=shared, d=days: s.snapshot(1, files=True, days=d)) for _ in range(5)
        )
        # progress alone: no file to choose, only the refresh and the log entry written
        bare[files] = min(timed(lambda w=writer: w.commit(w.empty(), {})) for _ in range(3))
    ours, reference = min(times[many]), min(times[few])
    return Figure(
        f"commit of 60 s of new rows on a table of {many:,} files",
        ours,
        reference,
        "s",
        f"<= 1.2x the same on {few:,} files",
        ours <= 1.2 * reference,
        f"the zone-day's snapshot (files chosen): {choose[many] * 1000:.2f} ms against"
        f" {choose[few] * 1000:.2f} ms; a commit of progress alone (refresh and log entry):"
        f" {bare[many] * 1000:.1f} ms against {bare[few] * 1000:.1f} ms",
    )


def bench_report_spark(work: Path, rows: int) -> Figure:
    """The same report, as a user runs it (whole processes, json), on Spark Connect (Sail
    on this machine) against DuckDB: informational, not a target."""
    root = make_report_lake(work, rows)
    port = free_port()
    config = root / "spark.toml"
    config.write_text(
        f'[storage]\nroot = "{root}"\n[engine]\nspark_remote = "sc://127.0.0.1:{port}"\n'
    )
    sail = Path(sys.executable).parent / "sail"
    server = subprocess.Popen(
        [str(sail), "spark", "server", "--ip", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)

        def report(engine: str) -> float:
            args = ["--config", str(config), "report", "--date", DAY.isoformat()]
            args += ["--format", "json", "--engine", engine, "--out", str(root / engine)]
            run = subprocess.run
            return timed(
                lambda: run(cdnlake(*args), check=True, env=env(), stdout=subprocess.DEVNULL)
            )

        report("spark")  # the first query of a session warms the server
        spark, duck = report("spark"), report("duckdb")
    finally:
        server.terminate()
        server.wait()
    return Figure(
        f"report of one day, {rows // 24 * 24:,} requests: --engine spark (Sail, this machine)",
        spark,
        duck,
        "s",
        "informational",
        True,
        "reference: --engine duckdb",
    )


BARE_IMPORTS = [sys.executable, "-c", "import polars, duckdb, pyarrow, deltalake"]


def process_time(
    cmd: list[str], before: Callable[[], object] | None = None, *, check: bool = True
) -> float:
    """One whole process, timed (``before`` runs untimed first).

    ``check=False`` for a command whose exit code says something (status: 1 when a zone
    is unhealthy)."""
    if before is not None:
        before()
    return timed(lambda: subprocess.run(cmd, check=check, env=env(), capture_output=True))


def in_turns(
    ours: Callable[[], float],
    reference: Callable[[], float],
    rounds: int = 7,
    pick: Callable[[list[float]], float] = statistics.median,
) -> tuple[float, float]:
    """Both sides measured in turns, ``rounds`` times each: this machine's speed drifts
    from minute to minute, and a drift must fall on both sides alike, not on whichever
    ran second. The median of each side's times (or ``pick``)."""
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        theirs.append(reference())
        mine.append(ours())
    return pick(mine), pick(theirs)


def bench_startup() -> Figure:
    ours, reference = in_turns(
        lambda: process_time(cdnlake("--help")),
        lambda: process_time([sys.executable, "-c", "pass"]),
        rounds=5,
    )
    return Figure(
        "cdnlake --help start-up",
        ours,
        reference,
        "s",
        "< 0.5 s more than python",
        ours - reference < 0.5,
    )


def bench_small_import(work: Path) -> Figure:
    """A 1,000-line ``import-v1`` into a new lake, as a whole process, against the bare
    imports of the libraries it stands on: what cdnlake adds to start-up."""
    src = make_v1_file(work / "small.log", 1000, seed=7)
    (work / "small").mkdir(parents=True, exist_ok=True)
    config = write_config(work / "small")
    lake = work / "small" / "data"
    command = cdnlake("--config", str(config), "import-v1", str(src), "--zone", "1234")
    ours, reference = in_turns(
        lambda: process_time(command, before=lambda: shutil.rmtree(lake, ignore_errors=True)),
        lambda: process_time(BARE_IMPORTS),
    )
    return Figure(
        "start-up: import-v1 of 1,000 lines, whole process",
        ours,
        reference,
        "s",
        "<= 1.3x bare imports",
        ours <= 1.3 * reference,
    )


RUNS_SQL = """
COPY (
  SELECT 1 + i % $zones AS zone,
         printf('run-%012x', i) AS run_id,
         'v2' AS source,
         $first::TIMESTAMPTZ + to_milliseconds(60000 * (i // $zones)) AS started,
         $first::TIMESTAMPTZ + to_milliseconds(60000 * (i // $zones) + 900) AS finished,
         $first::TIMESTAMPTZ + to_milliseconds(60000 * (i // $zones) - 360000) AS window_from,
         $first::TIMESTAMPTZ + to_milliseconds(60000 * (i // $zones)) AS window_to,
         1::INTEGER AS pages, 100::BIGINT AS rows, 0::BIGINT AS duplicates_dropped,
         0::BIGINT AS rejected, 0::INTEGER AS rate_limited, 0::INTEGER AS retries,
         0::INTEGER AS server_errors, 0::INTEGER AS transport_errors,
         'ok' AS outcome, NULL::VARCHAR AS error, 'bench:1' AS daemon,
         200::BIGINT AS rows_read
  FROM range($n) t(i)
) TO '{path}' (FORMAT parquet, PARTITION_BY (zone))
"""


def add_daemon_history(root: Path, zones: int, days: int) -> None:
    """What a daemon polling every minute leaves beside a month lake: one ``ingest_runs``
    row per zone and minute up to now, each zone's watermark (its application
    transaction), and the checkpoints its daily ``maintain`` writes."""
    import pyarrow as pa
    from deltalake import Schema, convert_to_deltalake

    from cdnlake.lake.log.schema import INGEST_RUNS, REQUESTS
    from cdnlake.lake.log.store import Lake
    from cdnlake.lake.zone.writer import ZoneWriter

    runs = root / "lake" / "ingest_runs"
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    first = now - timedelta(days=days)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(
        RUNS_SQL.format(path=runs),
        {"zones": zones, "first": first.isoformat(), "n": zones * days * 1440},
    )
    zone = Schema.from_arrow(pa.schema([("zone", pa.int64())]))
    convert_to_deltalake(str(runs), partition_by=zone, partition_strategy="hive")
    lake = Lake(str(root / "lake"), {})
    mark = int(now.timestamp() * 1000) - 360_000
    for zone_id in range(1, zones + 1):
        writer = ZoneWriter(session_of(lake), REQUESTS, zone_id)
        writer.commit(writer.empty(), {"": mark})
    for spec in (REQUESTS, INGEST_RUNS):
        table = lake.open(spec)
        assert table is not None
        table.create_checkpoint()


def bench_status(work: Path, zones: int, days: int, per_zone_day: int) -> Figure:
    """``cdnlake status`` as a whole process on ``zones`` zones with ``days`` days of
    history (requests, a run a minute, watermarks), against the bare imports."""
    root = work / "month"
    if not (root / "lake" / "requests" / "_delta_log").exists():
        make_month_lake(root, zones, days, per_zone_day)
    if not (root / "lake" / "ingest_runs").exists():
        add_daemon_history(root, zones, days)
    config = root / "config.toml"
    lines = [
        "[api]",
        'base_url = "http://127.0.0.1:9"',
        "[storage]",
        f'root = "{root}"',
        f'lake_uri = "{root / "lake"}"',
    ]
    for zone_id in range(1, zones + 1):
        lines += ["[[zones]]", f"id = {zone_id}", 'source = "v2"']
    config.write_text("\n".join(lines) + "\n")
    command = cdnlake("--config", str(config), "status", "--format", "json")
    proc = subprocess.run(command, env=env(), capture_output=True, text=True)
    if '"zone_id": 1,' not in proc.stdout:
        raise RuntimeError(f"status failed: {proc.stderr[-2000:]}")
    ours, reference = in_turns(
        lambda: process_time(command, check=False), lambda: process_time(BARE_IMPORTS)
    )
    return Figure(
        f"start-up: status on {zones} zones with {days} days of history, whole process",
        ours,
        reference,
        "s",
        "<= 1.3x bare imports",
        ours <= 1.3 * reference,
        f"{zones * days * 1440:,} runs",
    )


TOP_SQL = """
COPY (
  SELECT make_timestamptz(($start + i * $span // $n) * 1000) AS ts,
         md5(($start || ':' || i)::VARCHAR) AS request_id,
         (['HIT','HIT','HIT','MISS','EXPIRED','STALE','BYPASS','-'])[1 + (hash(i, 1) % 8)::BIGINT] AS cache_status,
         (['200','200','200','206','304','404','500','503'])[1 + (hash(i, 2) % 8)::BIGINT]::INTEGER AS status_code,
         (100 + hash(i, 3) % 500000)::BIGINT AS bytes_sent,
         'FR' AS edge_location, 'https' AS scheme,
         (['cdn.example.com','img.example.com','api.example.com'])[1 + (hash(i, 8) % 3)::BIGINT] AS host,
         '/static/' || (hash(i, 5) % 20000)::VARCHAR || '.js' AS path,
         'https://cdn.example.com/static/' || (hash(i, 5) % 20000)::VARCHAR || '.js' AS url,
         '198.51.' || (hash(i, 6) % 200)::VARCHAR || '.0' AS remote_ip,
         (['US','DE','GB','FR','JP'])[1 + (hash(i, 7) % 5)::BIGINT] AS country_code,
         (['Mozilla/5.0 (X11)','curl/8.5','Googlebot/2.1','okhttp/4'])[1 + (hash(i, 9) % 4)::BIGINT] AS user_agent,
         NULL::VARCHAR AS referer, NULL::BIGINT AS body_bytes_sent,
         NULL::VARCHAR AS content_range, NULL::VARCHAR AS ja4_fingerprint, NULL::INTEGER AS asn,
         NULL::VARCHAR AS asn_organization, 'forwarded' AS source
  FROM range($n) t(i)
) TO '{path}' (FORMAT parquet)
"""


def make_live_lake(root: Path, rate: int, minutes: int, flush: int = 5) -> tuple[Path, datetime]:
    """The last ``minutes`` of one zone at ``rate`` requests/s, one file per ``flush``
    seconds (as the forwarding receiver commits them), as a Delta table; and its now."""
    now = datetime.now(UTC).replace(microsecond=0)
    now -= timedelta(seconds=now.second % flush)
    table = root / "lake" / "requests"
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for k in range(minutes * 60 // flush):
        start = now - timedelta(seconds=flush * (k + 1))
        part = table / "pull_zone_id=1234" / f"date={start.date().isoformat()}"
        part.mkdir(parents=True, exist_ok=True)
        con.execute(
            TOP_SQL.replace("{path}", str(part / f"part-{k:05d}.parquet")),
            {"start": int(start.timestamp() * 1000), "span": flush * 1000, "n": rate * flush},
        )
    parquet_to_delta(str(table))
    return root, now


def cpu_of(fn: Callable[[], object]) -> float:
    """The CPU ``fn`` costs this process, every thread (DuckDB's) counted."""
    started = time.process_time()
    fn()
    return time.process_time() - started


def bench_top(work: Path, rate: int, minutes: int) -> list[Figure]:
    """The CPU one refresh of ``cdnlake top`` costs on a zone at ``rate`` requests/s with
    ``minutes`` of history in files of 5 s (as forwarding commits them), for the last
    minute and the last hour, against DuckDB's own scan of the same window's rows grouped
    by path alone (the least a question of that window costs, given the files; top groups
    them eight ways, the sparklines' spans and seven dimensions, in one scan)."""
    from cdnlake.lake.log.store import Lake
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.warehouse.live import WINDOWS, LiveView

    root, now = make_live_lake(work / "live", rate, minutes)
    files = sorted((root / "lake" / "requests").rglob("*.parquet"))
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    figures = []
    with LakeSession(Lake(str(root / "lake"), {})) as session:
        view = LiveView(session, [1234], ("HIT", "STALE", "UPDATING", "REVALIDATED"))
        for window in ("1m", "1h"):
            start = now - timedelta(seconds=WINDOWS[window])
            snap = view.snapshot(window, now=now)  # the first one loads the log
            expected = rate * min(WINDOWS[window], minutes * 60)
            if snap.requests != expected:
                raise RuntimeError(f"top counted {snap.requests:,} requests, not {expected:,}")
            wanted = [str(f) for f in files if int(f.stem.split("-")[1]) * 5 < WINDOWS[window]]

            def bare(start: datetime = start, wanted: list[str] = wanted) -> None:
                con.execute(
                    "SELECT path, count(*), sum(bytes_sent) FROM read_parquet($files) "
                    "WHERE ts >= $start AND ts < $end GROUP BY path",
                    {"files": wanted, "start": start, "end": now},
                ).fetchall()

            ours, reference = in_turns(
                lambda window=window: cpu_of(lambda: view.snapshot(window, now=now)),
                lambda bare=bare: cpu_of(bare),
                rounds=7,
            )
            figures.append(
                Figure(
                    f"top: CPU of one refresh of the last {window} at {rate:,} requests/s",
                    ours,
                    reference,
                    "s",
                    "<= 8x one GROUP BY (top groups eight ways)"
                    + (", < 0.1 s" if window == "1m" else ""),
                    ours <= 8 * reference and (window != "1m" or ours < 0.1),
                    f"{snap.files_read} of {snap.files_listed} files read, {snap.requests:,} rows",
                )
            )
        view.close()
    return figures


# -- driver ----------------------------------------------------------------------------
SIZES = {
    "full": {
        "import": 1_000_000,
        "backfill": 10_000_000,
        "mem": (1_000_000, 10_000_000),
        "ingest": 1_000_000,
        "backlog": (90, (30, 10.0)),
        "report": 10_000_000,
        "range": (50, 30, 66_667),
        "files": (100, 1_000, 100_000),
        # requests/s, seconds of steady state, poll_seconds, lag_seconds (see bench_busy_zone)
        "busy": (10_000, 600, 60, 300),
        # zones, seconds of steady state, poll_seconds, lag_seconds (see bench_many_zones)
        "zones": (1_000, 600, 60, 300),
        "more-zones": (2_000, 600, 60, 300),  # the lag bound alone, at twice the zones
        # lines/s and seconds (latency), lines at once (throughput), flush_seconds
        "forwarding": (1_000, 30, 200_000, 5.0),
        "traffic": 250_000,  # new requests in one commit (ingest.flush_rows)
        "top": (1_000, 70),  # requests/s and minutes of history (bench_top)
    },
    "small": {
        "import": 2_000,
        "backfill": 3_000,
        "mem": (2_000, 6_000),
        "ingest": 5_000,
        "backlog": (3, (30, 1.0)),
        "report": 24_000,
        "range": (3, 4, 500),
        "files": (5, 10, 200),
        "busy": (50, 6, 2, 4),
        "zones": (5, 6, 2, 4),
        "more-zones": (10, 6, 2, 4),
        "forwarding": (50, 3, 2_000, 1.0),
        "traffic": 20_000,
        "top": (20, 70),
    },
}


def run_all(
    size: str,
    only: set[str] | None = None,
    busy: tuple[int | None, float | None] = (None, None),
    zones: tuple[int | None, float | None] = (None, None),
    backfill_lines: int | None = None,
    reference: str | None = None,
) -> list[Figure]:
    s = dict(SIZES[size])
    s["backfill"] = backfill_lines or s["backfill"]
    rate, seconds, poll, lag = s["busy"]
    s["busy"] = (busy[0] or rate, busy[1] or seconds, poll, lag)
    count, seconds, poll, lag = s["zones"]
    s["zones"] = (zones[0] or count, zones[1] or seconds, poll, lag)
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="cdnlake-bench-") as tmp:
        work = Path(tmp)
        before = None if reference is None else reference_src(work, reference)
        plan: list[tuple[str, Callable[[], Figure | list[Figure]]]] = [
            ("startup", bench_startup),
            ("small-import", lambda: bench_small_import(work / "import")),
            ("import", lambda: bench_import_v1(work / "import", s["import"])),
            ("backfill", lambda: bench_backfill(work / "archive", s["backfill"])),
            ("memory", lambda: bench_import_memory(work / "memory", *s["mem"])),
            ("ingest", lambda: bench_ingest_v2(work / "ingest", s["ingest"])),
            ("backlog", lambda: bench_backlog(work / "backlog", *s["backlog"])),
            ("report", lambda: bench_report(work, s["report"])),
            ("spark", lambda: bench_report_spark(work, s["report"])),
            ("range", lambda: bench_range_report(work, *s["range"])),
            ("history", lambda: bench_commit_on_history(work, *s["range"])),
            ("traffic", lambda: bench_traffic_counting(work / "traffic", s["traffic"])),
            ("files", lambda: bench_commit_on_files(work, *s["files"])),
            ("status", lambda: bench_status(work, *s["range"])),
            ("busy", lambda: bench_busy_zone(work, *s["busy"])),
            ("zones", lambda: bench_many_zones(work, *s["zones"], reference=before)),
            ("more-zones", lambda: bench_many_zones(work / "more", *s["more-zones"])[1:2]),
            ("forwarding", lambda: bench_forwarding(work, *s["forwarding"])),
            ("top", lambda: bench_top(work, *s["top"])),
        ]
        for name, fn in plan:
            if only and name not in only:
                continue
            for d in ("import", "archive", "memory", "ingest", "backlog"):
                (work / d).mkdir(exist_ok=True)
            made = fn()
            for figure in made if isinstance(made, list) else [made]:
                figures.append(figure)
                print(" | ".join(figure.row()), flush=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--small", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--only", action="append", help="run only these benchmarks")
    parser.add_argument("--busy-rate", type=int, help="the busy zone's requests/s")
    parser.add_argument("--busy-seconds", type=float, help="the busy zone's steady state")
    parser.add_argument("--zones", type=int, help="how many quiet zones (bench 'zones')")
    parser.add_argument("--zones-seconds", type=float, help="how long the quiet zones run")
    parser.add_argument("--backfill-lines", type=int, help="archived lines (bench 'backfill')")
    parser.add_argument(
        "--reference",
        metavar="REV",
        help="a commit whose code the daemon figures (bench 'zones') also run, first, as\n"
        "their reference in the same run (make bench: the last before issue 47's door)",
    )
    args = parser.parse_args()
    # As pip leaves an installed package: bytecode compiled (this checkout is installed
    # editable, and PYTHONDONTWRITEBYTECODE would have every process compile it again).
    compileall.compile_dir(REPO / "src" / "cdnlake", quiet=1)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print("what | ours | reference (same run) | ratio | target | verdict | note")
    figures = run_all(
        "small" if args.small else "full",
        set(args.only or []) or None,
        (args.busy_rate, args.busy_seconds),
        (args.zones, args.zones_seconds),
        args.backfill_lines,
        args.reference,
    )
    missed = [f.what for f in figures if not f.ok]
    print(
        f"{len(figures) - len(missed)} of {len(figures)} targets met"
        + (f"; missed: {missed}" if missed else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
