"""The report as a person sees it: Debian's Chromium (driven by Playwright) at a desktop
width and a phone width. No sideways overflow of the page, chart text legible, charts
drawn, and the figures written as people read them."""

from __future__ import annotations

import os
import shutil
from datetime import date

import pytest

from cdnlake.reports.build import write_reports
from cdnlake.warehouse.named import Slice
from tests.fixture_lake import build_fixture_lake
from tests.reports.operator_day import DAY as OPERATOR_DAY
from tests.reports.operator_day import add_operator_day, add_today
from tests.sessions import session_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (make test installs it)"
)
DESKTOP, PHONE = 1400, 390
MIN_TEXT_PX = 10.0


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    config = build_fixture_lake(root)
    daily = write_reports(
        config, date(2026, 11, 20), formats=("html",), session=session_for(config)
    )[0]
    ranged = write_reports(
        config,
        date(2026, 11, 18),
        formats=("html",),
        end=date(2026, 11, 20),
        session=session_for(config),
    )[0]
    # A day of AI crawlers, long paths missing the cache and every status class, and a
    # range that reaches today (a partial day).
    add_operator_day(config)
    today = add_today(config)
    operator = write_reports(config, OPERATOR_DAY, formats=("html",), session=session_for(config))[
        0
    ]
    to_today = write_reports(
        config, date(2026, 11, 18), formats=("html",), end=today, session=session_for(config)
    )[0]
    # A slice compared with the day before, and a sliced range against a week before.
    piece = Slice.parse(host="a.example", status_class="2xx", cache_status="miss")
    sliced = write_reports(
        config,
        OPERATOR_DAY,
        formats=("html",),
        piece=piece,
        compare="previous",
        session=session_for(config),
    )
    sliced_range = write_reports(
        config,
        date(2026, 11, 19),
        formats=("html",),
        end=OPERATOR_DAY,
        piece=Slice.parse(path_prefix="/", country="de"),
        compare="week",
        session=session_for(config),
    )[0]
    return {
        "daily": daily,
        "range": ranged,
        "operator": operator,
        "to_today": to_today,
        "sliced": sliced[0],
        "sliced_range": sliced_range,
    }


def look(browser, path, width: int, shots):
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    page.screenshot(path=str(shots / f"{path.stem}-{width}.png"), full_page=True)
    if os.environ.get("CDNLAKE_SHOTS"):  # a folder to keep them in, to look at
        page.screenshot(
            path=f"{os.environ['CDNLAKE_SHOTS']}/{path.stem}-{width}.png", full_page=True
        )
    return page, errors


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
@pytest.mark.parametrize(
    "kind", ["daily", "range", "operator", "to_today", "sliced", "sliced_range"]
)
def test_no_overflow_and_legible_charts(browser, pages, kind, width, tmp_path):
    page, errors = look(browser, pages[kind], width, tmp_path)
    try:
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"the page is {scroll}px wide at {width}px"
        # Every chart's text, as rendered: its font size in the SVG times the SVG's scale.
        sizes = page.evaluate(
            """[...document.querySelectorAll('svg.chart text')].map(t =>
                 parseFloat(t.getAttribute('font-size')) * t.getScreenCTM().a)"""
        )
        assert len(sizes) > 20 and min(sizes) >= MIN_TEXT_PX, sorted(sizes)[:3]
        # The charts were drawn: bars and lines with a size on screen.
        drawn = page.evaluate(
            """[...document.querySelectorAll('svg.chart rect, svg.chart polyline')]
                 .filter(e => e.getBoundingClientRect().width > 0).length"""
        )
        assert drawn >= 8
        # Nothing wider than the screen but charts and long tables, which scroll in their box.
        wide = page.evaluate(
            f"""[...document.querySelectorAll('main *')].filter(e =>
                 e.getBoundingClientRect().right > {width} + 1 && !e.closest('.chartbox, .scroll')
                 && e.offsetParent !== null).map(e => e.tagName + '.' + e.className)"""
        )
        assert not wide, wide[:5]
        assert not [e for e in errors if "Content Security Policy" not in e], errors
    finally:
        page.close()


def test_figures_are_written_as_people_read_them(browser, pages, tmp_path):
    page, _ = look(browser, pages["daily"], DESKTOP, tmp_path)
    try:
        cards = page.inner_text("#headline")
        assert "10\n" in cards or "10 " in cards  # requests: an integer, not 10.00
        assert "29.2 kB" in cards  # bytes in one unit style
        assert "pp vs day before" in cards  # rate changes in percentage points
        assert ".00" not in page.inner_text("#status_codes").split("Share")[0]
        legend = page.inner_text("#cache-statuses")
        for status in ("HIT", "MISS", "EXPIRED", "STALE", "UPDATING", "REVALIDATED", "BYPASS"):
            assert status in legend
        assert "no cache status logged" in legend  # "-" is explained
        zones = page.inner_text("#zones")
        assert "1 · z1" in zones and "2 · z2" in zones  # names beside ids
        assert page.inner_text("#browser") and page.inner_text("#countries")
        # the hourly tables are folded
        assert page.evaluate("document.querySelector('details#traffic_by_hour').open") is False
        assert "request_hit_ratio_pct" not in page.inner_text("main")
    finally:
        page.close()


def test_hostile_text_does_not_run_in_the_browser(browser, pages, tmp_path):
    page, _ = look(browser, pages["daily"], DESKTOP, tmp_path)
    try:
        assert page.evaluate("document.scripts.length") == 0
        assert "<script>alert(1)</script>" in page.inner_text("main")  # shown as text
    finally:
        page.close()


# Every word of the page's text (charts aside, folded tables unfolded) whose characters
# are laid out on more than one line: a word broken inside. A word runs between spaces;
# a slash ends one too (a path may wrap after its slashes, and only there). Measured on
# the rendered line boxes, one Range per word.
BROKEN_WORDS = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const broken = [];
  const range = document.createRange();
  const walker = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest('svg')) continue;
    for (const m of node.data.matchAll(/[^\\s\\/]+\\/?/g)) {
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const rects = [...range.getClientRects()].filter(r => r.width > 0 && r.height > 0);
      if (!rects.length) continue;
      const tops = rects.map(r => r.top);
      const tall = Math.max(...rects.map(r => r.height));
      if (Math.max(...tops) - Math.min(...tops) > tall / 2) {
        const at = node.parentElement.closest('[id]');
        broken.push((at ? at.id : node.parentElement.tagName) + ': ' + m[0]);
      }
    }
  }
  return broken;
}"""


@pytest.mark.parametrize("kind", ["daily", "operator", "to_today"])
def test_on_a_phone_no_title_or_path_is_broken_inside_a_word(browser, pages, kind, tmp_path):
    page, _ = look(browser, pages[kind], PHONE, tmp_path)
    try:
        words = page.evaluate(
            "[...document.querySelectorAll('main td')].map(e => e.textContent).join(' ')"
        )
        if kind == "operator":  # the long path is there to be wrapped, and is kept whole
            assert "a-very-long-file-name-without-any-breaks" in words
        broken = page.evaluate(BROKEN_WORDS)
        assert not broken, broken[:10]
        # a path too long for its cell ends in an ellipsis, the whole of it in the tooltip
        if kind == "operator":
            clipped = page.evaluate(
                """[...document.querySelectorAll('#top_miss_paths_by_bytes .pieces')]
                     .filter(p => [...p.children].some(s => s.scrollWidth > s.clientWidth + 1))
                     .map(p => [p.title, getComputedStyle(p.lastElementChild).textOverflow])"""
            )
            assert any(t.endswith(".mp4") for t, _ in clipped), clipped
            assert all(t.startswith("a.example/") and o == "ellipsis" for t, o in clipped)
    finally:
        page.close()


@pytest.mark.parametrize("kind", ["operator", "to_today"])
def test_a_chart_that_scrolls_says_so(browser, pages, kind, tmp_path):
    """On a phone each chart overflows its box and shows the cue; on a desktop, where it
    fits, no cue at all."""
    cues = """[...document.querySelectorAll('#charts .chartwrap')].map(w => {
        const box = w.querySelector('.chartbox'), hint = w.querySelector('.scroll-hint');
        const r = hint.getBoundingClientRect();
        return {overflows: box.scrollWidth > box.clientWidth + 1,
                hint: getComputedStyle(hint).display !== 'none' && r.height > 0 && r.width > 0,
                fade: getComputedStyle(w, '::after').display !== 'none'};
      })"""
    for width, scrolls in ((PHONE, True), (DESKTOP, False)):
        page, _ = look(browser, pages[kind], width, tmp_path)
        try:
            seen = page.evaluate(cues)
            assert len(seen) == 4
            want = {"overflows": scrolls, "hint": scrolls, "fade": scrolls}
            assert all(s == want for s in seen), (width, seen)
            if scrolls:  # the cue is on screen, under its chart, in the panel
                assert page.get_by_text("scroll sideways").first.is_visible()
                # and the fade goes once the chart is scrolled to its end
                fade = "getComputedStyle(document.querySelector('.chartwrap'), '::after')"
                assert page.evaluate(f"{fade}.opacity") == "1"
                page.evaluate("document.querySelector('.chartbox').scrollLeft = 1e6")
                page.wait_for_function(f"{fade}.opacity === '0'", timeout=10_000)
        finally:
            page.close()


def test_a_partial_day_is_marked_in_the_range_charts(browser, pages, tmp_path):
    """Today's place in each chart is hatched, its bars pale, and the legend says why."""
    page, _ = look(browser, pages["to_today"], DESKTOP, tmp_path)
    try:
        seen = page.evaluate(
            """[...document.querySelectorAll('#charts .panel')].map(p => {
                 const band = p.querySelector('rect.partial-band');
                 const r = band ? band.getBoundingClientRect() : {width: 0, height: 0};
                 const marked = [...p.querySelectorAll('svg .partial')].map(e =>
                   e.tagName === 'rect' ? getComputedStyle(e).fillOpacity
                                        : getComputedStyle(e).fill);
                 const key = p.querySelector('.legend .partial-key');
                 return {band: r.width > 10 && r.height > 100, marked,
                         key: key ? key.innerText : null};
               })"""
        )
        assert len(seen) == 4
        for chart in seen:
            assert chart["band"] and chart["key"] and chart["key"].startswith("partial day: ")
            assert chart["marked"], chart
        bars, _, points, _ = seen
        assert bars["marked"] == ["0.45"]  # the one partial bar, pale
        assert set(points["marked"]) == {"rgb(255, 255, 255)"}  # hollow points
    finally:
        page.close()


def test_a_sliced_report_names_its_slice_and_shows_its_changes(browser, pages, tmp_path):
    page, _ = look(browser, pages["sliced"], PHONE, tmp_path)
    try:
        assert page.inner_text("#slice") == "Slice: host a.example, 2xx responses, cache MISS"
        assert "report-all-host-a.example_2xx_miss-2026-11-21-vs-previous" in pages["sliced"].name
        assert "compared with the previous day (2026-11-20)" in page.inner_text(".sub")
        assert "% vs previous day" in page.inner_text("#headline")
        assert "change" in page.inner_text("#top_miss_paths_by_bytes")  # under each figure
        # The day compared with drawn dashed in every chart.
        dashed = page.evaluate("document.querySelectorAll('svg.chart .compared').length")
        assert dashed >= 4
    finally:
        page.close()
