"""Tables fit the terminal (issue #49): on an 80-column pseudo-terminal no line is wider,
the columns left out are named (``--wide`` shows them); on a pipe every column is whole;
prose lines wrap at the terminal's width."""

from __future__ import annotations

import os
import sys

import pexpect

from tests.cli.test_sql_cli import setup
from tests.conftest import KEY, run_cli

WIDE_QUERY = "SELECT * FROM requests ORDER BY request_id LIMIT 2"


def on_terminal(cfg, *args: str, columns: int = 80) -> list[str]:
    """The lines ``cdnlake ARGS`` prints on a terminal ``columns`` wide."""
    proc = pexpect.spawn(
        sys.executable,
        ["-m", "cdnlake", "--config", str(cfg), *args],
        env={**os.environ, "CDNLAKE_ACCESS_KEY": KEY, "TERM": "dumb"},
        encoding="utf-8",
        timeout=60,
        dimensions=(50, columns),
    )
    proc.expect(pexpect.EOF)
    proc.close()
    return str(proc.before).replace("\r", "").splitlines()


def test_a_wide_result_fits_the_terminal_and_names_what_it_leaves_out(tmp_path):
    cfg = setup(tmp_path)
    lines = on_terminal(cfg, "sql", WIDE_QUERY)
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    text = "\n".join(lines)
    assert "column(s) not shown, the terminal is too narrow:" in text, text
    assert "--wide shows them all)" in text and "user_agent" in text
    assert "pull_zone_id" in lines[1]  # the first columns are shown, headers whole
    every = on_terminal(cfg, "sql", WIDE_QUERY, "--wide")
    assert "not shown" not in "\n".join(every) and "user_agent" in every[1]
    # On a pipe: every column, whole, each row on one line, for the program reading it.
    piped = run_cli("--config", str(cfg), "sql", WIDE_QUERY).stdout.splitlines()
    assert "not shown" not in "\n".join(piped)
    assert "user_agent" in piped[1] and "source" in piped[1], piped[1]
    assert len(piped) == 7, piped  # 3 header lines, 2 rows, the bottom and the count


def test_status_wide_and_its_prose_fit_the_terminal(tmp_path):
    cfg = setup(tmp_path)
    lines = on_terminal(cfg, "status", "--wide", columns=60)
    # A path longer than the terminal is not broken: it stands on a line of its own.
    too_wide = [line for line in lines if len(line) > 60 and " " in line.strip()]
    assert not too_wide, "\n".join(lines)
    assert "--format json has them all" in "\n".join(lines)
    assert any(line.startswith("retention: ") for line in lines)
    assert any(line.startswith("  ") and not line.startswith("  │") for line in lines), lines


def test_the_shell_counts_the_rows_a_limit_leaves_out():
    from cdnlake.warehouse.output import render

    text = render("table", ["n"], [(0,), (1,)], total=5, more_hint=".limit 0 shows every row")
    assert "(5 rows, 2 shown: .limit 0 shows every row)" in text, text
    assert "only the first" not in text
