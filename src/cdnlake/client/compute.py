"""Compute scripts: add and update named secrets (the value is never returned)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from cdnlake.client.area import Area, check_id
from cdnlake.client.error_bodies import field_error
from cdnlake.errors import RequestValidationError

MAX_SECRET_LENGTH = 4096


class ScriptSecret(msgspec.Struct):
    Id: int
    Name: str | None = None
    LastModified: datetime | None = None


def check_secret(value: str) -> str:
    if not isinstance(value, str) or not value:
        raise RequestValidationError("Secret", "must be a non-empty string")
    if len(value) > MAX_SECRET_LENGTH:
        raise RequestValidationError(
            "Secret", f"at most {MAX_SECRET_LENGTH} characters, got {len(value)}"
        )
    return value


class ComputeApi(Area):
    def add_script_secret(self, script_id: int, name: str, secret: str) -> ScriptSecret:
        check_id("id", script_id)
        if not name or not name.strip():
            raise RequestValidationError("Name", "must not be empty")
        return self._call(
            "POST",
            f"/compute/script/{script_id}/secrets",
            ScriptSecret,
            parser=field_error,
            json={"Name": name, "Secret": check_secret(secret)},
        )

    def update_script_secret(self, script_id: int, secret_id: int, secret: str) -> ScriptSecret:
        check_id("id", script_id)
        check_id("secretId", secret_id)
        return self._call(
            "POST",
            f"/compute/script/{script_id}/secrets/{secret_id}",
            ScriptSecret,
            parser=field_error,
            json={"Secret": check_secret(secret)},
        )
