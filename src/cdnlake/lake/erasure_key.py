"""The key that hashes an erased address in ``erasures``: never the address itself.

An erasure must say what it erased without keeping it. A plain hash of an IPv4 address
is no protection (the 2^32 addresses are hashed in minutes), so the address is kept as an
HMAC-SHA256 under a key that is not in the lake: the key of ``[privacy] hash_key_env``
when the operator set one (the same key every machine of a fleet holds), else a random
key that ``cdnlake forget`` creates once in ``<root>/work/erasure.key`` (mode 0600). A
reader of the lake alone can then neither read nor brute-force the addresses erased.

Each erasure also keeps the key's *id* (an HMAC of a constant under the key), so a
process holding another key knows that it cannot match that erasure, and says so.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

KEY_FILE = "erasure.key"
_KEY_ID_TEXT = b"cdnlake erasure key id"


@dataclass(frozen=True)
class ErasureKey:
    """The key itself (bytes) and its id: what ``erasures.key_id`` holds."""

    secret: bytes

    @property
    def key_id(self) -> str:
        return hmac.new(self.secret, _KEY_ID_TEXT, hashlib.sha256).hexdigest()[:16]

    def digest(self, text: str) -> str:
        """``hmac-sha256:<hex>`` of ``text`` under this key."""
        mac = hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()
        return f"hmac-sha256:{mac}"


class KeySource:
    """Where a process finds the erasure key: a secret from the environment (``[privacy]
    hash_key_env``), else ``<work>/erasure.key``; read once, on first use."""

    def __init__(self, work: Path | None, secret: bytes | None = None) -> None:
        self.work = work
        self._key: ErasureKey | None = ErasureKey(secret) if secret else None
        self._from_env = self._key is not None
        self._every: list[ErasureKey] | None = None

    @property
    def file(self) -> Path | None:
        return None if self.work is None else self.work / KEY_FILE

    def get(self, *, create: bool = False) -> ErasureKey | None:
        """The key; None where there is none yet (``create``: made now, in the work
        folder: what ``cdnlake forget`` does the first time)."""
        if self._key is not None:
            return self._key
        path = self.file
        if path is None:
            return None
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            if not create:
                return None
            text = self._create(path)
        self._key = ErasureKey(bytes.fromhex(text))
        return self._key

    def every(self) -> list[ErasureKey]:
        """The key, and the work folder's key file too where the key comes from the
        environment: erasures made before ``hash_key_env`` was set (under the file's key)
        still match. Read once."""
        if self._every is None:
            key = self.get()
            if key is None:
                return []
            self._every = [key]
            path = self.file
            if self._from_env and path is not None and path.exists():
                stored = ErasureKey(bytes.fromhex(path.read_text().strip()))
                if stored.key_id != key.key_id:
                    self._every.append(stored)
        return self._every

    @staticmethod
    def _create(path: Path) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = secrets.token_hex(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: its key is the key
            return path.read_text().strip()
        with os.fdopen(fd, "w") as out:
            out.write(text + "\n")
        log.warning(
            "erasure key created in %s: keep it (and back it up with the storage root); "
            "without it, erased addresses cannot be kept from coming back",
            path,
        )
        return text
