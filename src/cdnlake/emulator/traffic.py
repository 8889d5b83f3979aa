"""Deterministic synthetic CDN traffic: the same seed gives the same requests, forever.

Records are generated per (zone, UTC hour) from a seeded RNG (a zone with a sustained
rate: per second, see ``sustained.py``), so any time range can be produced on demand
and tests can recompute the ground truth in-process. Each record has
its own visibility delay of up to 5 minutes (late arrival), and v1 lines and v2 JSON are
two renderings of the same record.
"""

from __future__ import annotations

import base64
import bisect
import functools
import hashlib
import itertools
import random
import threading
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Generic, TypeVar
from urllib.parse import quote

from cdnlake.emulator.records import HOUR_MS, MAX_DELAY_MS, Record, WireRecord, ZoneSpec
from cdnlake.emulator.sustained import SustainedTraffic

T = TypeVar("T")


CACHE_WEIGHTS = (
    ("HIT", 70),
    ("MISS", 13),
    ("EXPIRED", 3),
    ("BYPASS", 4),
    ("STALE", 2),
    ("UPDATING", 2),
    ("REVALIDATED", 4),
)
STATUS_WEIGHTS = (
    (200, 780),
    (206, 50),
    (304, 50),
    (301, 10),
    (404, 50),
    (403, 10),
    (429, 5),
    (500, 10),
    (502, 10),
    (503, 5),
)
EDGES = ["DE", "FR", "UK", "NY", "LA", "MI", "WA", "SG", "JP", "SYD"]
COUNTRIES = ["US", "DE", "GB", "FR", "JP", "BR", "IN", "NL", "SE", "CA", "AU", "SG"]
USER_AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/18.1 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Mobile Safari/537.36",
    "curl/8.11.0",
    "updown.io daemon 2.2",
    "Googlebot/2.1 (+http://www.google.com/bot.html)",
]
# AI crawlers and assistants, as they send themselves: a few clients are one each (every
# request of such a client carries it), so the demo's report shows its AI crawler section.
AI_AGENTS = [
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; "
    "+https://openai.com/gptbot)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; ClaudeBot/1.0; "
    "+claudebot@anthropic.com)",
    "CCBot/2.0 (https://commoncrawl.org/faq/)",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; PerplexityBot/1.0; "
    "+https://perplexity.ai/perplexitybot)",
    "Mozilla/5.0 (Linux; Android 5.0) AppleWebKit/537.36 (KHTML, like Gecko) Mobile "
    "Safari/537.36 (compatible; Bytespider; spider-feedback@bytedance.com)",
]
AI_CLIENT_EVERY = 20  # clients k with k % 20 == AI_CLIENT_AT are AI crawlers
AI_CLIENT_AT = 7
REFERERS = [
    "https://www.example.com/",
    "https://www.example.com/blog/",
    "https://news.example.org/article/42",
    "https://www.google.com/",
]
ASNS = [
    (3320, "Deutsche Telekom AG"),
    (7922, "Comcast Cable Communications"),
    (2856, "British Telecommunications PLC"),
    (16509, "Amazon.com, Inc."),
    (4713, "NTT Communications Corporation"),
]
JA4 = [
    "t13d1516h2_8daaf6152771_b0da82dd1658",
    "t13d1517h2_8daaf6152771_b1ff8ab2d16f",
    "t12d1209h1_d34a8e72043a_b39be8c56a14",
]
HOT_PATHS = [
    "/",
    "/index.html",
    "/assets/app.js",
    "/assets/app.css",
    "/assets/vendor.js",
    "/img/logo.svg",
    "/img/hero.jpg",
    "/img/banner.webp",
    "/fonts/inter.woff2",
    "/favicon.ico",
    "/api/config.json",
    "/video/intro.mp4",
    "/video/intro-720p.m4v",
    "/downloads/app-1.4.2.zip",
    "/docs/guide.pdf",
]
# Scanners put strangers' text into every field: reports must keep it inert.
HOSTILE = [
    "/<script>alert(1)</script>",
    "/search/%22%3E%3Cimg%20src=x%20onerror=alert(1)%3E",
    '/=HYPERLINK("http://evil.example/","x")',
    "/wp-login.php",
    "/../../etc/passwd",
]
HOSTILE_AGENTS = [
    "<script>alert('ua')</script>",
    '=HYPERLINK("http://evil.example/","click")',
    "+SUM(1,1)",
    "sqlmap/1.8",
]


CLIENTS = 5000


@functools.cache
def client_ip(zone_id: int, k: int) -> str:
    """The anonymised address of client ``k``: a few heavy clients, a long tail."""
    rng = random.Random(f"client:{zone_id}:{k}")
    if rng.random() < 0.8:
        return f"{rng.randint(1, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.0"
    return f"2001:db8:{rng.getrandbits(16):x}:{rng.getrandbits(16):x}::"


@functools.cache
def full_client_ip(zone_id: int, k: int) -> str:
    """The whole address of client ``k`` (the network of :func:`client_ip`, a host in it)."""
    network = client_ip(zone_id, k)
    host = zlib.crc32(f"host:{zone_id}:{k}".encode())
    if network.endswith("::"):
        groups = [(host >> shift) & 0xFFFF or 1 for shift in (0, 8, 16, 24)]
        return network[:-1] + ":".join(f"{g:x}" for g in groups)
    return network[:-1] + str(1 + host % 254)


SIGNED_FORMS = 6  # query, ";", JWT, directory, directory percent-encoded, directory HS256


def signed(url: str, path: str, zone_id: int, ts: int) -> tuple[str, str]:
    """One request of five with the provider's token authentication (its README, "Token
    authentication"), as ``(url, path)``: the token in the query string (``&`` or ``;``
    separated, or a JWT), or a directory token, the path's first segment (plainly, percent-
    encoded in upper case, or of the ``HS256-`` format). Each token holds ``tk`` and 22 hex
    digits, so a test can look for it; ``path`` holds a directory token as the log does."""
    digest = hashlib.sha256(f"token:{zone_id}:{ts}:{url}".encode()).hexdigest()
    if int(digest[:2], 16) % 5:
        return url, path
    token = f"tk{digest[2:24]}"
    expires = ts // 1000 + 3600
    form = int(digest[24:28], 16) % SIGNED_FORMS
    joiner = "&" if "?" in url else "?"
    if form == 0:
        return f"{url}{joiner}token={token}&expires={expires}", path
    if form == 1:
        return f"{url}{';' if '?' in url else '?'}token={token};expires={expires}", path
    if form == 2:
        claims = base64.urlsafe_b64encode(f'{{"exp":{expires}}}'.encode()).rstrip(b"=")
        return f"{url}{joiner}jwt=eyJhbGciOiJIUzI1NiJ9.{claims.decode()}.{token}", path
    folder = quote(path.rsplit("/", 1)[0] + "/", safe="")
    segment = f"bcdn_token={token}&expires={expires}&token_path={folder}"
    if form == 4:  # names in upper case, the whole segment percent-encoded
        segment = quote(f"BCDN_TOKEN={token}&EXPIRES={expires}&TOKEN_PATH={folder}", safe="")
    elif form == 5:
        segment = f"bcdn_token=HS256-{token}&expires={expires}&token_path={folder}"
    origin = url[: url.index("/", url.index("//") + 2)]
    return f"{origin}/{segment}{url[len(origin) :]}", f"/{segment}{path}"


@functools.lru_cache(maxsize=4096)
def _second_text(second: int) -> str:
    return datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def format_ts(ts_ms: int) -> str:
    base = _second_text(ts_ms // 1000)
    if ts_ms % 1000 == 0:
        return base + "Z"  # the wire format may omit milliseconds
    return f"{base}.{ts_ms % 1000:03d}Z"


class _Weighted(Generic[T]):
    """A weighted choice: one ``random()`` draw, found among the cumulative weights."""

    def __init__(self, table: tuple[tuple[T, int], ...]) -> None:
        self.values = [v for v, _ in table]
        self.bounds = list(itertools.accumulate(w for _, w in table))

    def __call__(self, rng: random.Random) -> T:
        pick = rng.random() * self.bounds[-1]
        return self.values[min(bisect.bisect_right(self.bounds, pick), len(self.values) - 1)]


_cache_status = _Weighted(CACHE_WEIGHTS)
_status_code = _Weighted(STATUS_WEIGHTS)


class Traffic:
    """All records of all zones, generated lazily per hour and cached."""

    def __init__(self, seed: int, zones: dict[int, ZoneSpec], rpm: float = 20.0) -> None:
        self.seed = seed
        self.zones = zones
        self.rpm = rpm
        self._cache: dict[tuple[int, int], tuple[list[int], list[Record]]] = {}
        self._late: dict[tuple[int, int], list[Record]] = {}  # added by ``add_late``
        self._lock = threading.Lock()
        self._hosts: dict[int, list[str]] = {}
        self.sustained = SustainedTraffic(seed, self._sustained_record)
        # v2 records and v1 lines served per zone (what a reader's amplification counts).
        self.served: dict[int, int] = {}

    def spec(self, zone_id: int) -> ZoneSpec:
        return self.zones.get(zone_id) or ZoneSpec(zone_id)

    def is_sustained(self, zone_id: int) -> bool:
        return self.spec(zone_id).per_second > 0

    def note_served(self, zone_id: int, count: int) -> None:
        with self._lock:
            self.served[zone_id] = self.served.get(zone_id, 0) + count

    def hour(self, zone_id: int, hour_index: int) -> tuple[list[int], list[Record]]:
        """Records of one UTC hour, sorted by (timestamp, request id), with their keys.

        A sustained zone's hour is made whole here: walk it with ``iter_records``."""
        spec = self.spec(zone_id)
        if spec.per_second > 0:
            start = hour_index * HOUR_MS
            recs = list(self.sustained.iter_records(spec, start, start + HOUR_MS))
            return [r.ts_ms for r in recs], recs
        key = (zone_id, hour_index)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        records = self._generate(zone_id, hour_index)
        with self._lock:
            records += self._late.get(key, [])
        records.sort(key=lambda r: (r.ts_ms, r.wire.requestId))
        result = ([r.ts_ms for r in records], records)
        with self._lock:
            self._cache[key] = result
        return result

    def add_late(self, zone_id: int, ts_ms: int, delay_ms: int, count: int = 1) -> list[Record]:
        """``count`` more requests of ``zone_id`` made at ``ts_ms`` that reach the provider
        ``delay_ms`` later (a record late by more than the usual 5 minutes is allowed too)."""
        key = (zone_id, ts_ms // HOUR_MS)
        spec = self.spec(zone_id)
        hosts = [f"cdn{zone_id}.example.com"]
        with self._lock:
            known = len(self._late.get(key, []))
        rng = random.Random(f"{self.seed}:{zone_id}:late:{ts_ms}:{known}")
        added = [self._record(rng, spec, zone_id, ts_ms, hosts) for _ in range(count)]
        for record in added:
            record.visible_ms = ts_ms + delay_ms
        if spec.per_second > 0:
            self.sustained.add_late(spec, added)
            with self._lock:  # so that the next call draws other records
                self._late.setdefault(key, []).extend(added)
            return added
        with self._lock:
            self._late.setdefault(key, []).extend(added)
            self._cache.pop(key, None)  # generated again with them
        return added

    def forget_before(self, ts_ms: int) -> None:
        """Drop cached hours that are past retention, so memory stays flat."""
        limit = ts_ms // HOUR_MS
        with self._lock:
            for key in [k for k in self._cache if k[1] < limit]:
                del self._cache[key]
            for key in [k for k in self._late if k[1] < limit]:
                del self._late[key]
        self.sustained.forget_before(ts_ms)

    def iter_records(self, zone_id: int, from_ms: int, to_ms: int) -> Iterator[Record]:
        """Every record with ``from_ms <= ts < to_ms``, visible or not, in order; a
        sustained zone's one second at a time, never the whole window at once."""
        spec = self.spec(zone_id)
        if spec.per_second > 0:
            yield from self.sustained.iter_records(spec, from_ms, to_ms)
            return
        for h in range(from_ms // HOUR_MS, (to_ms - 1) // HOUR_MS + 1):
            keys, recs = self.hour(zone_id, h)
            yield from recs[bisect.bisect_left(keys, from_ms) : bisect.bisect_left(keys, to_ms)]

    def records(self, zone_id: int, from_ms: int, to_ms: int) -> list[Record]:
        """Every record with ``from_ms <= ts < to_ms``, visible or not, in order."""
        if self.is_sustained(zone_id):
            return list(self.iter_records(zone_id, from_ms, to_ms))
        out: list[Record] = []
        for h in range(from_ms // HOUR_MS, (to_ms - 1) // HOUR_MS + 1):
            keys, recs = self.hour(zone_id, h)
            lo = bisect.bisect_left(keys, from_ms)
            hi = bisect.bisect_left(keys, to_ms)
            out.extend(recs[lo:hi])
        return out

    def _sustained_record(
        self, rng: random.Random, spec: ZoneSpec, zone_id: int, ts: int
    ) -> Record:
        hosts = self._hosts.get(zone_id)
        if hosts is None:
            hosts = [f"cdn{zone_id}.example.com", f"img{zone_id}.example.com", "www.example.com"]
            self._hosts[zone_id] = hosts
        return self._record(rng, spec, zone_id, ts, hosts)

    def _generate(self, zone_id: int, hour_index: int) -> list[Record]:
        rng = random.Random(f"{self.seed}:{zone_id}:{hour_index}")
        spec = self.zones.get(zone_id, ZoneSpec(zone_id))
        hour_of_day = hour_index % 24
        diurnal = 0.55 + 0.45 * (1 - abs(hour_of_day - 14) / 12)
        mean = self.rpm * 60 * diurnal
        count = max(0, int(rng.gauss(mean, mean**0.5)))
        hosts = [f"cdn{zone_id}.example.com", f"img{zone_id}.example.com", "www.example.com"]
        start_ms = hour_index * HOUR_MS
        out: list[Record] = []
        while len(out) < count:
            ts = start_ms + rng.randrange(HOUR_MS)
            if rng.random() < 0.05:
                ts -= ts % 1000  # whole-second timestamps exist on the wire too
            burst = rng.randint(5, 40) if rng.random() < 0.01 else 1
            for _ in range(min(burst, count - len(out))):
                out.append(self._record(rng, spec, zone_id, ts, hosts))
        return out

    def _record(
        self, rng: random.Random, spec: ZoneSpec, zone_id: int, ts: int, hosts: list[str]
    ) -> Record:
        hostile = rng.random() < 0.004
        post = rng.random() < 0.04
        if hostile:
            path = rng.choice(HOSTILE)
            status = 404
        elif rng.random() < 0.75:
            path = HOT_PATHS[min(int(rng.paretovariate(1.2)) - 1, len(HOT_PATHS) - 1)]
            status = _status_code(rng)
        else:
            path = f"/static/{rng.getrandbits(40):010x}.{rng.choice(['js', 'css', 'png'])}"
            status = _status_code(rng)
        cache = "-" if post else _cache_status(rng)
        host = rng.choice(hosts)
        scheme = "https" if rng.random() < 0.95 else "http"
        query = "?v=3" if path.endswith((".js", ".css")) and rng.random() < 0.5 else ""
        url = f"{scheme}://{host}{path}{query}"
        if path.startswith("/video") or path.endswith(".zip"):
            size = rng.randint(1_000_000, 8_000_000)
        elif path.endswith((".jpg", ".webp", ".pdf", ".woff2")):
            size = rng.randint(20_000, 600_000)
        else:
            size = rng.randint(300, 120_000)
        content_range = None
        if status == 304:
            size = rng.randint(150, 400)
        elif status >= 400 or status == 301:
            size = rng.randint(200, 2_000)
        elif status == 206:
            size = rng.randint(65_536, 1_048_576)
            content_range = f"bytes={rng.randrange(0, 10) * 1_048_576}-"
        client = int(rng.paretovariate(0.8)) % CLIENTS
        ip = full_client_ip(zone_id, client) if spec.full_ips else client_ip(zone_id, client)
        if spec.signed_urls:  # no draw of rng: the zone's other fields stay as they are
            url, path = signed(url, path, zone_id, ts)
        ua: str | None = (
            rng.choice(HOSTILE_AGENTS)
            if hostile
            else (None if rng.random() < 0.03 else rng.choice(USER_AGENTS))
        )
        if not hostile and client % AI_CLIENT_EVERY == AI_CLIENT_AT:  # no draw of rng
            ua = AI_AGENTS[client // AI_CLIENT_EVERY % len(AI_AGENTS)]
        referer = rng.choice(REFERERS) if rng.random() < 0.6 else None
        country = None if rng.random() < 0.02 else rng.choice(COUNTRIES)
        asn, org = rng.choice(ASNS)
        delay = int(MAX_DELAY_MS * rng.random() ** 3)
        authorization = None
        if spec.extended and rng.random() < 0.1:
            authorization = f"Bearer eyJhbGciOiJIUzI1NiJ9.{rng.getrandbits(96):024x}.sig"
        wire = WireRecord(
            timestamp=format_ts(ts),
            pullZoneId=zone_id,
            requestId=f"{rng.getrandbits(128):032x}",
            cacheStatus=cache,
            statusCode=status,
            bytesSent=size,
            edgeLocation=rng.choice(EDGES),
            scheme=scheme,
            host=host,
            path=path,
            url=url,
            remoteIp=ip,
            countryCode=country,
            userAgent=ua,
            referer=referer,
            bodyBytesSent=max(0, size - 320) if spec.extended else None,
            contentRange=content_range if spec.extended else None,
            authorizationHeader=authorization,
            ja4Fingerprint=rng.choice(JA4),
            asn=asn,
            asnOrganization=org,
        )
        return Record(ts_ms=ts, visible_ms=ts + delay, wire=wire)
