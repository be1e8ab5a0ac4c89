"""The deployment page and the deployments list left open, in a real browser (the Debian
``chromium`` package driven by Playwright) against Django's live test server and its database:
what they show keeps up with the deployment, its sweeps and its node agent without a reload.

The deployment page: a sweep created after it loaded joins its sweep list; once the deployment is
stopped, "Run a sweep" goes (the header says why) and its Ended age counts on from "just now"; while
its live socket is down its agent badge reads "agent online (as last seen hh:mm:ss UTC)", greyed,
never a green "agent online"; once the agent's heartbeats stop, the badge turns "agent offline (no
heartbeat for N s)" past the server's limit, as the node page judges it. The list: a running
deployment's time serving counts on between reads, a stop and a new deployment show within a read,
and while its reads fail the list says since when it is stale and each badge reads as last seen.

No websocket server: the page's ``/ws/live/`` is routed to the test, which answers the
subscription and every ping (the page is live) or closes every socket (it is down). The agent's
heartbeats are the agent's own ``node_heartbeat`` from a thread of the test.
"""
from __future__ import annotations

import json
import re
import time
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from controlplane.tests.browser.conftest import in_thread, sign_in
from controlplane.tests.browser.test_node_heartbeat_browser import Heartbeats
from deployments.choices import DeploymentStatus
from deployments.models import Deployment, Node
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

SOCKET = re.compile(r".*/ws/live/.*")
#: The server's offline limit for the agent during these tests, s.
OFFLINE_AFTER_S = 8
LAST_SEEN = r" \(as last seen \d\d:\d\d:\d\d UTC\)$"


class Socket:
    """The page's live socket as the server would answer it: accepted, subscribed and ponged while
    up; closed as it opens while down."""

    def __init__(self, page) -> None:
        self.down = False
        self.current = None
        page.route_web_socket(SOCKET, self._open)

    def _open(self, ws) -> None:
        if self.down:
            ws.close(code=1012, reason="restarting")
            return
        groups = parse_qs(urlsplit(ws.url).query).get("sub", [])

        def answer(text) -> None:
            if json.loads(text).get("action") == "ping":
                ws.send(json.dumps({"type": "live.pong", "t": time.time()}))

        ws.on_message(answer)
        ws.send(json.dumps({"type": "live.subscribed", "ack_every": 50,
                            "groups": {g: {"seq": 1, "latest": {}} for g in groups}}))
        self.current = ws

    def stop(self) -> None:
        self.down = True
        if self.current is not None:
            self.current.close(code=1012, reason="restarting")
            self.current = None

    def start(self) -> None:
        self.down = False


def _wait_live(page) -> None:
    page.wait_for_function("() => document.documentElement.getAttribute('data-live-state') === 'live'",
                           timeout=20_000)


def _wait_text(page, selector: str, pattern: str, timeout_s: float = 20) -> str:
    """Wait until the first element ``selector`` (a Playwright selector) has text matching
    ``pattern``; that text."""
    located = page.locator(selector).first
    expect(located).to_have_text(re.compile(pattern), timeout=timeout_s * 1000)
    return located.inner_text().strip()


def _seconds(text: str) -> int:
    """Seconds of a duration as the pages write it (``1 min 05 s``, ``42 s``)."""
    m = re.fullmatch(r"(?:(\d+) min )?(\d+) s", text)
    assert m, text
    return int(m.group(1) or 0) * 60 + int(m.group(2))


@pytest.fixture
def beating(transactional_db, settings):
    """A ready deployment (ready for 1 min) on node ``edge-box``, whose agent heartbeats every half
    second from a thread until the test stops it; the server's offline limit is OFFLINE_AFTER_S and
    the page re-reads the node every second. ``(deployment id, Heartbeats)``."""
    settings.CEILING_HEARTBEAT_TIMEOUT_S = float(OFFLINE_AFTER_S)
    settings.CEILING_AGENT_HEARTBEAT_S = 1.0
    node = cpu_node_create(name="edge-box")
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now(), agent_pid=4321)
    deployment = deployment_row_create(recipe=recipe_row_create(node=node, name="edge-single"))
    now = timezone.now()
    Deployment.objects.filter(pk=deployment.pk).update(
        created_at=now - timedelta(seconds=75), started_at=now - timedelta(seconds=70), ready_at=now - timedelta(seconds=60))
    heartbeats = Heartbeats(node.name)
    heartbeats.start()
    yield deployment.pk, heartbeats
    heartbeats.stop()


def _sweep_create(deployment_id: int, user) -> int:
    return BenchmarkSweep.objects.create(
        deployment_id=deployment_id, status=SweepStatus.PENDING, points_total=1, requests_total=10,
        grid={"concurrency": [2], "lengths": [[8, 8]], "requests": 10}, created_by=user).pk


def _stop(deployment_id: int) -> None:
    Deployment.objects.filter(pk=deployment_id).update(status=DeploymentStatus.STOPPED, ended_at=timezone.now())


def test_the_deployment_page_follows_its_sweeps_its_stop_and_its_agent(live_server, beating, operator, browser):
    deployment_id, heartbeats = beating
    base = live_server.url
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    socket = Socket(page)
    sign_in(page, base, operator)
    page.goto(f"{base}/deployments/{deployment_id}/", wait_until="domcontentloaded")
    _wait_live(page)
    badge = page.locator("#deployment-live [data-agent-badge]")
    assert badge.inner_text() == "agent online"
    assert page.locator("#deployment-actions a:text-is('Run a sweep')").count() == 1
    assert page.locator("#deployment-sweeps").inner_text().count("None yet.") == 1

    # A sweep created after the page loaded joins its list without a reload.
    sweep_id = in_thread(lambda: _sweep_create(deployment_id, operator))
    page.wait_for_selector(f'#deployment-sweeps tr[data-sweep-id="{sweep_id}"]', timeout=15_000)
    assert page.locator(f'#deployment-sweeps tr[data-sweep-id="{sweep_id}"] .tag').inner_text() == "pending"

    # Stopped: the status follows, the primary action goes and the header says why.
    in_thread(lambda: _stop(deployment_id))
    _wait_text(page, "#deployment-live .status-line .tag", "^stopped$", timeout_s=15)
    page.wait_for_function("() => !document.querySelector('#deployment-actions a.button:not(.secondary)')",
                           timeout=5_000)
    assert page.locator("#deployment-actions").inner_text().startswith("No sweep: the deployment was stopped")
    assert page.locator("text=Run a sweep").count() == 0

    # Ended counts on from "just now", as does every age beside a time (Created, the timeline).
    ended = "#deployment-live .facts dt:text-is('Ended') + dd [data-age]"
    first = page.locator(ended).inner_text()
    assert re.fullmatch(r"just now|[1-4] s ago", first), first
    _wait_text(page, ended, r"^([5-9]|\d\d) s ago$", timeout_s=15)
    created = page.locator("#deployment-live .facts dt:text-is('Created') + dd [data-age]").inner_text()
    assert re.fullmatch(r"1 min \d\d s ago", created), created

    # The page's live socket goes down: the agent badge reads as last seen, greyed, not green.
    socket.stop()
    _wait_text(page, "#deployment-live [data-agent-badge]", r"^agent online" + LAST_SEEN, timeout_s=15)
    grey = page.evaluate("() => getComputedStyle(document.querySelector('#deployment-live [data-agent-badge]')).filter")
    assert "grayscale(1)" in grey, grey
    # ...and back: the badge is live again.
    socket.start()
    _wait_text(page, "#deployment-live [data-agent-badge]", r"^agent online$", timeout_s=30)

    # The agent stops heartbeating: past the server's limit the badge says so, red.
    heartbeats.stop()
    text = _wait_text(page, "#deployment-live [data-agent-badge]", r"^agent offline \(no heartbeat for \d+ s\)$",
                      timeout_s=OFFLINE_AFTER_S + 20)
    assert int(re.search(r"(\d+) s\)$", text).group(1)) >= OFFLINE_AFTER_S, text
    classes = badge.get_attribute("class").split()
    assert "bad" in classes and "ok" not in classes, classes
    assert errors == [], errors
    page.context.close()


@pytest.fixture
def listed(transactional_db, settings):
    """Node ``edge-box`` with its agent online and a deployment on it ready for 1 min; its id."""
    node = cpu_node_create(name="edge-box")
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now() + timedelta(minutes=10))
    deployment = deployment_row_create(recipe=recipe_row_create(node=node, name="edge-single"))
    now = timezone.now()
    Deployment.objects.filter(pk=deployment.pk).update(
        created_at=now - timedelta(seconds=75), started_at=now - timedelta(seconds=70), ready_at=now - timedelta(seconds=60))
    return deployment.pk


def _row(pk: int) -> str:
    return f"#deployment-rows tbody tr:has(td:text-is('{pk}'))"


def test_the_deployments_list_counts_on_and_follows_stops_and_new_deployments(live_server, listed, viewer, browser):
    base = live_server.url
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    sign_in(page, base, viewer)
    page.goto(f"{base}/deployments/", wait_until="domcontentloaded")
    row = _row(listed)
    assert page.locator(f"{row} .tag").first.inner_text() == "ready"
    assert re.fullmatch(r"As of \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, updates every 5 s\.",
                        page.locator("#deployment-rows > p").first.inner_text())

    # Between reads the time serving counts on.
    serving = f"{row} [data-duration-from]"
    first = _seconds(page.locator(serving).inner_text())
    assert 60 <= first < 90, first
    page.wait_for_timeout(3500)
    later = _seconds(page.locator(serving).inner_text())
    assert first + 3 <= later <= first + 5, (first, later)

    # A stop shows within a read: the status, and the time served no longer running.
    in_thread(lambda: _stop(listed))
    _wait_text(page, f"{row} .tag", "^stopped$", timeout_s=15)
    assert "(running)" not in page.locator(row).inner_text()
    assert page.locator(serving).count() == 0

    # A new deployment appears at the top.
    def another() -> int:
        node = Node.objects.get(name="edge-box")
        return deployment_row_create(recipe=recipe_row_create(node=node, name="edge-other"),
                                     status=DeploymentStatus.PENDING).pk
    new_id = in_thread(another)
    page.wait_for_selector(_row(new_id), timeout=15_000)
    assert page.locator("#deployment-rows tbody tr td:first-child").first.inner_text() == str(new_id)

    # Reads fail (the server is away): the list says since when it is stale, badges as last seen.
    page.route("**/deployments/rows/**", lambda route: route.abort("connectionrefused"))
    _wait_text(page, "#deployment-rows [data-live-cadence]", r"^not updating: stale since \d\d:\d\d:\d\d UTC$",
               timeout_s=15)
    assert re.fullmatch(r"stopped" + LAST_SEEN, page.locator(f"{row} .tag").first.inner_text())
    assert errors == [], errors
    page.context.close()
