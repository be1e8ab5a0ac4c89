"""Chart axes in a real browser (the Debian chromium package through Playwright): a sweep whose
requests take over 10 s end to end (the real sim, its times scaled up) draws its E2E chart in
seconds, the axis title saying so, where it drew ms ticks such as ``150000``; no chart on the page
draws a number of four or more digits without a thousands separator. What uPlot draws on its
canvas is read back by recording the canvas's fillText calls. A screenshot lands in
``var/artifacts/screenshots/``."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from benchmarks.services import sweep_create, sweep_execute
from benchmarks.tests.sweep_support import sim_deployment_create, sim_start
from controlplane.tests.browser.conftest import browser, sign_in  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

SHOTS = Path(django_settings.BASE_DIR) / "var" / "artifacts" / "screenshots"

# Every text drawn on a canvas, with the canvas's chart title.
RECORD = """(() => {
  const fill = CanvasRenderingContext2D.prototype.fillText;
  window.drawnTexts = [];
  CanvasRenderingContext2D.prototype.fillText = function (text, x, y, w) {
    const chart = this.canvas.closest('.chart');
    const title = chart && chart.querySelector('.u-title');
    window.drawnTexts.push({chart: title ? title.textContent : '', text: String(text)});
    return fill.call(this, text, x, y, w);
  };
})();"""


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.fixture
def long_sweep(tmp_path: Path, operator) -> int:
    """A finished sweep of the real sim at ten times its modelled times: two requests at
    concurrency 2 of 240 output tokens each, about 12 s end to end. Made before the browser starts
    (Playwright's sync API runs an event loop in this thread, where Django refuses database calls)."""
    base, proc = sim_start(tmp_path / "sim.log", time_scale=10.0)
    try:
        sweep = sweep_create(deployment=sim_deployment_create(base_url=base), user=operator,
                             grid={"concurrency": [2], "lengths": [[16, 240]], "requests": 2})
        assert sweep_execute(sweep_id=sweep.pk) == "done"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return sweep.pk


@pytest.mark.django_db(transaction=True)
def test_a_long_e2e_axis_is_drawn_in_seconds_with_separated_ticks(live_server, long_sweep, admin_user,
                                                                   browser) -> None:  # noqa: F811
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.add_init_script(RECORD)
    sign_in(page, live_server.url, admin_user)
    page.goto(f"{live_server.url}/benchmarks/sweeps/{long_sweep}/")
    page.wait_for_selector(".chart canvas")
    page.wait_for_timeout(300)
    spec = page.evaluate("""() => Array.from(document.querySelectorAll('.chart[data-chart]'))
      .map(c => JSON.parse(document.getElementById(c.getAttribute('data-chart')).textContent))
      .find(s => s.title.startsWith('E2E'))""")
    assert spec and spec["y"]["unit"] == "ms", spec
    largest = max(p[1] for s in spec["series"] for p in s["points"] if p[1] is not None)
    assert largest > 10_000, spec   # the page's data is in ms, above the 10 s switch

    drawn = page.evaluate("() => window.drawnTexts")
    e2e = [d["text"] for d in drawn if d["chart"].startswith("E2E")]
    assert any(t.endswith("(s)") for t in e2e) and not any(t.endswith("(ms)") for t in e2e), e2e
    # its ticks are seconds: around the largest value / 1000, nowhere near the ms figures
    ticks = [float(t.replace(",", "")) for t in e2e if re.fullmatch(r"-?[\d,]+(\.\d+)?", t)]
    assert ticks and max(ticks) < largest / 1000 * 2, (ticks, largest)
    # no chart draws a whole part of four digits or more (150000, 1024): thousands are separated
    assert drawn and not [d for d in drawn if re.search(r"(?<![\d.])\d{4}", d["text"])], drawn
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(".chart", has=page.locator(".u-title", has_text="E2E")).first.screenshot(
        path=str(SHOTS / "sweep-e2e-chart-seconds.png"))
