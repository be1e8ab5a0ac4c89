"""A sweep named with one 200-character word (the longest name the form takes, with no space or
hyphen to break at) fits a 1280 px window in a real browser (the Debian chromium package through
Playwright): the sweep page's heading and the benchmarks page's name cell break the word instead
of running off the page."""
from __future__ import annotations

import pytest

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from controlplane.tests.browser.conftest import browser, sign_in  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

LONG_NAME = "qwen3_8b_tp2_decode_heavy_" * 7 + "x" * 18
MEASURE = "() => ({page: document.documentElement.scrollWidth, window: window.innerWidth})"


@pytest.fixture
def sweep_id(db) -> int:
    """A done sweep with the long name, made before the browser starts (Playwright's sync API
    runs an event loop in this thread, where Django refuses database calls)."""
    return BenchmarkSweep.objects.create(name=LONG_NAME, status=SweepStatus.DONE).pk


@pytest.mark.django_db(transaction=True)
def test_a_200_character_sweep_name_does_not_widen_the_page(live_server, sweep_id, admin_user,
                                                            browser) -> None:  # noqa: F811
    assert len(LONG_NAME) == 200 and " " not in LONG_NAME and "-" not in LONG_NAME  # no break opportunity
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, live_server.url, admin_user)

    page.goto(f"{live_server.url}/benchmarks/sweeps/{sweep_id}/", wait_until="load")
    heading = page.locator("h1")
    assert LONG_NAME in heading.inner_text().replace("\n", "")
    seen = page.evaluate(MEASURE)
    assert seen["page"] <= seen["window"] == 1280, seen
    box = heading.bounding_box()
    assert box["x"] + box["width"] <= 1280 and box["height"] > 60, box  # wrapped onto lines

    page.goto(f"{live_server.url}/benchmarks/", wait_until="load")
    cell = page.locator("td.name", has_text=LONG_NAME[:40])
    assert cell.count() == 1
    seen = page.evaluate(MEASURE)
    context.close()
    assert seen["page"] <= seen["window"] == 1280, seen
