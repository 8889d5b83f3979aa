"""What operators act on, in every format (issue 42): AI crawlers as a group, the paths
that miss the cache most by bytes, status codes by class, countries by name, and a
partial day marked in the range report's charts."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from datetime import date

import pytest

from cdnlake.reports.build import write_reports
from cdnlake.reports.countries import country_name
from tests.fixture_lake import build_fixture_lake
from tests.reports.operator_day import DAY, LONG, SPECS, add_operator_day, add_today
from tests.sessions import session_for

STEM = f"report-all-{DAY}"


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    config = build_fixture_lake(tmp_path_factory.mktemp("operator"))
    add_operator_day(config)
    return config, add_today(config)


@pytest.fixture(scope="module")
def files(lake, tmp_path_factory):
    config, _ = lake
    out = tmp_path_factory.mktemp("out")
    return {p.name: p for p in write_reports(config, DAY, out=out, session=session_for(config))}


def doc(files):
    return json.loads(files[f"{STEM}.json"].read_text())


def csv_rows(files, section):
    return list(csv.DictReader(open(files[f"{STEM}.{section}.csv"], encoding="utf-8")))


def requests_where(pick) -> Counter[object]:
    counts: Counter[object] = Counter()
    for n, cache, status, size, path, country, agent in SPECS:
        key = pick(cache, status, size, path, country, agent)
        if key is not None:
            counts[key] += n
    return counts


def test_ai_crawlers_are_their_own_group(files):
    agents = doc(files)["user_agents"]
    got = {r["ai_crawler"]: r["requests"] for r in agents["ai_crawler"]}
    assert got == {"GPTBot": 5, "ClaudeBot": 4, "CCBot": 3, "PerplexityBot": 2, "Bytespider": 2}
    assert [r["ai_crawler"] for r in agents["ai_crawler"]][:2] == ["GPTBot", "ClaudeBot"]
    bots = {r["crawler"] for r in agents["crawler"]}
    assert bots == {"Googlebot", "UptimeRobot"}  # search bots and monitors, no AI crawler
    assert not {r["browser"] for r in agents["browser"]} & set(got)
    first = csv_rows(files, "ai_crawler")[0]
    assert (first["ai_crawler"], first["requests"]) == ("GPTBot", "5")
    md = files[f"{STEM}.md"].read_text()
    assert "## AI crawlers and assistants" in md and "| GPTBot | 5 | 13.16 % |" in md
    html = files[f"{STEM}.html"].read_text()
    assert 'id="ai_crawler"' in html and 'id="crawler"' in html


def test_the_paths_that_miss_most_by_bytes_are_shown_with_requests_and_bytes(files):
    misses = requests_where(lambda c, s, b, p, *_: p if c == "MISS" else None)
    miss_bytes = Counter()
    for n, cache, _, size, path, *_ in SPECS:
        if cache == "MISS":
            miss_bytes[path] += n * size
    total = sum(miss_bytes.values())
    want = sorted(miss_bytes, key=lambda p: -miss_bytes[p])
    rows = doc(files)["top_paths"]["by_miss_bytes"]
    assert [r["path"] for r in rows] == want
    assert rows[0]["path"] == LONG
    for r in rows:
        assert r["miss_requests"] == misses[r["path"]]
        assert r["miss_bytes"] == miss_bytes[r["path"]]
        assert r["share_pct"] == round(100 * miss_bytes[r["path"]] / total, 2)
    from_csv = csv_rows(files, "top_miss_paths_by_bytes")
    assert [(r["path"], int(r["miss_bytes"])) for r in from_csv] == [
        (p, miss_bytes[p]) for p in want
    ]
    # In the page, a panel of its own with both figures: not folded under <details>.
    html = files[f"{STEM}.html"].read_text()
    panel = re.search(r'<div class="panel" id="top_miss_paths_by_bytes">.*?</table>', html, re.S)
    assert panel is not None and "<details" not in panel.group(0)
    assert "10.0 MB" in panel.group(0) and ">2<" in panel.group(0)  # bytes and requests
    # Named for what it shows: miss requests and miss bytes, as the table beside it names
    # the same count ("Misses"); short headers, so that a phone's path column stays wide.
    headers = re.findall(r'<th class="num">([^<]*)</th>', panel.group(0))
    assert headers == ["Misses", "Miss bytes", "Share"], headers
    assert "by miss bytes (share: of all miss bytes)</h2>" in panel.group(0)
    md = files[f"{STEM}.md"].read_text()
    assert "| Path | Misses | Miss bytes | Share |" in md.replace("Host | ", ""), md


def test_status_codes_are_grouped_by_class(files):
    by_code = requests_where(lambda c, status, *_: status)
    groups = doc(files)["status_codes"]
    assert [g["class"] for g in groups] == ["2xx", "3xx", "4xx", "5xx"]
    assert [g["meaning"] for g in groups][-1] == "server error"
    total = sum(by_code.values())
    for g in groups:
        codes = [c for c in by_code if f"{c // 100}xx" == g["class"]]
        assert g["requests"] == sum(by_code[c] for c in codes)
        assert g["pct"] == round(100 * g["requests"] / total, 2)
        assert sorted(c["status_code"] for c in g["codes"]) == sorted(codes)
        assert [c["requests"] for c in g["codes"]] == sorted(
            (by_code[c] for c in codes), reverse=True
        )
    classes = csv_rows(files, "status_classes")
    assert [(r["class"], int(r["requests"]), r["codes"]) for r in classes] == [
        ("2xx", 28, "200 206"),
        ("3xx", 4, "301 304"),
        ("4xx", 3, "404 403"),
        ("5xx", 3, "503 500"),
    ]
    html = files[f"{STEM}.html"].read_text()
    panel = re.search(r'<div class="panel" id="status_codes">.*?</table>', html, re.S)
    assert panel is not None
    shown = re.findall(r'<tr class="(class|code)">', panel.group(0))
    assert shown == ["class", "code", "code"] * 4  # each class, its codes under it


def test_countries_are_named(files):
    rows = {r["country_code"]: r["country"] for r in doc(files)["countries"]}
    assert rows["DE"] == "Germany" and rows["US"] == "United States"
    assert rows["CI"] == "Côte d’Ivoire"  # in UTF-8, unharmed
    assert rows["XX"] == "XX" and rows["-"] == "-"  # unknown: shown as logged
    by_csv = {r["country_code"]: r["country"] for r in csv_rows(files, "countries")}
    assert by_csv == rows
    buckets = {r["bucket"]: r["country"] for r in csv_rows(files, "hit_ratio_by_country")}
    assert buckets["JP"] == "Japan"
    page = re.sub(r"<[^>]+>", "", files[f"{STEM}.html"].read_text())  # the text, as read
    assert "Germany (DE)" in page and "Japan (JP)" in page
    md = files[f"{STEM}.md"].read_text()
    assert "| Code | Country | Requests |" in md and "| DE | Germany | 17 |" in md


@pytest.mark.parametrize(
    ("code", "name"),
    [("DE", "Germany"), ("gb", "United Kingdom"), ("ZZ", "Unknown Region"), ("Q1", "Q1"),
     ("<b>FR</b>", "<b>FR</b>"), (None, "-"), ("", "")],
)  # fmt: skip
def test_country_names(code, name):
    assert country_name(code) == name


def test_a_partial_day_is_marked_in_the_range_charts(lake, tmp_path):
    config, today = lake
    paths = write_reports(
        config, date(2026, 11, 19), end=today, formats=("json", "html"), session=session_for(config)
    )
    report = json.loads(next(p for p in paths if p.suffix == ".json").read_text())
    trend = report["sections"]["daily_trend"]["rows"]
    assert [(r["date"], r["partial"]) for r in trend][-2:] == [
        (str(DAY), False),
        (str(today), True),
    ]
    html = next(p for p in paths if p.suffix == ".html").read_text()
    label = today.strftime("%m-%d")
    for chart in ("requests", "bandwidth", "hit-ratio", "errors"):
        panel = re.search(rf'<div class="panel" id="chart-{chart}">.*?</div></div>', html, re.S)
        assert panel is not None
        svg = panel.group(0)
        # One hatched band, at the last place of the four days, behind the partial day.
        bands = re.findall(
            r'<rect class="partial-band" x="([0-9.]+)"[^>]*fill="url\(#(hatch-[a-z-]+)\)"', svg
        )
        assert len(bands) == 1 and f'<pattern id="{bands[0][1]}"' in svg
        assert float(bands[0][0]) > 400  # the last of four places in a 560-wide chart
        assert f"{label}: a partial day (the day is still running" in svg
        marks = re.findall(r'class="partial"', svg)
        assert marks, chart  # its bars pale, its points hollow
        assert re.search(r'class="partial-key".*partial day: ' + label, html)
    whole = re.search(r'<div class="panel" id="chart-requests">.*?</svg>', html, re.S)
    assert whole is not None
    assert whole.group(0).count('class="partial"') == 1  # only today's bar


@pytest.mark.parametrize(
    ("text", "path", "html"),
    [
        ("05:00 missing", False, '<span class="pieces">05:00 missing</span>'),
        ("2026-11-20 Go-http-client", False,
         '<span class="pieces" title="2026-11-20 Go-http-client"><span>2026-11-20</span> '
         "<span>Go-http-client</span></span>"),
        ("a.example/x-y/z", True,
         '<span class="pieces" title="a.example/x-y/z"><span>a.example/</span><span>x-y/</span>'
         "<span>z</span></span>"),
        ("<b>x</b> y", False, '<span class="pieces"><span>&lt;b&gt;x&lt;/b&gt;</span> y</span>'),
    ],
)  # fmt: skip
def test_words_a_browser_could_break_are_kept_whole(text, path, html):
    from cdnlake.reports.html import breakable

    assert str(breakable(text, path)) == html
