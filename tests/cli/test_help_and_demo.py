"""Every command has help text; `cdnlake demo` runs the whole product end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, run_cli

COMMANDS = [
    "ingest",
    "import-v1",
    "daemon",
    "status",
    "sql",
    "report",
    "emulator",
    "demo",
    "api",
    "migrate-lake",
    "maintain",
    "audit",
]


def test_top_level_help_lists_every_command():
    r = run_cli("--help")
    assert r.returncode == 0
    for name in COMMANDS:
        assert name in r.stdout


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_has_help(name):
    r = run_cli(name, "--help")
    assert r.returncode == 0 and len(r.stdout.splitlines()) >= 3, r.stderr


def test_unknown_command_and_bad_option_are_exit_2():
    assert run_cli("frobnicate").returncode == 2
    r = run_cli("ingest", "--zone", "abc")
    assert r.returncode == 2 and "positive pull zone id" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_demo_end_to_end(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text((REPO / "config.toml").read_text())  # the committed demo setup
    started = time.monotonic()
    r = run_cli("--config", str(config), "demo", env={"CDNLAKE_ACCESS_KEY": ""}, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert time.monotonic() - started < 60
    assert "zone 1234 [v2] ok" in r.stdout and "zone 1235 [v1] ok" in r.stdout
    report = tmp_path / "data" / "reports"
    html = sorted(report.glob("report-all-*.html"))
    assert len(html) == 1 and f"Report: {html[0]}" in r.stdout
    assert "hit ratio (req)" in r.stdout
    # The daily upkeep on the demo's lake: small files compacted, every file checked.
    kept = run_cli("--config", str(config), "maintain", "--retention-hours", "0")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "requests:" in kept.stdout and "compacted" in kept.stdout
    again = run_cli("--config", str(config), "sql", "SELECT count(*) FROM requests")
    assert again.returncode == 0


def test_the_newcomer_path_of_the_readme(tmp_path):
    """After `make demo`: the emulator in a second terminal, the demo key, then ingest and api.

    The README's commands, on a free port instead of 8765 (set through the documented
    overrides), from a copy of the committed config.toml.
    """
    config = tmp_path / "config.toml"
    config.write_text((REPO / "config.toml").read_text())
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CDNLAKE_")}
    emulator = subprocess.Popen(
        [sys.executable, "-m", "cdnlake", "emulator", "--port", "0"],
        env=clean,  # a second terminal: no key set, so the emulator's default demo-key
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = emulator.stdout.readline()  # "cdnlake emulator listening on http://..."
        assert "listening on" in line, line
        url = line.split("listening on ", 1)[1].strip()
        env = {
            "CDNLAKE_ACCESS_KEY": "demo-key",  # the emulator's default key, as the README says
            "CDNLAKE_API_BASE_URL": url,
            "CDNLAKE_API_VIDEO_URL": url,
            "CDNLAKE_API_LOGGING_URL": url,
        }
        ingest = run_cli("--config", str(config), "ingest", env=env, timeout=300)
        assert ingest.returncode == 0, ingest.stdout + ingest.stderr
        assert "zone 1234 [v2] ok" in ingest.stdout and "shield zone 5001" in ingest.stdout
        records = run_cli(
            "--config", str(config), "api", "dns", "list-records", "--zone", "9001", env=env
        )
        assert records.returncode == 0 and json.loads(records.stdout)["Items"], records.stderr
        status = run_cli("--config", str(config), "status", env=env)
        assert status.returncode == 0, status.stdout
    finally:
        emulator.terminate()
        emulator.wait(timeout=30)


def test_emulator_help_names_the_demo_zones_without_importing_the_emulator():
    """Every command builds the emulator's options: they name its default zones as
    text, which must stay the emulator's own."""
    import argparse

    from cdnlake.cli.emulator_cmd import add_arguments
    from cdnlake.emulator.server import DEMO_ZONES

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert DEMO_ZONES in parser.format_help().replace("\n", "").replace(" ", "")


def test_demo_on_a_root_it_cannot_write_is_one_line(tmp_path):
    """Not a chained traceback per zone: the folder, in one line, exit 2."""
    result = run_cli(
        "--config",
        str(REPO / "config.toml"),
        "demo",
        env={"CDNLAKE_STORAGE_ROOT": "/proc/x"},
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot create or write to /proc/x" in lines[0], result.stderr
