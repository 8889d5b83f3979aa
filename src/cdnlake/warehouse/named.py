"""Named queries: one ``.sql`` file each in ``sql/`` (and the user's own in
``$CDNLAKE_SQL_DIR``), parameters in its header.

Header format (comment lines at the top of the file)::

    -- answers: What share of requests and bytes came from cache, per hour?
    -- param: zone BIGINT = NULL      pull zone id (NULL: all zones)
    -- param: day DATE                UTC day (required)
    -- param: hit_statuses VARCHAR[] = ['HIT','STALE','UPDATING','REVALIDATED']
    -- param: dimension VARCHAR = hour {hour|edge|country|host}   allowed values in braces

The body uses ``$name`` placeholders; values are always bound, never spliced in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime
from importlib.resources.abc import Traversable
from typing import Any

from cdnlake.errors import ConfigError, UsageError
from cdnlake.sqlfiles import USER_SQL_VARIABLE, shipped_dir, user_dir

_PARAM = re.compile(
    r"^--\s*param:\s*(?P<name>[a-z_][a-z0-9_]*)\s+(?P<type>[A-Z]+(?:\[\])?)"
    r"(?:\s*=\s*(?P<default>[^\s{]+))?\s*(?:\{(?P<choices>[^}]*)\})?\s*(?P<doc>.*)$"
)
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: str | None
    doc: str
    choices: tuple[str, ...] = ()

    @property
    def required(self) -> bool:
        return self.default is None

    def convert(self, text: str | None) -> Any:
        """Text from the command line (or the default) to a Python value to bind."""
        raw = self.default if text is None else text
        if raw is None:
            raise UsageError(f"--param {self.name}: required ({self.type}) - {self.doc}")
        if raw.upper() == "NULL":
            return None
        if self.choices and raw not in self.choices:
            raise UsageError(
                f"--param {self.name}: must be one of {', '.join(self.choices)}, got {raw!r}"
            )
        try:
            if self.type == "BIGINT" or self.type == "INTEGER":
                # every whole-number parameter is a zone id or a count of rows
                if not raw.strip().isdigit() or int(raw) < 1:
                    raise ValueError
                return int(raw)
            if self.type == "DOUBLE":
                return float(raw)
            if self.type == "DATE":
                return date.fromisoformat(raw)
            if self.type == "TIMESTAMPTZ":
                return datetime.fromisoformat(raw.replace("Z", "+00:00"))
            if self.type == "VARCHAR[]":
                items = raw.strip("[]").split(",")
                return [i.strip().strip("'\"") for i in items if i.strip()]
            if self.type == "VARCHAR":
                return raw
        except ValueError:
            whole = self.type in ("BIGINT", "INTEGER")
            wanted = f"{self.type} (a whole number >= 1)" if whole else self.type
            raise UsageError(f"--param {self.name}: expected {wanted}, got {raw!r}") from None
        raise UsageError(f"{self.name}: unsupported parameter type {self.type}")


@dataclass(frozen=True)
class NamedQuery:
    name: str
    path: Traversable | None  # None: not a file of the named queries
    answers: str
    params: list[Param] = field(default_factory=list)
    sql: str = ""

    def bind(self, given: dict[str, str | None]) -> dict[str, Any]:
        known = {p.name for p in self.params}
        unknown = sorted(set(given) - known)
        if unknown:
            raise UsageError(
                f"--param {unknown[0]}: query {self.name} has no such parameter "
                f"(it takes: {', '.join(sorted(known)) or 'none'})"
            )
        bound = {p.name: p.convert(given.get(p.name)) for p in self.params}
        first, last = bound.get("from_day"), bound.get("to_day")
        if first is not None and last is not None and first > last:
            raise UsageError(f"--param from_day: {first} is after to_day {last}")
        if {"day", "from_day", "to_day"} <= known:  # a day, or a range of days
            if bound["day"] is not None and (first is not None or last is not None):
                raise UsageError("--param day: give day, or from_day and to_day, not both")
            if bound["day"] is None and (first is None or last is None):
                raise UsageError(
                    f"--param day: required (DATE), or from_day and to_day - query {self.name}"
                )
        return bound

    def slice_params(self) -> list[str]:
        """The slice parameters (:data:`SLICE_PARAMS`) this query takes."""
        known = {p.name for p in self.params}
        return [name for name in SLICE_PARAMS if name in known]

    def signature(self) -> str:
        parts = []
        for p in self.params:
            parts.append(f"{p.name}:{p.type}" + ("" if p.required else f"={p.default}"))
        return " ".join(parts)


def parse_named(path: Traversable) -> NamedQuery:
    return parse_text(path.name.removesuffix(".sql"), path.read_text(encoding="utf-8"), path)


def parse_text(name: str, text: str, path: Traversable | None = None) -> NamedQuery:
    """A query from its text, parameters from its header (an internal statement too)."""
    answers: list[str] = []
    params: list[Param] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        match = _PARAM.match(line)
        if match:
            choices = tuple(c.strip() for c in (match["choices"] or "").split("|") if c.strip())
            params.append(
                Param(match["name"], match["type"], match["default"], match["doc"].strip(), choices)
            )
        elif line.lower().startswith("-- answers:"):
            answers.append(line.split(":", 1)[1].strip())
    return NamedQuery(name, path, " ".join(answers), params, text)


def _sql_files(directory: Traversable) -> dict[str, Traversable]:
    return {
        p.name.removesuffix(".sql"): p
        for p in directory.iterdir()
        if p.name.endswith(".sql") and p.is_file()
    }


def named_files(directory: Traversable | None = None) -> dict[str, Traversable]:
    """Each named query's file by name: those in ``directory``, else the shipped ones with
    the user's own (``$CDNLAKE_SQL_DIR``) added over them."""
    if directory is not None:
        return {n: p for n, p in _sql_files(directory).items() if _NAME.match(n)}
    found = {n: p for n, p in _sql_files(shipped_dir()).items() if _NAME.match(n)}
    mine = user_dir()
    if mine is not None:
        for name, path in _sql_files(mine).items():
            if not _NAME.match(name):
                raise ConfigError(
                    f"{USER_SQL_VARIABLE}: {path} is not a usable query name (lower-case "
                    "letters, digits and _, starting with a letter)"
                )
            found[name] = path
    return found


def list_named(directory: Traversable | None = None) -> list[NamedQuery]:
    return [parse_named(p) for _, p in sorted(named_files(directory).items())]


def get_named(name: str, directory: Traversable | None = None) -> NamedQuery:
    if not _NAME.match(name):
        raise UsageError(f"--query: bad query name {name!r}")
    known = named_files(directory)
    if name not in known:
        raise UsageError(f"--query: no named query {name!r} (known: {', '.join(sorted(known))})")
    return parse_named(known[name])


# The slices every report query takes (``--host``, ``--path-prefix``...): parameter names,
# in the order a slice is named.
SLICE_PARAMS = ("host", "path_prefix", "country", "status_class", "cache_status")
_HOST = re.compile(r"[a-z0-9.-]+(?::[0-9]+)?")
_CLASS = re.compile(r"[1-5]xx")
_COUNTRY = re.compile(r"[A-Z]{2}|-")
_CACHE = re.compile(r"[A-Z_]+|-")


@dataclass(frozen=True)
class Slice:
    """A part of the traffic a report or named query covers: each field None (all) or the
    one value its rows must have; fields combine (AND). Values are bound parameters."""

    host: str | None = None
    path_prefix: str | None = None
    country: str | None = None
    status_class: str | None = None
    cache_status: str | None = None

    @classmethod
    def parse(
        cls,
        *,
        host: str | None = None,
        path_prefix: str | None = None,
        country: str | None = None,
        status_class: str | None = None,
        cache_status: str | None = None,
    ) -> Slice:
        """From the command line's words: checked and spelt as the lake stores them (a
        host in lower case, a country and a cache status in upper case, ``5xx``)."""

        def check(
            option: str, value: str | None, pattern: re.Pattern[str], want: str
        ) -> str | None:
            if value is None:
                return None
            if not pattern.fullmatch(value):
                raise UsageError(f"--{option}: expected {want}, got {value!r}")
            return value

        if path_prefix is not None and not path_prefix.startswith("/"):
            raise UsageError(f"--path-prefix: expected a path starting with /, got {path_prefix!r}")
        return cls(
            host=check("host", host and host.strip().lower(), _HOST, "a host name"),
            path_prefix=path_prefix,
            country=check(
                "country",
                country and country.strip().upper(),
                _COUNTRY,
                'a two-letter country code (or "-": unknown)',
            ),
            status_class=check(
                "status-class",
                status_class and status_class.strip().lower(),
                _CLASS,
                "a status class, 1xx to 5xx",
            ),
            cache_status=check(
                "cache-status",
                cache_status and cache_status.strip().upper(),
                _CACHE,
                "a cache status (HIT, MISS, ...)",
            ),
        )

    def params(self) -> dict[str, str]:
        """The slice as parameter texts (only the fields set)."""
        return {n: v for n in SLICE_PARAMS if (v := getattr(self, n)) is not None}

    def __bool__(self) -> bool:
        return bool(self.params())

    def describe(self) -> str:
        """In words, for a title: ``host cdn.example.com, paths /img/, 5xx, MISS``."""
        words = {
            "host": "host {}",
            "path_prefix": "paths {}*",
            "country": "country {}",
            "status_class": "{} responses",
            "cache_status": "cache {}",
        }
        return ", ".join(words[n].format(v) for n, v in self.params().items())

    def slug(self) -> str:
        """In a file name: ``host-cdn.example.com_path-img_5xx_miss`` (letters, digits,
        dots and hyphens only)."""
        parts = []
        for name, value in self.params().items():
            text = re.sub(r"[^a-z0-9.]+", "-", value.lower()).strip("-") or "root"
            prefix = {"host": "host-", "path_prefix": "path-", "country": "country-"}
            parts.append(prefix.get(name, "") + text)
        return "_".join(parts)


def with_slice(
    query: NamedQuery, given: dict[str, str | None], piece: Slice
) -> dict[str, str | None]:
    """``given`` (--param) with the slice's parameters added; one line naming what is
    wrong when the query takes no such parameter or both name it."""
    for name in piece.params():
        if name not in {p.name for p in query.params}:
            option = "--" + name.replace("_", "-")
            raise UsageError(
                f"{option}: query {query.name} takes no {name} (it cannot be sliced so)"
            )
        if name in given:
            raise UsageError(f"--param {name} and --{name.replace('_', '-')}: give one of them")
    return {**given, **piece.params()}


def parse_params(pairs: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--param: expected KEY=VALUE, got {pair!r}")
        if key.strip() in out:
            raise UsageError(f"--param {key.strip()} given twice: give it once")
        out[key.strip()] = value
    return out
