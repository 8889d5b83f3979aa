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


def test_completion_knows_the_named_queries_and_the_configured_zones(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[[zones]]\nid = 1234\n[[zones]]\nid = 1236\n[[shield_zones]]\nid = 5001\n")
    r = run_cli("--config", str(config), "completion", "bash")
    assert r.returncode == 0, r.stderr
    assert set(complete_in_bash(r.stdout, "sql", "--query", "hit_ratio")) == {
        "hit_ratio",
        "hit_ratio_by",
    }
    assert complete_in_bash(r.stdout, "audit", "--zone", "") == ["1234", "1236"]
    assert complete_in_bash(r.stdout, "ingest", "--zone", "") == ["1234", "1236", "5001"]
    # Without a config, still a script: options complete, zones are typed.
    bare = run_cli("--config", str(tmp_path / "none.toml"), "completion", "bash")
    assert bare.returncode == 0 and "--zone" in bare.stdout


def test_every_option_and_command_has_help_text():
    import argparse

    from cdnlake.cli.main import build_parser

    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {choice.dest for choice in action._choices_actions if choice.help}
                for name, sub in action.choices.items():
                    if name not in helped:
                        missing.append(f"{path} {name}")
                    walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "cdnlake")
    assert not missing, missing
    top = run_cli("--help").stdout
    assert "erasures. With no SQL" in " ".join(top.split()), top
    maintain = " ".join(run_cli("maintain", "--help").stdout.split())
    assert "exit 1 if a zone's rows cannot be rewritten" in maintain
    pullzone = " ".join(run_cli("api", "--help").stdout.split())
    assert "set-archive" in pullzone and "show-archive" in pullzone, pullzone
