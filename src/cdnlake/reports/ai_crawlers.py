"""AI crawlers and agents, by the ai.robots.txt project's maintained list.

The list (``lists/ai_robots.json``, vendored unchanged; its source and version are in
``lists/README.md``) names the user agents of crawlers that gather text for AI models and
of assistants fetching pages for their users: GPTBot, ClaudeBot, CCBot, PerplexityBot,
Bytespider... A user agent is one of them when it holds a listed name as a whole word, in
any case, as the list's own server rules match. Matching runs over a whole column at once
(one polars regular expression), and a name is reported as the list spells it.
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


@functools.cache
def listed() -> dict[str, dict[str, str]]:
    """The list as shipped: name -> what it says of the crawler (operator, function...)."""
    text = resources.files("cdnlake.reports").joinpath("lists", LIST).read_text("utf-8")
    entries: dict[str, dict[str, str]] = json.loads(text)
    return entries


@functools.cache
def _names() -> tuple[str, dict[str, str]]:
    """(the pattern, lower-cased name -> the name reported)."""
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
    pattern = r"(?i)\b(" + "|".join(pl.escape_regex(n) for n in ordered) + r")\b"
    return pattern, canonical


def ai_crawlers(user_agents: Sequence[str | None]) -> list[str | None]:
    """Each user agent's AI crawler (as the list names it), or None."""
    import polars as pl

    if not user_agents:
        return []
    pattern, canonical = _names()
    found = (
        pl.Series("user_agent", list(user_agents), dtype=pl.String)
        .str.extract(pattern, 1)
        .str.to_lowercase()
        .replace_strict(canonical, default=None, return_dtype=pl.String)
    )
    return found.to_list()
