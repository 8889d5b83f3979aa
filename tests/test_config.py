"""Configuration: typed, read once, one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdnlake.config import load_config
from cdnlake.errors import ConfigError
from tests.conftest import REPO, run_cli

ENV = {"CDNLAKE_ACCESS_KEY": "k"}


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_committed_config_loads_and_documents_every_key():
    config = load_config(REPO / "config.toml", env=ENV)
    assert [z.id for z in config.zones] == [1234, 1235, 1236]
    assert config.storage.root == (REPO / "data").resolve()
    text = (REPO / "config.toml").read_text()
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#") and not line.startswith("["):
            assert "#" in line or line.split("=")[0].strip() in {"id", "name", "source"}, line


def test_demo_zones_match_committed_config():
    from cdnlake.emulator.server import DEMO_ZONES, parse_zones

    config = load_config(REPO / "config.toml", env=ENV)
    assert set(parse_zones(DEMO_ZONES)) == {z.id for z in config.zones}


def test_relative_root_is_relative_to_the_file(tmp_path):
    config = load_config(write(tmp_path, '[storage]\nroot = "x/y"\n'), env=ENV)
    assert config.storage.root == (tmp_path / "x" / "y").resolve()


def test_env_overrides(tmp_path):
    env = {**ENV, "CDNLAKE_INGEST_LAG_SECONDS": "42", "CDNLAKE_STORAGE_ROOT": "/tmp/zz"}
    config = load_config(write(tmp_path, "[ingest]\nlag_seconds = 1\n"), env=env)
    assert config.ingest.lag_seconds == 42
    assert str(config.storage.root) == "/tmp/zz"


def test_config_env_variable_locates_the_file(tmp_path):
    p = write(tmp_path, "[ingest]\npage_size = 7\n")
    assert load_config(None, env={"CDNLAKE_CONFIG": str(p)}).ingest.page_size == 7


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[ingest]\nlag_secs = 1\n", "ingest.lag_secs: unknown key"),
        ("[ingest]\nlag_seconds = 'soon'\n", "ingest.lag_seconds: expected integer"),
        ("[ingest]\npage_size = 20000\n", "ingest.page_size"),
        ("[bogus]\nx = 1\n", "bogus: unknown key"),
        ("[[zones]]\nname = 'x'\n", "zones[0].id: required key is missing"),
        ("[[zones]]\nid = 1\nsource = 'v3'\n", "zones[0].source"),
        ("[[zones]]\nid = 1\n[[zones]]\nid = 1\n", "configured twice"),
        ("[api]\naccess_key = 'abc'\n", "api.access_key: secrets must not be written"),
        ("[schedule]\nreport_at = '25:00'\n", "schedule.report_at"),
        ("[api]\nbase_url = 'ftp://x'\n", "api.base_url"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_bad_config_names_the_key(tmp_path, text, needle):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), env=ENV)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_key_is_exit_2_naming_the_variable(tmp_path):
    p = write(tmp_path, "[[zones]]\nid = 1\n")
    result = run_cli("--config", str(p), "ingest", env={"CDNLAKE_ACCESS_KEY": ""})
    assert result.returncode == 2
    assert "CDNLAKE_ACCESS_KEY" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_config_via_cli_is_one_line_exit_2(tmp_path):
    p = write(tmp_path, "[ingest]\nwhat = 1\n")
    result = run_cli("--config", str(p), "status")
    assert result.returncode == 2
    assert result.stderr.strip() == "cdnlake: error: ingest.what: unknown key"


def test_secret_never_in_repr():
    from cdnlake.config import Secret

    config = load_config(REPO / "config.toml", env={"CDNLAKE_ACCESS_KEY": "sup3rs3cret"})
    assert "sup3rs3cret" not in repr(config)
    assert repr(Secret("x")) == "Secret('***')"
