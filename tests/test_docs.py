"""The documentation tells the truth: README.md, data/README.md and docs/ against the real
command line, configuration, metrics and systemd unit, so they cannot drift apart again.

- The site builds with ``mkdocs build --strict`` (no broken link or anchor), and the
  README's relative links name files that exist.
- Every ``cdnlake ...`` command shown in a ``console`` block (after ``$ ``) or a ``bash``
  block parses with the real argument parser, in-process; every ``make`` target shown
  exists; every extra in a ``pip install 'cdnlake[...]'`` exists. Every option that a
  synopsis line (a ``text`` block line starting with ``cdnlake``) names exists.
- A ``console`` block right after ``<!-- transcript: NAME -->`` is held against the real
  command's output, line by line, as a skeleton: tables by their headers, numbers, times,
  paths and URLs left free. The demo runs once for all of them. A block named ``run``
  needs nothing else: its commands run as shown.
- A ``python`` block right after ``<!-- run: python -->`` runs, in a process of its own, in
  a folder holding a small lake at ``data/lake`` and its ``config.toml``; one after
  ``<!-- run: duckdb-delta -->`` runs in ``.venv-kernel`` (``make kernel``), whose DuckDB
  and delta extension are the versions that the page's ``pip install`` line names.
- The configuration tables name the keys the committed config.toml has, the metrics table
  the metrics the daemon exports, and the systemd unit shown is the one in contrib/.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdnlake.cli.main import build_parser
from cdnlake.errors import UsageError
from tests.conftest import REPO, free_port, run_cli

PAGES = [REPO / "README.md", REPO / "data" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+)(?P<lang>[\w-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*transcript:\s*(?P<name>[\w-]+)\s*-->\s*$")
RUN = re.compile(r"^\s*<!--\s*run:\s*(?P<name>[\w-]+)\s*-->\s*$")
UNIT = REPO / "contrib" / "systemd" / "cdnlake.service"


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    lines: list[str]
    transcript: str | None
    run: str | None = None  # <!-- run: NAME --> before a python block

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def code_blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a page, indented ones (inside list items) included."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = len(match["indent"]), match["fence"]
        previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(previous)
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            text = lines[j]
            body.append(text[indent:] if text[:indent].strip() == "" else text)
            j += 1
        run = RUN.match(previous)
        blocks.append(
            Block(
                page,
                i + 1,
                match["lang"],
                body,
                marker["name"] if marker else None,
                run["name"] if run else None,
            )
        )
        i = j + 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in code_blocks(page)]


def shown_commands(block: Block) -> list[str]:
    """The shell commands a block shows: `$ ` lines of a console block, every line of a
    bash block (comments aside)."""
    if block.lang == "console":
        return [line[2:] for line in block.lines if line.startswith("$ ")]
    if block.lang in ("bash", "sh", "shell"):
        return [line for line in block.lines if line.strip() and not line.startswith("#")]
    return []


def simple_commands(command: str) -> Iterator[list[str]]:
    """Each simple command of a shell line (split at ; && || |), without environment
    assignments and redirections."""
    for _, words in simple_commands_with_env(command):
        yield words


def simple_commands_with_env(command: str) -> Iterator[tuple[dict[str, str], list[str]]]:
    """Each simple command of a shell line, with the environment assignments before it."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    skip_next = False
    for token in [*lexer, ";"]:
        if skip_next:
            skip_next = False
            continue
        if token in (">", ">>", "<", "2>", "&>"):
            skip_next = True
            continue
        if token and set(token) <= set(";&|"):
            env: dict[str, str] = {}
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                name, _, value = words.pop(0).partition("=")
                env[name] = value
            if words:
                yield env, words
            words = []
            continue
        words.append(token)


def cdnlake_argv(words: list[str]) -> list[str] | None:
    if Path(words[0]).name == "cdnlake":
        return words[1:]
    if Path(words[0]).name.startswith("python") and words[1:3] == ["-m", "cdnlake"]:
        return words[3:]
    return None


def parse_error(argv: list[str]) -> str | None:
    """None when the real parser takes ``argv``, else what it said."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            build_parser().parse_args(argv)
    except UsageError as exc:
        return str(exc)
    except SystemExit as exc:  # --help, --version
        return None if exc.code in (0, None) else out.getvalue()
    return None


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, flags=re.MULTILINE))


def extras() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


def test_the_site_builds_strict(tmp_path):
    """mkdocs-material builds docs/ with --strict: a broken link or anchor fails."""
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=120,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert (tmp_path / "index.html").is_file()
    for page in (REPO / "docs").rglob("*.md"):
        built = tmp_path / page.relative_to(REPO / "docs").with_suffix("")
        assert (built / "index.html").is_file() or page.name == "index.md", page


def test_the_readmes_links_name_files_that_exist():
    for page in (REPO / "README.md", REPO / "data" / "README.md"):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            assert (page.parent / target).exists(), f"{page.name}: link to missing {target}"


def test_every_command_shown_parses():
    """Every `cdnlake ...` a page shows runs past the real parser; `make` targets and
    `pip install 'cdnlake[extra]'` extras exist."""
    problems: list[str] = []
    seen = 0
    targets, known_extras = make_targets(), extras()
    for block in all_blocks():
        for command in shown_commands(block):
            for words in simple_commands(command):
                argv = cdnlake_argv(words)
                if argv is not None:
                    seen += 1
                    error = parse_error(argv)
                    if error:
                        problems.append(f"{block.where()}: {command!r}: {error}")
                elif words[0] == "make":
                    missing = [t for t in words[1:] if t not in targets]
                    if missing:
                        problems.append(f"{block.where()}: no make target {missing}")
                elif Path(words[0]).name.startswith("pip") and "install" in words:
                    for extra in re.findall(r"cdnlake\[([\w,-]+)\]", command):
                        unknown = set(extra.split(",")) - known_extras
                        if unknown:
                            problems.append(f"{block.where()}: no extra {sorted(unknown)}")
    assert not problems, "\n".join(problems)
    assert seen >= 20, f"only {seen} cdnlake commands found: is the block parser broken?"


def _options(
    parser: argparse.ArgumentParser,
) -> tuple[set[str], dict[str, argparse.ArgumentParser]]:
    """A parser's option strings (its subcommands' included, recursively), and its
    subcommands."""
    options: set[str] = set()
    commands: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        options.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                commands[name] = sub
                options.update(_options(sub)[0])
    return options, commands


def synopsis_lines(block: Block) -> Iterator[str]:
    """`cdnlake ...` lines of a synopsis block, each with its indented continuation lines."""
    current: str | None = None
    for line in block.lines:
        if line.startswith("cdnlake "):
            if current:
                yield current
            current = line
        elif current is not None and line.startswith(" ") and "--" in line:
            current += " " + line.strip()
        else:
            if current:
                yield current
            current = None
    if current:
        yield current


def test_every_option_a_synopsis_names_exists():
    root_options, commands = _options(build_parser())
    root_only = {o for a in build_parser()._actions for o in a.option_strings}
    problems: list[str] = []
    for block in all_blocks():
        if block.lang not in ("text", ""):
            continue
        for line in synopsis_lines(block):
            words = line.split()[1:]
            name = next((w for w in words if re.fullmatch(r"[a-z][a-z0-9-]*", w)), None)
            if name not in commands:
                problems.append(f"{block.where()}: no command {name!r} in {line!r}")
                continue
            known = _options(commands[name])[0] | root_only
            for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line):
                if option not in known:
                    problems.append(f"{block.where()}: `cdnlake {name}` has no {option}")
    assert root_options
    assert not problems, "\n".join(problems)


# Transcripts: what a page shows against what the command prints today.


def skeleton(lines: list[str]) -> list[str]:
    """The shape of some output: table borders dropped, header rows by their cells, data
    rows as ROW, and numbers, times, paths and URLs as placeholders; repeats collapsed."""
    out: list[str] = []
    for raw in lines:
        line = raw.rstrip()
        if not line.strip() or line[0] in "┏┡└┌├╭╰╞":
            continue
        if line.startswith("┃"):
            shape = "HEADER " + " | ".join(c.strip() for c in line.strip("┃").split("┃"))
        elif line.startswith("│"):
            shape = "ROW"
        else:
            shape = re.sub(r"https?://\S+", "URL", line)
            shape = re.sub(r"(?<![\w.])/[^\s,;)]+", "PATH", shape)
            shape = re.sub(r"\d+(?:[.,:]\d+)*", "N", shape)
            shape = re.sub(r"\s+", " ", shape).strip()
        if not out or out[-1] != shape:
            out.append(shape)
    return out


def shown_output(block: Block) -> list[str]:
    """The output lines of a transcript (its `$ ` lines and make's echo of them aside)."""
    return [
        line
        for line in block.lines
        if not line.startswith("$ ") and not line.startswith(".venv/bin/cdnlake ")
    ]


def transcripts() -> dict[str, list[Block]]:
    found: dict[str, list[Block]] = {}
    for block in all_blocks():
        if block.transcript:
            assert block.lang == "console", f"{block.where()}: a transcript is a console block"
            found.setdefault(block.transcript, []).append(block)
    return found


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """`cdnlake demo` on the committed config.toml, once for every transcript here."""
    where = tmp_path_factory.mktemp("demo")
    config = where / "config.toml"
    shutil.copy(REPO / "config.toml", config)
    demo = run_cli("--config", str(config), "demo", env={"CDNLAKE_ACCESS_KEY": ""}, timeout=240)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    return config, demo.stdout.splitlines()


def real_output(name: str, demo_run: tuple[Path, list[str]]) -> list[str]:
    config, demo_lines = demo_run
    if name == "demo":
        return demo_lines
    if name == "status":
        return run_cli("--config", str(config), "status").stdout.splitlines()
    if name == "refused":
        dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        env = {f"CDNLAKE_API_{k}_URL": dead for k in ("BASE", "VIDEO", "LOGGING")}
        env["CDNLAKE_ACCESS_KEY"] = "demo-key"
        r = run_cli("--config", str(config), "ingest", "--zone", "1234", env=env)
        assert r.returncode == 1, r.stdout + r.stderr
        return r.stdout.splitlines()
    raise AssertionError(f"no real command for transcript {name!r}: add it to real_output")


def _differ(block: Block, name: str, shown: list[str], real: list[str]) -> str:
    return (
        f"{block.where()} ({name}) shows\n  "
        + "\n  ".join(shown)
        + "\nbut the command prints\n  "
        + "\n  ".join(real)
    )


def test_the_commands_marked_run_print_what_is_shown(tmp_path):
    """A transcript named `run` needs nothing but the committed config.toml: each of its
    commands runs as shown (environment assignments included), in a folder of its own."""
    shutil.copy(REPO / "config.toml", tmp_path / "config.toml")
    blocks = transcripts().get("run", [])
    assert len(blocks) >= 3, "the one-line errors of the docs are checked"
    problems: list[str] = []
    for block in blocks:
        shown: list[str] = []
        real: list[str] = []
        for line in block.lines:
            if not line.startswith("$ "):
                shown.append(line)
                continue
            for env, words in simple_commands_with_env(line[2:]):
                argv = cdnlake_argv(words)
                assert argv is not None, f"{block.where()}: only cdnlake commands run: {line}"
                done = subprocess.run(
                    [sys.executable, "-m", "cdnlake", *argv],
                    cwd=tmp_path,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "CDNLAKE_ACCESS_KEY": "demo-key", **env},
                    timeout=120,
                )
                real += done.stdout.splitlines() + done.stderr.splitlines()
        if skeleton(shown) != skeleton(real):
            problems.append(_differ(block, "run", skeleton(shown), skeleton(real)))
    assert not problems, "\n\n".join(problems)


def test_the_transcripts_shown_match_the_real_output(demo_run):
    found = transcripts()
    found.pop("run", None)
    assert {"demo", "status", "refused"} <= set(found), sorted(found)
    problems: list[str] = []
    for name, blocks in sorted(found.items()):
        real = skeleton(real_output(name, demo_run))
        for block in blocks:
            shown = skeleton(shown_output(block))
            if shown != real:
                problems.append(_differ(block, name, shown, real))
    assert not problems, "\n\n".join(problems)


def test_a_skeleton_sees_a_missing_line_or_column():
    """The comparison is not blind: the drift issue 31 found would have failed it."""
    real = [
        "┃ zone ┃ lag ┃ owner ┃ health ┃",
        "│ 1234 www │ 5m │ - │ ok │",
        "(1 rows)",
        "daemon: none running",
    ]
    assert skeleton(real) != skeleton(["┃ zone ┃ lag ┃ health ┃", *real[1:]])
    assert skeleton(real) != skeleton(real[:-1])
    assert skeleton(["zone 1 [v2] ok: 3 rows, 0.5s"]) == skeleton(["zone 9 [v1] ok: 12 rows, 2s"])


# Configuration, metrics, the systemd unit.


def _cells(row: str) -> list[str]:
    """The cells of a Markdown table row; a | inside `code` does not split."""
    cells, current, code = [], "", False
    for char in row.strip().strip("|"):
        if char == "`":
            code = not code
        if char == "|" and not code:
            cells.append(current.strip())
            current = ""
        else:
            current += char
    cells.append(current.strip())
    return cells


def config_tables(page: Path) -> dict[str, set[str]]:
    """Section -> keys, from a page's configuration table (header `| section | key...`);
    sections marked planned are left out."""
    sections: dict[str, set[str]] = {}
    section = ""
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("| section |"):
            inside = True
            continue
        if not inside or not line.startswith("|"):
            inside = inside and line.startswith("|")
            continue
        cells = _cells(line)
        if all(cell and set(cell) <= set("-:") for cell in cells):  # the |---| row
            continue
        if cells[0]:
            section = cells[0].strip("`").strip("[]")
        if "planned" in line:
            continue
        keys = {
            k for k in re.findall(r"`([^`]+)`", cells[1]) if re.fullmatch(r"[a-z_][a-z0-9_]*", k)
        }
        sections.setdefault(section, set()).update(keys)
    return sections


def committed_keys() -> dict[str, set[str]]:
    raw = tomllib.loads((REPO / "config.toml").read_text())
    keys: dict[str, set[str]] = {}
    for name, value in raw.items():
        if isinstance(value, list):  # [[zones]], [[shield_zones]]
            keys[name] = {k for item in value for k in item}
            continue
        keys[name] = {k for k, v in value.items() if not isinstance(v, dict)}
        for sub, table in value.items():
            if isinstance(table, dict):
                keys[f"{name}.{sub}"] = set(table)
    return keys


@pytest.mark.parametrize("page", ["README.md", "docs/configuration.md"])
def test_the_configuration_table_names_the_keys_of_config_toml(page):
    shown = config_tables(REPO / page)
    assert shown, f"{page}: no configuration table found"
    assert shown == committed_keys()


def test_the_metrics_table_names_the_metrics_the_daemon_exports(tmp_path):
    from prometheus_client import generate_latest

    from cdnlake.monitoring.metrics import DaemonMetrics
    from tests.fixture_lake import fixture_config

    metrics = DaemonMetrics(fixture_config(tmp_path), watermarks=dict)
    text = generate_latest(metrics.registry).decode()
    exported = {  # prometheus_client adds a *_created gauge beside each counter: not ours
        name: kind
        for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
        if not name.endswith("_created")
    }
    shown = dict(
        re.findall(
            r"^\| `(cdnlake_\w+)` \| (\w+) \|",
            (REPO / "docs" / "monitoring.md").read_text(),
            re.M,
        )
    )
    assert shown, "docs/monitoring.md: no metrics table found"
    assert shown == {name: exported.get(name) for name in shown}, exported
    assert set(exported) <= set(shown), f"not in the docs: {set(exported) - set(shown)}"


def _directives(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_systemd_unit_shown_is_the_one_that_ships():
    shown = [b for b in code_blocks(REPO / "docs" / "operations.md") if "[Service]" in b.lines]
    assert len(shown) == 1, "docs/operations.md shows the unit once, in an ini block"
    assert _directives(shown[0].lines) == _directives(UNIT.read_text().splitlines())
    (exec_start,) = [d for d in _directives(UNIT.read_text().splitlines()) if "ExecStart=" in d]
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    assert Path(argv[0]).name == "cdnlake" and parse_error(argv[1:]) is None
    assert argv[-1] == "daemon"


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here"
)
def test_the_systemd_unit_verifies(tmp_path):
    """`systemd-analyze verify` on the shipped unit. It checks that ExecStart's program is
    executable, so the copy verified runs a stand-in at a path of this machine; every
    other line is the shipped one. verify exits 0 even when it warns: its output must be
    empty."""
    program = tmp_path / "bin" / "cdnlake"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    text = UNIT.read_text()
    shipped = re.search(r"^ExecStart=(\S+)", text, re.M)
    assert shipped
    unit = tmp_path / "cdnlake.service"
    unit.write_text(text.replace(shipped[1], str(program)))
    verify = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0, verify.stderr
    assert "cdnlake.service" not in verify.stderr + verify.stdout, verify.stderr


# Python examples, run as shown.


@pytest.fixture(scope="module")
def example_folder(tmp_path_factory) -> Path:
    """A folder with a small lake at data/lake and the config.toml naming it."""
    from tests.fixture_lake import build_fixture_lake

    where = tmp_path_factory.mktemp("examples")
    build_fixture_lake(where / "data")
    (where / "config.toml").write_text('[storage]\nroot = "data"\n[[zones]]\nid = 1\n')
    return where


def run_example(python: str, block: Block, where: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDNLAKE_")}
    env["CDNLAKE_ACCESS_KEY"] = "demo-key"
    done = subprocess.run(
        [python, "-c", "\n".join(block.lines)],
        cwd=where,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, f"{block.where()}:\n{done.stdout}{done.stderr}"
    assert done.stdout.strip(), f"{block.where()}: printed nothing"


def test_the_python_examples_run(example_folder):
    blocks = [b for b in all_blocks() if b.run == "python"]
    assert len(blocks) >= 3, "cdnlake.connect, deltalake and polars are shown"
    for block in blocks:
        assert block.lang == "python", f"{block.where()}: only python blocks run"
        run_example(sys.executable, block, example_folder)


def test_the_duckdb_delta_example_runs_with_the_versions_shown(example_folder):
    """The DuckDB example, in the test-only environment ``make kernel`` builds
    (``.venv-kernel``: no pip package ships the delta extension for cdnlake's own DuckDB
    2.x), whose versions are the ones the page's pip line names."""
    (block,) = [b for b in all_blocks() if b.run == "duckdb-delta"]
    shown = [c for b in code_blocks(block.page) for c in shown_commands(b) if "pip" in c]
    (line,) = [c for c in shown if "duckdb-ext-delta==" in c]
    versions = dict(re.findall(r"'([\w-]+)==([\w.]+)'", line))
    makefile = (REPO / "Makefile").read_text()
    assert f"KERNEL_DUCKDB := {versions['duckdb']}" in makefile, versions
    assert f"KERNEL_DELTA  := {versions['duckdb-ext-delta']}" in makefile, versions
    python = REPO / ".venv-kernel" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{python} is missing (make test builds it with `make kernel`)")
    run_example(str(python), block, example_folder)
