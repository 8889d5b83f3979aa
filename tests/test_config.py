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
        ("[ingest]\nlag_seconds = 'soon'\n", "ingest.lag_seconds: expected integer, got string"),
        ("[ingest]\npage_size = 20000\n", "ingest.page_size: must be at most 10000, got 20000"),
        ("[ingest]\npage_size = 0\n", "ingest.page_size: must be at least 1, got 0"),
        ("[ingest]\nmax_window_seconds = 10\n", "ingest.max_window_seconds: must be at least 60"),
        ("[ingest]\nlag_seconds = -1\n", "ingest.lag_seconds: must be at least 0, got -1"),
        ("[api]\nretry_attempts = true\n", "api.retry_attempts: expected integer, got boolean"),
        ("[api]\ntimeout_seconds = 0\n", "api.timeout_seconds: must be greater than 0, got 0"),
        ("[bogus]\nx = 1\n", "bogus: unknown key"),
        ("ingest = 3\n", "ingest: expected a table, got integer"),
        ("zones = 3\n", "zones: expected an array, got integer"),
        ("path = 'elsewhere'\n", "path: unknown key"),
        ("[storage.s3]\nregions = 'x'\n", "storage.s3.regions: unknown key"),
        ("[storage]\nroot = ''\n", "storage.root: expected a path (a non-empty string), got ''"),
        ("[storage]\nlake_uri = 'gs://b/p'\n", "storage.lake_uri: expected a local path or s3://"),
        ("[[zones]]\nname = 'x'\n", "zones[0].id: required key is missing"),
        ("[[zones]]\nid = 0\n", "zones[0].id: must be at least 1, got 0"),
        ("[[zones]]\nid = 1\nsource = 'v3'\n", "zones[0].source: expected 'v1' or 'v2', got 'v3'"),
        ("[[zones]]\nid = 1\n[[zones]]\nid = 1\n", "zones[1].id: zone 1 is configured twice"),
        (
            "[[shield_zones]]\nid = 7\n[[shield_zones]]\nid = 8\n[[shield_zones]]\nid = 7\n",
            "shield_zones[2].id: zone 7 is configured twice",
        ),
        ("[api]\naccess_key = 'abc'\n", "api.access_key: secrets must not be written"),
        ("[coordination]\ndsn = 'x'\n", "named by coordination.postgres_dsn_env"),
        ("[storage.s3]\nsecret = 'x'\n", "storage.s3.secret: secrets must not be written"),
        ("[[zones]]\nid = 1\ntoken = 't'\n", "zones[0].token: secrets must not be written"),
        ("[schedule]\nreport_at = '25:00'\n", "schedule.report_at: expected HH:MM (UTC)"),
        ("[schedule]\nreport_at = 00:30:00\n", "schedule.report_at: expected string, got time"),
        ("[api]\nbase_url = 'ftp://x'\n", "api.base_url: expected an http(s) URL, got 'ftp://x'"),
        ("[log]\nlevel = 'loud'\n", "log.level: expected one of DEBUG, INFO"),
        ("[log]\nformat = 'xml'\n", "log.format: expected one of 'text', 'json', got 'xml'"),
        ("[report]\nformats = ['html', 'pdf']\n", "report.formats[1]: expected one of 'html'"),
        ("[report]\nhit_statuses = []\n", "report.hit_statuses: must not be empty"),
        ("[metrics]\nlisten = '9464'\n", "metrics.listen: expected HOST:PORT"),
        ("[metrics]\nlisten = 'h:99999'\n", "metrics.listen: port must be 0..65535"),
        ("[engine]\nspark_remote = 'http://x'\n", "engine.spark_remote: expected sc://host:port"),
        ("[coordination]\npostgres_dsn_env = 'a b'\n", "postgres_dsn_env: expected the NAME of"),
        ("[forwarding]\nprotocol = 'http'\n", "forwarding.protocol: expected one of 'tcp', 'tls'"),
        ("[forwarding]\nlisten = 'nowhere'\n", "forwarding.listen: expected HOST:PORT"),
        ("[forwarding]\nallow = ['10.0.0.0/33']\n", "forwarding.allow[0]: expected a network"),
        ("[forwarding]\nflush_seconds = 0\n", "forwarding.flush_seconds: must be greater than 0"),
        ("[forwarding]\nlisten = '[::]:6514'\nprotocol = 'tls'\n", "forwarding.tls_cert: protocol"),
        ("[audit]\ntolerance = 1\n", "audit.tolerance: must be less than 1, got 1"),
        ("[audit]\ntolerance = -0.5\n", "audit.tolerance: must be at least 0, got -0.5"),
        ("[audit]\ntolerance = 'loose'\n", "audit.tolerance: expected number, got string"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_bad_config_names_the_key(tmp_path, text, needle):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), env=ENV)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'c.toml'}: ")  # the file, then the key
    assert needle in message and "\n" not in message


def test_missing_key_is_exit_2_naming_the_variable(tmp_path):
    p = write(tmp_path, "[[zones]]\nid = 1\n")
    result = run_cli("--config", str(p), "ingest", env={"CDNLAKE_ACCESS_KEY": ""})
    assert result.returncode == 2
    assert "CDNLAKE_ACCESS_KEY" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_config_via_cli_is_one_line_exit_2(tmp_path):
    p = write(tmp_path, "[ingest]\nwhat = 1\n")
    result = run_cli("--config", str(p), "status")
    assert result.returncode == 2
    assert result.stderr.strip() == f"cdnlake: error: {p}: ingest.what: unknown key"


def test_secret_never_in_repr():
    from cdnlake.config import Secret

    config = load_config(REPO / "config.toml", env={"CDNLAKE_ACCESS_KEY": "sup3rs3cret"})
    assert "sup3rs3cret" not in repr(config)
    assert repr(Secret("x")) == "Secret('***')"


def one_line_exit_2(result, needle: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert needle in result.stderr, result.stderr


def test_non_utf8_config_is_one_line_exit_2(tmp_path):
    p = tmp_path / "c.toml"
    p.write_bytes(b'[[zones]]\nid = 1\nname = "caf\xe9"\n')  # Latin-1, not UTF-8
    one_line_exit_2(run_cli("--config", str(p), "status"), f"{p}: not UTF-8 text (byte 0xe9")


def test_unknown_key_via_cli_names_file_and_key(tmp_path):
    p = write(tmp_path, "[[zones]]\nid = 1\n[forwarding]\nport = 514\n")
    one_line_exit_2(run_cli("--config", str(p), "ingest"), f"{p}: forwarding.port: unknown key")


def test_duplicate_shield_zone_via_cli_is_exit_2(tmp_path):
    p = write(tmp_path, "[[shield_zones]]\nid = 5001\n[[shield_zones]]\nid = 5001\n")
    one_line_exit_2(run_cli("--config", str(p), "status"), "shield_zones[1].id: zone 5001")


def test_one_id_may_name_a_pull_zone_and_a_shield_zone(tmp_path):
    config = load_config(write(tmp_path, "[[zones]]\nid = 9\n[[shield_zones]]\nid = 9\n"), env=ENV)
    assert [z.id for z in config.zones] == [z.id for z in config.shield_zones] == [9]


def test_no_lag_and_no_overlap_is_refused_but_either_alone_is_fine(tmp_path):
    with pytest.raises(ConfigError, match=r"ingest\.lag_seconds: 0 together with overlap_seconds"):
        load_config(write(tmp_path, "[ingest]\nlag_seconds = 0\noverlap_seconds = 0\n"), env=ENV)
    env = {**ENV, "CDNLAKE_INGEST_OVERLAP_SECONDS": "0"}
    with pytest.raises(ConfigError, match="lag_seconds: 0 together"):
        load_config(write(tmp_path, "[ingest]\nlag_seconds = 0\n"), env=env)
    assert load_config(write(tmp_path, "[ingest]\nlag_seconds = 0\n"), env=ENV)
    assert load_config(write(tmp_path, "[ingest]\noverlap_seconds = 0\n"), env=ENV)


@pytest.mark.parametrize("command", ["status", "ingest", "daemon"])
def test_a_config_without_zones_is_refused_by_commands_that_need_them(tmp_path, command):
    p = write(tmp_path, f'[storage]\nroot = "{tmp_path / "data"}"\n')
    result = run_cli("--config", str(p), command, timeout=60)
    one_line_exit_2(result, "no zones configured" if command != "status" else "no [[zones]]")
    assert command in result.stderr


def test_status_without_zones_names_the_file(tmp_path):
    p = write(tmp_path, "")
    with pytest.raises(ConfigError) as info:
        load_config(p, env=ENV).require_zones("status")
    assert str(info.value) == (
        f"zones: no [[zones]] or [[shield_zones]] configured in {p}; "
        "`cdnlake status` needs at least one"
    )
    shield_only = load_config(write(tmp_path, "[[shield_zones]]\nid = 3\n"), env=ENV)
    shield_only.require_zones("status")  # a shield zone is a zone to show


def test_a_storage_root_that_is_a_file_is_one_line_exit_2(tmp_path):
    a_file = tmp_path / "data"
    a_file.write_text("not a folder")
    p = write(tmp_path, '[storage]\nroot = "data"\n[[zones]]\nid = 1\n')
    for command in (["status"], ["ingest"], ["sql", "SELECT 1"]):
        result = run_cli("--config", str(p), *command)
        one_line_exit_2(result, f"storage.root: {a_file} is a file, not a folder")
    below = write(tmp_path, '[storage]\nroot = "data/sub"\n[[zones]]\nid = 1\n')
    one_line_exit_2(run_cli("--config", str(below), "status"), f"lies below {a_file}, a file")
    lake = write(tmp_path, '[storage]\nroot = "elsewhere"\nlake_uri = "data"\n')
    with pytest.raises(ConfigError, match=r"storage\.lake_uri: .* is a file, not a folder"):
        load_config(lake, env=ENV)


def test_forwarding_and_audit_defaults_are_the_contracts(tmp_path):
    config = load_config(write(tmp_path, ""), env=ENV)
    fwd = config.forwarding
    assert (fwd.listen, fwd.protocol, fwd.tls_cert, fwd.tls_key) == ("", "tcp", "", "")
    assert fwd.allow == () and fwd.flush_seconds == 5 and not fwd.enabled
    assert fwd.address() is None
    assert [str(n) for n in fwd.networks()] == ["127.0.0.0/8", "::1/128"]  # [] = loopback only
    assert config.audit.tolerance == 0.001


def test_forwarding_settings_are_typed_and_paths_relative_to_the_file(tmp_path):
    text = (
        '[forwarding]\nlisten = "0.0.0.0:6514"\nprotocol = "tls"\ntls_cert = "pki/c.pem"\n'
        'tls_key = "/etc/k.pem"\nallow = ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"]\n'
        "flush_seconds = 1.5\n[audit]\ntolerance = 0\n"
    )
    config = load_config(write(tmp_path, text), env=ENV)
    fwd = config.forwarding
    assert fwd.enabled and fwd.address() == ("0.0.0.0", 6514)
    assert fwd.tls_cert == str((tmp_path / "pki" / "c.pem").resolve())
    assert fwd.tls_key == "/etc/k.pem" and fwd.flush_seconds == 1.5
    assert [str(n) for n in fwd.networks()] == ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7/32"]
    assert config.audit.tolerance == 0


def test_overrides_are_merged_before_the_checks_and_named_when_wrong(tmp_path):
    p = write(tmp_path, "[report]\ntop_n = 5\n")
    env = {
        **ENV,
        "CDNLAKE_REPORT_FORMATS": "html, md",
        "CDNLAKE_STORAGE_S3_ALLOW_HTTP": "yes",
        "CDNLAKE_FORWARDING_ALLOW": "10.0.0.0/8,::1",
        "CDNLAKE_AUDIT_TOLERANCE": "0.01",
        "CDNLAKE_API_TIMEOUT_SECONDS": "2.5",
    }
    config = load_config(p, env=env)
    assert config.report.formats == ("html", "md") and config.report.top_n == 5
    assert config.storage.s3.allow_http is True and config.api.timeout_seconds == 2.5
    assert config.forwarding.allow == ("10.0.0.0/8", "::1") and config.audit.tolerance == 0.01
    for name, value, needle in [
        ("CDNLAKE_INGEST_PAGE_SIZE", "0", "ingest.page_size: must be at least 1, got 0 (from "),
        ("CDNLAKE_INGEST_PAGE_SIZE", "many", "CDNLAKE_INGEST_PAGE_SIZE: expected integer"),
        ("CDNLAKE_STORAGE_S3_ALLOW_HTTP", "maybe", "CDNLAKE_STORAGE_S3_ALLOW_HTTP: expected"),
        ("CDNLAKE_AUDIT_TOLERANCE", "2", "audit.tolerance: must be less than 1, got 2.0"),
        ("CDNLAKE_FORWARDING_PROTOCOL", "sctp", "forwarding.protocol: expected one of"),
        ("CDNLAKE_FORWARDING_ALLOW", "10.0.0.0/8,nowhere", "forwarding.allow[1]: expected"),
    ]:
        with pytest.raises(ConfigError) as info:
            load_config(p, env={**ENV, name: value})
        assert needle in str(info.value) and name in str(info.value)


def test_every_key_is_in_the_committed_config():
    """The committed config.toml shows (and the first test: comments) every key there is."""
    import tomllib

    from cdnlake.config import SECTIONS, ShieldZoneConfig, ZoneConfig, _overridable

    raw = tomllib.loads((REPO / "config.toml").read_text())
    for section, cls in SECTIONS.items():
        table = raw
        for part in section.split("."):
            table = table[part]
        assert set(_overridable(cls)) <= set(table), section
    assert set(_overridable(ZoneConfig)) == set(raw["zones"][0])
    assert set(_overridable(ShieldZoneConfig)) == set(raw["shield_zones"][0])


def test_config_is_immutable():
    config = load_config(REPO / "config.toml", env=ENV)
    with pytest.raises(AttributeError):
        config.ingest.lag_seconds = 0  # type: ignore[misc]


def test_a_key_variable_of_ones_own_leaves_the_default_one_unread(tmp_path):
    """The README's tour exports CDNLAKE_ACCESS_KEY; a config naming MY_KEY still loads,
    and the key is MY_KEY's."""
    p = write(tmp_path, '[api]\naccess_key_env = "MY_KEY"\n[[zones]]\nid = 1\n')
    config = load_config(p, env={"CDNLAKE_ACCESS_KEY": "old", "MY_KEY": "mine"})
    assert config.api.access_key is not None and config.api.access_key.reveal() == "mine"
    loose = load_config(p, env={"CDNLAKE_ACCESS_KEY": "old", "CDNLAKE_LOGGING_TOKEN": "t"})
    assert loose.api.access_key is None
    with pytest.raises(ConfigError, match="CDNLAKE_ACESS_KEY: unknown environment variable"):
        load_config(p, env={"CDNLAKE_ACESS_KEY": "typo"})


def test_log_levels_agree_between_the_command_line_and_the_file(tmp_path):
    from cdnlake.cli import main
    from cdnlake.config import LOG_LEVELS

    assert main.LOG_LEVELS == LOG_LEVELS
    p = write(tmp_path, '[log]\nlevel = "CRITICAL"\n[[zones]]\nid = 1\n')
    assert load_config(p, env=ENV).log.level == "CRITICAL"
    result = run_cli("--config", str(p), "--log-level", "CRITICAL", "sql", "SELECT 1")
    assert "invalid choice" not in result.stderr, result.stderr


ARCHIVE = """[[zones]]
id = 1234
[zones.archive]
storage_zone = "cdnlake-archive"
folder = "www"
password_env = "ARCHIVE_PW"
"""


def test_a_zones_archive_is_typed_and_its_password_comes_from_the_environment(tmp_path):
    config = load_config(write(tmp_path, ARCHIVE), env={**ENV, "ARCHIVE_PW": "secret"})
    archive = config.zones[0].archive
    assert archive is not None and archive.folder == "www"
    assert archive.require_password("k").reveal() == "secret" and "secret" not in repr(archive)
    cases = [
        (ARCHIVE.replace('"www"', '"w/w"'), "zones[0].archive.folder: expected a folder name"),
        (ARCHIVE.replace('password_env = "ARCHIVE_PW"\n', ""), "archive.password_env: required"),
        (ARCHIVE + 'password = "x"\n', "zones[0].archive.password: secrets must not be written"),
        (ARCHIVE + "typo = 1\n", "zones[0].archive.typo: unknown key"),
        ('[[zones]]\nid = 1\narchive = "x"\n', "zones[0].archive: expected a table, got string"),
    ]
    for text, needle in cases:
        with pytest.raises(ConfigError) as info:
            load_config(write(tmp_path, text), env=ENV)
        assert needle in str(info.value) and "\n" not in str(info.value)
    # The variable the archive names is known, not an unknown CDNLAKE_* override.
    named = ARCHIVE.replace("ARCHIVE_PW", "CDNLAKE_ARCHIVE_PASSWORD")
    load_config(write(tmp_path, named), env={**ENV, "CDNLAKE_ARCHIVE_PASSWORD": "x"})
    config = load_config(write(tmp_path, ARCHIVE), env=ENV)
    with pytest.raises(ConfigError, match="ARCHIVE_PW is not set"):
        config.zones[0].archive.require_password("zones[0].archive.password_env")  # type: ignore[union-attr]


def test_a_secret_exported_for_another_config_is_never_an_error(tmp_path):
    """docs once said `export CDNLAKE_ARCHIVE_PASSWORD=...`: a config that names no such
    variable must still load; a near miss of an override's name stays an error."""
    p = write(tmp_path, "[[zones]]\nid = 1\n")
    for name in ("CDNLAKE_ARCHIVE_PASSWORD", "CDNLAKE_HASH_KEY", "CDNLAKE_PG_DSN"):
        load_config(p, env={**ENV, name: "secret"})
    for name, near in [
        ("CDNLAKE_INGST_LAG_SECONDS", "CDNLAKE_INGEST_LAG_SECONDS"),
        ("CDNLAKE_STORAGE_ROOOT", "CDNLAKE_STORAGE_ROOT"),
        ("CDNLAKE_ACESS_KEY", "CDNLAKE_ACCESS_KEY"),
    ]:
        with pytest.raises(ConfigError, match=f"{name}: unknown .* did you mean {near}"):
            load_config(p, env={**ENV, name: "1"})
    with pytest.raises(ConfigError, match="CDNLAKE_STORAGE_WHATEVER: unknown environment"):
        load_config(p, env={**ENV, "CDNLAKE_STORAGE_WHATEVER": "1"})
    load_config(p, env={**ENV, "CDNLAKE_HOME_OF_MY_SHELL": "1"})  # not an override's name


def test_a_value_from_the_environment_is_not_blamed_on_the_file(tmp_path):
    p = write(tmp_path, "[[zones]]\nid = 1\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(ConfigError) as info:
        load_config(p, env={**ENV, "CDNLAKE_STORAGE_ROOT": str(a_file)})
    message = str(info.value)
    assert message.startswith("storage.root: ") and "c.toml" not in message
    assert message.endswith("(from the environment variable CDNLAKE_STORAGE_ROOT)")
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, f'[storage]\nroot = "{a_file}"\n'), env=ENV)
    assert str(info.value).startswith(f"{p}: storage.root: ") and "environment" not in str(
        info.value
    )
