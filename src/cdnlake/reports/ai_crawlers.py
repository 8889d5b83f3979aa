"""AI crawlers and agents, by the ai.robots.txt project's maintained list.

The list (``lists/ai_robots.json``, vendored unchanged; its source and version are in
``lists/README.md``) names the user agents of crawlers that gather text for AI models and
of assistants fetching pages for their users: GPTBot, ClaudeBot, CCBot, PerplexityBot,
Bytespider... A user agent is one of them when it holds a listed name as a whole product
token: the name itself, ``name/version``, or a whole item of a comment (``(compatible;
GPTBot/1.2)``), never part of a longer token (``GPTBotanist``, ``Sogou-spider``).

A few names on the list are plain words ("Spider", "Code", "Cursor", "Scrapy"): browsers,
editors and other crawlers carry them as tokens too ("Sogou web spider/4.0", VS Code's
"Code/1.85.0"). Such a name counts only as the user agent's first token, spelt as listed;
the distinctive ones (``GPTBot``, ``meta-externalagent``) count anywhere, in any case.
Matching runs over a whole column at once (polars regular expressions), and a name is
reported as the list spells it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from importlib import resources

LIST = "ai_robots.json"
# "Brightbot 1.0", "iaskspider/2.0": a listed name with a version is the same crawler.
_VERSIONED = re.compile(r"(.+?)[ /][0-9][0-9.]*")
# A plain word ("Spider", "Code"): letters only, no inner capital, not a longer *bot name.
_PLAIN_WORD = re.compile(r"[A-Za-z][a-z]+")
_CRAWLER_ENDINGS = ("bot", "spider", "crawler")
# What may stand before and after a product token (its own characters are none of these).
_BEFORE = r"(?:^|[\s(;,+])"
_AFTER = r"(?:$|[\s/;),@])"


def plain_word(name: str) -> bool:
    """A name that is also an ordinary word, matched only as a user agent's first token."""
    lower = name.lower()
    distinctive = lower.endswith(_CRAWLER_ENDINGS) and lower not in _CRAWLER_ENDINGS
    return bool(_PLAIN_WORD.fullmatch(name)) and not distinctive


@functools.cache
def listed() -> dict[str, dict[str, str]]:
    """The list as shipped: name -> what it says of the crawler (operator, function...)."""
    text = resources.files("cdnlake.reports").joinpath("lists", LIST).read_text("utf-8")
    entries: dict[str, dict[str, str]] = json.loads(text)
    return entries


@functools.cache
def _names() -> tuple[str, str, dict[str, str]]:
    """(the pattern of distinctive names, that of plain words, lower-cased name -> the name
    reported)."""
    import polars as pl

    canonical: dict[str, str] = {}
    for name in listed():
        canonical.setdefault(name.lower(), name)  # one spelling per name, the list's first
    for lower, name in list(canonical.items()):
        versioned = _VERSIONED.fullmatch(name)
        if versioned and versioned.group(1).lower() in canonical:
            canonical[lower] = canonical[versioned.group(1).lower()]
    # The longest names first: "Applebot-Extended" is not taken for "Applebot".
    ordered = sorted(canonical, key=lambda n: (-len(n), n))
    anywhere = [pl.escape_regex(n) for n in ordered if not plain_word(canonical[n])]
    words = sorted((canonical[n] for n in ordered if plain_word(canonical[n])), key=len)[::-1]
    distinctive = r"(?i)" + _BEFORE + "(" + "|".join(anywhere) + ")" + _AFTER
    first = r"^(" + "|".join(pl.escape_regex(n) for n in words) + ")" + _AFTER
    return distinctive, first, canonical


def ai_crawlers(user_agents: Sequence[str | None]) -> list[str | None]:
    """Each user agent's AI crawler (as the list names it), or None."""
    import polars as pl

    if not user_agents:
        return []
    distinctive, first, canonical = _names()
    agents = pl.Series("user_agent", list(user_agents), dtype=pl.String)
    found = (
        agents.str.extract(distinctive, 1)
        .fill_null(agents.str.extract(first, 1))
        .str.to_lowercase()
        .replace_strict(canonical, default=None, return_dtype=pl.String)
    )
    return found.to_list()
