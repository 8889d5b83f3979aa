"""`cdnlake completion bash|zsh`: scripts generated from the parser, that the shells load."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import run_cli

COMMANDS = ("ingest", "status", "sql", "report", "maintain", "audit", "completion")


def complete_in_bash(script: str, *words: str) -> list[str]:
    """What bash's completion offers after ``cdnlake WORDS`` (the last word being typed)."""
    line = " ".join(["cdnlake", *words])
    probe = (
        f"{script}\n"
        "complete -p cdnlake >&2\n"
        f"COMP_WORDS=(cdnlake {' '.join(words)}); COMP_CWORD={len(words)}\n"
        f"COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}\n"
        "_shtab_cdnlake cdnlake\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile"], input=probe, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("complete ") and done.stderr.rstrip().endswith(" cdnlake")
    return [w.strip() for w in done.stdout.splitlines() if w.strip()]


def test_the_bash_script_loads_and_completes_commands_and_options():
    r = run_cli("completion", "bash")
    assert r.returncode == 0, r.stderr
    syntax = subprocess.run(["bash", "-n"], input=r.stdout, capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    offered = complete_in_bash(r.stdout, "")
    assert set(COMMANDS) <= set(offered), offered
    assert complete_in_bash(r.stdout, "st") == ["status"]
    sql_options = complete_in_bash(r.stdout, "sql", "--f")
    assert {"--file", "--format"} <= set(sql_options), sql_options
    assert "--wide" in complete_in_bash(r.stdout, "status", "--w")


def test_the_zsh_script_names_the_commands():
    r = run_cli("completion", "zsh")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#compdef cdnlake")
    for command in COMMANDS:
        assert f'"{command}:' in r.stdout or f"{command}:" in r.stdout, command
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed here: its syntax is not checked")
    syntax = subprocess.run(["zsh", "-n"], input=r.stdout, capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_an_unknown_shell_is_usage():
    r = run_cli("completion", "fish")
    assert r.returncode == 2 and "invalid choice" in r.stderr
