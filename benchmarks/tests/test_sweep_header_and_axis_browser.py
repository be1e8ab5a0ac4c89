"""The sweep page's layout in a real browser (the Debian chromium package through Playwright): the
header's buttons stay on one line, "All benchmarks" last, with the note saying why the What-if is
not available on a line of its own below the header row rather than between the buttons (where it
pushed "All benchmarks" onto a second line); every chart's axis titles are drawn whole inside the
chart, the per-GPU chart's a short "tok/s per GPU" (its "output per GPU (tok/s)" was cut to
"output per GPU (to"). Screenshots land in ``var/artifacts/screenshots/``."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from benchmarks.services import sweep_create, sweep_execute
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.tests.browser.conftest import browser, sign_in  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

SHOTS = Path(django_settings.BASE_DIR) / "var" / "artifacts" / "screenshots"

# The header: each shown button's text and box, the title's and the header's boxes, and the note
# saying why the What-if is not available (its box, and whether it sits inside the header).
HEADER = """() => {
  const head = document.querySelector('main .page-head');
  const box = e => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, left: r.left,
                                                                  right: r.right}; };
  const buttons = Array.from(head.querySelectorAll('.actions .button')).filter(b => b.offsetParent !== null)
    .map(b => ({text: b.innerText.trim(), ...box(b)}));
  const note = document.querySelector('[data-whatif-refused]');
  return {buttons: buttons, title: box(head.querySelector('h1')), head: box(head),
          note: note ? {text: note.innerText.trim(), inHead: head.contains(note), ...box(note)} : null};
}"""

# Each drawn chart's axis titles (uPlot draws them on its canvas): the text, the font it is drawn
# in, its length in that font (px), the plot's side it runs along (px), and for the y title, centred
# on the plot's height, where its two ends fall from the canvas's top (px).
AXES = """() => Array.from(document.querySelectorAll('.chart[data-chart]')).filter(c => c.querySelector('canvas')).map(c => {
  const C = window.CeilingCharts, spec = JSON.parse(document.getElementById(c.getAttribute('data-chart')).textContent);
  const canvas = c.querySelector('canvas').getBoundingClientRect(), plot = c.querySelector('.u-over').getBoundingClientRect();
  const ctx = document.createElement('canvas').getContext('2d');
  return {title: spec.title, axes: ['x', 'y'].map(key => {
    const text = C.axisTitle(spec[key]), font = C.labelFontFitting(text);
    ctx.font = font;
    const length = ctx.measureText(text).width, middle = plot.top + plot.height / 2 - canvas.top;
    return {text: text, font: font, length: length, plot: key === 'y' ? plot.height : plot.width,
            from: middle - length / 2, to: middle + length / 2, canvas: canvas.height};
  })};
})"""


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.fixture
def sweeps(sim_url, operator) -> dict[str, int]:
    """Two finished sweeps of the real sim: closed-loop points (its charts against concurrency, a
    What-if offered) and open-loop points alone (no closed-loop point: the What-if is not available,
    and the page says why). Made before the browser starts (Playwright's sync API runs an event loop
    in this thread, where Django refuses database calls)."""
    out = {}
    for name, grid in (("closed", {"concurrency": [1, 2], "lengths": [[16, 8]], "requests": 4}),
                       ("open", {"request_rates": [5, 10], "lengths": [[16, 8]], "requests": 4})):
        sweep = sweep_create(deployment=sim_deployment_create(base_url=sim_url, recipe_name=f"sim-{name}"),
                             user=operator, grid=grid)
        assert sweep_execute(sweep_id=sweep.pk) == "done"
        out[name] = sweep.pk
    return out


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("width", [1400, 1024])
def test_the_header_buttons_share_one_line_and_axis_titles_fit_their_charts(live_server, sweeps, admin_user,
                                                                            browser, width) -> None:  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": 1000})
    page = context.new_page()
    sign_in(page, live_server.url, admin_user)
    SHOTS.mkdir(parents=True, exist_ok=True)
    seen = {}
    for name, pk in sweeps.items():
        page.goto(f"{live_server.url}/benchmarks/sweeps/{pk}/")
        page.wait_for_selector(".chart canvas")
        page.screenshot(path=str(SHOTS / f"sweep-header-{name}-{width}.png"))
        seen[name] = {"header": page.evaluate(HEADER), "axes": page.evaluate(AXES)}
        page.locator(".chart").nth(1).screenshot(path=str(SHOTS / f"sweep-per-gpu-chart-{name}-{width}.png"))
    context.close()

    # The note is shown, below the header row and outside it, never among the buttons.
    open_head = seen["open"]["header"]
    assert open_head["note"] is not None and open_head["note"]["text"].startswith("What-if not available: "), open_head
    assert not open_head["note"]["inHead"] and open_head["note"]["top"] >= open_head["head"]["bottom"] - 0.5, open_head
    assert seen["closed"]["header"]["note"] is None
    for name, shown in seen.items():
        buttons = shown["header"]["buttons"]
        assert [b["text"] for b in buttons][-1] == "All benchmarks", (name, buttons)
        assert len({round(b["top"]) for b in buttons}) == 1, (name, width, buttons)   # one line
    assert "What-if: a faster kernel…" in [b["text"] for b in seen["closed"]["header"]["buttons"]]

    for name, shown in seen.items():
        charts = {chart["title"]: chart["axes"] for chart in shown["axes"]}
        per_gpu = [t for t in charts if t.startswith("Output throughput per GPU vs ")]
        assert len(per_gpu) == 1 and len(charts) == 5, (name, list(charts))
        assert charts[per_gpu[0]][1]["text"] == "tok/s per GPU", (name, charts[per_gpu[0]])
        for title, (x_title, y_title) in charts.items():
            # each title is no longer than its side of the plot, and the y title, centred on the
            # plot's height, lies inside the canvas from end to end
            assert x_title["length"] <= x_title["plot"] and y_title["length"] <= y_title["plot"], (name, title)
            assert 0 <= y_title["from"] and y_title["to"] <= y_title["canvas"], (name, width, title, y_title)
