"""`cdnlake sql` with no SQL: the interactive shell through a real pseudo-terminal, and
standard input when it is a pipe; Ctrl-C cancels a running query, not the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pexpect
import pytest

from tests.cli.test_sql_cli import setup
from tests.conftest import KEY

CLI = [sys.executable, "-m", "cdnlake"]
LONG_QUERY = "SELECT sum(hash(range)) AS s FROM range(1000000000000)"  # hours, if not cancelled


def spawn_shell(tmp_path, *args: str) -> pexpect.spawn:
    cfg = setup(tmp_path)
    env = {
        **os.environ,
        "CDNLAKE_ACCESS_KEY": KEY,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "TERM": "dumb",
    }
    shell = pexpect.spawn(
        sys.executable,
        ["-m", "cdnlake", "--config", str(cfg), *args, "sql"],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 120),
    )
    shell.expect_exact("cdnlake> ")
    return shell


def ask(shell: pexpect.spawn, line: str) -> str:
    """What the shell printed for ``line``, up to its next prompt."""
    shell.sendline(line)
    shell.expect_exact("cdnlake> ")
    return str(shell.before)


def test_the_shell_on_a_terminal(tmp_path):
    shell = spawn_shell(tmp_path)
    try:
        # A statement over several lines: a continuation prompt until the ;
        shell.sendline("SELECT count(*) AS n,")
        shell.expect_exact("...> ")
        shell.sendline("  count(DISTINCT pull_zone_id) AS zones")
        shell.expect_exact("...> ")
        answer = ask(shell, "FROM requests;")
        assert "│ 12 │ 2     │" in answer and "(1 row)" in answer, answer
        assert ask(shell, ".format csv").strip() == ".format csv"
        answer = ask(shell, ".run hit_ratio day=2026-11-20 zone=1")
        assert "requests,hit_requests,request_hit_ratio_pct" in answer, answer
        assert "\n8,3,37.5," in answer.replace("\r", "")
        # Two statements on a line: both answered; a bad one is one line, the shell goes on.
        answer = ask(shell, "SELECT 1 AS a; SELEKT 2;").replace("\r", "")
        assert "a\n1\n" in answer and "error: sql: Parser Error" in answer, answer
        answer = ask(shell, ".run hit_ratio").replace("\r", "")
        assert "error: .run: parameter day: required" in answer, answer
        assert "--param" not in answer and "--query" not in ask(shell, ".run nosuch")
        answer = ask(shell, ".tables")
        assert "requests_hourly," in answer and "audit_days," in answer, answer
        answer = ask(shell, ".schema ingest_gaps").replace("\r", "")
        assert "column,type\n" in answer and "gap_from,TIMESTAMP WITH TIME ZONE" in answer
        assert "hit_ratio_by" in ask(shell, ".queries")
        assert ".run NAME" in ask(shell, ".help")
        assert "the lake as it is now" in ask(shell, ".refresh")
        shell.sendeof()
        shell.expect(pexpect.EOF)
    finally:
        shell.close()
    assert shell.exitstatus == 0
    history = tmp_path / "state" / "cdnlake" / "sql_history"
    assert "FROM requests;" in history.read_text()
    assert history.stat().st_mode & 0o777 == 0o600


def test_the_shell_as_psql_and_sqlite3_users_expect(tmp_path):
    """Up recalls the whole statement typed over lines; a limit says how many rows there
    were; a query running over a second says so as it runs."""
    shell = spawn_shell(tmp_path)
    try:
        shell.sendline("SELECT 40 +")
        shell.expect_exact("...> ")
        answer = ask(shell, "2 AS answer;")
        assert "42" in answer, answer
        shell.send("\x1b[A")  # Up: the statement, whole
        shell.expect_exact("SELECT 40 + 2 AS answer;")
        shell.send("\r")
        shell.expect_exact("cdnlake> ")
        ask(shell, ".limit 2")
        answer = ask(shell, "SELECT * FROM range(5);")
        assert "(5 rows, 2 shown: .limit 0 shows every row)" in answer, answer
        assert "only the first" not in answer
        shell.sendline(LONG_QUERY + ";")
        shell.expect_exact("(running 1 s; Ctrl-C cancels)", timeout=30)
        shell.expect_exact("(running 2 s; Ctrl-C cancels)", timeout=30)
        shell.sendintr()
        shell.expect_exact("query cancelled", timeout=10)
        shell.expect_exact("cdnlake> ")
        shell.sendline(".quit")
        shell.expect(pexpect.EOF)
    finally:
        shell.close()
    history = (tmp_path / "state" / "cdnlake" / "sql_history").read_text().splitlines()
    assert "SELECT 40 + 2 AS answer;" in history and "SELECT 40 +" not in history, history


def test_connect_hides_the_views_the_relations_are_built_on(tmp_path):
    import cdnlake

    cfg = setup(tmp_path)
    con = cdnlake.connect(cfg)
    try:
        names = {name for (name,) in con.sql("SHOW TABLES").fetchall()}
        assert "requests" in names and "requests_hourly" in names, names
        assert not {n for n in names if n.startswith("_")}, names
        assert con.sql("SELECT count(*) FROM requests_hourly").fetchall()[0][0] > 0
    finally:
        con.close()


def test_ctrl_c_cancels_the_query_not_the_shell(tmp_path):
    shell = spawn_shell(tmp_path, "--log-level", "DEBUG")
    try:
        shell.sendline(LONG_QUERY + ";")
        shell.expect_exact("sql: running a statement")  # the query runs: now Ctrl-C
        sent = time.monotonic()
        shell.sendintr()
        shell.expect_exact("query cancelled", timeout=10)
        assert time.monotonic() - sent < 5
        shell.expect_exact("cdnlake> ")
        answer = ask(shell, "SELECT 40 + 2 AS answer;")
        assert "42" in answer, answer
        # Ctrl-C while typing drops the statement, and the shell goes on.
        shell.sendline("SELECT 1,")
        shell.expect_exact("...> ")
        shell.sendintr()
        shell.expect_exact("cdnlake> ")
        assert ".quit" in ask(shell, ".help")
        shell.sendline(".quit")
        shell.expect(pexpect.EOF)
    finally:
        shell.close()
    assert shell.exitstatus == 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_cancels_a_one_shot_query_with_one_line_exit_1(tmp_path, signum):
    cfg = setup(tmp_path)
    proc = subprocess.Popen(
        [*CLI, "--config", str(cfg), "--log-level", "DEBUG", "sql", LONG_QUERY],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # readiness: the statement runs
            if "sql: running statement 1 of 1" in line:
                break
        else:
            pytest.fail("the query never started")
        sent = time.monotonic()
        proc.send_signal(signum)
        rest = proc.stderr.read()
        proc.wait(timeout=30)
        assert time.monotonic() - sent < 5
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert rest.strip().splitlines() == ["cdnlake: interrupted"], rest


def test_a_pipe_is_read_as_sql_not_a_shell(tmp_path):
    cfg = setup(tmp_path)
    script = (
        "-- a comment; with a semicolon\n"
        "CREATE TEMP TABLE zones AS\n"
        "  SELECT DISTINCT pull_zone_id FROM requests;\n"
        "SELECT count(*) AS n,\n"
        "       ';' AS semicolon\n"
        "FROM zones;\n"
    )
    for args in (["sql"], ["sql", "-"]):
        r = subprocess.run(
            [sys.executable, "-m", "cdnlake", "--config", str(cfg), *args, "--format", "csv"],
            input=script,
            capture_output=True,
            text=True,
            env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout == "n,semicolon\n2,;\n"
        assert "cdnlake>" not in r.stdout


def test_the_shell_on_a_root_without_a_lake_says_so(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[storage]\nroot = "{tmp_path / "nothing"}"\n[[zones]]\nid = 1\n')
    env = {**os.environ, "CDNLAKE_ACCESS_KEY": KEY, "XDG_STATE_HOME": str(tmp_path / "s")}
    shell = pexpect.spawn(
        sys.executable, [*CLI[1:], "--config", str(cfg), "sql"], env=env, encoding="utf-8"
    )
    shell.expect(pexpect.EOF, timeout=60)
    shell.close()
    assert shell.exitstatus == 1
    assert f"cdnlake: error: no lake at {tmp_path / 'nothing' / 'lake'}" in str(shell.before)


def test_a_file_vacuumed_under_the_shell_is_read_again_not_failed_query_after_query(tmp_path):
    """The shell reads the lake as it was when it opened; ``forget --vacuum-now`` beside it
    deletes a file that snapshot names. The next query reads the lake as it is now (said in
    a line) and answers; it never fails query after query for the file."""
    shell = spawn_shell(tmp_path)
    try:
        assert "│ 12 │" in ask(shell, "SELECT count(*) AS n FROM requests;")
        forget = ["forget", "--ip", "2001:db8::", "--vacuum-now"]  # r05 alone
        done = subprocess.run(
            [*CLI, "--config", str(tmp_path / "config.toml"), *forget],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY},
        )
        assert done.returncode == 0, done.stderr
        assert "the old bytes have left storage (--vacuum-now)" in done.stdout
        answer = ask(shell, "SELECT count(*) AS n FROM requests;")
        assert "│ 11 │" in answer and "error" not in answer, answer
        assert "a file of the lake left storage since the shell read it" in answer, answer
        answer = ask(shell, "SELECT count(*) AS n FROM requests;")
        assert "│ 11 │" in answer and "left storage" not in answer, answer
        shell.sendeof()
        shell.expect(pexpect.EOF)
    finally:
        shell.close()
    assert shell.exitstatus == 0
