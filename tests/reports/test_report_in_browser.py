"""The report as a person sees it: Debian's Chromium (driven by Playwright) at a desktop
width and a phone width. No sideways overflow of the page, chart text legible, charts
drawn, and the figures written as people read them."""

from __future__ import annotations

import shutil
from datetime import date

import pytest

from cdnlake.reports.build import write_reports
from tests.fixture_lake import build_fixture_lake

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
    daily = write_reports(config, date(2026, 11, 20), formats=("html",))[0]
    ranged = write_reports(config, date(2026, 11, 18), formats=("html",), end=date(2026, 11, 20))[0]
    return {"daily": daily, "range": ranged}


def look(browser, path, width: int, shots):
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    page.screenshot(path=str(shots / f"{path.stem}-{width}.png"), full_page=True)
    return page, errors


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
@pytest.mark.parametrize("kind", ["daily", "range"])
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
