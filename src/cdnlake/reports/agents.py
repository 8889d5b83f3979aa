"""User agents grouped as people read them: browsers and their systems, tools, AI crawlers
and other bots.

Three well-kept sets of data decide, none of our own regular expressions:

- the ai.robots.txt list (:mod:`cdnlake.reports.ai_crawlers`): crawlers gathering text for
  AI models and assistants fetching pages for their users, a group of their own, before
  anything else (its GPTBot or Bytespider is an AI crawler, not a search engine's bot);
- the crawler-user-agents list (its ``tags`` say what each pattern is: a search engine,
  a monitor, an HTTP library...): an agent it knows is a bot, or a tool when tagged
  ``http-library`` or ``browser-automation`` (curl, wget, python-requests, headless
  browsers: scripts, neither people nor crawlers);
- ua-parser (the uap-core rules): the browser and system families of everything else,
  and a bot in the rules' own words (a ``Spider``) that the list does not know yet.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass

UNKNOWN = "Unknown"
# Kinds of the report's sections, in order; "crawler" holds every other bot (search
# engines, monitors too).
KINDS = ("browser", "os", "tool", "crawler", "ai_crawler")
TOOL_TAGS = {"http-library", "browser-automation"}
CHUNK = 50  # patterns per combined expression: one search tells whether any matches


@dataclass(frozen=True)
class Agent:
    browser: str
    os: str
    tool: str | None = None  # an HTTP tool or library, when it is one
    crawler: str | None = None  # a bot's name, when it is one
    ai_crawler: str | None = None  # an AI crawler's name (the ai.robots.txt list's)


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    tool: bool


@functools.cache
def _patterns() -> tuple[list[re.Pattern[str]], list[list[_Pattern]]]:
    """The list's patterns, in chunks: one combined expression per chunk, then each
    pattern of a chunk that matched (for its tags)."""
    from crawleruseragents import CRAWLER_USER_AGENTS_DATA

    entries = [
        _Pattern(re.compile(e["pattern"]), bool(TOOL_TAGS & set(e.get("tags", []))))
        for e in CRAWLER_USER_AGENTS_DATA
    ]
    chunks = [entries[i : i + CHUNK] for i in range(0, len(entries), CHUNK)]
    combined = [re.compile("|".join(f"(?:{p.regex.pattern})" for p in c)) for c in chunks]
    return combined, chunks


def _listed(user_agent: str) -> tuple[str, bool] | None:
    """(what matched, is a tool) when the crawler list knows ``user_agent``."""
    combined, chunks = _patterns()
    for regex, chunk in zip(combined, chunks, strict=True):
        if regex.search(user_agent) is None:
            continue
        for pattern in chunk:
            found = pattern.regex.search(user_agent)
            if found is not None:
                return found.group(0).strip(" /;(") or user_agent, pattern.tool
    return None


def classify(user_agent: str) -> Agent:
    """What one user-agent string is: a browser on a system, a tool, an AI crawler or
    another bot."""
    from cdnlake.reports.ai_crawlers import ai_crawlers

    (ai,) = ai_crawlers([user_agent])
    if ai is not None:
        agent = _classify(user_agent)
        return Agent(ai, agent.os, ai_crawler=ai)
    return _classify(user_agent)


@functools.lru_cache(maxsize=4096)
def _classify(user_agent: str) -> Agent:
    """What a user agent that is no AI crawler is: a browser on a system, a tool, a bot."""
    if user_agent in ("-", "(others)", ""):
        return Agent(UNKNOWN, UNKNOWN)
    from ua_parser import parse

    parsed = parse(user_agent)
    family = parsed.user_agent.family if parsed.user_agent else None
    system = parsed.os.family if parsed.os else UNKNOWN
    listed = _listed(user_agent)
    if listed is not None:
        matched, tool = listed
        name = family or matched
        return Agent(name, system, tool=name) if tool else Agent(name, system, crawler=name)
    if parsed.device is not None and parsed.device.family == "Spider":
        return Agent(family or UNKNOWN, system, crawler=family or user_agent[:40])
    return Agent(family or UNKNOWN, system)


def group(rows: list[tuple[str, int]], top_n: int) -> dict[str, list[tuple[str, int, float]]]:
    """``{"browser": [(family, requests, pct of all requests)], "os": ..., "tool": ...,
    "crawler": ..., "ai_crawler": ...}``, the ``top_n`` largest of each, most requests
    first (ties by name). Browsers and systems count people's requests only: a tool or a
    bot is neither. AI crawlers are found over all the rows at once."""
    from cdnlake.reports.ai_crawlers import ai_crawlers

    total = sum(n for _, n in rows) or 1
    groups: dict[str, Counter[str]] = {kind: Counter() for kind in KINDS}
    ai = ai_crawlers([user_agent for user_agent, _ in rows])
    for (user_agent, requests), ai_crawler in zip(rows, ai, strict=True):
        if ai_crawler is not None:
            groups["ai_crawler"][ai_crawler] += requests
            continue
        agent = _classify(user_agent)
        if agent.crawler is not None:
            groups["crawler"][agent.crawler] += requests
        elif agent.tool is not None:
            groups["tool"][agent.tool] += requests
        else:
            groups["browser"][agent.browser] += requests
            groups["os"][agent.os] += requests
    out = {}
    for kind, counts in groups.items():
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top_n]
        out[kind] = [(name, n, round(100.0 * n / total, 2)) for name, n in ranked]
    return out
