"""AI crawlers, a group of their own beside search bots and monitors, from the vendored
ai.robots.txt list (issue 42)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from cdnlake.reports.agents import classify, group
from cdnlake.reports.ai_crawlers import ai_crawlers, listed
from tests.reports.operator_day import AI, CHROME, GOOGLEBOT, UPTIME

# Each as the crawler sends it, and the name the report gives it.
AGENTS = [
    *((agent, name) for name, agent in AI.items()),
    ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; ChatGPT-User/1.0; "
     "+https://openai.com/bot", "ChatGPT-User"),
    ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; OAI-SearchBot/1.0; "
     "+https://openai.com/searchbot", "OAI-SearchBot"),
    ("Claude-User/1.0 (+Claude-User@anthropic.com)", "Claude-User"),
    ("Claude-SearchBot/1.0", "Claude-SearchBot"),
    ("anthropic-ai", "anthropic-ai"),
    ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Perplexity-User/1.0; "
     "+https://perplexity.ai/perplexity-user)", "Perplexity-User"),
    ("Google-Extended", "Google-Extended"),
    ("Mozilla/5.0 (Macintosh) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 "
     "Safari/605.1.15 (Applebot-Extended/0.1)", "Applebot-Extended"),
    ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Amazonbot/0.1; "
     "+https://developer.amazon.com/support/amazonbot) Chrome/119.0.6045.214 Safari/537.36",
     "Amazonbot"),
    ("meta-externalagent/1.1 (+https://developers.facebook.com/docs/sharing/webmasters/crawler)",
     "meta-externalagent"),
    ("Meta-ExternalAgent/1.1", "meta-externalagent"),  # one crawler, however it is spelt
    ("FacebookBot/1.0", "FacebookBot"),
    ("cohere-ai", "cohere-ai"),
    ("Mozilla/5.0 (compatible; Diffbot/0.1; +http://www.diffbot.com)", "Diffbot"),
    ("Mozilla/5.0 (compatible; YouBot (+http://www.you.com))", "YouBot"),
    ("imagesift.com ImagesiftBot", "ImagesiftBot"),
    ("Timpibot/0.8 (+http://www.timpi.io)", "Timpibot"),
    ("omgili/0.5 +http://omgili.com", "omgili"),
    ("Mozilla/5.0 (compatible; Brightbot 1.0)", "Brightbot"),  # a name with its version
    ("GPTBOT/1.0", "GPTBot"),  # any case
    ("Spider/1.0 (+https://spider.cloud)", "Spider"),  # a plain word as the first token
    ("Scrapy/2.11.2 (+https://scrapy.org)", "Scrapy"),
    ("facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
     "facebookexternalhit"),
]  # fmt: skip


def test_the_vendored_list_loads_and_says_where_it_comes_from():
    names = listed()
    assert len(names) > 150
    for name in ("GPTBot", "ClaudeBot", "CCBot", "PerplexityBot", "Bytespider", "omgili"):
        assert name in names and names[name]["operator"]
    notes = resources.files("cdnlake.reports").joinpath("lists", "README.md").read_text()
    assert "github.com/ai-robots-txt/ai.robots.txt" in notes
    assert re.search(r"commit `[0-9a-f]{40}` of \d{4}-\d\d-\d\d", notes)
    licence = resources.files("cdnlake.reports").joinpath("lists", "ai_robots.LICENSE")
    assert licence.read_text().startswith("MIT License")  # shipped with the list, as it asks


@pytest.mark.parametrize(("agent", "name"), AGENTS, ids=[n for _, n in AGENTS])
def test_ai_crawlers_are_found_by_the_list(agent, name):
    got = classify(agent)
    assert got.ai_crawler == name and got.crawler is None and got.tool is None


@pytest.mark.parametrize(
    "agent",
    [
        CHROME,
        GOOGLEBOT,  # a search engine's bot stays one
        UPTIME,  # and a monitor
        "curl/8.11.0",
        "Mozilla/5.0 (compatible; GPTBotanist/1.0)",  # a name inside a longer word is not it
        "Mozilla/5.0 (compatible; X-GPTBot-Test/1.0)",  # nor inside a longer token
        "-",
        # The list's plain words, carried by browsers, editors and other crawlers:
        "Sogou web spider/4.0(+http://www.sogou.com/docs/help/webmasters.htm#07)",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Code/1.85.1 Chrome/114.0.5735.289 Electron/25.9.7 Safari/537.36",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like "
        "Gecko) Cursor/0.42.3 Chrome/124.0.6367.243 Electron/30.5.1 Safari/537.36",
        "Mozilla/5.0 (compatible; MJ12bot/v1.4.8; http://mj12bot.com/) spider",
        "code",  # a plain word in another spelling
    ],
)
def test_what_is_no_ai_crawler(agent):
    assert classify(agent).ai_crawler is None


def test_the_column_is_matched_at_once():
    agents = [AI["GPTBot"], None, CHROME, "ccbot/2.0", AI["Bytespider"]]
    assert ai_crawlers(agents) == ["GPTBot", None, None, "CCBot", "Bytespider"]
    assert ai_crawlers([]) == []


def test_ai_crawlers_are_a_group_beside_bots_monitors_and_people():
    rows = [
        (AI["GPTBot"], 30),
        ("gptbot/1.1", 10),
        (AI["ClaudeBot"], 20),
        (GOOGLEBOT, 15),
        (UPTIME, 5),
        (CHROME, 20),
    ]
    grouped = group(rows, top_n=10)
    assert grouped["ai_crawler"] == [("GPTBot", 40, 40.0), ("ClaudeBot", 20, 20.0)]
    assert grouped["crawler"] == [("Googlebot", 15, 15.0), ("UptimeRobot", 5, 5.0)]
    assert grouped["browser"] == [("Chrome", 20, 20.0)]
    assert grouped["tool"] == []


def test_the_emulators_traffic_holds_ai_crawlers_the_report_names():
    """The demo's report shows its AI crawler section: a day of an emulated zone."""
    from cdnlake.emulator.records import ZoneSpec
    from cdnlake.emulator.traffic import Traffic

    traffic = Traffic(7, {1234: ZoneSpec(1234)})
    agents = [r.wire.userAgent for h in range(480_000, 480_024) for r in traffic.hour(1234, h)[1]]
    named = [name for name in ai_crawlers(agents) if name is not None]
    assert {"GPTBot", "ClaudeBot", "CCBot", "PerplexityBot", "Bytespider"} <= set(named)
    assert 0.01 < len(named) / len(agents) < 0.2  # some of the traffic, not most of it
