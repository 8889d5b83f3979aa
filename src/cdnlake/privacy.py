"""What cdnlake keeps of personal data: client addresses and URL query strings.

``[privacy]`` (:class:`cdnlake.config.PrivacyConfig`) becomes one :class:`PrivacyPolicy`,
built once at the composition root (the key of ``ip = "hash"`` read from the environment
there) and given to the lake session, whose writers apply it to every row and every
rejected line's raw text before a byte is written (``docs/privacy.md``).

- ``remote_ip``: ``keep`` (as received), ``truncate`` (the network of the configured
  prefix: ``1.2.3.4`` -> ``1.2.3.0`` at /24), ``drop`` (NULL) or ``hash`` (HMAC-SHA256
  of the address's 4 or 16 bytes, as 64 hex digits: one address, one hash, however it
  was written). Addresses are read with the
  standard library's :mod:`ipaddress`: an IPv4-mapped IPv6 address counts as its IPv4
  address, a zone index (``%eth0``) is dropped. What the provider already anonymised
  (``1.2.3.0``, ``2001:db8:1:2::``) is truncated again, which leaves it as it is at the
  provider's prefixes or longer; ``0.0.0.0`` and ``::`` (the provider's "Drop") are kept
  as they are but under ``drop``. A value that is no address is stored as NULL under
  ``truncate`` and ``hash``: never as given. Under ``hash`` a value that is already 64
  lower-case hex digits is taken for a hash stored earlier and left as it is.
- ``url``, ``path`` and ``referer``: every signed-URL form of the provider goes
  (:meth:`PrivacyPolicy.strip_url`): query and ``;`` parameters named in ``strip_query``
  or signing ones (:data:`SIGNING_NAMES`; names compared case-insensitively after
  percent-decoding), a directory token's path segment (``/bcdn_token=...&expires=...``)
  whole, a JWT or ``HS256-`` token anywhere as :data:`MARKER`. The other parameters,
  their order, the rest of the path and the fragment stay as they were. It fails closed:
  what still holds a signing parameter once decoded (a signed URL inside a value), or
  does not decode, goes (a parameter) or becomes :data:`MARKER` (a segment, a fragment).
- A rejected line's raw text: a v1 line (``|``-separated: address in field 6, URL in
  field 8) or a v2 record's JSON (``remoteIp``, ``url``, ``path``) is treated field by
  field, and then, whatever the text is, every run :func:`address_tokens` finds (the one
  reading of addresses in free text, ``forget``'s and the erasure filter's too) is
  treated as an address (``-`` where it does not parse: fails closed) and every URL-ish
  run (one holding ``=``, ``%``, ``;`` or a bearer token) as a URL.
- A shield event's ``log`` text and its labels (``labels_json``) are scrubbed the same
  way (they are free text).

Request ids (the exactly-once keys) are never touched.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import json
import re
import socket
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, NamedTuple
from urllib.parse import unquote

if TYPE_CHECKING:
    import polars as pl

    from cdnlake.config import PrivacyConfig, Secret

IpMode = Literal["keep", "truncate", "drop", "hash"]
MODES: tuple[IpMode, ...] = ("keep", "truncate", "hash", "drop")  # in code order
HASH_PATTERN = r"^[0-9a-f]{64}$"
_HASHED = re.compile(HASH_PATTERN)
_V4 = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
IPV4_PATTERN = rf"^{_V4}(?:\.{_V4}){{3}}$"  # dotted quad as ipaddress reads it
# A run of free text that may be an address (:func:`address_tokens` decides). IPv6: hex
# groups and at least two colons (or ``%3A``: percent-encoded in a URL), maybe a dotted
# quad last and a zone index (``%eth0``, ``%25eth0``); the longest run, never the middle
# of a word. IPv4: a dotted quad standing alone (not a piece of ``1.2.3.4.5``).
_ADDRESS_IN_TEXT = re.compile(
    r"(?<![\w.])(?P<v6>(?P<body>(?:[0-9A-Fa-f]*+(?::|%3[Aa])){2,}+"
    r"(?:\d{1,3}(?:\.\d{1,3}){3}(?!\.?\d)|[0-9A-Fa-f]*+))(?:%(?!3[Aa])[\w.~-]+)?)"
    r"|(?<![\d.])(?P<v4>\d{1,3}(?:\.\d{1,3}){3})(?!\.?\d)"
)
_ENCODED_COLON = re.compile(r"%3[Aa]")
# The provider's token authentication (its README: "Token authentication"): the names of
# its signing parameters, in a query string or, for directory tokens, as a path segment
# (``/bcdn_token=...&expires=...&token_path=%2Fv%2F/v/seg.ts``). They always go while
# URLs are scrubbed at all (``strip_query`` not empty).
SIGNING_NAMES = (
    "token",
    "bcdn_token",
    "expires",
    "token_path",
    "token_countries",
    "token_countries_blocked",
)
# A token standing on its own: a JWT (three base64url parts, the first a JSON header) or
# the provider's newer ``HS256-<base64url>``; replaced by MARKER wherever it is.
_BEARER = re.compile(
    r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*|(?i:hs256-)[A-Za-z0-9_-]+=*"
)
MARKER = "[token]"
# What a path segment needs before it can hold a token (else it is kept as it is).
_MAY_SIGN = re.compile(r"[=%;]|eyJ|(?i:hs256-)")
_SEPARATORS = re.compile(r"([&;])")  # between query parameters (and matrix parameters)
_DECODINGS = 3  # percent-decoding rounds before a value counts as undecodable
# A URL-ish run of free text (a rejected line, a shield event's log or labels).
_URLISH_IN_TEXT = re.compile(r"[^\s|\"'<>\\]*(?:[=%;]|eyJ|(?i:hs256-))[^\s|\"'<>\\]*")
V1_IP_FIELD, V1_URL_FIELD, V1_REFERER_FIELD = 5, 7, 6  # 0-based fields of a v1 line
_FINGERPRINT = b"cdnlake privacy key id"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_address(text: str | None) -> Address | None:
    """``text`` as an address (an IPv4-mapped IPv6 address as its IPv4 address, without
    a zone index or surrounding brackets), or None when it is none."""
    if text is None:
        return None
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


_MAPPED = bytes(10) + b"\xff\xff"  # the first 12 bytes of an IPv4-mapped IPv6 address


def packed_address(text: str) -> bytes | None:
    """``text`` as an address's 4 or 16 bytes (an IPv4-mapped IPv6 address as its IPv4
    address), or None when it is none: the C parser first (a tenth of the time of
    :mod:`ipaddress`, which reads what it refuses: brackets, zone indexes)."""
    try:
        return socket.inet_pton(socket.AF_INET, text)
    except OSError:
        pass
    try:
        packed = socket.inet_pton(socket.AF_INET6, text)
    except OSError:
        address = parse_address(text)
        return None if address is None else address.packed
    return packed[12:] if packed.startswith(_MAPPED) else packed


class AddressToken(NamedTuple):
    """A run of free text that may be a client address: where it stands, and the address
    (an IPv4-mapped one as its IPv4 address), or None where it does not parse: then it
    is personal all the same (scrubbing fails closed)."""

    start: int
    end: int
    address: Address | None


def address_tokens(text: str) -> list[AddressToken]:
    """The runs of ``text`` (a raw line, a shield event's text, labels) that may be client
    addresses: the one reading of free text that scrubbing, ``forget`` and the erasure
    filter share, so that an address is matched by its parsed value however it is
    written (any case, leading zeros, ``::`` or not, ``::ffff:1.2.3.4``, ``[...]:443``,
    a zone index, ``%3A``). A dotted quad is read in decimal, leading zeros and all (an
    octet past 255: None). An IPv6 run that does not parse counts (None) where only an
    address would hold ``::``, six colons or a dotted quad; a time of day (``12:34:56``)
    or a MAC address does not."""
    found: list[AddressToken] = []
    for match in _ADDRESS_IN_TEXT.finditer(text):
        start, end = match.span()
        if match["v4"] is not None:
            found.append(AddressToken(start, end, _dotted_quad(match["v4"])))
            continue
        written = match["body"]
        body = _ENCODED_COLON.sub(":", written)
        trailing = body.endswith(":") and (not body.endswith("::") or body.endswith(":::"))
        if written == match["v6"] and trailing:
            # a colon after it (``2001:db8::1: blocked``, ``2001:db8::: x``) is punctuation
            body = body[:-1]
            end -= 1 if written.endswith(":") else 3
        address = parse_address(body)
        if address is None and "::" not in body and "." not in body and body.count(":") < 6:
            continue  # a time of day, a MAC address, a ratio: no address
        found.append(AddressToken(start, end, address))
    return found


def _dotted_quad(text: str) -> ipaddress.IPv4Address | None:
    """Four decimal octets as an address (``010.001.002.003`` is 10.1.2.3: logs pad, they
    do not write octal), or None when one is past 255."""
    try:
        return ipaddress.IPv4Address(bytes(int(octet) for octet in text.split(".")))
    except ValueError:
        return None


def addresses_in(text: str | None) -> list[str]:
    """The addresses ``text`` holds (:func:`address_tokens` that parse), each in the one
    spelling :func:`parse_address` gives (``2001:db8::1``; an IPv4-mapped one as its IPv4
    address): what erasures are matched by, never the text as written."""
    if not text:
        return []
    return [token.address.compressed for token in address_tokens(text) if token.address]


def addresses_column(column: pl.Series) -> pl.Series:
    """:func:`addresses_in` of each value of a text column (a list each), once per
    distinct value."""
    import polars as pl

    read: dict[str, list[str]] = {}
    for value in column.unique().drop_nulls().to_list():
        read[value] = addresses_in(value)
    lists = [[] if value is None else read[value] for value in column.to_list()]
    return pl.Series(column.name, lists, dtype=pl.List(pl.String))


def address_text(packed: bytes) -> str:
    """An address's 4 or 16 bytes as :mod:`ipaddress` writes it (IPv6: lower case, the
    longest run of two or more zero groups, the first of equals, as ``::``)."""
    if len(packed) == 4:
        return ".".join(map(str, packed))
    groups = struct.unpack(">8H", packed)
    best, best_len, start = -1, 1, -1
    for i, group in enumerate((*groups, 1)):
        if group == 0 and start < 0:
            start = i
        elif group != 0 and start >= 0:
            if i - start > best_len:
                best, best_len = start, i - start
            start = -1
    words = [f"{g:x}" for g in groups]
    if best < 0:
        return ":".join(words)
    return ":".join(words[:best]) + "::" + ":".join(words[best + best_len :])


@dataclass(frozen=True)
class Setting:
    """A ``[privacy]`` setting as the lake records it with each zone's rows: an integer
    (a Delta application transaction's version, :meth:`code`), so that ``status`` and
    ``maintain --apply-privacy`` know what the stored rows went through."""

    ip: IpMode = "keep"
    # truncate: the prefixes kept; hash: those of the networks hashed (rows stored under
    # truncate, then hashed by ``maintain --apply-privacy``), 0 where addresses were hashed
    ipv4_prefix: int = 0
    ipv6_prefix: int = 0
    strip_id: int = 0  # 16 bits of a digest of the strip_query names (0: none)
    key_id: int = 0  # 30 bits of an HMAC of a fixed text under the hash key (hash only)
    # 1: every signed-URL form scrubbed (directory tokens in the path, ";" parameters,
    # bearer tokens); 0: query parameters only, as before. Rows stored under 0 are
    # rewritten by ``maintain --apply-privacy``.
    url_rules: int = 0

    def code(self) -> int:
        return (
            MODES.index(self.ip)
            | self.ipv4_prefix << 2
            | self.ipv6_prefix << 8
            | self.strip_id << 16
            | self.key_id << 32
            | self.url_rules << 62
        )

    @classmethod
    def decode(cls, code: int) -> Setting:
        return cls(
            MODES[code & 3],
            (code >> 2) & 0x3F,
            (code >> 8) & 0xFF,
            (code >> 16) & 0xFFFF,
            (code >> 32) & 0x3FFFFFFF,
            (code >> 62) & 1,
        )

    def describe_ip(self) -> str:
        """The address treatment in a few words, e.g. ``truncate /24 /64``."""
        if self.ip == "truncate":
            return f"truncate /{self.ipv4_prefix} /{self.ipv6_prefix}"
        if self.ip == "hash" and self.holds_networks:
            return (
                f"keyed hashes of /{self.ipv4_prefix} (IPv4) and /{self.ipv6_prefix} (IPv6) "
                f"networks, not of addresses (key {self.key_id:08x})"
            )
        if self.ip == "hash":
            return f"hash (key {self.key_id:08x})"
        return self.ip

    @property
    def holds_networks(self) -> bool:
        """Whether its rows hold networks (or their hashes), not single clients."""
        return self.ip in ("truncate", "hash") and self.ipv4_prefix > 0

    def hashing(self, stored: Setting) -> Setting:
        """What rows stored under ``stored`` hold once treated under this setting: under
        ``hash``, keyed hashes of the networks where they held networks; else this."""
        if self.ip != "hash" or not stored.holds_networks:
            return self
        return replace(self, ipv4_prefix=stored.ipv4_prefix, ipv6_prefix=stored.ipv6_prefix)

    def describe(self) -> str:
        """The setting in a few words: ``ip truncate /24 /64, query parameters removed``."""
        query = "URLs whole" if self.strip_id == 0 else "query parameters removed"
        if self.strip_id and not self.url_rules:
            query += " (signed paths whole)"
        return f"ip {self.describe_ip()}, {query}"

    def same_as(self, other: Setting) -> bool:
        """Equal, but where one key id is unknown (0: the key is not in this environment)."""
        if self.ip == other.ip == "hash" and 0 in (self.key_id, other.key_id):
            return replace(self, key_id=0) == replace(other, key_id=0)
        return self == other

    def cannot_become(self, wanted: Setting) -> str | None:
        """Why rows stored under this setting cannot be brought to ``wanted`` (None when
        they can, or need nothing)."""
        if self.ip == "hash" and wanted.ip == "truncate":
            return (
                "addresses stored as hashes cannot be truncated (the addresses are not "
                'known any more); keep ip = "hash" or choose "drop"'
            )
        if self.ip == "hash" and wanted.ip == "hash" and self.key_id != wanted.key_id:
            return (
                f"addresses stored as hashes under another key (key {self.key_id:08x}) "
                "cannot be hashed again under this one (the addresses are not known any more)"
            )
        return None

    def reaches(self, wanted: Setting) -> bool:
        """Whether rows stored under this setting, treated under ``wanted``, are stored as
        ``wanted`` stores them (not when this setting is the stronger: a truncated address
        stays truncated under ``keep``)."""
        if wanted.ip == "drop":
            return True
        if self.ip == "drop":
            return False
        if wanted.ip == "keep":
            return self.ip == "keep"
        if self.ip == "hash" and self.holds_networks:  # hashes of networks stay so
            return wanted.holds_networks and self.key_id == wanted.key_id
        if wanted.ip == "truncate":
            return self.ip == "keep" or (
                self.ip == "truncate"
                and self.ipv4_prefix >= wanted.ipv4_prefix
                and self.ipv6_prefix >= wanted.ipv6_prefix
            )
        return self.ip != "hash" or self.key_id == wanted.key_id


def configured_setting(config: PrivacyConfig) -> Setting:
    """The setting ``[privacy]`` names, without failing where the hash key is not in this
    environment (``status``): then its key id is 0, unknown."""
    key = config.hash_key.reveal().encode() if config.hash_key is not None else b"?"
    policy = PrivacyPolicy(
        config.ip, config.ipv4_prefix, config.ipv6_prefix, config.strip_query, key
    )
    setting = policy.setting
    return setting if config.hash_key is not None else replace(setting, key_id=0)


KEEP_ALL = Setting()  # what every lake stored before [privacy] existed (code 0)


def _strip_id(names: Iterable[str]) -> int:
    names = sorted({n.lower() for n in names})
    if not names:
        return 0
    digest = hashlib.sha256("\0".join(names).encode()).digest()
    return int.from_bytes(digest[:2], "big") or 1


@dataclass(frozen=True)
class PrivacyPolicy:
    """The ``[privacy]`` setting, ready to apply: built once (:meth:`from_config`) and
    passed down. :data:`KEEP` changes nothing."""

    ip: IpMode = "keep"
    ipv4_prefix: int = 24
    ipv6_prefix: int = 64
    strip_query: tuple[str, ...] = ()
    key: bytes = field(default=b"", repr=False)
    # The configured key (hash_key_env) whatever ``ip`` is: it hashes the addresses
    # ``cdnlake forget`` records; empty: the storage root's own key (lake/zone/erasure_key.py).
    erasure_key: bytes = field(default=b"", repr=False)
    _names: frozenset[str] = field(init=False, repr=False, compare=False)
    _mac: hmac.HMAC = field(init=False, repr=False, compare=False)
    _assigned: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = {n.lower() for n in self.strip_query}
        if names:
            names |= set(SIGNING_NAMES)
        object.__setattr__(self, "_names", frozenset(names))
        # A listed name given a value, anywhere in a decoded, lower-cased piece of URL.
        listed = "|".join(re.escape(n) for n in sorted(names)) or "(?!)"
        object.__setattr__(self, "_assigned", re.compile(rf"(?:^|[/?&;#=])(?:{listed})="))
        object.__setattr__(self, "_mac", hmac.new(self.key, digestmod=hashlib.sha256))
        if self.ip == "hash" and not self.key:
            raise ValueError("a hash policy needs a key")

    @classmethod
    def from_config(cls, config: PrivacyConfig) -> PrivacyPolicy:
        """The policy of ``[privacy]``; ConfigError naming the variable when ``ip =
        "hash"`` and the key's variable is unset or empty."""
        key = b""
        if config.ip == "hash":
            secret: Secret = config.require_hash_key()
            key = secret.reveal().encode()
        configured = config.hash_key.reveal().encode() if config.hash_key is not None else b""
        return cls(
            config.ip,
            config.ipv4_prefix,
            config.ipv6_prefix,
            config.strip_query,
            key,
            erasure_key=configured,
        )

    # -- what the policy is -------------------------------------------------------------
    @property
    def changes_nothing(self) -> bool:
        return self.ip == "keep" and not self._names

    @functools.cached_property
    def setting(self) -> Setting:
        key_id = 0
        if self.ip == "hash":
            digest = hmac.new(self.key, _FINGERPRINT, hashlib.sha256).digest()
            key_id = int.from_bytes(digest[:4], "big") & 0x3FFFFFFF
        v4, v6 = (self.ipv4_prefix, self.ipv6_prefix) if self.ip == "truncate" else (0, 0)
        strip_id = _strip_id(self.strip_query)
        return Setting(self.ip, v4, v6, strip_id, key_id, url_rules=int(strip_id != 0))

    def describe(self) -> str:
        """One line for ``status`` and the report."""
        ip = {
            "keep": "client addresses kept as received",
            "truncate": (
                f"client addresses truncated to /{self.ipv4_prefix} (IPv4) "
                f"and /{self.ipv6_prefix} (IPv6)"
            ),
            "drop": "client addresses not stored",
            "hash": "client addresses stored as keyed hashes (HMAC-SHA256)",
        }[self.ip]
        query = (
            "query parameters " + ", ".join(self.strip_query) + " removed from URLs"
            if self.strip_query
            else "URLs kept whole"
        )
        return f"{ip}; {query}"

    # -- one address ----------------------------------------------------------------------
    def stored_as(self, text: str | None) -> str | None:
        """What ``text`` (a ``remote_ip`` as received) is stored as under this policy:
        also what ``forget --ip`` looks for."""
        if text is None or self.ip == "keep":
            return text
        if self.ip == "drop":
            return None
        if self.ip == "hash" and _HASHED.match(text):
            return text  # a hash stored earlier
        packed = packed_address(text)
        if packed is None:
            return None
        if not any(packed):  # the provider's "Drop": nothing left to protect
            return address_text(packed)
        if self.ip == "truncate":
            bits = 8 * len(packed)
            prefix = self.ipv4_prefix if bits == 32 else self.ipv6_prefix
            network = int.from_bytes(packed, "big") >> (bits - prefix) << (bits - prefix)
            return address_text(network.to_bytes(len(packed), "big"))
        mac = self._mac.copy()
        mac.update(packed)
        return mac.hexdigest()

    # -- columns ------------------------------------------------------------------------
    def addresses(self, column: pl.Series) -> pl.Series:
        """A ``remote_ip`` column as stored (:meth:`stored_as` of each value): IPv4
        truncation in polars' kernels, the rest once per distinct value."""
        import polars as pl

        if self.ip == "keep" or column.len() == 0:
            return column
        if self.ip == "drop":
            return pl.Series(column.name, [None] * column.len(), pl.String)
        if self.ip == "truncate" and self.ipv4_prefix % 8 == 0:
            v4 = column.str.contains(IPV4_PATTERN).fill_null(False)
            if v4.all():
                return self._truncate_v4(column)
            if not v4.any():
                return _by_distinct(column, self.stored_as)
            others = _by_distinct(column.clone().set(v4, None), self.stored_as)
            return self._truncate_v4(column).zip_with(v4, others)
        return _by_distinct(column, self.stored_as)

    def _truncate_v4(self, column: pl.Series) -> pl.Series:
        """Dotted quads truncated to ``ipv4_prefix``, a multiple of 8, by one regex
        replacement (other values: anything; the caller keeps the dotted quads' alone)."""
        whole = self.ipv4_prefix // 8
        if whole == 4:
            return column
        kept = r"\.".join([r"(\d+)"] * whole)
        dropped = r"\.".join([r"\d+"] * (4 - whole))
        pattern = f"^{kept}\\.{dropped}$" if whole else f"^{dropped}$"
        zeros = ".".join(["0"] * (4 - whole))
        keep = ".".join(f"${{{i + 1}}}" for i in range(whole))
        return column.str.replace(pattern, f"{keep}.{zeros}" if whole else zeros)

    def urls(self, column: pl.Series) -> pl.Series:
        """A ``url``, ``path`` or ``referer`` column as :meth:`strip_url` leaves each value:
        rows whose query string may hold a listed name plainly by regex replacements; the
        rows that may hold anything else (a ``%``, a ``;``, a ``=`` before the query, a
        fragment, a bearer token), or still a listed name after them, one by one."""
        import polars as pl

        if not self._names or column.len() == 0:
            return column
        names = "|".join(re.escape(n) for n in sorted(self._names))
        slow = column.str.contains(r"(?i)[%;#]|^[^?]*=|eyj|hs256-").fill_null(False)
        fast = column.str.contains(rf"(?i)\?.*(?:{names})").fill_null(False) & ~slow
        if not (slow.any() or fast.any()):
            return column
        out = column.clone()
        if fast.any():
            rows = fast.arg_true()
            picked = column.gather(rows)
            stripped = self._strip_fast(picked, picked.str.extract(r"^[^?]*\?(.*)$", 1), names)
            out = out.scatter(rows, stripped)
            # A listed name left (inside another parameter's value): one by one as well.
            slow = slow | (fast & out.str.contains(rf"(?i)[/?&=](?:{names})=").fill_null(False))
        if slow.any():
            rows = slow.arg_true()
            treated = [self.strip_url(url) for url in column.gather(rows).to_list()]
            out = out.scatter(rows, pl.Series(treated, dtype=pl.String))
        return out

    def _strip_fast(self, urls: pl.Series, query: pl.Series, names: str) -> pl.Series:
        """URLs (without a fragment) less the parameters named plainly in their query
        strings ``query``."""
        import polars as pl

        # Between "&"s, a listed name alone or with its "=value" goes; one pass removes
        # every other one of a run of them (a match takes the "&" the next one needs).
        param = rf"(?i)&(?:{names})(?:=[^&]*)?&"
        padded = "&" + query + "&"
        while True:
            fewer = padded.str.replace_all(param, "&")
            if fewer.equals(padded):
                break
            padded = fewer
        kept = padded.str.strip_prefix("&").str.strip_suffix("&")
        changed = kept.str.len_bytes() < query.str.len_bytes()
        frame = pl.DataFrame({"url": urls, "kept": kept})
        url = pl.col("url")
        base = url.str.extract(r"^([^?]*)", 1)
        new = pl.concat_str(
            base,
            pl.when(pl.col("kept") != "").then("?" + pl.col("kept")).otherwise(pl.lit("")),
        )
        out = frame.select(pl.when(changed).then(new).otherwise(url).alias(urls.name))
        return out.to_series()

    def strip_url(self, url: str | None) -> str | None:
        """One URL (or path, or URL-ish run of text) as it may be stored, the reference
        :meth:`urls` keeps to. Query (and ``;``) parameters of a listed name go (names
        percent-decoded, any case); a path segment that is a directory token (its first
        parameter of a listed name, e.g. ``bcdn_token=...&expires=...&token_path=...``)
        goes whole, the rest of the path stays; a JWT or ``HS256-`` token anywhere becomes
        :data:`MARKER`. Fails closed: a parameter that, decoded, still assigns a listed
        name (a URL inside a value) goes; such a path segment or fragment, or one that
        does not decode, becomes :data:`MARKER`."""
        if url is None or not self._names:
            return url
        head, hash_mark, fragment = url.partition("#")
        base, question, query = head.partition("?")
        segments = [self._path_segment(s) for s in base.split("/")]
        stored = "/".join(s for s in segments if s is not None)
        if base.startswith("/") and not stored:
            stored = "/"  # a path of nothing but a directory token: the root
        if question:
            kept = self._strip_params(query)
            if kept is None:
                stored += "?" + query
            elif kept:
                stored += "?" + kept
        if hash_mark:
            fragment = _BEARER.sub(MARKER, fragment)
            stored += "#" + (MARKER if self._holds_token(fragment) else fragment)
        return stored

    def _path_segment(self, segment: str) -> str | None:
        """One segment of a path as it may be stored (None: dropped, with its slash)."""
        if not _MAY_SIGN.search(segment):
            return segment
        decoded = _decoded(segment)
        if decoded is None:
            return MARKER
        name, eq, _ = _SEPARATORS.split(decoded, 1)[0].partition("=")
        if eq and name.lower() in self._names:
            return None  # a directory token: the signing segment goes whole
        kept = self._strip_params(segment)  # its ";" (matrix) parameters
        segment = segment if kept is None else kept
        return MARKER if not segment or self._holds_token(segment) else segment

    def _strip_params(self, query: str) -> str | None:
        """The query (without its ``?``) less the listed parameters, ``&`` or ``;``
        separated, and bearer tokens as :data:`MARKER`; None if nothing changed."""
        parts = _SEPARATORS.split(query)
        kept: list[str] = []
        changed = False
        for i in range(0, len(parts), 2):
            part = parts[i]
            name = unquote(part.partition("=")[0]).lower()
            marked = _BEARER.sub(MARKER, part)
            if name in self._names or self._holds_token(marked):
                changed = True
                continue
            changed |= marked != part
            kept += [parts[i - 1], marked] if i else ["", marked]
        if not changed:
            return None
        if kept:
            kept[0] = ""  # the first one kept has no separator before it
        return "".join(kept)

    def _holds_token(self, piece: str) -> bool:
        """Whether ``piece`` of a URL, percent-decoded, still assigns a listed name or
        holds a bearer token, or does not decode (fails closed)."""
        decoded = _decoded(piece)
        if decoded is None:
            return True
        return bool(self._assigned.search(decoded.lower()) or _BEARER.search(decoded))

    def rows(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Rows of a table as they may be stored: ``remote_ip``, ``url``, ``path`` (a
        directory token is in the path), ``referer`` and a
        shield event's ``log`` text and ``labels_json`` (the provider's labels, free-form),
        where the frame has them."""
        if self.changes_nothing or frame.height == 0:
            return frame
        changed: list[pl.Series] = []
        if "remote_ip" in frame.columns and self.ip != "keep":
            changed.append(self.addresses(frame["remote_ip"]))
        for name in ("url", "path", "referer"):
            if name in frame.columns and self._names:
                changed.append(self.urls(frame[name]))
        for name in ("log", "labels_json"):  # a shield event's free text and its labels
            if name in frame.columns:
                changed.append(self.texts(frame[name]))
        return frame.with_columns(changed) if changed else frame

    # -- raw text -------------------------------------------------------------------------
    def texts(self, column: pl.Series) -> pl.Series:
        """A column of raw text (a rejected line, a shield event's log) as it may be
        stored: :meth:`scrub_text` once per distinct value."""
        if self.changes_nothing or column.len() == 0:
            return column
        return _by_distinct(column, self.scrub_text)

    def scrub_text(self, text: str | None) -> str | None:
        """A raw line or record as it may be stored: a v2 record's ``remoteIp`` and
        ``url``, a v1 line's fields 6 and 8 treated as the columns are; then, whatever
        the text, every address-looking token and every URL-ish run (one holding a ``=``,
        ``%``, ``;`` or a bearer token) as :meth:`strip_url` leaves it."""
        if text is None or self.changes_nothing:
            return text
        text = self._v2_record(text) or self._v1_line(text) or text
        if self._names:
            text = _URLISH_IN_TEXT.sub(self._strip_url_match, text)
        if self.ip != "keep":
            text = self._scrub_addresses(text)
        return text

    def _strip_url_match(self, match: re.Match[str]) -> str:
        return self.strip_url(match[0]) or ""

    def _scrub_addresses(self, text: str) -> str:
        """Every :func:`address_tokens` run of ``text`` as its address is stored, ``-``
        where it is not or where the run does not parse (fails closed)."""
        pieces: list[str] = []
        last = 0
        for token in address_tokens(text):
            stored = None if token.address is None else self.stored_as(token.address.compressed)
            pieces += [text[last : token.start], stored or "-"]
            last = token.end
        return "".join(pieces) + text[last:] if pieces else text

    def _v2_record(self, text: str) -> str | None:
        if not text.lstrip().startswith("{"):
            return None
        try:
            record = json.loads(text)
        except ValueError:
            return None
        if not isinstance(record, dict):
            return None
        before = dict(record)
        for name in ("remoteIp", "RemoteIp"):  # the v2 spelling, the management API's
            if isinstance(record.get(name), str):
                record[name] = self.stored_as(record[name])
        for name in ("url", "Url", "path", "Path", "referer", "Referer"):
            if isinstance(record.get(name), str):
                record[name] = self.strip_url(record[name])
        if record == before:
            return None  # the text as it came (the rest of the scrub still reads it)
        return json.dumps(record, ensure_ascii=False, separators=(",", ":"))

    def _v1_line(self, text: str) -> str | None:
        fields = text.split("|")
        if len(fields) <= V1_URL_FIELD:
            return None
        if self.ip != "keep":
            fields[V1_IP_FIELD] = self.stored_as(fields[V1_IP_FIELD]) or "-"
        for i in (V1_URL_FIELD, V1_REFERER_FIELD):
            fields[i] = self.strip_url(fields[i]) or ""
        return "|".join(fields)


KEEP = PrivacyPolicy()  # stores everything as received: the lake before [privacy]


def _decoded(text: str) -> str | None:
    """``text`` percent-decoded until nothing changes (a value encoded twice holds what
    it holds once), or None when that takes more than :data:`_DECODINGS` rounds."""
    for _ in range(_DECODINGS + 1):
        decoded = unquote(text)
        if decoded == text:
            return text
        text = decoded
    return None


def _by_distinct(column: pl.Series, treat: Callable[[str | None], str | None]) -> pl.Series:
    """``treat`` of each value, computed once per distinct value."""
    import polars as pl

    distinct = column.unique().drop_nulls()
    if distinct.len() == 0:
        return column
    treated = pl.Series([treat(value) for value in distinct.to_list()], dtype=pl.String)
    return column.replace_strict(distinct, treated, default=None, return_dtype=pl.String)
