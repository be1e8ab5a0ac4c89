"""The sweep page's results table in a real browser (the Debian chromium package through
Playwright): at a 1400 px window every column, ITL, E2E, Failures and Flags included, is in view
without scrolling (headers name the figure on one line and its unit on a second, cells are padded
less, flag names wrap), every header still there; on a narrow window it scrolls in its box as
before. Screenshots land in ``var/artifacts/screenshots/``."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from benchmarks.models import BenchmarkRun
from benchmarks.services import sweep_create, sweep_execute
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.tests.browser.conftest import browser, sign_in  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

SHOTS = Path(django_settings.BASE_DIR) / "var" / "artifacts" / "screenshots"

# The results table's box and the header cells: their text (unit on its own line) and whether each
# lies inside the box as shown.
MEASURE = """() => {
  const table = document.querySelector('table.results'), box = table.closest('.table-scroll');
  const b = box.getBoundingClientRect();
  const heads = Array.from(table.querySelectorAll('thead tr:first-child th')).map(th => {
    const r = th.getBoundingClientRect(), unit = th.querySelector('.unit');
    return {text: th.innerText.replace(/\\s+/g, ' ').trim(), inView: r.left >= b.left - 1 && r.right <= b.right + 1,
            unitBelow: unit ? unit.getBoundingClientRect().top >= th.firstChild.parentNode.getBoundingClientRect().top
                              && getComputedStyle(unit).display === 'block' : null};
  });
  const flags = Array.from(table.querySelectorAll('tbody td.flags')).map(td => td.getBoundingClientRect().width);
  return {scroll: box.scrollWidth, client: box.clientWidth, overflow: box.getAttribute('data-overflow'),
          heads: heads, flagWidths: flags};
}"""


# The E2E cells (the four after TTFT, TPOT and ITL's twelve, which follow the seven single columns).
# The run ids too: a long-lived install's are five digits and more, where a fresh test database's are one.
WIDEST_E2E = """() => document.querySelectorAll('table.results tbody tr').forEach(tr => {
  Array.from(tr.children).slice(19, 23).forEach((td, i) => { td.textContent = ['24,890', '24,113', '41,226', '61,904'][i]; });
  tr.querySelector('.run-id').textContent = '#123456';
})"""


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.fixture
def swept(sim_url, operator) -> int:
    """A finished sweep of the real sim with closed- and open-loop points over two length pairs,
    one point carrying two long flag names. Made before the browser starts (Playwright's sync API
    runs an event loop in this thread, where Django refuses database calls)."""
    deployment = sim_deployment_create(base_url=sim_url)
    sweep = sweep_create(deployment=deployment, user=operator, grid={
        "concurrency": [1, 2], "request_rates": [5], "lengths": [[16, 8], [32, 8]], "requests": 4})
    assert sweep_execute(sweep_id=sweep.pk) == "done"
    run = BenchmarkRun.objects.filter(sweep=sweep).order_by("ordinal").first()
    run.flags = ["output_length_mismatch", "concurrency_shortfall"]
    run.save(update_fields=["flags"])
    return sweep.pk


@pytest.mark.django_db(transaction=True)
def test_the_results_table_fits_a_1400_px_window_and_scrolls_on_a_narrow_one(live_server, swept, admin_user,
                                                                               browser) -> None:  # noqa: F811
    SHOTS.mkdir(parents=True, exist_ok=True)
    seen = {}
    for width in (1400, 900):
        context = browser.new_context(viewport={"width": width, "height": 1000})
        page = context.new_page()
        sign_in(page, live_server.url, admin_user)
        page.goto(f"{live_server.url}/benchmarks/sweeps/{swept}/")
        page.wait_for_selector("table.results tbody tr")
        # The sim's points end in tens of ms; a real model's in tens of seconds, as the E2E cells
        # then read ("24,890"): the table must fit those, so its E2E cells are given such figures.
        page.evaluate(WIDEST_E2E)
        if width == 900:   # the box's overflow mark follows a resize observer
            page.wait_for_function("() => document.querySelector('table.results').closest('.table-scroll')"
                                   ".getAttribute('data-overflow') === 'right'")
        seen[width] = page.evaluate(MEASURE)
        page.locator("table.results").locator("xpath=..").screenshot(path=str(SHOTS / f"sweep-results-fit-{width}.png"))
        context.close()

    wide = seen[1400]
    assert wide["scroll"] <= wide["client"] and wide["overflow"] is None, (wide["scroll"], wide["client"], wide)
    texts = [h["text"] for h in wide["heads"]]
    for header in ("Point", "Status", "Requests", "Output (tok/s)", "Per GPU (tok/s)", "Requests (req/s)",
                   "Goodput (req/s)", "TTFT (ms)", "TPOT (ms)", "ITL (ms)", "E2E (ms)", "Failures (requests)",
                   "Flags"):
        assert header in texts, (header, texts)
    assert all(h["inView"] for h in wide["heads"]), wide["heads"]
    # each unit sits on its own line under the figure's name
    assert all(h["unitBelow"] for h in wide["heads"] if h["unitBelow"] is not None), wide["heads"]
    assert sum(h["unitBelow"] is not None for h in wide["heads"]) >= 9, wide["heads"]
    # the flagged point's two names wrap instead of widening the column to both on one line
    assert wide["flagWidths"] and max(wide["flagWidths"]) < 200, wide

    narrow = seen[900]
    assert narrow["scroll"] > narrow["client"] and narrow["overflow"] == "right", narrow
