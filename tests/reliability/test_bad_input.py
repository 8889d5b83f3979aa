"""Bad input on every command: one line naming what was wrong, the right exit code."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad") / "config.toml"
    path.write_text(
        '[api]\nlogging_url = "http://127.0.0.1:9"\nbase_url = "http://127.0.0.1:9"\n'
        'video_url = "http://127.0.0.1:9"\n[[zones]]\nid = 1234\n'
    )
    return path


CASES = [
    (["ingest", "--zone", "999"], "zone 999 is not configured (pull zones: 1234"),
    (["ingest", "--zone", "-3"], "positive pull zone id"),
    (["ingest", "--zone", "1.5"], "positive pull zone id"),
    (["import-v1", "/nonexistent.log", "--zone", "1234"], "not a readable file"),
    (["import-v1", "x.log"], "--zone"),
    (["report", "--date", "2026-02-30"], "YYYY-MM-DD"),
    (["report", "--date", "yesterday"], "YYYY-MM-DD"),
    (["report", "--date", "3026-01-01"], "future"),
    (["report", "--zone", "5"], "pull zone 5 is not configured"),
    (["report", "--format", "html,docx", "--date", "2026-11-01"], "docx"),
    (["sql", "--query", "hit_ratio", "--param", "day=2026-13-45"], "expected DATE"),
    (["sql", "--query", "hit_ratio", "--param", "day"], "KEY=VALUE"),
    (["sql", "--query", "../etc/passwd"], "bad query name"),
    (
        ["sql", "--query", "top_miss_paths", "--param", "day=2026-11-20", "--param", "top_n=x"],
        "expected INTEGER",
    ),
    (
        [
            "sql",
            "--query",
            "hit_ratio_by",
            "--param",
            "day=2026-11-20",
            "--param",
            "dimension=planet",
        ],
        "must be one of hour, edge, country, host",
    ),
    (["status", "--format", "yaml"], "invalid choice"),
    (["emulator", "--zones", "abc"], "--zones"),
    (["emulator", "--rate", "30"], "REQUESTS/SECONDS"),
    (["emulator", "--error-rate", "2"], "between 0 and 1"),
    (["emulator", "--now", "noon"], "--now"),
    (["api", "dns", "list-records", "--zone", "9001", "--type", "BOGUS"], "unknown record type"),
    (["api", "shield", "event-logs", "--zone", "5001", "--date", "02-30-2026"], "not a real date"),
    (["api", "compute", "add-secret", "--script", "1", "--name", "n"], "--secret-env"),
    (["--config", "/nonexistent/config.toml", "status"], "not found"),
]


@pytest.mark.parametrize(
    ("args", "needle"), CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_one_line_exit_2(cfg, args, needle):
    full = args if args[0] == "--config" else ["--config", str(cfg), *args]
    r = run_cli(*full)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert needle in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_unreachable_provider_is_exit_1_with_the_reason(cfg):
    r = run_cli("--config", str(cfg), "ingest", env={"CDNLAKE_API_RETRY_ATTEMPTS": "1"})
    assert r.returncode == 1
    assert "cannot connect" in r.stdout and "Traceback" not in r.stderr


def test_no_command_prints_help_and_exit_2():
    r = run_cli()
    assert r.returncode == 2 and "COMMAND" in r.stdout
