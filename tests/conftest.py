"""Shared fixtures: a real loopback emulator, an S3 API (moto's server), configs pointing
at them, and ground truth."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cdnlake.client import ApiClient, BudgetRegistry, LoggingClient, RetryPolicy
from cdnlake.config import Config, load_config
from cdnlake.emulator import Emulator, EmulatorConfig, Faults, parse_zones

NOW = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)
KEY = "test-key"
FAST_RETRY = RetryPolicy(max_attempts=8, base_delay=0.01, max_delay=0.05, max_total_seconds=20)
# Under fault injection about half of all attempts fail, so 8 attempts leave a ~0.4% chance
# that one of a run's hundreds of requests gives up: a flaky test. 40 attempts make that
# ~1e-12 per request while a test that wants a give-up still narrows the policy itself.
FAULT_RETRY = RetryPolicy(max_attempts=40, base_delay=0.01, max_delay=0.05, max_total_seconds=60)
REPO = Path(__file__).resolve().parents[1]
FIXTURES_DIR = REPO / "tests" / "fixtures"
# moto accepts any credentials; the lake reads them from the standard AWS environment, and
# so do the CLI processes the tests start.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
# The key every daemon of a test fleet shares ([privacy] hash_key_env = "FLEET_KEY").
os.environ.setdefault("FLEET_KEY", "fleet-key-of-the-tests-" + "k" * 32)
# A terminal's size comes from the terminal: a COLUMNS or LINES inherited from the runner
# (an xdist worker has them) would override the pseudo-terminals the tests open.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)

# `make test` runs the suite in several pytest-xdist workers (Makefile: unit). Each worker is
# a process of its own with its own session: its own moto, Sail, PostgreSQL and emulators,
# each on a free port, and its own tmp_path tree.
if os.environ.get("PYTEST_XDIST_WORKER"):
    # A worker's ``__main__`` has neither a file nor a spec, which pyspark's Spark Connect
    # client takes for a doctest run: it then looks for a Spark install and exits. The
    # worker's main program is xdist's remote module; name it.
    _main = sys.modules["__main__"]
    if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
        import xdist.remote

        _main.__file__ = xdist.remote.__file__

# The slowest modules, slowest first (docs/development.md lists their tests). The workers
# take whole files (--dist loadfile: a module's fixtures are built once), in collection
# order; starting these first keeps one of them from being the last thing still running.
SLOW_FIRST = [
    "tests/ingest/test_crash_safety.py",
    "tests/reliability/test_s3_faults.py",
    "tests/lake/test_vacuum_beside_daemon.py",
    "tests/coordination/test_fleet_vacuum_now.py",
    "tests/bench/test_bench_smoke.py",
    "tests/cli/test_backfill_cli.py",
    "tests/audit/test_reread.py",
    "tests/ingest/test_read_twice.py",
    "tests/test_scheduler.py",
    "tests/ingest/test_loud_inputs.py",
    "tests/ingest/test_exactly_once.py",
    "tests/coordination/test_daemons.py",
    "tests/cli/test_help_and_demo.py",
    "tests/reliability/test_load.py",
    "tests/warehouse/test_spark_engine.py",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest modules first, each module's tests in their own order."""
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(proc: subprocess.Popen[Any], port: int, name: str) -> None:
    """Until ``proc`` accepts connections on ``port`` (readiness, not a fixed sleep)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited at start") from None
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not start within 60 s")


class S3Server:
    """moto's S3 server on loopback, started and stopped by the suite."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        moto = Path(sys.executable).parent / "moto_server"
        self.proc = subprocess.Popen(
            [str(moto), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_listening(self.proc, self.port, "moto_server")

    def new_bucket(self) -> str:
        import boto3

        name = f"lake-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=self.url, region_name="us-east-1").create_bucket(
            Bucket=name
        )
        return name

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(params=["local", "s3"])
def lake_kind(request: pytest.FixtureRequest) -> str:
    """Run a test against a lake on local disk and one on S3 (moto's server)."""
    if request.param == "s3":
        request.getfixturevalue("s3_server")
    return str(request.param)


class SailServer:
    """A Spark Connect server (Sail) on loopback, reading the lake on local disk and on
    moto's S3 (``AWS_ENDPOINT``/``AWS_ALLOW_HTTP`` in its environment)."""

    def __init__(self, s3: S3Server) -> None:
        self.s3 = s3
        self.port = free_port()
        self.remote = f"sc://127.0.0.1:{self.port}"
        sail = Path(sys.executable).parent / "sail"
        env = {
            **os.environ,
            "AWS_ENDPOINT": s3.url,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1",
            "RUST_LOG": "error",
        }
        self.proc = subprocess.Popen(
            [str(sail), "spark", "server", "--ip", "127.0.0.1", "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        wait_listening(self.proc, self.port, "sail")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def sail(s3_server: S3Server) -> Iterator[SailServer]:
    server = SailServer(s3_server)
    yield server
    server.stop()


def postgres_bin() -> Path | None:
    """Where Debian's PostgreSQL server programs are (``initdb``, ``pg_ctl``), if anywhere."""
    import shutil

    found = shutil.which("pg_ctl")
    if found and Path(found).with_name("initdb").exists():
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return versions[-1].parent if versions else None


class PostgresServer:
    """A real PostgreSQL on 127.0.0.1 in a temporary folder, started and stopped by the
    suite. As root (CI), the server runs as Debian's ``postgres`` user: it refuses root."""

    def __init__(self) -> None:
        import pwd
        import tempfile

        found = postgres_bin()
        if found is None:
            pytest.skip("PostgreSQL is not installed (make test installs Debian's package)")
        self.bin: Path = found
        # Not under pytest's own folder, which only root may enter.
        self.dir = Path(tempfile.mkdtemp(prefix="cdnlake-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.user: list[str] = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
            self.user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "cdnlake", "--no-sync")
        self.dsn = f"host=127.0.0.1 port={self.port} user=cdnlake dbname=postgres"
        self.start()

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(
            [*self.user, str(self.bin / program), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.dir,
        )

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off"
        # -w: pg_ctl returns once the server accepts connections (readiness, not a sleep).
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.dir / "log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        import shutil

        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    yield server
    server.remove()


def s3_lake_lines(server: S3Server) -> list[str]:
    """``[storage]`` keys of a lake in a new bucket on ``server``."""
    return [
        f'lake_uri = "s3://{server.new_bucket()}/lake"',
        "[storage.s3]",
        f'endpoint_url = "{server.url}"',
        "allow_http = true",
    ]


def start_emulator(
    zones: str = "1234:extended,1235:v1,1236",
    *,
    rpm: float = 5.0,
    rate: tuple[int, float] = (1000, 10.0),
    now: datetime | None = NOW,
    frozen: bool = True,
    faults: Faults | None = None,
    seed: int = 7,
    **extra: Any,
) -> Emulator:
    """A started emulator; ``extra`` are more :class:`EmulatorConfig` fields (e.g.
    ``archive_days``, ``archive_limits`` for zones marked ``:archived``)."""
    config = EmulatorConfig(
        port=0,
        seed=seed,
        access_key=KEY,
        zones=parse_zones(zones),
        rate_limit=rate[0],
        rate_window=rate[1],
        rpm=rpm,
        now=now,
        frozen=frozen,
        faults=faults or Faults(),
        **extra,
    )
    return Emulator(config).start()


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = start_emulator()
    yield emu
    emu.stop()


def write_config(
    tmp_path: Path,
    emu: Emulator,
    zones: list[tuple[int, str]] | None = None,
    *,
    s3: S3Server | None = None,
    **ingest: Any,
) -> Path:
    """A config.toml in tmp_path pointing at ``emu``; ingest keys override defaults.

    With ``s3``, the lake is in a new bucket of that S3 server.
    """
    zones = zones or [(1234, "v2"), (1235, "v1"), (1236, "v2")]
    settings = {
        "lag_seconds": 300,
        "overlap_seconds": 600,
        "page_size": 2000,
        "requests_per_window": 1000,
        "window_seconds": 10,
        "max_window_seconds": 21600,
    }
    settings.update(ingest)
    lines = [
        "[api]",
        f'base_url = "{emu.url}"',
        f'video_url = "{emu.url}"',
        f'logging_url = "{emu.url}"',
        "timeout_seconds = 10",
        "retry_attempts = 8",
        "retry_max_seconds = 20",
        "[storage]",
        'root = "data"',
        *(s3_lake_lines(s3) if s3 is not None else []),
        "[ingest]",
        *(f"{k} = {v}" for k, v in settings.items()),
        "[schedule]",
        "poll_seconds = 1",
    ]
    for zid, source in zones:
        lines += ["[[zones]]", f"id = {zid}", f'name = "z{zid}"', f'source = "{source}"']
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def load_test_config(path: Path) -> Config:
    return load_config(path, env={"CDNLAKE_ACCESS_KEY": KEY})


def make_client(config: Config, **kwargs: Any) -> ApiClient:
    budgets = BudgetRegistry(config.ingest.requests_per_window, config.ingest.window_seconds)
    return ApiClient(config.api, retry=kwargs.pop("retry", FAST_RETRY), budgets=budgets, **kwargs)


def logging_client(config: Config, retry: RetryPolicy = FAST_RETRY) -> LoggingClient:
    return LoggingClient(make_client(config, retry=retry))


def truth_ids(
    emu: Emulator, zone: int, start: datetime, end: datetime, at: datetime | None = None
) -> set[str]:
    """Request ids the provider holds for ``[start, end)`` that are visible at ``at``."""
    at_ms = int((at or emu.clock.now()).timestamp() * 1000)
    return {
        r.wire.requestId
        for r in emu.traffic.records(
            zone, int(start.timestamp() * 1000), int(end.timestamp() * 1000)
        )
        if r.visible_ms <= at_ms
    }


def lake_of(where: Path | Config) -> Any:
    """The lake of a config, or the local lake under a storage root."""
    from cdnlake.lake.log.store import Lake

    if isinstance(where, Config):
        return Lake.from_config(where.storage)
    return Lake(str(where / "lake"), {})


def lake_frame(where: Path | Config, table: str = "requests") -> Any:
    """A whole lake table as a polars frame (empty if the table does not exist yet)."""
    import polars as pl

    from cdnlake.lake.log.schema import TABLES_BY_NAME, polars_schema

    spec = TABLES_BY_NAME[table]
    delta = lake_of(where).open(spec)
    if delta is None:
        return pl.DataFrame(schema=polars_schema(spec.schema))
    return pl.from_arrow(delta.to_pyarrow_table())


def lake_ids(where: Path | Config, zone: int) -> list[str]:
    """Request ids in the lake for a zone, repeats included (they must never be there)."""
    import polars as pl

    frame = lake_frame(where)
    return frame.filter(pl.col("pull_zone_id") == zone)["request_id"].to_list()


def spawn_cli(
    *args: str, stdout: Any = subprocess.DEVNULL, stderr: Any = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    """`cdnlake ARGS` in the background, with the test access key."""
    return subprocess.Popen(
        [sys.executable, "-m", "cdnlake", *args],
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
        stdout=stdout,
        stderr=stderr,
        text=True,
    )


def ingest_all(config: Config, emu: Emulator) -> list[Any]:
    """One ingestion pass over every configured zone, on the emulator's clock."""
    from cdnlake.ingest.passes import Ingestor
    from tests.sessions import session_for

    with session_for(config) as session:
        ingestor = Ingestor(config, logging_client(config), session, clock=emu.clock.now)
        return ingestor.run(config.zones)


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "CDNLAKE_ACCESS_KEY": KEY, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "cdnlake", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


# Runs the CLI in this process, reports which heavy libraries it loaded on stderr, and
# exits with the command's own exit code.
_MODULES_WRAPPER = """
import json, sys
from cdnlake.cli.main import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("polars", "pyarrow", "pandas", "numpy") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
raise SystemExit(code)
"""


def cli_heavy_modules(*args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """A whole CLI process (its exit code the command's), and which of polars, pyarrow,
    pandas and numpy it loaded."""
    import json

    proc = subprocess.run(
        [sys.executable, "-c", _MODULES_WRAPPER, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith('{"code"'), proc.stderr[-2000:]
    return proc, json.loads(lines[-1])["heavy"]


__all__ = ["NOW", "timedelta"]


def lake_text_contains(where: Path | Config, needle: str) -> list[str]:
    """Every lake table and text column holding ``needle`` (files are compressed: read them)."""
    import polars as pl

    from cdnlake.lake.log.schema import TABLES

    hits = []
    for spec in TABLES:
        frame = lake_frame(where, spec.name)
        for name, dtype in frame.schema.items():
            if dtype == pl.String and frame[name].str.contains(needle, literal=True).any():
                hits.append(f"{spec.name}:{name}")
    local = lake_of(where).local
    for f in local.rglob("*") if local is not None else []:  # raw bytes: log, checkpoints
        if f.is_file() and needle.encode() in f.read_bytes():
            hits.append(str(f.relative_to(local)))
    return hits


@pytest.fixture(autouse=True)
def _no_handler_on_a_closed_stream() -> None:
    """A CLI run in-process earlier in this worker may have left a logging handler on a
    stream pytest has since closed: its "Logging error" on stderr is not the code's."""
    import logging

    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        if not isinstance(logger, logging.Logger):
            continue
        for handler in list(logger.handlers):
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
                logger.removeHandler(handler)
