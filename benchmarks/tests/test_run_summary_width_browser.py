"""The run page's Summary table in a real browser (the Debian chromium package through Playwright):
at a 1400 px window its label column is wide enough that a fact's help text (what "Client CPU per
streamed event" measures) reads in a few lines, where a 200 px column beside a mostly empty page
wrapped it to some twenty; every value still sits in its row's number column. A screenshot lands
in ``var/artifacts/screenshots/``."""
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

# Each help text of the Summary table: its row's label, the label cell's width, the help's lines
# (its height over its line height), and the value cell's box beside it.
MEASURE = """() => {
  const table = document.querySelector('table.kv.summary');
  const helps = Array.from(table.querySelectorAll('.fact-help')).map(h => {
    const cell = h.closest('td'), row = cell.closest('tr'), value = row.querySelector('td.num');
    const lineHeight = parseFloat(getComputedStyle(h).lineHeight);
    return {label: cell.firstChild.textContent.trim(), cell: cell.getBoundingClientRect().width,
            lines: Math.round(h.getBoundingClientRect().height / lineHeight),
            valueLeft: value.getBoundingClientRect().left, cellRight: cell.getBoundingClientRect().right};
  });
  return {table: table.getBoundingClientRect().width, main: document.querySelector('main').clientWidth,
          helps: helps};
}"""


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.fixture
def run_id(sim_url, operator) -> int:
    """A run of a finished sweep of the real sim (its summary has the client's CPU per streamed
    event). Made before the browser starts (Playwright's sync API runs an event loop in this thread,
    where Django refuses database calls)."""
    sweep = sweep_create(deployment=sim_deployment_create(base_url=sim_url), user=operator,
                         grid={"concurrency": [2], "lengths": [[16, 8]], "requests": 4})
    assert sweep_execute(sweep_id=sweep.pk) == "done"
    return BenchmarkRun.objects.get(sweep=sweep).pk


@pytest.mark.django_db(transaction=True)
def test_the_summary_gives_help_texts_room_to_read_in_a_few_lines(live_server, run_id, admin_user,
                                                                   browser) -> None:  # noqa: F811
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    sign_in(page, live_server.url, admin_user)
    page.goto(f"{live_server.url}/benchmarks/runs/{run_id}/")
    page.wait_for_selector("table.kv.summary")
    shown = page.evaluate(MEASURE)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("table.kv.summary").screenshot(path=str(SHOTS / "run-summary-1400.png"))

    cpu = [h for h in shown["helps"] if h["label"].startswith("Client CPU per streamed event")]
    assert cpu, shown
    for help_text in shown["helps"]:
        assert help_text["cell"] >= 450, (help_text, shown)      # was about 200 px
        assert help_text["lines"] <= 6, (help_text, shown)       # was about 20 lines
        assert help_text["valueLeft"] >= help_text["cellRight"] - 1, help_text
