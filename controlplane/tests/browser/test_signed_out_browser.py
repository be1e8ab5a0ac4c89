"""A page whose session ends while it is open, in a real browser (the Debian ``chromium`` package
driven by Playwright) against Django's live test server: a viewer has a ready deployment's page
open (its live panel and three process log tails poll every 2 s) and logs out in another tab
of the same browser. The page's polls are answered 401 and nothing of the login page is ever
swapped in; the page says it is signed out with a link back to itself through the login page,
the live status, the live panel's cadence and each log tail's "refreshed every 2 s" say so too,
and the polls pause instead of asking every 2 s.

No engines, agent or websocket server: the rows are written directly and the live client finds
no ``/ws/live/`` (the WSGI test server has none); its session check is held back, so the page
learns of the logout from its polls, as a user met it.

Then the other way round: the polls are held back and the live client's own session check after
each refused handshake (one node of ``GET /api/nodes/``, never a request of the page itself) finds
the logout, or the role taken away, and the page says so.
"""
from __future__ import annotations

import re
import time
from urllib.parse import quote

import pytest
from django.utils import timezone

from controlplane.tests.browser.conftest import in_thread, sign_in_to

from deployments.choices import ProcessStatus, Role
from deployments.models import ServerProcess
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

POLLED = re.compile(r"/deployments/\d+/(live|logs|processes/\d+/log)/")
#: The live client's session check after a refused handshake (static/ceiling/live.js).
SESSION_CHECK = re.compile(r"/api/nodes/\?limit=1$")
LOGIN_FIELD_COUNT = "() => document.querySelectorAll('#id_username').length"


@pytest.fixture
def ready_pd(transactional_db, viewer) -> int:
    """A ready PD deployment with prefill, decode and router processes; its id."""
    recipe = recipe_row_create(node=cpu_node_create(name="edge-box"), name="edge-pd", topology="pd")
    deployment = deployment_row_create(recipe=recipe)
    deployment.processes.all().delete()
    now = timezone.now()
    for role in (Role.PREFILL, Role.DECODE, Role.ROUTER):
        ServerProcess.objects.create(deployment=deployment, role=role, status=ProcessStatus.READY,
                                     last_probe_at=now, started_at=now)
    return deployment.pk


def test_it_never_swaps_the_login_page_into_a_page_signed_out_in_another_tab(live_server, ready_pd, viewer, browser):
    base = live_server.url
    page_path = f"/deployments/{ready_pd}/"
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    polls: list[tuple[float, int, str]] = []
    page.on("response", lambda r: polls.append((time.monotonic(), r.status, r.url)) if POLLED.search(r.url) else None)

    # The live client's own session check is held back, so that the page's polls are what finds
    # the session ended, as a user met it.
    page.route(SESSION_CHECK, lambda route: route.abort())

    sign_in_to(page, base, viewer, page_path)
    assert page.locator(".log-panel").count() == 3
    deadline = time.monotonic() + 6
    while not any(status == 200 and "/live/" in url for _, status, url in polls) and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert any(status == 200 and "/live/" in url for _, status, url in polls), polls

    # Log out in a second tab of the same browser (same session cookie).
    other = context.new_page()
    other.goto(f"{base}/deployments/", wait_until="domcontentloaded")
    other.click("nav button:has-text('Log out')")
    other.wait_for_url(re.compile(r"/login/"), wait_until="domcontentloaded")
    logged_out_at = time.monotonic()

    notice = page.locator("[data-session-state]")
    notice.wait_for(state="visible", timeout=6000)
    assert notice.inner_text().startswith("Signed out (in another tab, or the session expired)")
    assert notice.locator("a").get_attribute("href") == f"/login/?next={quote(page_path, safe='')}"
    assert page.locator("[data-live-status]").first.inner_text().startswith("updates stopped (signed out): log in again")
    # The header's "updates every 2 s" no longer promises updates.
    assert page.locator("#deployment-live [data-live-cadence]").inner_text() == "updates stopped (signed out)"
    # Nor do the log tails' "refreshed every 2 s".
    heads = page.locator(".log-panel h3 .muted").all_inner_texts()
    assert len(heads) == 3 and all(h.endswith(", secrets redacted, updates stopped (signed out)") for h in heads), heads

    # Longer than a poll period (2 s): every poll of the page has come round since.
    page.wait_for_timeout(2500)
    assert page.evaluate(LOGIN_FIELD_COUNT) == 0
    assert page.locator("#deployment-live").count() == 1 and page.locator(".log-panel").count() == 3
    refused = [at for at, status, _ in polls if status == 401]
    assert refused and min(refused) > logged_out_at, polls
    after = [(at, status, url) for at, status, url in polls if at >= min(refused)]
    assert {status for _, status, _ in after} == {401}, after
    # Paused: what was already in flight when the first 401 came back, then nothing.
    assert [poll for poll in after if poll[0] > min(refused) + 1.0] == [], after

    context.close()
    assert errors == [], errors


@pytest.mark.parametrize("how, status, line, notice", [
    ("logged out", 401, "updates stopped (signed out): log in again to see live data",
     "Signed out (in another tab, or the session expired)"),
    ("role removed", 403, "no access: your account may no longer read live data",
     "No access: your role no longer allows this page's updates"),
])
def test_the_live_clients_session_check_reads_one_node_and_finds_the_session_gone(
        live_server, ready_pd, viewer, browser, how, status, line, notice):
    base = live_server.url
    page_path = f"/deployments/{ready_pd}/"
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    requests: list[tuple[str, str]] = []
    page.on("request", lambda r: requests.append((r.method, r.url)))
    checks: list[tuple[float, int]] = []
    page.on("response", lambda r: checks.append((time.monotonic(), r.status)) if SESSION_CHECK.search(r.url) else None)
    # The page's polls are held back: only the live client's check can find the session gone.
    page.route(POLLED, lambda route: route.abort())

    sign_in_to(page, base, viewer, page_path)
    # No /ws/live/ here: every handshake is refused, and each refusal is followed by the check,
    # answered 200 while the viewer is signed in (the page keeps reconnecting).
    deadline = time.monotonic() + 10
    while not checks and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert checks and {s for _, s in checks} == {200}, checks
    page.wait_for_function("() => document.querySelector('[data-live-status]').textContent.startsWith('reconnecting')",
                           timeout=5_000, polling=100)

    # Taken before the sign-out starts: the page's check may already meet it while the other tab is still closing.
    gone_at = time.monotonic()
    if how == "logged out":
        other = context.new_page()
        other.goto(f"{base}/deployments/", wait_until="domcontentloaded")
        other.click("nav button:has-text('Log out')")
        other.wait_for_url(re.compile(r"/login/"), wait_until="domcontentloaded")
        other.close()
    else:
        in_thread(lambda: viewer.groups.clear())

    page.wait_for_function(
        "text => document.querySelector('[data-live-status]').textContent.startsWith(text)", arg=line,
        timeout=25_000, polling=200)
    assert page.locator("[data-live-status]").first.get_attribute("data-state") == "signed-out"
    assert page.locator("[data-session-state]").inner_text().startswith(notice)
    assert page.locator("#deployment-live [data-live-cadence]").inner_text() == (
        "updates stopped (signed out)" if status == 401 else "updates stopped (no access)")
    # The check's answer reaches the test as an event of its own, maybe a moment after the page drew it.
    deadline = time.monotonic() + 5
    while status not in [s for at, s in checks if at > gone_at] and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    after = [s for at, s in checks if at > gone_at]
    assert after and after[-1] == status and set(after) <= {200, status}, checks
    # The check is a GET of one node as JSON; the page itself is never asked again.
    assert [m for m, _ in requests if m == "HEAD"] == [], requests
    assert [u for m, u in requests if u == f"{base}{page_path}"] == [f"{base}{page_path}"], requests

    context.close()
    assert errors == [], errors
