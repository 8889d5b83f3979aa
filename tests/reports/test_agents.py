"""User agents as people read them: browsers on systems, tools, bots (issue 31: curl was
12 % of browsers, "Other" the top browser, and a monitor no bot)."""

from __future__ import annotations

import pytest

from cdnlake.reports.agents import Agent, classify, group

CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)
IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1"
)


@pytest.mark.parametrize(
    ("agent", "tool"),
    [
        ("curl/8.11.0", "curl"),
        ("Wget/1.21.4 (linux-gnu)", "Wget"),
        ("python-requests/2.32.3", "Python Requests"),
        ("Go-http-client/1.1", "Go-http-client"),
        ("okhttp/4.12.0", "okhttp"),
    ],
)
def test_tools_are_apart_from_browsers_and_bots(agent, tool):
    got = classify(agent)
    assert got.tool == tool and got.crawler is None


@pytest.mark.parametrize(
    ("agent", "bot"),
    [
        ("updown.io daemon 2.2", "updown.io"),  # a monitor
        ("Googlebot/2.1 (+http://www.google.com/bot.html)", "Googlebot"),
        ("Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", "bingbot"),
        ("Mozilla/5.0+(compatible; UptimeRobot/2.0; http://www.uptimerobot.com/)", "UptimeRobot"),
    ],
)
def test_bots_and_monitors_are_bots(agent, bot):
    got = classify(agent)
    assert got.crawler == bot and got.tool is None


def test_browsers_keep_their_families():
    assert (classify(CHROME).browser, classify(CHROME).os) == ("Chrome", "Windows")
    assert (classify(IPHONE).browser, classify(IPHONE).os) == ("Mobile Safari", "iOS")
    assert classify(CHROME).crawler is None and classify(CHROME).tool is None


def test_the_groups_count_people_apart_from_programs():
    rows = [
        (CHROME, 40),
        (IPHONE, 20),
        ("curl/8.11.0", 12),
        ("updown.io daemon 2.2", 20),
        ("Googlebot/2.1 (+http://www.google.com/bot.html)", 8),
    ]
    grouped = group(rows, top_n=10)
    assert grouped["browser"] == [("Chrome", 40, 40.0), ("Mobile Safari", 20, 20.0)]
    assert grouped["os"] == [("Windows", 40, 40.0), ("iOS", 20, 20.0)]
    assert grouped["tool"] == [("curl", 12, 12.0)]
    assert grouped["crawler"] == [("updown.io", 20, 20.0), ("Googlebot", 8, 8.0)]


@pytest.mark.parametrize("agent", ["-", "", "<script>alert('ua')</script>", "=HYPERLINK(1)"])
def test_what_no_data_knows_is_unknown(agent):
    assert classify(agent) == Agent("Unknown", "Unknown")
