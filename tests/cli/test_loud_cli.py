"""What a new user met: one line where a traceback was, types JSON cannot hold, slow tables,
overrides misspelt in silence, shield zone ids refused, summaries printed twice."""

from __future__ import annotations

import json
import os
import pty
import select
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import KEY, REPO, run_cli, start_emulator, write_config
from tests.fixture_lake import build_fixture_lake


def fixture_config(tmp_path, extra: str = ""):
    config = build_fixture_lake(tmp_path / "root")
    path = tmp_path / "config.toml"
    path.write_text(
        f'[storage]\nroot = "{config.storage.root}"\n[[zones]]\nid = 1\n[[zones]]\nid = 2\n'
        "[[shield_zones]]\nid = 5001\n" + extra
    )
    return path


def one_line_error(result: subprocess.CompletedProcess[str], needle: str, code: int = 2) -> None:
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.stderr


def test_json_holds_every_duckdb_type(tmp_path):
    cfg = fixture_config(tmp_path)
    query = (
        "SELECT INTERVAL 1 DAY + INTERVAL 90 MINUTE AS i, '\\xAA\\x00'::BLOB AS b, "
        "'6299c177-15e5-4642-a665-95cb7101eb59'::UUID AS u, 'nan'::DOUBLE AS nan, "
        "'-inf'::DOUBLE AS inf, [1.5, 'nan'::DOUBLE] AS l, MAP {1: 2} AS m, 1.25::DECIMAL(9,2) AS d"
    )
    result = run_cli("--config", str(cfg), "sql", query, "--format", "json")
    assert result.returncode == 0, result.stderr

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    (row,) = json.loads(result.stdout, parse_constant=refuse)
    assert row == {
        "i": "P1DT1H30M",
        "b": "qgA=",
        "u": "6299c177-15e5-4642-a665-95cb7101eb59",
        "nan": None,
        "inf": None,
        "l": [1.5, None],
        "m": {"1": 2},
        "d": 1.25,
    }
    as_csv = run_cli("--config", str(cfg), "sql", query, "--format", "csv").stdout
    assert (
        as_csv.splitlines()[1].startswith("P1DT1H30M,qgA=,6299c177") and '"[1.5, null]"' in as_csv
    )


def test_a_terminal_table_is_capped_and_says_how_to_get_everything(tmp_path):
    cfg = fixture_config(tmp_path)
    query = "SELECT range AS n, repeat('x', 40) AS pad FROM range(20000)"
    started = time.monotonic()
    capped = run_cli("--config", str(cfg), "sql", query)
    assert capped.returncode == 0
    assert "(20,000 rows, 1000 shown: --limit 0 shows every row" in capped.stdout
    assert "│ 999 " in capped.stdout and "│ 1000 " not in capped.stdout
    small = run_cli("--config", str(cfg), "sql", query, "--limit", "5")
    assert "(20,000 rows, 5 shown" in small.stdout
    every = run_cli("--config", str(cfg), "sql", query, "--format", "csv")
    assert len(every.stdout.splitlines()) == 20001
    assert time.monotonic() - started < 60  # minutes before: a guard, not a benchmark
    one_line_error(
        run_cli("--config", str(cfg), "sql", query, "--format", "csv", "--limit", "3"),
        "--limit: goes with --format table",
    )


def test_sql_list_has_no_stray_punctuation():
    listing = run_cli("sql", "--list").stdout
    assert "(required)" in listing and ";)" not in listing and "(required;" not in listing
    assert "(default hour; one of hour|edge|country|host)" in listing


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["report", "--format", ""], "report --format: name at least one of"),
        (["status", "--max-lag", "-5"], "--max-lag: expected a whole number"),
        (["emulator", "--port", "99999"], "--port: expected a port 0..65535"),
        (["emulator", "--rpm", "-5"], "--rpm: expected a positive number"),
        (["emulator", "--slow-seconds", "-1"], "--slow-seconds: expected seconds >= 0"),
        (["report", "--zone", "5001"], "5001 is a shield zone"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, needle):
    cfg = fixture_config(tmp_path)
    one_line_error(run_cli("--config", str(cfg), *args), needle)


def test_report_out_must_be_a_writable_folder(tmp_path):
    cfg = fixture_config(tmp_path)
    a_file = tmp_path / "report.html"
    a_file.write_text("")
    result = run_cli("--config", str(cfg), "report", "--date", "2026-11-20", "--out", str(a_file))
    one_line_error(result, "is a file, not a folder")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = run_cli(
            "--config", str(cfg), "report", "--date", "2026-11-20", "--out", str(locked / "x")
        )
        if os.geteuid() != 0:  # root writes anywhere
            one_line_error(result, "report --out: cannot create")
        else:
            assert result.returncode == 0
    finally:
        locked.chmod(0o700)
    below_a_file = run_cli(
        "--config", str(cfg), "report", "--date", "2026-11-20", "--out", str(a_file / "sub")
    )
    one_line_error(below_a_file, "report --out: cannot create")


@pytest.mark.parametrize("top_n", ["0", "-3"])
def test_report_top_n_must_be_positive(tmp_path, top_n):
    cfg = fixture_config(tmp_path, f"[report]\ntop_n = {top_n}\n")
    one_line_error(run_cli("--config", str(cfg), "report"), "report.top_n: must be at least 1")
    env_cfg = fixture_config(tmp_path)
    one_line_error(
        run_cli("--config", str(env_cfg), "report", env={"CDNLAKE_REPORT_TOP_N": top_n}),
        "report.top_n: must be at least 1",
    )


def test_a_misspelt_override_is_refused_like_a_misspelt_key(tmp_path):
    cfg = fixture_config(tmp_path)
    for name in ("CDNLAKE_INGEST_LAG_SECOND", "CDNLAKE_INGST_LAG_SECONDS"):
        one_line_error(
            run_cli("--config", str(cfg), "status", env={name: "600"}),
            f"{name}: unknown environment variable",
        )
    fine = run_cli("--config", str(cfg), "status", env={"CDNLAKE_INGEST_LAG_SECONDS": "600"})
    assert "unknown environment variable" not in fine.stderr


def test_a_refused_connection_fails_fast_in_one_line_per_zone(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = tmp_path / "config.toml"
    url = f"http://127.0.0.1:{port}"
    path.write_text(
        f'[api]\nbase_url = "{url}"\nvideo_url = "{url}"\nlogging_url = "{url}"\n'
        '[storage]\nroot = "data"\n[[zones]]\nid = 1234\n[[zones]]\nid = 1235\nsource = "v1"\n'
    )
    started = time.monotonic()
    result = run_cli("--config", str(path), "ingest")
    assert result.returncode == 1 and time.monotonic() - started < 20
    refused = [line for line in result.stdout.splitlines() if "connection refused" in line]
    assert len(refused) == 2, result.stdout
    assert all(f"cannot connect to {url}" in line for line in refused)
    assert "Traceback" not in result.stdout + result.stderr


def test_ingest_zone_takes_shield_zone_ids(tmp_path):
    emu = start_emulator("1234")
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2")])
        with open(path, "a") as f:
            f.write("[[shield_zones]]\nid = 5001\n")
        result = run_cli("--config", str(path), "ingest", "--zone", "5001")
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.startswith("shield zone 5001 [shield] ok")
        assert "zone 1234" not in result.stdout
        unknown = run_cli("--config", str(path), "ingest", "--zone", "77")
        one_line_error(unknown, "zone 77 is not configured (pull zones: 1234; shield zones: 5001)")
    finally:
        emu.stop()


def read_terminal(args: list[str], env: dict[str, str], timeout: float = 120) -> str:
    """What a person sees: the command's stdout and stderr on one pseudo-terminal."""
    main, secondary = pty.openpty()
    proc = subprocess.Popen(args, stdout=secondary, stderr=secondary, env=env)
    os.close(secondary)
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(main)
    return seen.decode("utf-8", "replace")


def test_a_failing_zone_is_summarised_once_on_a_terminal(tmp_path):
    emu = start_emulator("1234,1240:disabled")
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2"), (1240, "v2")])
        env = {**os.environ, "CDNLAKE_ACCESS_KEY": KEY, "COLUMNS": "200"}
        screen = read_terminal(
            [sys.executable, "-m", "cdnlake", "--config", str(path), "ingest"], env
        )
    finally:
        emu.stop()
    assert screen.count("zone 1240 [v2] failed") == 1, screen
    assert screen.count("zone 1234 [v2] ok") == 1, screen


def test_the_wheel_carries_its_sql(tmp_path):
    """Installed as a wheel (not -e), sql --list and a report work from any folder."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(REPO),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
        ],
        check=True,
        capture_output=True,
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # The fresh venv finds cdnlake's dependencies where the test's own venv has them (no
    # network), but cdnlake itself only as the wheel unpacked into it.
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "deps.pth").write_text("\n".join(deps) + "\n")
    (wheel,) = wheels.glob("cdnlake-*.whl")
    import zipfile

    zipfile.ZipFile(wheel).extractall(site)
    # The fleet's PostgreSQL statements ship too.
    assert "cdnlake/sql/postgres/take_leases.sql" in zipfile.ZipFile(wheel).namelist()
    # So does the report's list of AI crawlers (a report reads it).
    for name in ("ai_robots.json", "ai_robots.LICENSE", "README.md"):
        assert f"cdnlake/reports/lists/{name}" in zipfile.ZipFile(wheel).namelist()
    python = venv / "bin" / "python"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Without PYTHONPATH: a source tree put first on the path would hide the wheel.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run(
        [str(python), "-c", "import cdnlake; print(cdnlake.__file__)"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert where.startswith(str(site)), where
    listing = subprocess.run(
        [str(python), "-m", "cdnlake", "sql", "--list"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=env,
    )
    assert listing.returncode == 0 and "hit_ratio_by" in listing.stdout, listing.stderr
    cfg = fixture_config(tmp_path)
    report = subprocess.run(
        [
            str(python),
            "-m",
            "cdnlake",
            "--config",
            str(cfg),
            "report",
            "--date",
            "2026-11-20",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
    )
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "out" / "report-all-2026-11-20.json").is_file()
