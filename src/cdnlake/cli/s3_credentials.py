"""An ``s3://`` lake without AWS credentials: one line saying so, not a delta-rs error chain.

The lake's libraries (delta-rs, object_store) read credentials from the standard AWS
environment. With none there, they end in the instance-metadata service and fail with
several lines of chained errors in colour, naming its address. :func:`require_credentials`
refuses such a lake up front when no credentials of any kind are visible and the instance
metadata cannot be the answer; :func:`missing_credentials` recognises the chain when it
comes anyway (a machine on AWS with no instance role).

What is visible here is a plain look at the environment and the usual files, not the AWS
SDK's own resolution (botocore is no dependency of cdnlake): it does not cover an instance
or task role, ``credential_process`` or SSO in a config file it does not find, or a
profile that names no credentials. An instance role is therefore let through whenever the
lake is on AWS itself and ``AWS_EC2_METADATA_DISABLED`` is not true.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from cdnlake.config import StorageConfig
from cdnlake.errors import ConfigError

# Set any of these and some credential provider of the AWS chain has something to go on.
PROVIDER_VARIABLES = (
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",  # EKS (IRSA)
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",  # ECS task role
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",  # EKS pod identity, Greengrass
)
HINT = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary "
    "credentials), or AWS_PROFILE naming a profile of ~/.aws/credentials"
)
# The instance-metadata service (IPv4 and IPv6) and the AWS chain's own words for "none".
METADATA = re.compile(
    r"169\.254\.169\.254|fd00:ec2::254|/latest/api/token|no credentials|"
    r"credentials? (?:were )?not (?:be )?(?:found|loaded)|NoCredentialProviders|"
    r"failed to load credentials",
    re.IGNORECASE,
)
S3_URI = re.compile(r"s3a?://[^\s:;,'\"]+")


def visible_credentials(env: Mapping[str, str] | None = None) -> str | None:
    """Where the AWS chain would find credentials, as far as a look can tell, or None."""
    env = os.environ if env is None else env
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return "AWS_ACCESS_KEY_ID"
    for name in PROVIDER_VARIABLES:
        if env.get(name):
            return name
    home = Path(env.get("HOME") or Path.home())
    for name, default in (
        ("AWS_SHARED_CREDENTIALS_FILE", home / ".aws" / "credentials"),
        ("AWS_CONFIG_FILE", home / ".aws" / "config"),
    ):
        path = Path(env[name]).expanduser() if env.get(name) else default
        if path.is_file():
            return str(path)
    return None


def on_aws(endpoint_url: str) -> bool:
    """The lake is on AWS's own S3 (no endpoint, or one of amazonaws.com)."""
    if not endpoint_url:
        return True
    host = (urlsplit(endpoint_url).hostname or "").lower()
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


def require_credentials(storage: StorageConfig, env: Mapping[str, str] | None = None) -> None:
    """ConfigError (exit 2) for an ``s3://`` lake that no AWS credentials could reach."""
    env = os.environ if env is None else env
    uri = storage.lake_location
    if not uri.startswith("s3://") or visible_credentials(env) is not None:
        return
    metadata_off = env.get("AWS_EC2_METADATA_DISABLED", "").strip().lower() == "true"
    if on_aws(storage.s3.endpoint_url) and not metadata_off:
        return  # an instance role may answer; missing_credentials() if it does not
    raise ConfigError(no_credentials(uri))


def no_credentials(uri: str) -> str:
    return f"storage.lake_uri: no AWS credentials found for {uri}: {HINT}"


def missing_credentials(message: str, tables: tuple[str, ...] = ()) -> str | None:
    """The one line for an error of the lake's libraries that ended in the search for
    credentials (the instance-metadata service, say), or None for any other error.
    ``tables``: names of lake tables, taken off the end of the URI to name the lake."""
    if not METADATA.search(message):
        return None
    found = S3_URI.search(message)
    if found is None:
        return no_credentials("the s3:// lake")
    uri = found.group(0).rstrip("/.")
    head, _, last = uri.rpartition("/")
    if last in tables and head.count("/") >= 2:
        uri = head
    return no_credentials(uri)
