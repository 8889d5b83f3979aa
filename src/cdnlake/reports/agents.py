"""User agents grouped as people read them: browsers, operating systems and crawlers.

The parsing is ua-parser's (the uap-core rules that GoAccess-like tools and analytics
suites share), not regular expressions of our own. A crawler is what those rules call a
``Spider``; its requests are counted as a crawler, not as a browser or a system.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

UNKNOWN = "Unknown"


@functools.lru_cache(maxsize=4096)
def classify(user_agent: str) -> tuple[str, str, str | None]:
    """``(browser, os, crawler)`` families of one user-agent string (crawler None if not)."""
    if user_agent in ("-", "(others)", ""):
        return UNKNOWN, UNKNOWN, None
    from ua_parser import parse

    parsed = parse(user_agent)
    browser = parsed.user_agent.family if parsed.user_agent else "Other"
    system = parsed.os.family if parsed.os else "Other"
    if parsed.device is not None and parsed.device.family == "Spider":
        return browser, system, browser
    return browser, system, None


def group(rows: list[tuple[str, int]], top_n: int) -> dict[str, list[tuple[str, int, float]]]:
    """``{"browser": [(family, requests, pct of all requests)], "os": ..., "crawler": ...}``,
    the ``top_n`` largest of each, most requests first (ties by name)."""
    total = sum(n for _, n in rows) or 1
    groups: dict[str, Counter[str]] = {"browser": Counter(), "os": Counter(), "crawler": Counter()}
    for user_agent, requests in rows:
        browser, system, crawler = classify(user_agent)
        if crawler is not None:
            groups["crawler"][crawler] += requests
        else:
            groups["browser"][browser] += requests
            groups["os"][system] += requests
    out = {}
    for kind, counts in groups.items():
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top_n]
        out[kind] = [(name, n, round(100.0 * n / total, 2)) for name, n in ranked]
    return out


def as_records(grouped: dict[str, list[tuple[str, int, float]]]) -> dict[str, Any]:
    return {
        kind: [{kind: name, "requests": n, "pct": pct} for name, n, pct in rows]
        for kind, rows in grouped.items()
    }
