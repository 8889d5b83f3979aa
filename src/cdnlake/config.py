"""Typed configuration, read once at the entry point and passed down.

Lookup order of the file: ``--config PATH``, ``$CDNLAKE_CONFIG``, ``./config.toml``.
Any key of a table can be overridden by ``CDNLAKE_<SECTION>_<KEY>`` (for example
``CDNLAKE_STORAGE_ROOT`` or ``CDNLAKE_INGEST_LAG_SECONDS``); the overrides are merged into
the file's tables before one msgspec conversion checks types, constraints and unknown keys.
Secrets are never read from the file: the access key comes from the environment variable
that ``api.access_key_env`` names.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import tomllib
import types
import typing
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from cdnlake.errors import ConfigError
from cdnlake.retention import RETENTION_SECONDS

# A record stamped later than now by more than this is refused ("future timestamp", by the
# v1 parser and v2 normalisation) and a zone whose freshest row is is unhealthy: our clock
# and the provider's differ by seconds, not hours; a record from 2030 is a fault.
FUTURE_TOLERANCE_SECONDS = 3600

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
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# The value types of the file's keys; `description` is what an error says was expected.
Positive = Annotated[int, Meta(ge=1)]
NonNegative = Annotated[int, Meta(ge=0)]
PositiveSeconds = Annotated[float, Meta(gt=0)]
HttpUrl = Annotated[str, Meta(pattern=r"^https?://[^/\s]+", description="an http(s) URL")]
ClockTime = Annotated[
    str, Meta(pattern=r"^([01]\d|2[0-3]):[0-5]\d$", description="HH:MM (UTC), e.g. 00:30")
]
LakeUri = Annotated[
    str,
    Meta(
        pattern=r"^(s3://[^/\s]+.*|(?!.*://).*)$", description="a local path or s3://bucket/prefix"
    ),
]
EnvName = Annotated[
    str,
    Meta(
        pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$",
        description='the NAME of an environment variable (or "")',
    ),
]
ListenAddress = Annotated[
    str,
    Meta(
        pattern=r"^((\[[0-9a-fA-F:]+\]|[^:\s\[\]]+):\d{1,5})?$",
        description='HOST:PORT, e.g. 127.0.0.1:9464 (or "" for off)',
    ),
]
SparkRemote = Annotated[
    str, Meta(pattern=r"^(sc://.+)?$", description='sc://host:port (or "" for none)')
]
NonEmpty = Annotated[tuple[str, ...], Meta(min_length=1)]
Tolerance = Annotated[float, Meta(ge=0, lt=1)]


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


class Table(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One table of the file: typed, immutable, and an unknown key in it is an error.

    ``__post_init__`` checks raise ValueError("key: what is wrong"); the conversion adds
    where the table is.
    """


def _check_listen(listen: str) -> None:
    if listen and not 0 <= int(listen.rpartition(":")[2]) <= 65535:
        raise ValueError(f"listen: port must be 0..65535, got {listen!r}")


def _address(listen: str) -> tuple[str, int] | None:
    if not listen:
        return None
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class ApiConfig(Table, frozen=True):
    base_url: HttpUrl = "https://api.example-cdn.net"
    video_url: HttpUrl = "https://video.example-cdn.net"
    logging_url: HttpUrl = "https://logging.example-cdn.net"
    access_key_env: EnvName = "CDNLAKE_ACCESS_KEY"
    bearer_token_env: EnvName = "CDNLAKE_LOGGING_TOKEN"
    timeout_seconds: PositiveSeconds = 30.0
    retry_attempts: Positive = 8
    retry_max_seconds: PositiveSeconds = 120.0
    # Resolved from the environment at load time; never from the file.
    access_key: Secret | None = None
    bearer_token: Secret | None = None

    def require_access_key(self) -> Secret:
        return required_secret(
            self.access_key, "api.access_key_env", self.access_key_env, "the API access key"
        )


class S3Config(Table, frozen=True):
    """``[storage.s3]``: only read for an ``s3://`` lake. Credentials are never here: they
    come from the standard AWS environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)."""

    endpoint_url: str = ""  # "" = AWS; else any S3-compatible store
    region: str = "us-east-1"
    allow_http: bool = False  # true only for a plain-HTTP endpoint


class StorageConfig(Table, frozen=True):
    root: Path = Path("data")
    lake_uri: LakeUri = ""  # "" = <root>/lake; or s3://bucket/prefix
    s3: S3Config = msgspec.field(default_factory=S3Config)

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


class IngestConfig(Table, frozen=True):
    lag_seconds: NonNegative = 300
    overlap_seconds: NonNegative = 600
    page_size: Annotated[int, Meta(ge=1, le=10_000)] = 10_000
    requests_per_window: Positive = 30
    window_seconds: PositiveSeconds = 10.0
    max_window_seconds: Annotated[int, Meta(ge=60, le=RETENTION_SECONDS)] = 6 * 3600
    flush_rows: Positive = 250_000
    concurrency: Positive = 8

    def __post_init__(self) -> None:
        if self.lag_seconds == 0 and self.overlap_seconds == 0:
            raise ValueError(
                "lag_seconds: 0 together with overlap_seconds = 0 would lose records that "
                "arrive late without a word; give one of them the most a record may be late"
            )


class ScheduleConfig(Table, frozen=True):
    poll_seconds: Positive = 60
    report_at: ClockTime = "00:30"
    maintain_at: ClockTime = "01:30"  # UTC time of the daily compaction/checkpoint/vacuum
    # How often a zone that names its archive is listed for newly closed parts.
    archive_seconds: Positive = 900


class LogConfig(Table, frozen=True):
    level: str = "INFO"
    format: Literal["text", "json"] = "text"  # for people, or one object per line

    def __post_init__(self) -> None:
        if self.level.upper() not in LOG_LEVELS:
            raise ValueError(f"level: expected one of {', '.join(LOG_LEVELS)}, got {self.level!r}")


class MetricsConfig(Table, frozen=True):
    """``[metrics]``: the daemon's /metrics and /healthz."""

    listen: ListenAddress = ""  # "" = off; "127.0.0.1:9464"

    def __post_init__(self) -> None:
        _check_listen(self.listen)

    def address(self) -> tuple[str, int] | None:
        """``(host, port)``, or None when off."""
        return _address(self.listen)


class StatusConfig(Table, frozen=True):
    max_lag_seconds: NonNegative = 1800


class ReportConfig(Table, frozen=True):
    hit_statuses: NonEmpty = ("HIT", "STALE", "UPDATING", "REVALIDATED")
    formats: tuple[Literal["html", "csv", "json", "md"], ...] = ("html", "csv", "json", "md")
    top_n: Positive = 10


class CoordinationConfig(Table, frozen=True):
    """``[coordination]``: several daemons share the zones through PostgreSQL."""

    postgres_dsn_env: EnvName = ""  # NAME of the environment variable holding the DSN
    # Resolved from the environment at load time; never from the file.
    postgres_dsn: Secret | None = None

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


class EngineConfig(Table, frozen=True):
    """``[engine]``: where ``--engine spark`` sends its queries."""

    spark_remote: SparkRemote = ""  # Spark Connect address, e.g. "sc://spark-host:15002"


LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class ForwardingConfig(Table, frozen=True):
    """``[forwarding]``: the daemon's syslog receiver for the provider's log forwarding."""

    listen: ListenAddress = ""  # "" = off; e.g. "0.0.0.0:6514"
    protocol: Literal["tcp", "tls", "udp"] = "tcp"
    tls_cert: str = ""  # PEM file, for protocol = "tls" (relative to the config file)
    tls_key: str = ""
    allow: tuple[str, ...] = ()  # source networks (CIDR) allowed to send; () = loopback only
    flush_seconds: PositiveSeconds = 5.0

    def __post_init__(self) -> None:
        _check_listen(self.listen)
        for i, cidr in enumerate(self.allow):
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(
                    f"allow[{i}]: expected a network such as 10.0.0.0/8 or 2001:db8::/32, "
                    f"got {cidr!r}"
                ) from None
        if self.listen and self.protocol == "tls":
            for key in ("tls_cert", "tls_key"):
                if not getattr(self, key):
                    raise ValueError(f'{key}: protocol = "tls" needs a PEM file here')

    @property
    def enabled(self) -> bool:
        return bool(self.listen)

    def address(self) -> tuple[str, int] | None:
        """``(host, port)``, or None when off."""
        return _address(self.listen)

    def networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        """The source networks allowed to send: ``allow``, or loopback when it is empty."""
        if not self.allow:
            return LOOPBACK
        return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in self.allow)


class AuditConfig(Table, frozen=True):
    """``[audit]``: the lake's hourly counts against the provider's statistics."""

    tolerance: Tolerance = 0.001  # an hour is short below (1 - tolerance) of the provider's count


IpTreatment = Literal["keep", "truncate", "drop", "hash"]
QueryName = Annotated[
    str,
    Meta(
        pattern=r"^[^&=#?\s]+$",
        description="a query parameter name (no '&', '=', '#', '?' or space)",
    ),
]
StorageZoneName = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9-]*$",
        description="a storage zone's name (letters, digits and -)",
    ),
]
FolderName = Annotated[
    str, Meta(pattern=r"^[^/\\\s]+$", description="a folder name (no /, no spaces)")
]
RequiredEnvName = Annotated[
    str,
    Meta(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the NAME of an environment variable",
    ),
]


class PrivacyConfig(Table, frozen=True):
    """``[privacy]``: what cdnlake keeps of client addresses and URL query strings
    (:mod:`cdnlake.privacy` applies it; ``docs/privacy.md`` explains each setting)."""

    ip: IpTreatment = "keep"
    ipv4_prefix: Annotated[int, Meta(ge=0, le=32)] = 24  # bits kept by "truncate"
    ipv6_prefix: Annotated[int, Meta(ge=0, le=128)] = 64
    hash_key_env: EnvName = ""  # NAME of the env variable holding the HMAC-SHA256 key
    strip_query: tuple[QueryName, ...] = ("token", "expires", "token_path")
    # Resolved from the environment at load time; never from the file.
    hash_key: Secret | None = None

    def __post_init__(self) -> None:
        if self.ip == "hash" and not self.hash_key_env:
            raise ValueError(
                'hash_key_env: ip = "hash" needs the NAME of an environment variable '
                "holding the HMAC-SHA256 key"
            )

    def require_hash_key(self) -> Secret:
        """The key of ``ip = "hash"``, or the one-line error naming its variable."""
        return required_secret(
            self.hash_key, "privacy.hash_key_env", self.hash_key_env, "the HMAC-SHA256 key"
        )


class ArchiveConfig(Table, frozen=True):
    """A zone's permanent log storage (the provider's archive): the storage zone its
    parts are in, the folder the provider names after the pull zone, and the NAME of the
    environment variable holding the storage zone's password (read-only suffices)."""

    storage_zone: StorageZoneName
    folder: FolderName
    password_env: RequiredEnvName
    url: HttpUrl = "https://storage.example-cdn.net"  # the storage zone's Edge Storage endpoint
    # Resolved from the environment at load time; never from the file.
    password: Secret | None = None

    def require_password(self, key: str) -> Secret:
        return required_secret(
            self.password,
            key,
            self.password_env,
            f"the password of storage zone {self.storage_zone}",
        )


MIN_KEPT_DAYS = 3  # the provider serves 3 days: what it could serve again is never expired


class RetentionConfig(Table, frozen=True):
    """``[retention]``: how long the lake keeps rows (0 = forever), and how long removed
    files stay in storage before a vacuum deletes them."""

    requests_days: NonNegative = 0  # requests and shield_events, by their UTC day
    bookkeeping_days: NonNegative = 0  # ingest_runs, ingest_gaps, rejected_lines, ...
    vacuum_hours: Positive = 168  # removed files leave storage this long after

    def __post_init__(self) -> None:
        for key in ("requests_days", "bookkeeping_days"):
            days = getattr(self, key)
            if 0 < days < MIN_KEPT_DAYS:
                raise ValueError(
                    f"{key}: must be 0 (keep forever) or at least {MIN_KEPT_DAYS} (the "
                    f"provider serves {MIN_KEPT_DAYS} days, which a pass may read again), "
                    f"got {days}"
                )

    def first_kept(self, now: datetime, days: int | None = None) -> date | None:
        """The first UTC day of ``requests`` (or of ``days`` days) kept at ``now``; None
        while everything is kept (0 days). A day before it is *expired*."""
        days = self.requests_days if days is None else days
        return None if days <= 0 else now.date() - timedelta(days=days)

    def describe(self) -> str:
        """What retention keeps, in a few words (``status``)."""

        def kept(days: int) -> str:
            return "forever" if days == 0 else f"{days} days"

        return (
            f"requests and shield events kept {kept(self.requests_days)}, bookkeeping "
            f"{kept(self.bookkeeping_days)}; removed files leave storage "
            f"{self.vacuum_hours} h after removal"
        )


class ZoneConfig(Table, frozen=True):
    id: Positive
    name: str = ""
    source: Annotated[str, Meta(pattern=r"^v[12]$", description="'v1' or 'v2'")] = "v2"
    archive: ArchiveConfig | None = None  # its archive, for `backfill` and the daemon

    @property
    def label(self) -> str:
        return f"{self.id} ({self.name})" if self.name else str(self.id)


class ShieldZoneConfig(Table, frozen=True):
    id: Positive
    name: str = ""


def _first_repeat(ids: list[int]) -> int | None:
    seen: set[int] = set()
    for i, zone_id in enumerate(ids):
        if zone_id in seen:
            return i
        seen.add(zone_id)
    return None


class Config(Table, frozen=True):
    api: ApiConfig = msgspec.field(default_factory=ApiConfig)
    storage: StorageConfig = msgspec.field(default_factory=StorageConfig)
    ingest: IngestConfig = msgspec.field(default_factory=IngestConfig)
    schedule: ScheduleConfig = msgspec.field(default_factory=ScheduleConfig)
    log: LogConfig = msgspec.field(default_factory=LogConfig)
    status: StatusConfig = msgspec.field(default_factory=StatusConfig)
    report: ReportConfig = msgspec.field(default_factory=ReportConfig)
    coordination: CoordinationConfig = msgspec.field(default_factory=CoordinationConfig)
    engine: EngineConfig = msgspec.field(default_factory=EngineConfig)
    metrics: MetricsConfig = msgspec.field(default_factory=MetricsConfig)
    forwarding: ForwardingConfig = msgspec.field(default_factory=ForwardingConfig)
    audit: AuditConfig = msgspec.field(default_factory=AuditConfig)
    privacy: PrivacyConfig = msgspec.field(default_factory=PrivacyConfig)
    retention: RetentionConfig = msgspec.field(default_factory=RetentionConfig)
    zones: tuple[ZoneConfig, ...] = ()
    shield_zones: tuple[ShieldZoneConfig, ...] = ()
    path: Path | None = None  # the file it was read from; never a key of the file

    def __post_init__(self) -> None:
        for name, zones in (("zones", self.zones), ("shield_zones", self.shield_zones)):
            twice = _first_repeat([z.id for z in zones])
            if twice is not None:
                raise ValueError(f"{name}[{twice}].id: zone {zones[twice].id} is configured twice")
        if self.coordination.enabled and not self.privacy.hash_key_env:
            # An erasure made on one machine is matched on every other under this key.
            raise ValueError(
                "privacy.hash_key_env: a fleet ([coordination] postgres_dsn_env) needs the "
                "NAME of an environment variable holding a key every daemon shares (erased "
                "addresses are recorded and matched as keyed hashes under it)"
            )

    def zone(self, zone_id: int) -> ZoneConfig:
        for zone in self.zones:
            if zone.id == zone_id:
                return zone
        known = ", ".join(str(z.id) for z in self.zones) or "none"
        if any(z.id == zone_id for z in self.shield_zones):
            raise ConfigError(
                f"zones: {zone_id} is a shield zone ([[shield_zones]]), and this works on "
                f"pull zones only (pull zones configured: {known})"
            )
        raise ConfigError(f"zones: pull zone {zone_id} is not configured (configured: {known})")

    def require_zones(self, command: str) -> None:
        """A command that works zone by zone refuses a config without any zone."""
        if not self.zones and not self.shield_zones:
            where = f" in {self.path}" if self.path else ""
            raise ConfigError(
                f"zones: no [[zones]] or [[shield_zones]] configured{where}; "
                f"`cdnlake {command}` needs at least one"
            )

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


# Keys of the structs that are filled from the environment, never from the file.
_RESOLVED_FIELDS = {"access_key", "bearer_token", "postgres_dsn", "hash_key", "password"}
# CDNLAKE_* variables that are not overrides of a config key.
OTHER_VARIABLES = {"CDNLAKE_CONFIG", "CDNLAKE_SQL_DIR"}
# The default names of the variables holding a secret (api.access_key_env,
# api.bearer_token_env): exported for one config, they must not break another.
SECRET_DEFAULTS = {"CDNLAKE_ACCESS_KEY", "CDNLAKE_LOGGING_TOKEN"}


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _is_table(tp: Any) -> bool:
    """A table of the file, or an optional one (a zone's ``archive``)."""
    if isinstance(tp, types.UnionType):
        return any(_is_table(arg) for arg in typing.get_args(tp))
    return isinstance(tp, type) and issubclass(tp, Table)


def _sections() -> dict[str, type[Table]]:
    """Every table that environment variables may override: ``ingest``, ``storage.s3``..."""
    found: dict[str, type[Table]] = {}

    def walk(prefix: str, cls: type[Table]) -> None:
        for key, tp in _hints(cls).items():
            if _is_table(tp):
                name = f"{prefix}.{key}" if prefix else key
                found[name] = tp
                walk(name, tp)

    walk("", Config)
    return found


SECTIONS = _sections()


def env_variable(section: str, key: str) -> str:
    """``CDNLAKE_STORAGE_S3_REGION`` for ``[storage.s3] region``."""
    return f"CDNLAKE_{section.replace('.', '_').upper()}_{key.upper()}"


def _overridable(cls: type[Table]) -> dict[str, Any]:
    """The scalar and list keys of a table, with their types."""
    return {
        key: tp
        for key, tp in _hints(cls).items()
        if key not in _RESOLVED_FIELDS and not _is_table(tp)
    }


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
        text = cfg_path.read_bytes().decode("utf-8")
        raw = tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"config: file {cfg_path} not found (use --config PATH)") from None
    except IsADirectoryError:
        raise ConfigError(f"{cfg_path}: a folder, not a config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{cfg_path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} "
            f"at offset {exc.start}); save it as UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{cfg_path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{cfg_path}: cannot read the config file: {exc.strerror}") from None
    return build_config(raw, base_dir=cfg_path.resolve().parent, env=env, path=cfg_path)


def build_config(
    raw: dict[str, Any], *, base_dir: Path, env: dict[str, str], path: Path | None = None
) -> Config:
    """The file's tables (``raw``) with the environment's overrides, typed and checked."""
    where = f"{path}: " if path is not None else ""
    _refuse_secrets(raw, where)
    merged, origin = _merge_environment(raw, env)
    try:
        config = msgspec.convert(merged, Config, dec_hook=_decode)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(str(exc), merged, origin, where)) from None
    storage = config.storage
    root = storage.root if storage.root.is_absolute() else base_dir / storage.root
    lake_uri = storage.lake_uri
    if lake_uri and "://" not in lake_uri and not Path(lake_uri).is_absolute():
        lake_uri = str((base_dir / lake_uri).resolve())  # relative to the config file
    storage = msgspec.structs.replace(storage, root=root.resolve(), lake_uri=lake_uri)
    _refuse_a_file(storage.root, "storage.root", _source(origin, "storage.root", where))
    if lake_uri and "://" not in lake_uri:
        _refuse_a_file(
            Path(lake_uri), "storage.lake_uri", _source(origin, "storage.lake_uri", where)
        )
    forwarding = config.forwarding
    tls = {
        key: str((base_dir / value).resolve())
        for key in ("tls_cert", "tls_key")
        if (value := getattr(forwarding, key))
    }
    api, coordination, privacy = config.api, config.coordination, config.privacy
    config = msgspec.structs.replace(
        config,
        storage=storage,
        forwarding=msgspec.structs.replace(forwarding, **tls),
        api=msgspec.structs.replace(
            api,
            access_key=_secret(env, api.access_key_env),
            bearer_token=_secret(env, api.bearer_token_env),
        ),
        coordination=msgspec.structs.replace(
            coordination, postgres_dsn=_secret(env, coordination.postgres_dsn_env)
        ),
        privacy=msgspec.structs.replace(privacy, hash_key=_secret(env, privacy.hash_key_env)),
        zones=tuple(_with_password(zone, env) for zone in config.zones),
        path=path,
    )
    _check_environment(config, env)
    return config


def _with_password(zone: ZoneConfig, env: dict[str, str]) -> ZoneConfig:
    """The zone with its archive's password read from the variable the config names."""
    if zone.archive is None:
        return zone
    archive = msgspec.structs.replace(
        zone.archive, password=_secret(env, zone.archive.password_env)
    )
    return msgspec.structs.replace(zone, archive=archive)


def _secret(env: dict[str, str], name: str) -> Secret | None:
    value = env.get(name) if name else None
    return Secret(value) if value else None


def _decode(tp: type, value: Any) -> Any:
    if tp is Path:
        if not isinstance(value, str) or not value:
            raise ValueError(f"expected a path (a non-empty string), got {value!r}")
        return Path(value)
    raise NotImplementedError  # pragma: no cover - only Path needs help


def _source(origin: dict[str, str], key: str, where: str) -> tuple[str, str]:
    """Where the value of ``key`` came from, as an error puts it: a prefix naming the file,
    or a suffix naming the environment variable that overrode it."""
    if key in origin:
        return "", f" (from the environment variable {origin[key]})"
    return where, ""


def _refuse_a_file(path: Path, key: str, source: tuple[str, str]) -> None:
    """A storage folder that is a file (or lies below one) is a mistake, not an empty lake."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        what = "is a file" if existing == path else f"lies below {existing}, a file"
        prefix, suffix = source
        raise ConfigError(f"{prefix}{key}: {path} {what}, not a folder{suffix}")


def _refuse_secrets(raw: dict[str, Any], where: str) -> None:
    """A credential written into the file is refused by name, before anything else."""
    if "path" in raw:
        raise ConfigError(f"{where}path: unknown key")

    def walk(table: dict[str, Any], prefix: str) -> None:
        for key, value in table.items():
            name = f"{prefix}.{key}" if prefix else key
            if prefix and key in SECRET_KEY_NAMES | _RESOLVED_FIELDS:
                if name.startswith("storage."):
                    instead = "the standard AWS environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)"
                elif name.startswith("coordination."):
                    instead = "the environment variable named by coordination.postgres_dsn_env"
                elif name.startswith("privacy."):
                    instead = "the environment variable named by privacy.hash_key_env"
                elif name.endswith("archive.password"):
                    instead = "the environment variable named by archive.password_env"
                else:
                    instead = "the environment variable named by api.access_key_env"
                raise ConfigError(
                    f"{where}{name}: secrets must not be written in the config file; "
                    f"put the value in {instead}"
                )
            for i, item in enumerate(value if isinstance(value, list) else [value]):
                if isinstance(item, dict):
                    walk(item, f"{name}[{i}]" if isinstance(value, list) else name)

    walk(raw, "")


def _merge_environment(
    raw: dict[str, Any], env: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The file's tables with every ``CDNLAKE_<SECTION>_<KEY>`` set in their place.

    Returns the merged tables and, for each overridden key, the variable that set it.
    """
    merged: dict[str, Any] = dict(raw)
    origin: dict[str, str] = {}
    for section, cls in SECTIONS.items():
        for key, tp in _overridable(cls).items():
            name = env_variable(section, key)
            if name not in env:
                continue
            table = _table(merged, section)
            if table is None:  # the file has a non-table there; its own error follows
                continue
            table[key] = _from_text(name, tp, env[name])
            origin[f"{section}.{key}"] = name
    return merged, origin


def _table(merged: dict[str, Any], section: str) -> dict[str, Any] | None:
    """The (copied) table of ``section`` in ``merged``, created when the file lacks it."""
    node = merged
    for part in section.split("."):
        child = node.get(part, {})
        if not isinstance(child, dict):
            return None
        node[part] = child = dict(child)
        node = child
    return node


def _base(tp: Any) -> Any:
    if typing.get_origin(tp) is Annotated:
        return typing.get_args(tp)[0]
    if isinstance(tp, types.UnionType):  # an optional table (``archive``): the table
        kinds = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        return kinds[0] if len(kinds) == 1 else tp
    return tp


TRUE, FALSE = {"1", "true", "yes"}, {"0", "false", "no"}


def _from_text(name: str, tp: Any, text: str) -> Any:
    """An override's text as the key's type; its constraints are checked with the rest."""
    base = _base(tp)
    if typing.get_origin(base) is tuple:
        return [part.strip() for part in text.split(",") if part.strip()]
    if base is bool:
        if text.lower() in TRUE | FALSE:
            return text.lower() in TRUE
        raise ConfigError(f"{name}: expected boolean (true or false), got {text!r}")
    if base in (int, float):
        try:
            return msgspec.convert(text, base, strict=False)
        except msgspec.ValidationError:
            raise ConfigError(f"{name}: expected {_WORDS[base.__name__]}, got {text!r}") from None
    return text


def _check_environment(config: Config, env: dict[str, str]) -> None:
    """A CDNLAKE_* variable that looks like an override but overrides nothing is a mistake,
    as an unknown key is: it starts ``CDNLAKE_<SECTION>_`` or is a near miss of a known name.

    A variable that holds a secret (a name ending ``_PASSWORD``, ``_KEY``, ``_TOKEN``...) is
    never an error: another config may name it (``archive.password_env``), and one exported
    for that config must not stop this one. The variables that hold a secret by default stay
    known when the config names others (``access_key_env = "MY_KEY"`` with
    CDNLAKE_ACCESS_KEY still exported): the config's choice wins, the default is not read."""
    named = {
        config.api.access_key_env,
        config.api.bearer_token_env,
        config.coordination.postgres_dsn_env,
        config.privacy.hash_key_env,
    } | {z.archive.password_env for z in config.zones if z.archive is not None}
    overrides = {
        env_variable(section, key) for section, cls in SECTIONS.items() for key in _overridable(cls)
    }
    known = OTHER_VARIABLES | SECRET_DEFAULTS | named | overrides
    prefixes = tuple(env_variable(section, "") for section in SECTIONS)
    for name in sorted(env):
        if not name.startswith("CDNLAKE_") or name in known:
            continue
        if _looks_secret(name):
            near = difflib.get_close_matches(name, sorted(SECRET_DEFAULTS), 1, 0.85)
        else:
            near = difflib.get_close_matches(name, sorted(known - named), 1, 0.85)
            if not near and not name.startswith(prefixes):
                continue  # not an override's name: someone else's variable
        hint = f"; did you mean {near[0]}?" if near else ""
        if near or not _looks_secret(name):
            raise ConfigError(
                f"{name}: unknown environment variable (overrides are "
                "CDNLAKE_<SECTION>_<KEY> for a key of config.toml, e.g. "
                f"CDNLAKE_STORAGE_ROOT{hint})"
            )


# The last word of a variable's name that says it holds a credential, not a setting.
_SECRET_WORDS = {"PASSWORD", "PASS", "PW", "KEY", "TOKEN", "DSN", "SECRET", "CREDENTIALS"}


def _looks_secret(name: str) -> bool:
    return name.rpartition("_")[2] in _SECRET_WORDS


# How msgspec's type names read in an error.
_WORDS = {
    "int": "integer",
    "float": "number",
    "str": "string",
    "bool": "boolean",
    "object": "a table",
    "array": "an array",
    "null": "nothing",
}
_BOUNDS = {">=": "at least", ">": "greater than", "<=": "at most", "<": "less than"}


def _explain(message: str, merged: dict[str, Any], origin: dict[str, str], where: str) -> str:
    """msgspec's ``Expected `int` >= 1 - at `$.ingest.page_size``` as one line naming the key
    as the file spells it: ``c.toml: ingest.page_size: must be at least 1, got 0``."""
    text, _, at = message.partition(" - at `")
    steps: list[str | int] = [
        name or int(index) for name, index in re.findall(r"\.(\w+)|\[(\d+)\]", at.rstrip("`"))
    ]
    if m := re.fullmatch(r"Object contains unknown field `(\w+)`", text):
        steps.append(m[1])
        text = "unknown key"
    elif m := re.fullmatch(r"Object missing required field `(\w+)`", text):
        steps.append(m[1])
        text = "required key is missing"
    elif m := re.fullmatch(r"([\w.\[\]]+): (.*)", text):  # our own checks
        steps += [name or int(index) for name, index in re.findall(r"(\w+)|\[(\d+)\]", m[1])]
        text = m[2]
    else:
        text = _words(text, steps, _value(merged, steps))
    key = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps).lstrip(".")
    prefix, suffix = _source(origin, re.sub(r"\[\d+\]$", "", key), where)
    return f"{prefix}{key}: {text}{suffix}"


def _words(text: str, steps: list[str | int], value: Any) -> str:
    got = f", got {value!r}" if value is not _MISSING else ""
    if m := re.fullmatch(r"Expected `(\w+)`, got `(\w+)`", text):
        return f"expected {_WORDS.get(m[1], m[1])}, got {_WORDS.get(m[2], m[2])}"
    if m := re.fullmatch(r"Expected `object \| null`, got `(\w+)`", text):  # an optional table
        return f"expected a table, got {_WORDS.get(m[1], m[1])}"
    if m := re.fullmatch(r"Expected `\w+` of length >= (\d+)", text):
        return "must not be empty" if m[1] == "1" else f"needs at least {m[1]} items{got}"
    if m := re.fullmatch(r"Expected `\w+` (>=|>|<=|<) (\S+)", text):
        return f"must be {_BOUNDS[m[1]]} {float(m[2]):g}{got}"
    tp = _field_type(steps)
    if text.startswith("Expected `str` matching regex"):
        metas = [a for a in typing.get_args(tp)[1:] if isinstance(a, Meta)]
        if metas and metas[0].description:
            return f"expected {metas[0].description}{got}"
    if text.startswith("Invalid enum value"):
        allowed = typing.get_args(_base(tp))
        return f"expected one of {', '.join(repr(a) for a in allowed)}{got}"
    return text[:1].lower() + text[1:]


_MISSING = object()


def _value(merged: Any, steps: list[str | int]) -> Any:
    node = merged
    for step in steps:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return node


def _field_type(steps: list[str | int]) -> Any:
    """The declared type of the key at ``steps`` (``["zones", 0, "source"]``)."""
    tp: Any = Config
    for step in steps:
        tp = _base(tp)
        if isinstance(step, int):
            tp = typing.get_args(tp)[0]
        elif _is_table(tp):
            tp = _hints(tp).get(step, Any)
        else:
            return Any
    return tp
