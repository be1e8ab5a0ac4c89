"""The "Sweep #N queued." message in a real browser (the Debian chromium package through
Playwright): the sweep form sends the page to the new sweep with that message at its top; once the
sweep's status, re-rendered by the page's poll, leaves pending and waiting (here it runs to done on
the real sim), the message is gone, not left above a status that reads done. A screenshot lands in
``var/artifacts/screenshots/``."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from benchmarks.models import BenchmarkSweep
from benchmarks.services import sweep_execute
from benchmarks.tests.sweep_support import sim_deployment_create
from controlplane.tests.browser.conftest import browser, in_thread, live_route, sign_in  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180),
              pytest.mark.django_db(transaction=True)]

SHOTS = Path(django_settings.BASE_DIR) / "var" / "artifacts" / "screenshots"

SHOWN = """() => ({status: document.querySelector('[data-queue-status]').getAttribute('data-queue-status'),
  badge: document.querySelector('#sweep-progress .status-line .tag').textContent.trim(),
  notices: Array.from(document.querySelectorAll('.messages > li')).map(li => li.textContent.trim())})"""


@pytest.fixture(autouse=True)
def _var_dir(settings, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path


@pytest.fixture
def deployment_id(sim_url) -> int:
    """A ready deployment of the real sim, made before the browser starts (Playwright's sync API
    runs an event loop in this thread, where Django refuses database calls)."""
    return sim_deployment_create(base_url=sim_url).pk


def test_the_queued_message_goes_once_the_sweep_leaves_the_queue(live_server, deployment_id, operator,
                                                                   browser) -> None:  # noqa: F811
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    live_route(page)   # no websocket server here: the status block's poll carries the status
    sign_in(page, live_server.url, operator)
    page.goto(f"{live_server.url}/benchmarks/sweeps/new/?deployment={deployment_id}")
    page.fill("input[name=concurrency]", "1, 2")
    page.fill("input[name=lengths]", "16:8")
    page.fill("input[name=requests]", "4")
    page.click("button[type=submit]:has-text('Start sweep')")
    page.wait_for_url(re.compile(r".*/benchmarks/sweeps/\d+/$"), wait_until="domcontentloaded")
    sweep_id = int(re.search(r"/sweeps/(\d+)/$", page.url).group(1))

    queued = page.evaluate(SHOWN)
    assert queued["status"] == "pending" and queued["notices"] == [f"Sweep #{sweep_id} queued."], queued

    # No worker here: the sweep runs on another thread (Django refuses database calls on this one).
    assert in_thread(lambda: sweep_execute(sweep_id=sweep_id)) == "done"
    assert in_thread(lambda: BenchmarkSweep.objects.get(pk=sweep_id).status) == "done"
    page.wait_for_function("() => document.querySelector('[data-queue-status]')"
                           ".getAttribute('data-queue-status') === 'done'", timeout=15_000)
    done = page.evaluate(SHOWN)
    assert done["badge"] == "done" and done["notices"] == [], done
    assert page.locator("main .messages").count() == 0
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "sweep-queued-notice-gone.png"))

    # A reload of the finished sweep has no message to drop, and the page says done.
    page.reload(wait_until="domcontentloaded")
    assert page.evaluate(SHOWN)["notices"] == []
