"""The key that hashes an erased address in ``erasures``: never the address itself.

An address is kept as an HMAC-SHA256 under a key not in the lake (a plain hash of IPv4 is
brute-forced in minutes): ``[privacy] hash_key_env``'s, else 32 random bytes that
``cdnlake forget`` writes once, whole, to ``<root>/work/erasure.key`` (mode 0600). A short
or unreadable key is an error. Each erasure keeps the key's id, so a process holding
another key knows it cannot match it. Keys retired from ``hash_key_env`` stay in
``<root>/work/erasure-retired.keys`` (one a line): erasures made under them still match,
none is made under them (docs/privacy.md, "Rotating the key").
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cdnlake.errors import ConfigError
from cdnlake.lake.log.store import sync_path, write_durably

log = logging.getLogger(__name__)

KEY_FILE = "erasure.key"
RETIRED_FILE = "erasure-retired.keys"
_KEY_ID_TEXT = b"cdnlake erasure key id"
MIN_KEY_BYTES = 32


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
        """``secret``: the key of ``hash_key_env``, checked when first used (a short one
        is an error, as in a key file; a process that erases nothing never needs it)."""
        self.work = work
        self._secret = secret or None
        self._key: ErasureKey | None = None
        self._every: list[ErasureKey] | None = None

    @property
    def file(self) -> Path | None:
        return None if self.work is None else self.work / KEY_FILE

    def get(self, *, create: bool = False) -> ErasureKey | None:
        """The key; None where there is none yet (``create``: made now, in the work
        folder: what ``cdnlake forget`` does the first time)."""
        if self._key is not None:
            return self._key
        if self._secret is not None:
            self._key = _long_enough(
                self._secret,
                "privacy.hash_key_env: the erasure key its variable holds has",
                f"set the variable to at least {MIN_KEY_BYTES} random bytes",
            )
            return self._key
        path = self.file
        if path is None:
            return None
        if not path.exists():
            if not create:
                return None
            self._create(path)
        self._key = read_key(path)
        return self._key

    def every(self) -> list[ErasureKey]:
        """The key, and those erasures made before may have used: the work folder's key
        file where the key comes from the environment (erasures made before
        ``hash_key_env`` was set), and each retired key. Read once."""
        if self._every is None:
            key = self.get()
            if key is None:
                return []
            found: list[ErasureKey] = []
            path = self.file
            if self._secret is not None and path is not None and path.exists():
                found.append(read_key(path))
            if self.work is not None and (self.work / RETIRED_FILE).exists():
                found += read_keys(self.work / RETIRED_FILE)
            self._every = [key]
            for other in found:
                if other.key_id not in {k.key_id for k in self._every}:
                    self._every.append(other)
        return self._every

    @staticmethod
    def _create(path: Path) -> None:
        """A new key in ``path``, whole or not at all; where another process made one
        first, its key is the key."""
        temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        text = secrets.token_hex(MIN_KEY_BYTES) + "\n"
        try:
            write_durably(temp, text.encode(), named=False, mode=0o600)
            try:
                os.link(temp, path)  # never over a key another process linked first
            except FileExistsError:
                return
        finally:
            temp.unlink(missing_ok=True)
        sync_path(path.parent)
        log.warning(
            "erasure key created in %s: keep it, and back it up apart from the storage "
            "root's backups (with both, erased addresses can be recovered); without it, "
            "erased addresses cannot be kept from coming back",
            path,
        )


def read_key(path: Path) -> ErasureKey:
    """The key of a key file; ConfigError where it cannot be read or is too short."""
    (key,) = read_keys(path, one=True)
    return key


def read_keys(path: Path, *, one: bool = False) -> list[ErasureKey]:
    """The keys of a file of keys, one a line in hexadecimal (``one``: the file holds a
    single key); ConfigError where it cannot be read or a key is too short."""
    remedy = "restore it from its backup, or set privacy.hash_key_env"
    try:
        text = path.read_text()
        found = [bytes.fromhex(text)] if one else [bytes.fromhex(line) for line in text.split()]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not hexadecimal"
        raise ConfigError(
            f"{path}: the erasure key cannot be read ({why}); restore it from its backup, "
            "or set privacy.hash_key_env to the key forget used"
        ) from None
    return [_long_enough(secret, f"{path}: the erasure key holds", remedy) for secret in found]


def _long_enough(secret: bytes, holds: str, remedy: str) -> ErasureKey:
    """The key, unless it is too short (ConfigError: ``holds`` its length, ``remedy``)."""
    if len(secret) < MIN_KEY_BYTES:
        raise ConfigError(
            f"{holds} {len(secret)} byte(s), fewer than {MIN_KEY_BYTES}: a short key "
            f"protects no erased address; {remedy}"
        )
    return ErasureKey(secret)
