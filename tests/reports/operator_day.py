"""A day with what an operator acts on, added to the fixture lake with the real lake writer:
AI crawlers beside search bots and monitors, paths that miss the cache with long names,
status codes of every class, countries known and unknown; and rows of today (a partial
day) for a range report that reaches it."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import polars as pl

from cdnlake.config import Config
from cdnlake.lake.log.schema import REQUEST_SCHEMA, REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.writer import ZoneWriter
from tests.sessions import session_of

DAY = date(2026, 11, 21)
ZONE = 1
CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)
# Each AI crawler's user agent as it sends it (lower case too: matching ignores case).
AI = {
    "GPTBot": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; "
    "+https://openai.com/gptbot)",
    "ClaudeBot": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; "
    "ClaudeBot/1.0; +claudebot@anthropic.com)",
    "CCBot": "ccbot/2.0 (https://commoncrawl.org/faq/)",
    "PerplexityBot": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; "
    "PerplexityBot/1.0; +https://perplexity.ai/perplexitybot)",
    "Bytespider": "Mozilla/5.0 (Linux; Android 5.0) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Mobile Safari/537.36 (compatible; Bytespider; spider-feedback@bytedance.com)",
}
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
UPTIME = "Mozilla/5.0+(compatible; UptimeRobot/2.0; http://www.uptimerobot.com/)"
LONG = "/assets/video/2026/a-very-long-file-name-without-any-breaks-0123456789abcdef0123456.mp4"
# (requests, cache status, status code, bytes each, path, country, user agent)
SPECS: list[tuple[int, str, int, int, str, str | None, str]] = [
    (5, "MISS", 200, 20_000, "/docs/guide/", "US", AI["GPTBot"]),
    (4, "MISS", 200, 15_000, "/docs/guide/", "US", AI["ClaudeBot"]),
    (3, "HIT", 200, 10_000, "/docs/guide/", "DE", AI["CCBot"]),
    (2, "HIT", 200, 10_000, "/docs/", "DE", AI["PerplexityBot"]),
    (2, "HIT", 301, 300, "/old", "JP", AI["Bytespider"]),
    (2, "MISS", 200, 5_000_000, LONG, "CI", CHROME),
    (3, "MISS", 200, 1_000_000, "/downloads/installer-x86_64.tar.gz", "DE", CHROME),
    (3, "HIT", 200, 4_000, "/", "DE", GOOGLEBOT),
    (2, "HIT", 304, 0, "/", "XX", UPTIME),
    (6, "HIT", 206, 50_000, LONG, "DE", CHROME),
    (2, "MISS", 404, 500, "/missing", None, CHROME),
    (1, "BYPASS", 403, 200, "/admin", "US", "curl/8.11.0"),
    (1, "MISS", 500, 100, "/api/report", "US", CHROME),
    (2, "EXPIRED", 503, 100, "/api/report", "US", CHROME),
]


def frame(day: date, specs: list[tuple[int, str, int, int, str, str | None, str]]) -> pl.DataFrame:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    rows: list[dict[str, Any]] = []
    for n, cache, status, size, path, country, agent in specs:
        for _ in range(n):
            i = len(rows)
            rows.append(
                {
                    "ts": start + timedelta(seconds=1 + 97 * i),
                    "request_id": f"op-{day}-{i}",
                    "cache_status": cache,
                    "status_code": status,
                    "bytes_sent": size,
                    "edge_location": "DE",
                    "scheme": "https",
                    "host": "a.example",
                    "path": path,
                    "url": f"https://a.example{path}",
                    "remote_ip": f"192.0.2.{i % 250}",
                    "country_code": country,
                    "user_agent": agent,
                    "referer": None,
                    "body_bytes_sent": None,
                    "content_range": None,
                    "ja4_fingerprint": None,
                    "asn": 3320,
                    "asn_organization": "Telekom",
                    "source": "v2",
                }
            )
    from cdnlake.lake.log.schema import polars_schema

    return pl.DataFrame(rows, schema=polars_schema(REQUEST_SCHEMA))


def add_operator_day(config: Config) -> None:
    """The day of :data:`SPECS` in zone :data:`ZONE`."""
    lake = Lake.from_config(config.storage)
    ZoneWriter(session_of(lake), REQUESTS, ZONE).commit(frame(DAY, SPECS), {})


def add_today(config: Config) -> date:
    """A few requests in the first minutes of today: a partial day."""
    today = datetime.now(UTC).date()
    lake = Lake.from_config(config.storage)
    specs = [(3, "HIT", 200, 1_000, "/", "DE", CHROME), (1, "MISS", 500, 100, "/x", "US", CHROME)]
    ZoneWriter(session_of(lake), REQUESTS, ZONE).commit(frame(today, specs), {})
    return today
