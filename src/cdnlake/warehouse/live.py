"""What is happening now: the last minute, 5 minutes or hour of ``requests``, for ``top``.

A refresh reads only the data files whose ``ts`` statistics overlap the window. They are
chosen on the Delta log as the process's :class:`~cdnlake.lake.log.table.LogTable` follows
it (each refresh reads the log entries written since the last one, not the whole log),
among the files of the window's days of each zone; the newest row's time is the greatest
``ts`` those statistics name, and its source is read from that one file. DuckDB
aggregates the chosen files (on local disk its own Parquet reader, on S3 an Arrow
dataset of them) with the statements in ``sql/internal/top_*.sql``: the window in equal
spans (the sparklines) and the first keys of each dimension, in one scan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from cdnlake.errors import DataError, UsageError, first_line
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.sqlfiles import internal_sql

if TYPE_CHECKING:
    import duckdb
    from deltalake import DeltaTable

    from cdnlake.lake.log.delta_log import File
    from cdnlake.lake.log.table import LogTable
    from cdnlake.lake.zone.session import LakeSession

WINDOWS = {"1m": 60, "5m": 300, "1h": 3600}  # the windows top offers, in seconds
SORTS = ("requests", "bytes", "misses", "errors")
# The dimensions of the window's first keys: the name in the JSON, and its title.
DIMENSIONS = {
    "path": "paths",
    "host": "hosts",
    "country": "countries",
    "status": "status codes",
    "cache": "cache statuses",
    "agent": "user agents",
    "client": "clients",
}
BUCKETS = 30  # the spans of a sparkline: 2 s of a minute, 10 s of 5 minutes, 2 min of an hour
TOP_N = 10  # the keys of each dimension a snapshot keeps
# The days whose files may hold the newest row besides the window's: a clock ahead
# stamps rows of tomorrow.
FRESH_DAYS = (-1, 0, 1)


@dataclass(frozen=True)
class Key:
    """One key of a dimension in the window (a path, a country...; None: unknown)."""

    key: str | None
    requests: int
    bytes: int
    misses: int
    errors: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "requests": self.requests,
            "bytes": self.bytes,
            "misses": self.misses,
            "errors": self.errors,
        }


@dataclass(frozen=True)
class Span:
    """One span of the window (a sparkline's point)."""

    requests: int = 0
    bytes: int = 0
    hits: int = 0
    client_errors: int = 0
    server_errors: int = 0


def ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


@dataclass
class Snapshot:
    """The window ``[start, end)`` of ``zones``' requests."""

    zones: list[int]
    window: str
    sort: str
    start: datetime
    end: datetime
    spans: list[Span]
    top: dict[str, list[Key]]
    newest: datetime | None = None  # the newest row the zones' files hold (any day read)
    newest_zone: int | None = None
    newest_source: str | None = None
    files_read: int = 0  # the data files whose statistics overlap the window
    files_listed: int = 0  # the data files of the days looked at
    took_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def total(self, name: str) -> int:
        return sum(getattr(span, name) for span in self.spans)

    @property
    def requests(self) -> int:
        return self.total("requests")

    def rates(self) -> dict[str, float | None]:
        """The window's figures: requests/s, bytes/s, and the hit, 4xx and 5xx ratios."""
        requests = self.requests
        return {
            "requests_per_second": requests / self.seconds,
            "bytes_per_second": self.total("bytes") / self.seconds,
            "hit_ratio": ratio(self.total("hits"), requests),
            "ratio_4xx": ratio(self.total("client_errors"), requests),
            "ratio_5xx": ratio(self.total("server_errors"), requests),
        }

    def series(self) -> dict[str, list[float | None]]:
        """The same figures per span of the window (the sparklines)."""
        step = self.seconds / len(self.spans)
        return {
            "requests_per_second": [s.requests / step for s in self.spans],
            "bytes_per_second": [s.bytes / step for s in self.spans],
            "hit_ratio": [ratio(s.hits, s.requests) for s in self.spans],
            "ratio_4xx": [ratio(s.client_errors, s.requests) for s in self.spans],
            "ratio_5xx": [ratio(s.server_errors, s.requests) for s in self.spans],
        }

    def age_seconds(self, now: datetime | None = None) -> float | None:
        """How old the newest row is (negative: stamped ahead of now)."""
        if self.newest is None:
            return None
        return ((now or datetime.now(UTC)) - self.newest).total_seconds()

    def as_dict(self) -> dict[str, Any]:
        return {
            "zones": self.zones,
            "window": self.window,
            "sort": self.sort,
            "from": self.start.isoformat(),
            "to": self.end.isoformat(),
            "requests": self.requests,
            "bytes": self.total("bytes"),
            "hits": self.total("hits"),
            "responses_4xx": self.total("client_errors"),
            "responses_5xx": self.total("server_errors"),
            **self.rates(),
            "series": self.series(),
            "top": {name: [k.as_dict() for k in keys] for name, keys in self.top.items()},
            "newest_row": None if self.newest is None else self.newest.isoformat(),
            "newest_age_seconds": self.age_seconds(self.end),
            "newest_zone": self.newest_zone,
            "newest_source": self.newest_source,
            "files_read": self.files_read,
            "files_listed": self.files_listed,
        }


def window_of(name: str) -> int:
    if name not in WINDOWS:
        raise UsageError(f"--window: expected one of {', '.join(WINDOWS)}, got {name!r}")
    return WINDOWS[name]


class LiveView:
    """The window's figures of some zones, as often as asked, from one lake session.

    Built at the composition root (``cdnlake top``, a benchmark) with the process's
    :class:`~cdnlake.lake.zone.session.LakeSession`; holds one in-memory DuckDB connection."""

    def __init__(
        self,
        session: LakeSession,
        zones: list[int],
        hit_statuses: tuple[str, ...] | list[str],
        *,
        top_n: int = TOP_N,
    ) -> None:
        import duckdb

        self.session = session
        self.zones = list(zones)
        self.hit_statuses = list(hit_statuses)
        self.top_n = top_n
        self._table: LogTable | None = None
        self._delta: DeltaTable | None = None  # an S3 lake's dataset is typed on it
        self._con: duckdb.DuckDBPyConnection = duckdb.connect(":memory:")
        self._con.execute("SET TimeZone = 'UTC'")

    def holds_rows(self) -> bool:
        """Whether the lake's ``requests`` table was ever written (the view then follows
        its log; until then every window is empty and nothing is created)."""
        if self._table is None:
            delta = self.session.lake.open(REQUESTS)
            if delta is None:
                return False
            table = self.session.log_table(REQUESTS, create=False)  # writes nothing
            if table is None:
                return False
            self._delta, self._table = delta, table
        return True

    def snapshot(
        self,
        window: str = "1m",
        sort: str = "requests",
        zone: int | None = None,
        *,
        now: datetime | None = None,
    ) -> Snapshot:
        """The window ending ``now`` of ``zone`` (all the view's zones when None), its keys
        ranked by ``sort``."""
        import time

        began = time.perf_counter()
        seconds = window_of(window)
        if sort not in SORTS:
            raise UsageError(f"--sort: expected one of {', '.join(SORTS)}, got {sort!r}")
        zones = self.zones if zone is None else [zone]
        end = (now or datetime.now(UTC)).astimezone(UTC)
        start = end - timedelta(seconds=seconds)
        snap = Snapshot(zones, window, sort, start, end, [Span()] * BUCKETS, {})
        snap.top = {name: [] for name in DIMENSIONS}
        if self.holds_rows():
            import duckdb

            from cdnlake.warehouse.db import damaged_file

            try:
                self._fill(snap)
            except duckdb.Error as exc:  # a data file damaged, or removed by a compaction
                raise damaged_file(exc) or DataError(
                    f"lake table requests cannot be read: {first_line(exc)}"
                ) from None
        snap.took_seconds = time.perf_counter() - began
        return snap

    def _fill(self, snap: Snapshot) -> None:
        assert self._table is not None
        days = _days(snap.start, snap.end)
        wanted = sorted({*days, *(snap.end.date() + timedelta(days=d) for d in FRESH_DAYS)})
        listed: list[File] = []
        for zone in snap.zones:
            chosen = self._table.snapshot(zone, files=True, days=[d.isoformat() for d in wanted])
            listed.extend({**f, "zone": zone} for f in chosen.files or [])
        snap.files_listed = len(listed)
        window = [f for f in listed if _overlaps(f, snap.start, snap.end)]
        snap.files_read = len(window)
        newest = max(
            (f for f in listed if f.get("max.ts") is not None),
            key=lambda f: f["max.ts"],
            default=None,
        )
        if newest is not None:
            self._read([newest])
            found = self._con.execute(internal_sql("top_newest"), {"since": newest["max.ts"]})
            row = found.fetchone()
            if row is not None:
                snap.newest, snap.newest_zone, snap.newest_source = row[0], int(row[1]), row[2]
        if not window:
            return
        self._read(window)
        params = {
            "start": snap.start,
            "end": snap.end,
            "hit_statuses": self.hit_statuses,
        }
        found = self._con.execute(
            internal_sql("top_window"),
            {**params, "buckets": BUCKETS, "sort": snap.sort, "limit": self.top_n},
        )
        spans = [Span()] * BUCKETS
        for dimension, key, requests, size, misses, errors, e4, e5 in found.fetchall():
            if dimension == "bucket":
                spans[int(key)] = Span(requests, size, requests - misses, e4, e5)
            else:
                snap.top[dimension].append(Key(key, requests, size, misses, errors))
        snap.spans = spans

    def _read(self, files: list[File]) -> None:
        """``top_rows``: the rows of ``files`` (of the log, each with its ``zone``)."""
        lake = self.session.lake
        if lake.local is not None:
            base = lake.local / REQUESTS.name
            paths = [str(base / unquote(f["path"])) for f in files]
            self._con.execute("SET VARIABLE top_files = $files", {"files": paths})
            self._con.execute(internal_sql("top_rows"))
            return
        assert self._delta is not None
        from cdnlake.lake.upkeep.rewrite import day_of  # (its writer, polars: on S3 only)

        actions = [
            {
                **f,
                f"partition.{REQUESTS.zone_column}": f["zone"],
                "partition.date": day_of(f["path"]),
            }
            for f in files
        ]
        dataset = lake.dataset(REQUESTS, self._delta, actions=actions)
        self._con.execute("DROP VIEW IF EXISTS top_rows")
        self._con.register("top_rows", dataset)

    def close(self) -> None:
        self._con.close()


def _days(start: datetime, end: datetime) -> list[date]:
    first, last = start.date(), end.date()
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _overlaps(file: File, start: datetime, end: datetime) -> bool:
    """Whether a file's ``ts`` statistics overlap ``[start, end)``; a file whose log
    names none may hold any time: it is read."""
    from cdnlake.lake.log.store import logged_span  # (deltalake: not for `cdnlake --help`)

    span = logged_span(file)
    return span is None or (span[0] < end and span[1] > start)
