"""Wide pages in a real browser (the Debian chromium package through Playwright): the page takes
the window's width, so the sweep's results table (about 1800 px) fits on a 1920 px screen instead
of a 1155 px box; where it does not fit (about 1000 px and narrower: at 1400 px it fits, see
test_sweep_results_fit_browser.py) its box scrolls and marks the side its hidden
columns are on, which the stylesheet fades, and draws a scroll bar of its own that scrolls it (the
browser's own is invisible in headless Chromium, as on macOS); chart legends stay inside their cards
and name their series until a point is hovered; admin pages ask for no /favicon.ico (a 404 in the
console). Screenshots of the scrolled table land in ``var/artifacts/screenshots/``."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.services import sweep_create, sweep_execute
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.tests.browser.conftest import browser, sign_in  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

# the results table's scroll box
BOX = "document.querySelector('table.results').closest('.table-scroll')"

MEASURE = """() => {
  const box = document.querySelector('table.results').closest('.table-scroll');
  const legends = Array.from(document.querySelectorAll('.chart .u-legend')).map(l => {
    const card = l.closest('.chart').getBoundingClientRect(), r = l.getBoundingClientRect();
    return {inside: r.right <= card.right && r.left >= card.left, scrolls: l.scrollWidth > l.clientWidth};
  });
  return {main: document.querySelector('main').clientWidth, box: box.clientWidth, table: box.scrollWidth,
          overflow: box.getAttribute('data-overflow'), legends: legends};
}"""


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.fixture
def swept(sim_url, operator) -> int:
    """A finished sweep with closed- and open-loop points over two length pairs: a results table
    about 1800 px wide and ten charts. Made before the browser starts (Playwright's sync API runs
    an event loop in this thread, where Django refuses database calls)."""
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator, grid={
        "concurrency": [1, 2], "request_rates": [5], "lengths": [[16, 8], [32, 8]], "requests": 4})
    assert sweep_execute(sweep_id=sweep.pk) == "done"
    return sweep.pk


@pytest.mark.django_db(transaction=True)
def test_wide_tables_use_the_window_and_say_when_they_scroll(live_server, swept, admin_user,
                                                             browser) -> None:  # noqa: F811
    seen = {}
    for width in (1920, 1000):
        context = browser.new_context(viewport={"width": width, "height": 1000})
        page = context.new_page()
        missing: list[str] = []
        page.on("response", lambda r, missing=missing: missing.append(r.url) if r.status == 404 else None)
        sign_in(page, live_server.url, admin_user)
        page.goto(f"{live_server.url}/benchmarks/sweeps/{swept}/")
        page.wait_for_selector(".chart .u-legend")
        seen[width] = page.evaluate(MEASURE)
        if width == 1000:
            page.evaluate(f"() => {{ const b = {BOX}; b.scrollLeft = b.scrollWidth; }}")
            page.wait_for_function(f"() => {BOX}.getAttribute('data-overflow') === 'left'")
            page.evaluate(f"() => {{ {BOX}.scrollLeft = 40; }}")
            page.wait_for_function(f"() => {BOX}.getAttribute('data-overflow') === 'left right'")
            mask = page.evaluate(f"() => getComputedStyle({BOX}).maskImage")
            assert "linear-gradient" in mask
        # a list page's tables (no box of their own in the template) are boxed too, and the top
        # links wrap: at 560 px the page does not scroll sideways, its tables do
        page.set_viewport_size({"width": 560, "height": 1000})
        page.goto(f"{live_server.url}/benchmarks/")
        page.wait_for_load_state("networkidle")
        narrow_list = page.evaluate("""() => ({page: document.documentElement.scrollWidth, window: window.innerWidth,
            unboxed: Array.from(document.querySelectorAll('main table')).filter(t => !t.closest('.table-scroll')).length,
            wide: Array.from(document.querySelectorAll('main .table-scroll')).some(b => b.scrollWidth > b.clientWidth)})""")
        assert narrow_list["unboxed"] == 0 and narrow_list["wide"], narrow_list
        assert narrow_list["page"] <= narrow_list["window"], narrow_list   # the top links wrap too
        page.set_viewport_size({"width": width, "height": 1000})
        page.goto(f"{live_server.url}/admin/")
        page.wait_for_load_state("networkidle")
        assert not [url for url in missing if url.endswith("/favicon.ico")], missing
        context.close()
    wide, narrow = seen[1920], seen[1000]
    # 1920 px: the page spans the window (a 1200 px page left a 1155 px box); the table fits, unmarked.
    assert wide["main"] == 1920, wide
    assert wide["box"] == wide["table"] > 1155 and wide["overflow"] is None, wide
    # 1000 px: the table scrolls in its box, which says its hidden columns are to the right.
    assert narrow["box"] < narrow["table"] and narrow["overflow"] == "right", narrow
    for shown in (wide, narrow):
        assert shown["legends"] and all(legend["inside"] and not legend["scrolls"] for legend in shown["legends"])


def _signed_in_page(browser, live_server, user, width: int):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    sign_in(page, live_server.url, user)
    return context, page


LEGEND = """() => { const l = document.querySelector('.chart .u-legend');
  return Array.from(l.querySelectorAll('tr')).filter(r => getComputedStyle(r).display !== 'none')
    .map(r => [r.querySelector('th').innerText.trim(), r.querySelector('td').innerText.trim(),
                 getComputedStyle(r.querySelector('td')).display !== 'none']); }"""


@pytest.mark.django_db(transaction=True)
def test_chart_legends_name_the_series_until_a_point_is_hovered(live_server, swept, admin_user,
                                                                 browser) -> None:  # noqa: F811
    context, page = _signed_in_page(browser, live_server, admin_user, 1400)
    page.goto(f"{live_server.url}/benchmarks/sweeps/{swept}/")
    page.wait_for_selector(".chart .u-legend")
    # Nothing hovered: the series names, no "—" that reads as missing data, no x-axis row.
    assert page.evaluate(LEGEND) == [["16/8", "", False], ["32/8", "", False]]
    assert "—" not in page.locator(".chart .u-legend").first.inner_text()
    # Hovering the chart gives the point's values after the names.
    over = page.locator(".chart .u-over").first
    box = over.bounding_box()
    over.hover(position={"x": box["width"] - 2, "y": box["height"] / 2})
    page.wait_for_function("() => !document.querySelector('.chart .u-legend').classList.contains('legend-idle')")
    hovered = page.evaluate(LEGEND)
    assert hovered[0] == ["concurrency (requests)", "2 requests", True], hovered
    assert [row[0] for row in hovered[1:]] == ["16/8", "32/8"]
    assert all(row[1].endswith(" tok/s") and row[2] for row in hovered[1:]), hovered
    page.mouse.move(1, 1)
    page.wait_for_function("() => document.querySelector('.chart .u-legend').classList.contains('legend-idle')")
    context.close()


RAIL = """() => { const box = document.querySelector('table.results').closest('.table-scroll');
  const rail = box.querySelector(':scope > .scroll-rail'), thumb = rail && rail.firstChild;
  const r = rail ? rail.getBoundingClientRect() : null, t = thumb ? thumb.getBoundingClientRect() : null;
  const b = box.getBoundingClientRect();
  const last = Array.from(box.querySelectorAll('thead th')).pop().getBoundingClientRect();
  return {overflow: box.getAttribute('data-overflow'), border: getComputedStyle(box).borderTopWidth,
          rail: r && !rail.hidden ? {height: r.height, left: r.left - b.left, right: b.right - r.right,
                                     bottomGap: b.bottom - r.bottom} : null,
          thumb: t ? {left: t.left - r.left, width: t.width} : null,
          lastHeaderShown: last.right <= b.right + 1 && last.left >= b.left, scroll: box.scrollLeft,
          max: box.scrollWidth - box.clientWidth}; }"""


@pytest.mark.django_db(transaction=True)
def test_a_cut_off_table_shows_a_scroll_bar_that_scrolls_it(live_server, swept, admin_user,
                                                            browser) -> None:  # noqa: F811
    # Headless Chromium, like macOS, draws no scroll bar until one scrolls: on a narrow window the
    # results table's ITL and E2E columns were simply cut off at the box's edge.
    from django.conf import settings
    shots = Path(settings.BASE_DIR) / "var" / "artifacts" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    for width in (900, 1000):
        context, page = _signed_in_page(browser, live_server, admin_user, width)
        page.goto(f"{live_server.url}/benchmarks/sweeps/{swept}/")
        page.wait_for_selector("table.results")
        page.wait_for_function("() => document.querySelector('table.results').closest('.table-scroll')"
                               ".getAttribute('data-overflow') === 'right'")
        before = page.evaluate(RAIL)
        assert before["border"] == "1px" and not before["lastHeaderShown"], before
        rail, thumb = before["rail"], before["thumb"]
        assert rail and rail["height"] == 12 and rail["left"] <= 1 and rail["right"] <= 1, before
        assert rail["bottomGap"] >= 0 and thumb["left"] == 0 and 0 < thumb["width"] < width, before
        box = page.locator("table.results").locator("xpath=..")
        box.screenshot(path=str(shots / f"sweep-results-{width}.png"))
        # Dragging the thumb to the rail's end brings the last columns (E2E) into view.
        handle = page.locator("table.results + .scroll-rail .scroll-thumb").bounding_box()
        page.mouse.move(handle["x"] + 5, handle["y"] + 5)
        page.mouse.down()
        page.mouse.move(handle["x"] + width, handle["y"] + 5, steps=5)
        page.mouse.up()
        page.wait_for_function("() => document.querySelector('table.results').closest('.table-scroll')"
                               ".getAttribute('data-overflow') === 'left'")
        after = page.evaluate(RAIL)
        assert after["lastHeaderShown"] and after["scroll"] >= after["max"] - 1, after
        assert after["thumb"]["left"] > 0 and after["rail"]["left"] <= 1, after
        box.screenshot(path=str(shots / f"sweep-results-{width}-scrolled.png"))
        context.close()
