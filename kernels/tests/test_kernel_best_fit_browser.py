"""The kernels index at 1400 x 900 in a real browser (the Debian chromium package through
Playwright): the "Best variants" table of the packages' stored H200 jobs fits its box, its long
variant strings wrapped at their commas instead of running off the page behind a scroll bar."""
from __future__ import annotations

import pytest

from controlplane.tests.browser.conftest import browser, sign_in  # noqa: F401 - the fixture
from kernels.models import KernelBest
from kernels.tests.conftest import stored_jobs_ingest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]


MEASURE = """() => {
  const table = document.querySelector('table.kernel-best'), box = table.parentElement;
  const cells = Array.from(table.querySelectorAll('tbody td.variant'));
  return {box: box.clientWidth, table: table.scrollWidth, boxScroll: box.scrollWidth,
          page: document.documentElement.scrollWidth, window: window.innerWidth,
          keys: cells.map(c => c.innerText.trim()),
          wrapped: cells.filter(c => c.querySelector('code').getClientRects().length > 1).length};
}"""


@pytest.fixture
def stored_best(db, settings, tmp_path) -> list[str]:
    """The three packages' stored H200 jobs ingested: their best variants, made before the browser
    starts (Playwright's sync API runs an event loop in this thread, where Django refuses database
    calls). Returns their variants' keys."""
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    stored_jobs_ingest()
    return list(KernelBest.objects.values_list("variant__key", flat=True))


@pytest.mark.django_db(transaction=True)
def test_the_best_variants_table_fits_the_kernels_page_at_1400_px(live_server, stored_best, admin_user,
                                                                    browser) -> None:  # noqa: F811
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    sign_in(page, live_server.url, admin_user)
    page.goto(f"{live_server.url}/kernels/")
    page.wait_for_selector("table.kernel-best")
    seen = page.evaluate(MEASURE)
    context.close()
    # every variant is shown whole: the breaks added after its commas add no character
    assert sorted(seen["keys"]) == sorted(stored_best) and max(map(len, stored_best)) >= 80, seen
    assert seen["wrapped"] > 0, seen   # the long ones take more than one line
    assert seen["table"] <= seen["box"] and seen["boxScroll"] <= seen["box"], seen
    assert seen["page"] <= seen["window"], seen
