"""`cdnlake api AREA ACTION`: JSON on stdout, --all walks pages, one-line errors."""

from __future__ import annotations

import json

import pytest

from tests.conftest import KEY, run_cli, start_emulator


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    emu = start_emulator("1234")
    path = tmp_path_factory.mktemp("api") / "config.toml"
    path.write_text(
        f'[api]\nbase_url = "{emu.url}"\nvideo_url = "{emu.url}"\nlogging_url = "{emu.url}"\n'
    )
    yield emu, path
    emu.stop()


def api(env, *args, extra_env=None):
    _, path = env
    return run_cli("--config", str(path), "api", *args, env=extra_env)


def test_paged_lists_with_all(env):
    r = api(env, "dns", "list-records", "--zone", "9001", "--per-page", "5", "--all")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)) == 23
    r = api(env, "video", "list-videos", "--library", "7001", "--items-per-page", "10", "--all")
    assert len(json.loads(r.stdout)) == 23
    r = api(
        env, "video", "list-videos", "--library", "7001", "--items-per-page", "10", "--page", "3"
    )
    page = json.loads(r.stdout)
    assert page["currentPage"] == 3 and len(page["items"]) == 3 and page["totalItems"] == 23
    r = api(env, "dns", "list-records", "--zone", "9001", "--type", "CNAME")
    assert {rec["Type"] for rec in json.loads(r.stdout)["Items"]} == {2}


def test_secret_from_env_never_printed(env):
    r = api(
        env,
        "compute",
        "add-secret",
        "--script",
        "3001",
        "--name",
        "CLI_SECRET",
        "--secret-env",
        "MY_SECRET",
        extra_env={"MY_SECRET": "top-s3cret"},
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["Name"] == "CLI_SECRET" and "top-s3cret" not in r.stdout + r.stderr


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["dns", "list-records", "--zone", "9001", "--per-page", "4"], 2, "perPage"),
        (
            ["shield", "review", "--zone", "5001", "--rule-id", "1", "--action", "Nuke"],
            2,
            "--action",
        ),
        (["shield", "event-logs", "--zone", "5001", "--date", "11/20/2026"], 2, "YYYY-MM-DD"),
        (["pullzone", "add-hostname", "--zone", "1234", "--hostname", ""], 2, "Hostname"),
        (["dns", "list-records", "--zone", "9002"], 1, "dnszone.not_found"),
        (
            ["compute", "add-secret", "--script", "3001", "--name", "x", "--secret-env", "NOPE_X"],
            2,
            "NOPE_X",
        ),
        (["video", "frobnicate"], 2, "invalid choice"),
    ],
)
def test_errors(env, args, code, needle):
    r = api(env, *args)
    assert r.returncode == code, r.stderr
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_every_action_has_help():
    actions = {
        "shield": ["review", "update-spec", "metrics", "event-logs", "waf-enums"],
        "compute": ["add-secret", "update-secret"],
        "pullzone": ["add-hostname"],
        "video": ["list-videos", "list-collections", "resolutions", "oembed"],
        "dns": ["list-records"],
        "containers": ["list-node-ips"],
    }
    for area, names in actions.items():
        listing = run_cli("api", area, "--help").stdout
        for name in names:
            assert name in listing
            r = run_cli("api", area, name, "--help")
            assert r.returncode == 0 and "usage" in r.stdout


def test_missing_key_is_exit_2_but_oembed_needs_none(env):
    r = api(env, "containers", "list-node-ips", extra_env={"CDNLAKE_ACCESS_KEY": ""})
    assert r.returncode == 2 and "CDNLAKE_ACCESS_KEY" in r.stderr
    r = api(
        env, "video", "oembed", "--url", "https://v.example/1", extra_env={"CDNLAKE_ACCESS_KEY": ""}
    )
    assert r.returncode == 0 and json.loads(r.stdout)["type"] == "video"
    assert KEY
