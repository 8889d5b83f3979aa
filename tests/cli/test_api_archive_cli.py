"""`cdnlake api pullzone set-archive|show-archive` and `cdnlake api storagezone list|get`:
permanent log storage switched from the command line; passwords masked unless asked."""

from __future__ import annotations

import json

import pytest

from cdnlake.emulator import DEFAULT_STORAGE_ZONES
from tests.conftest import run_cli, start_emulator

STORE = DEFAULT_STORAGE_ZONES[0]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    emu = start_emulator("1234:archived,1235", rpm=1, archive_days=1)
    path = tmp_path_factory.mktemp("api") / "config.toml"
    path.write_text(f'[api]\nbase_url = "{emu.url}"\nlogging_url = "{emu.url}"\n')
    yield emu, path
    emu.stop()


def api(env, *args):
    _, path = env
    r = run_cli("--config", str(path), "api", *args)
    return r


def test_storage_zones_are_listed_with_their_passwords_masked(env):
    r = api(env, "storagezone", "list")
    assert r.returncode == 0, r.stderr
    (zone,) = json.loads(r.stdout)
    assert zone["Id"] == STORE.id and zone["Name"] == STORE.name
    assert zone["Password"] == zone["ReadOnlyPassword"] == "***"
    assert STORE.password not in r.stdout + r.stderr
    assert STORE.read_only_password not in r.stdout + r.stderr
    r = api(env, "storagezone", "get", "--id", str(STORE.id), "--show-passwords")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["ReadOnlyPassword"] == STORE.read_only_password
    assert shown["StorageHostname"] == STORE.hostname
    r = api(env, "storagezone", "get", "--id", "4242")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1


def test_permanent_storage_is_switched_on_shown_and_off(env):
    r = api(env, "pullzone", "show-archive", "--zone", "1235")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["enabled"] is False
    r = api(env, "pullzone", "set-archive", "--zone", "1235", "--storage-zone", str(STORE.id))
    assert r.returncode == 0, r.stderr
    on = json.loads(r.stdout)
    assert on["LoggingSaveToStorage"] is True and on["LoggingStorageZoneId"] == STORE.id
    r = api(env, "pullzone", "show-archive", "--zone", "1235")
    shown = json.loads(r.stdout)
    assert shown["enabled"] is True and shown["storageZone"]["Name"] == STORE.name
    assert shown["storageZone"]["Password"] == "***"
    assert shown["folder"] == "pullzone-logs/zone-1235/"
    assert STORE.password not in r.stdout
    r = api(env, "pullzone", "set-archive", "--zone", "1235", "--disable")
    assert r.returncode == 0 and json.loads(r.stdout)["LoggingSaveToStorage"] is False


def test_set_archive_refuses_what_does_not_add_up(env):
    r = api(env, "pullzone", "set-archive", "--zone", "1235")
    assert r.returncode == 2 and "--storage-zone needed (or --disable)" in r.stderr
    r = api(env, "pullzone", "set-archive", "--zone", "1235", "--disable", "--storage-zone", "1")
    assert r.returncode == 2 and "--disable takes no --storage-zone" in r.stderr
    r = api(env, "pullzone", "set-archive", "--zone", "1235", "--storage-zone", "99")
    assert r.returncode == 1 and "LoggingStorageZoneId" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
