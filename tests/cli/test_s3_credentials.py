"""An S3 lake without AWS credentials: one line naming the lake and what to set, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cdnlake.cli.main import _no_aws_credentials
from cdnlake.cli.s3_credentials import require_credentials, visible_credentials
from cdnlake.config import S3Config, StorageConfig
from cdnlake.errors import ConfigError, StorageError
from tests.conftest import KEY, start_emulator, write_config

# What delta-rs said for `status` on a machine with no credentials and no instance role.
CHAIN = (
    "lake table s3://bucket/lake/requests cannot be read: Kernel error -> Generic S3 error\n"
    "          \x1b[31m↳\x1b[0m Error performing PUT http://169.254.169.254/latest/api/token"
    " in 1.75972ms - Server returned non-2xx status code\n"
    "           \x1b[31m↳\x1b[0m 403 Forbidden\n"
)


def test_status_ingest_and_sql_say_no_aws_credentials_in_one_line(tmp_path, s3_server):
    emu = start_emulator("1234")
    try:
        path = write_config(tmp_path, emu, [(1234, "v2")], s3=s3_server)
        lake = next(
            line.split('"')[1] for line in path.read_text().splitlines() if "lake_uri" in line
        )
        # No AWS variable at all, and a home without ~/.aws.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env |= {"HOME": str(tmp_path), "CDNLAKE_ACCESS_KEY": KEY}
        for command in (["status"], ["ingest"], ["sql", "SELECT count(*) FROM requests"]):
            proc = subprocess.run(
                [sys.executable, "-m", "cdnlake", "--config", str(path), *command],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            assert proc.returncode == 2, (command, proc.stderr)
            assert proc.stdout == ""
            line = proc.stderr
            assert line.count("\n") == 1, (command, line)
            assert line.startswith("cdnlake: error: storage.lake_uri: no AWS credentials found")
            assert lake in line and "AWS_ACCESS_KEY_ID" in line and "AWS_PROFILE" in line
            assert "\x1b" not in line and "169.254." not in line and "Traceback" not in line
        assert emu.counters.get(1234) is None or emu.counters[1234].requests == 0
    finally:
        emu.stop()


def s3_lake(endpoint_url: str = "") -> StorageConfig:
    return StorageConfig(lake_uri="s3://bucket/lake", s3=S3Config(endpoint_url=endpoint_url))


@pytest.mark.parametrize(
    ("env", "seen"),
    [
        ({"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}, "AWS_ACCESS_KEY_ID"),
        ({"AWS_ACCESS_KEY_ID": "a"}, None),  # half a key pair is none
        ({"AWS_PROFILE": "lake"}, "AWS_PROFILE"),
        ({"AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token"}, "AWS_WEB_IDENTITY_TOKEN_FILE"),
        ({}, None),
    ],
)
def test_visible_credentials_from_the_environment(tmp_path, env, seen):
    assert visible_credentials({"HOME": str(tmp_path), **env}) == seen


def test_visible_credentials_from_the_shared_files(tmp_path):
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("[default]\n")
    assert visible_credentials({"HOME": str(tmp_path)}) == str(tmp_path / ".aws/credentials")
    elsewhere = tmp_path / "creds"
    elsewhere.write_text("[default]\n")
    env = {"HOME": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(elsewhere)}
    assert visible_credentials(env) == str(elsewhere)


def test_an_instance_role_on_aws_is_let_through(tmp_path):
    home = {"HOME": str(tmp_path)}
    require_credentials(s3_lake(), home)  # AWS itself: the instance metadata may answer
    require_credentials(s3_lake("https://s3.eu-west-1.amazonaws.com"), home)
    require_credentials(StorageConfig(root=tmp_path), home)  # a local lake needs none
    with pytest.raises(ConfigError, match="no AWS credentials found for s3://bucket/lake"):
        require_credentials(s3_lake(), {**home, "AWS_EC2_METADATA_DISABLED": "true"})
    with pytest.raises(ConfigError, match="AWS_SECRET_ACCESS_KEY"):
        require_credentials(s3_lake("http://127.0.0.1:9000"), home)


def test_the_lake_libraries_chain_becomes_one_line():
    line = _no_aws_credentials(StorageError(CHAIN))
    assert line is not None and "\n" not in line and "\x1b" not in line
    assert line.startswith("storage.lake_uri: no AWS credentials found for s3://bucket/lake:")
    assert _no_aws_credentials(StorageError("lake table s3://b/l/requests is gone")) is None
