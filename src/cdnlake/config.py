"""Typed configuration, read once at the entry point and passed down.

Lookup order of the file: ``--config PATH``, ``$CDNLAKE_CONFIG``, ``./config.toml``.
Any scalar key can be overridden by ``CDNLAKE_<SECTION>_<KEY>`` (for example
``CDNLAKE_STORAGE_ROOT`` or ``CDNLAKE_INGEST_LAG_SECONDS``). Secrets are never read from
the file: the access key comes from the environment variable that ``api.access_key_env``
names.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdnlake.errors import ConfigError

DEFAULT_BASE_URL = "https://api.example-cdn.net"
DEFAULT_VIDEO_URL = "https://video.example-cdn.net"
DEFAULT_LOGGING_URL = "https://logging.example-cdn.net"
DEFAULT_ACCESS_KEY_ENV = "CDNLAKE_ACCESS_KEY"
DEFAULT_BEARER_TOKEN_ENV = "CDNLAKE_LOGGING_TOKEN"
DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_LAG_SECONDS = 300
DEFAULT_OVERLAP_SECONDS = 600
DEFAULT_PAGE_SIZE = 10_000
DEFAULT_REQUESTS_PER_WINDOW = 30
DEFAULT_WINDOW_SECONDS = 10.0
DEFAULT_MAX_WINDOW_SECONDS = 6 * 3600
DEFAULT_POLL_SECONDS = 60
DEFAULT_REPORT_AT = "00:30"
DEFAULT_HIT_STATUSES = ("HIT", "STALE", "UPDATING", "REVALIDATED")
RETENTION_SECONDS = 72 * 3600

SECRET_KEY_NAMES = {
    "access_key",
    "key",
    "token",
    "bearer_token",
    "password",
    "secret",
    "dsn",
    "postgres_dsn",
}


class Secret:
    """A credential that never shows itself in a repr, a log line or an error."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def required_secret(secret: Secret | None, key: str, variable: str, what: str) -> Secret:
    """The secret, or the one-line error naming the key and the variable that lacks it."""
    if secret is None:
        raise ConfigError(
            f"{key}: environment variable {variable} is not set (it must hold {what})"
        )
    return secret


@dataclass(frozen=True)
class ApiConfig:
    base_url: str = DEFAULT_BASE_URL
    video_url: str = DEFAULT_VIDEO_URL
    logging_url: str = DEFAULT_LOGGING_URL
    access_key_env: str = DEFAULT_ACCESS_KEY_ENV
    bearer_token_env: str = DEFAULT_BEARER_TOKEN_ENV
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    retry_attempts: int = 8
    retry_max_seconds: float = 120.0
    # Resolved from the environment at load time; never from the file.
    access_key: Secret | None = field(default=None, repr=False, compare=False)
    bearer_token: Secret | None = field(default=None, repr=False, compare=False)

    def require_access_key(self) -> Secret:
        return required_secret(
            self.access_key, "api.access_key_env", self.access_key_env, "the API access key"
        )


@dataclass(frozen=True)
class S3Config:
    """``[storage.s3]``: only read for an ``s3://`` lake. Credentials are never here: they
    come from the standard AWS environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)."""

    endpoint_url: str = ""  # "" = AWS; else any S3-compatible store
    region: str = "us-east-1"
    allow_http: bool = False  # true only for a plain-HTTP endpoint


@dataclass(frozen=True)
class StorageConfig:
    root: Path = Path("data")
    lake_uri: str = ""  # "" = <root>/lake; or s3://bucket/prefix
    s3: S3Config = field(default_factory=S3Config)

    @property
    def lake_location(self) -> str:
        """The lake's URI: a local path, or ``s3://bucket/prefix``."""
        return self.lake_uri or str(self.root / "lake")

    def storage_options(self) -> dict[str, str]:
        """What the Delta and object-store libraries need to reach the lake."""
        if not self.lake_location.startswith("s3://"):
            return {}
        options = {"AWS_REGION": self.s3.region}
        if self.s3.endpoint_url:
            options["AWS_ENDPOINT_URL"] = self.s3.endpoint_url
        if self.s3.allow_http:
            options["AWS_ALLOW_HTTP"] = "true"
        return options

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def work(self) -> Path:
        """Local scratch: zone locks and v1 downloads in flight (never the only copy)."""
        return self.root / "work"


@dataclass(frozen=True)
class IngestConfig:
    lag_seconds: int = DEFAULT_LAG_SECONDS
    overlap_seconds: int = DEFAULT_OVERLAP_SECONDS
    page_size: int = DEFAULT_PAGE_SIZE
    requests_per_window: int = DEFAULT_REQUESTS_PER_WINDOW
    window_seconds: float = DEFAULT_WINDOW_SECONDS
    max_window_seconds: int = DEFAULT_MAX_WINDOW_SECONDS
    flush_rows: int = 250_000
    concurrency: int = 8


@dataclass(frozen=True)
class ScheduleConfig:
    poll_seconds: int = DEFAULT_POLL_SECONDS
    report_at: str = DEFAULT_REPORT_AT
    maintain_at: str = "01:30"  # UTC time of the daily compaction/checkpoint/vacuum


@dataclass(frozen=True)
class LogConfig:
    level: str = "INFO"
    format: str = "text"  # "text" (for people) or "json" (one object per line)


@dataclass(frozen=True)
class MetricsConfig:
    """``[metrics]``: the daemon's /metrics and /healthz."""

    listen: str = ""  # "" = off; "127.0.0.1:9464"

    def address(self) -> tuple[str, int] | None:
        """``(host, port)``, or None when off."""
        if not self.listen:
            return None
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


@dataclass(frozen=True)
class StatusConfig:
    max_lag_seconds: int = 1800


@dataclass(frozen=True)
class ReportConfig:
    hit_statuses: tuple[str, ...] = DEFAULT_HIT_STATUSES
    formats: tuple[str, ...] = ("html", "csv", "json", "md")
    top_n: int = 10


@dataclass(frozen=True)
class CoordinationConfig:
    """``[coordination]``: several daemons share the zones through PostgreSQL."""

    postgres_dsn_env: str = ""  # NAME of the environment variable holding the DSN
    # Resolved from the environment at load time; never from the file.
    postgres_dsn: Secret | None = field(default=None, repr=False, compare=False)

    @property
    def enabled(self) -> bool:
        return bool(self.postgres_dsn_env)

    def require_dsn(self) -> Secret:
        return required_secret(
            self.postgres_dsn,
            "coordination.postgres_dsn_env",
            self.postgres_dsn_env,
            "the PostgreSQL DSN",
        )


@dataclass(frozen=True)
class EngineConfig:
    """``[engine]``: where ``--engine spark`` sends its queries."""

    spark_remote: str = ""  # Spark Connect address, e.g. "sc://spark-host:15002"


@dataclass(frozen=True)
class ZoneConfig:
    id: int
    name: str = ""
    source: str = "v2"

    @property
    def label(self) -> str:
        return f"{self.id} ({self.name})" if self.name else str(self.id)


@dataclass(frozen=True)
class ShieldZoneConfig:
    id: int
    name: str = ""


@dataclass(frozen=True)
class Config:
    api: ApiConfig = field(default_factory=ApiConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    log: LogConfig = field(default_factory=LogConfig)
    status: StatusConfig = field(default_factory=StatusConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    coordination: CoordinationConfig = field(default_factory=CoordinationConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    zones: tuple[ZoneConfig, ...] = ()
    shield_zones: tuple[ShieldZoneConfig, ...] = ()
    path: Path | None = None

    def zone(self, zone_id: int) -> ZoneConfig:
        for zone in self.zones:
            if zone.id == zone_id:
                return zone
        known = ", ".join(str(z.id) for z in self.zones) or "none"
        raise ConfigError(f"zones: pull zone {zone_id} is not configured (configured: {known})")

    def select_all_zones(
        self, ids: list[int] | None
    ) -> tuple[tuple[ZoneConfig, ...], tuple[ShieldZoneConfig, ...]]:
        """The pull and shield zones with these ids (all of both without ids).

        The two are numbered apart, so one id may name a zone of each kind: both are taken.
        """
        if not ids:
            return self.zones, self.shield_zones
        wanted = set(ids)
        known = {z.id for z in self.zones} | {z.id for z in self.shield_zones}
        for zone_id in ids:
            if zone_id not in known:
                pull = ", ".join(str(z.id) for z in self.zones) or "none"
                shield = ", ".join(str(z.id) for z in self.shield_zones) or "none"
                raise ConfigError(
                    f"zones: zone {zone_id} is not configured (pull zones: {pull}; "
                    f"shield zones: {shield})"
                )
        return (
            tuple(z for z in self.zones if z.id in wanted),
            tuple(z for z in self.shield_zones if z.id in wanted),
        )


SECTIONS: dict[str, type] = {
    "api": ApiConfig,
    "storage": StorageConfig,
    "ingest": IngestConfig,
    "schedule": ScheduleConfig,
    "log": LogConfig,
    "status": StatusConfig,
    "report": ReportConfig,
    "coordination": CoordinationConfig,
    "engine": EngineConfig,
    "metrics": MetricsConfig,
}
# Tables inside a section ([storage.s3]): (section, key) -> their class.
NESTED_SECTIONS: dict[str, dict[str, type]] = {"storage": {"s3": S3Config}}
LIST_SECTIONS: dict[str, type] = {"zones": ZoneConfig, "shield_zones": ShieldZoneConfig}
_RESOLVED_FIELDS = {"access_key", "bearer_token", "postgres_dsn"}


def find_config_path(explicit: str | os.PathLike[str] | None, env: dict[str, str]) -> Path:
    if explicit:
        return Path(explicit)
    if env.get("CDNLAKE_CONFIG"):
        return Path(env["CDNLAKE_CONFIG"])
    return Path("config.toml")


def load_config(
    path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None
) -> Config:
    """Read, validate and resolve the configuration; raise ConfigError naming the key."""
    env = dict(os.environ) if env is None else env
    cfg_path = find_config_path(path, env)
    try:
        raw = tomllib.loads(cfg_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config: file {cfg_path} not found (use --config PATH)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config: {cfg_path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config: cannot read {cfg_path}: {exc.strerror}") from None
    return build_config(raw, base_dir=cfg_path.resolve().parent, env=env, path=cfg_path)


def build_config(
    raw: dict[str, Any], *, base_dir: Path, env: dict[str, str], path: Path | None = None
) -> Config:
    sections: dict[str, Any] = {}
    for key, value in raw.items():
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{key}: must be a table ([{key}])")
            nested = {k: v for k, v in value.items() if k in NESTED_SECTIONS.get(key, {})}
            flat = {k: v for k, v in value.items() if k not in nested}
            sections[key] = _build_section(key, SECTIONS[key], flat, env)
            for sub, raw_sub in nested.items():
                sub_cls = NESTED_SECTIONS[key][sub]
                built = _build_section(f"{key}.{sub}", sub_cls, raw_sub, env)
                sections[key] = dataclasses.replace(sections[key], **{sub: built})
        elif key in LIST_SECTIONS:
            if not isinstance(value, list):
                raise ConfigError(f"{key}: must be an array of tables ([[{key}]])")
            sections[key] = tuple(
                _build_section(f"{key}[{i}]", LIST_SECTIONS[key], item, {})
                for i, item in enumerate(value)
            )
        else:
            raise ConfigError(f"{key}: unknown key in config file")
    for name, cls in SECTIONS.items():
        if name not in sections:
            sections[name] = _build_section(name, cls, {}, env)
    for name, subs in NESTED_SECTIONS.items():
        section = raw.get(name)
        given: dict[str, Any] = section if isinstance(section, dict) else {}
        for sub, sub_cls in subs.items():
            if sub not in given:  # defaults, with their environment overrides
                built = _build_section(f"{name}.{sub}", sub_cls, {}, env)
                sections[name] = dataclasses.replace(sections[name], **{sub: built})
    storage: StorageConfig = sections["storage"]
    root = storage.root if storage.root.is_absolute() else (base_dir / storage.root)
    lake_uri = storage.lake_uri
    if lake_uri and "://" not in lake_uri and not Path(lake_uri).is_absolute():
        lake_uri = str((base_dir / lake_uri).resolve())  # relative to the config file
    sections["storage"] = dataclasses.replace(storage, root=root.resolve(), lake_uri=lake_uri)
    api: ApiConfig = sections["api"]
    access = env.get(api.access_key_env)
    bearer = env.get(api.bearer_token_env)
    sections["api"] = dataclasses.replace(
        api,
        access_key=Secret(access) if access else None,
        bearer_token=Secret(bearer) if bearer else None,
    )
    coordination: CoordinationConfig = sections["coordination"]
    dsn = env.get(coordination.postgres_dsn_env) if coordination.postgres_dsn_env else None
    sections["coordination"] = dataclasses.replace(
        coordination, postgres_dsn=Secret(dsn) if dsn else None
    )
    config = Config(**sections, path=path)
    _check_environment(config, env)
    _validate(config)
    return config


# CDNLAKE_* variables that are not overrides of a config key.
OTHER_VARIABLES = {"CDNLAKE_CONFIG", "CDNLAKE_SQL_DIR"}


def _check_environment(config: Config, env: dict[str, str]) -> None:
    """A CDNLAKE_* variable that overrides nothing is a mistake, as an unknown key is."""
    known = OTHER_VARIABLES | {
        config.api.access_key_env,
        config.api.bearer_token_env,
        config.coordination.postgres_dsn_env,
    }
    every = {**SECTIONS}
    for section, subs in NESTED_SECTIONS.items():
        every.update({f"{section}.{sub}": cls for sub, cls in subs.items()})
    for section, cls in every.items():
        known |= {
            env_variable(section, f.name)
            for f in dataclasses.fields(cls)
            if f.name not in _RESOLVED_FIELDS
        }
    for name in sorted(env):
        if name.startswith("CDNLAKE_") and name not in known:
            raise ConfigError(
                f"{name}: unknown environment variable (overrides are "
                "CDNLAKE_<SECTION>_<KEY> for a key of config.toml, e.g. CDNLAKE_STORAGE_ROOT)"
            )


def _build_section(name: str, cls: type, values: Any, env: dict[str, str]) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"{name}: must be a table")
    hints = typing.get_type_hints(cls)
    nested = NESTED_SECTIONS.get(name, {})
    fields = {
        f.name: f
        for f in dataclasses.fields(cls)
        if f.name not in _RESOLVED_FIELDS and f.name not in nested
    }
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields:
            if key in SECRET_KEY_NAMES or key in _RESOLVED_FIELDS:
                named_by = (
                    "coordination.postgres_dsn_env"
                    if name == "coordination"
                    else "api.access_key_env"
                )
                raise ConfigError(
                    f"{name}.{key}: secrets must not be written in the config file; "
                    f"put the value in the environment variable named by {named_by}"
                )
            raise ConfigError(f"{name}.{key}: unknown key")
        kwargs[key] = _coerce(f"{name}.{key}", hints[key], value)
    for key in fields:
        env_name = env_variable(name, key)
        if env_name in env:
            kwargs[key] = _coerce_text(f"{env_name}", hints[key], env[env_name])
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
        and f.name not in kwargs
    ]
    if missing:
        raise ConfigError(f"{name}.{missing[0]}: required key is missing")
    return cls(**kwargs)


def env_variable(section: str, key: str) -> str:
    """``CDNLAKE_STORAGE_S3_REGION`` for ``[storage.s3] region``."""
    return f"CDNLAKE_{section.replace('.', '_').upper()}_{key.upper()}"


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is tuple:
        return f"array of {_type_name(typing.get_args(tp)[0])}"
    if tp is Path:
        return "string (a path)"
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(tp, str(tp))


def _coerce(key: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _coerce(key, args[0], value)
    if origin is tuple:
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected {_type_name(tp)}, got {type(value).__name__}")
        item_tp = typing.get_args(tp)[0]
        return tuple(_coerce(key, item_tp, v) for v in value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected boolean, got {type(value).__name__}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected integer, got {type(value).__name__}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected number, got {type(value).__name__}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected string, got {type(value).__name__}")
        return value
    if tp is Path:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key}: expected a non-empty path string")
        return Path(value)
    raise ConfigError(f"{key}: unsupported type")  # pragma: no cover


def _coerce_text(key: str, tp: Any, text: str) -> Any:
    """Environment overrides arrive as text; convert to the key's type."""
    origin = typing.get_origin(tp)
    try:
        if origin is tuple:
            return tuple(part.strip() for part in text.split(",") if part.strip())
        if tp is bool:
            if text.lower() not in {"1", "0", "true", "false", "yes", "no"}:
                raise ValueError
            return text.lower() in {"1", "true", "yes"}
        if tp is int:
            return int(text)
        if tp is float:
            return float(text)
        if tp is Path:
            return Path(text)
        return text
    except ValueError:
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {text!r}") from None


_REPORT_AT = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
LOG_LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
LOG_FORMATS = {"text", "json"}
REPORT_FORMATS = {"html", "csv", "json", "md"}


def _validate(config: Config) -> None:
    for key in ("base_url", "video_url", "logging_url"):
        url = getattr(config.api, key)
        if not re.match(r"^https?://[^/\s]+", url):
            raise ConfigError(f"api.{key}: expected an http(s) URL, got {url!r}")
    lake_uri = config.storage.lake_uri
    if "://" in lake_uri and not re.match(r"^s3://[^/\s]+", lake_uri):
        raise ConfigError(
            f"storage.lake_uri: expected a local path or s3://bucket/prefix, got {lake_uri!r}"
        )
    if config.api.timeout_seconds <= 0:
        raise ConfigError("api.timeout_seconds: must be positive")
    if config.api.retry_attempts < 1:
        raise ConfigError("api.retry_attempts: must be at least 1")
    ing = config.ingest
    if not 1 <= ing.page_size <= 10_000:
        raise ConfigError(f"ingest.page_size: must be 1..10000, got {ing.page_size}")
    if ing.lag_seconds < 0 or ing.overlap_seconds < 0:
        raise ConfigError("ingest.lag_seconds / ingest.overlap_seconds: must not be negative")
    if ing.requests_per_window < 1:
        raise ConfigError("ingest.requests_per_window: must be at least 1")
    if ing.window_seconds <= 0:
        raise ConfigError("ingest.window_seconds: must be positive")
    if not 60 <= ing.max_window_seconds <= RETENTION_SECONDS:
        raise ConfigError("ingest.max_window_seconds: must be 60..259200")
    if ing.concurrency < 1 or ing.flush_rows < 1:
        raise ConfigError("ingest.concurrency / ingest.flush_rows: must be at least 1")
    if config.schedule.poll_seconds < 1:
        raise ConfigError("schedule.poll_seconds: must be at least 1")
    if not _REPORT_AT.match(config.schedule.report_at):
        raise ConfigError(
            f"schedule.report_at: expected HH:MM (UTC), got {config.schedule.report_at!r}"
        )
    if not _REPORT_AT.match(config.schedule.maintain_at):
        raise ConfigError(
            f"schedule.maintain_at: expected HH:MM (UTC), got {config.schedule.maintain_at!r}"
        )
    if config.log.format not in LOG_FORMATS:
        raise ConfigError(f"log.format: expected 'text' or 'json', got {config.log.format!r}")
    listen = config.metrics.listen
    if listen and not re.match(r"^(\[[0-9a-fA-F:]+\]|[^:\s]+):\d{1,5}$", listen):
        raise ConfigError(
            f"metrics.listen: expected HOST:PORT, e.g. 127.0.0.1:9464, got {listen!r}"
        )
    if listen and not 0 <= int(listen.rpartition(":")[2]) <= 65535:
        raise ConfigError(f"metrics.listen: port must be 0..65535, got {listen!r}")
    if config.log.level.upper() not in LOG_LEVELS:
        raise ConfigError(f"log.level: expected one of {sorted(LOG_LEVELS)}")
    bad = set(config.report.formats) - REPORT_FORMATS
    if bad:
        raise ConfigError(f"report.formats: unknown format {sorted(bad)[0]!r}")
    if config.report.top_n < 1:
        raise ConfigError(f"report.top_n: must be at least 1, got {config.report.top_n}")
    if not config.report.hit_statuses:
        raise ConfigError("report.hit_statuses: must name at least one cache status")
    dsn_env = config.coordination.postgres_dsn_env
    if dsn_env and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", dsn_env):
        raise ConfigError(
            "coordination.postgres_dsn_env: expected the NAME of an environment variable, "
            f"got {dsn_env!r}"
        )
    remote = config.engine.spark_remote
    if remote and not remote.startswith("sc://"):
        raise ConfigError(f"engine.spark_remote: expected sc://host:port, got {remote!r}")
    seen: set[int] = set()
    for i, zone in enumerate(config.zones):
        if zone.id <= 0:
            raise ConfigError(f"zones[{i}].id: must be a positive integer")
        if zone.id in seen:
            raise ConfigError(f"zones[{i}].id: zone {zone.id} is configured twice")
        seen.add(zone.id)
        if zone.source not in ("v1", "v2"):
            raise ConfigError(f"zones[{i}].source: expected 'v1' or 'v2', got {zone.source!r}")
    for i, shield in enumerate(config.shield_zones):
        if shield.id <= 0:
            raise ConfigError(f"shield_zones[{i}].id: must be a positive integer")
