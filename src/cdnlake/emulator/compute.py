"""Compute scripts: secrets, stored but never echoed back."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from cdnlake.emulator.area import (
    AreaBase,
    RouteSpec,
    Secret,
    field_auth,
    field_error,
    iso,
)
from cdnlake.emulator.http import Request, Response, json_response


class ComputeRoutes(AreaBase):
    ROUTES: ClassVar[list[RouteSpec]] = [
        ("POST", r"^/compute/script/(\d+)/secrets$", "add_secret", field_auth),
        ("POST", r"^/compute/script/(\d+)/secrets/(\d+)$", "update_secret", field_auth),
    ]

    def _secret_body(self, req: Request) -> dict[str, Any] | Response:
        try:
            body = req.json()
        except ValueError:
            return field_error(400, "body.invalid", "body", "not JSON")
        if not isinstance(body, dict):
            return field_error(400, "body.invalid", "body", "expected an object")
        secret = body.get("Secret")
        if not isinstance(secret, str) or not secret:
            return field_error(400, "secret.required", "Secret", "is required")
        if len(secret) > 4096:
            return field_error(400, "secret.too_long", "Secret", "at most 4096 characters")
        return body

    def add_secret(self, req: Request, m: re.Match[str]) -> Response:
        script = int(m.group(1))
        if script not in self.fx.scripts:
            return field_error(404, "script.not_found", "id", f"script {script} does not exist")
        body = self._secret_body(req)
        if isinstance(body, Response):
            return body
        name = body.get("Name")
        if not isinstance(name, str) or not name.strip():
            return field_error(400, "name.required", "Name", "is required")
        with self._lock:
            secrets = self.state.secrets.setdefault(script, {})
            if any(s.name == name for s in secrets.values()):
                return field_error(409, "name.taken", "Name", f"a secret named {name} exists")
            sid = self.state.next_secret_id
            self.state.next_secret_id += 1
            secret = Secret(sid, name, body["Secret"], self.emulator.clock.now())
            secrets[sid] = secret
        return json_response(201, {"Id": sid, "Name": name, "LastModified": iso(secret.modified)})

    def update_secret(self, req: Request, m: re.Match[str]) -> Response:
        script, sid = int(m.group(1)), int(m.group(2))
        if script not in self.fx.scripts:
            return field_error(404, "script.not_found", "id", f"script {script} does not exist")
        body = self._secret_body(req)
        if isinstance(body, Response):
            return body
        with self._lock:
            secret = self.state.secrets.get(script, {}).get(sid)
            if secret is None:
                return field_error(404, "secret.not_found", "secretId", f"no secret {sid}")
            secret.value = body["Secret"]
            secret.modified = self.emulator.clock.now()
        return json_response(
            200, {"Id": sid, "Name": secret.name, "LastModified": iso(secret.modified)}
        )
