"""The wall at 1920x1080 in a real browser (the Debian ``chromium`` package driven by Playwright)
against Django's live test server, with the demo's shape of data: node ``local`` (online, no
GPU), the offline 8-GPU seed node that never sent a sample, three live deployments (one PD with
prefill, decode and router) and two that ended after them (a stop and a cancel before start).

Every live tile lies inside the screen, the page does not scroll, the ended deployments come
after the live ones in one strip, and the PD tile's output figure ("32.2 tok/s", drawn by the
page's own renderer) stays on one line. Then the viewer logs out in another tab and the wall's
status line says its updates stopped. When node ``local``'s agent goes offline, its deployment
tiles say their state is as last seen, as the deployment page does, until it is back.

No engines, agent or websocket server: the rows are written directly (the WSGI test server has
no ``/ws/live/``), which is what the layout depends on.
"""
from __future__ import annotations

import json
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from controlplane.tests.browser.conftest import in_thread
from deployments.choices import DeploymentStatus, ProcessStatus, Role
from deployments.models import Deployment, Node, Recipe, ServerProcess
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create, seed_node_create

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

PASSWORD = "correct-horse-battery"  # the personas' password (conftest.py)
SCREENSHOTS = Path(settings.VAR_DIR) / "artifacts" / "screenshots"


@pytest.fixture
def demo_like(transactional_db, settings) -> dict:
    """The demo's nodes and deployments; ids of the live (newest first) and ended ones. Node
    ``local``'s one heartbeat counts for 10 minutes, so a test slowed by a loaded host does not see
    its agent go offline part way (a test that wants it offline dates the heartbeat further back)."""
    settings.CEILING_HEARTBEAT_TIMEOUT_S = 600.0
    local = cpu_node_create(name="local")
    Node.objects.filter(pk=local.pk).update(cpu_count=2, agent_heartbeat_at=timezone.now())
    seed = seed_node_create(name="seed-8gpu")
    pd = deployment_row_create(recipe=recipe_row_create(node=local, name="local-sim-pd", topology="pd"))
    pd.processes.all().delete()
    now = timezone.now()
    for role in (Role.PREFILL, Role.DECODE, Role.ROUTER):
        ServerProcess.objects.create(deployment=pd, role=role, status=ProcessStatus.READY, last_probe_at=now, started_at=now)
    llama = deployment_row_create(recipe=recipe_row_create(node=local, name="local-llamacpp", engine="llamacpp"))
    single = deployment_row_create(recipe=recipe_row_create(node=local, name="local-sim-single"))
    ended = []
    for recipe, reason in ((recipe_row_create(node=seed, name="seed-v4-flash-tp4", engine="sglang"), "cancelled before start"),
                           (recipe_row_create(node=local, name="browser-sim-secret"), "")):
        d = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)
        d.ended_at, d.reason = timezone.now() - timedelta(minutes=1), reason
        d.save()
        ended.append(d.pk)
    return {"live": [single.pk, llama.pk, pd.pk], "ended": ended[::-1], "pd": pd.pk, "seed": seed.name}


def _assert_one_line(page, seed) -> None:
    """The seed node's tile is one line of text: name, offline badge, what it has, "never sampled";
    no empty bars and no "no sample yet" footer."""
    assert seed.inner_text().replace("\n", " ") == ("seed-8gpu agent offline 8 GPUs · 95.6 GiB each · 64 CPUs · "
                                                    "512.0 GiB host memory · never sampled")
    assert seed.locator(".sample-age, .wall-gpu, .wall-host").count() == 0
    line = seed.locator(".wall-node-line")
    # one line: it never wraps, nothing of it is cut, and it is no taller than twice its font size
    assert line.evaluate("el => getComputedStyle(el).whiteSpace") == "nowrap"
    assert line.evaluate("el => el.getBoundingClientRect().height < 2 * parseFloat(getComputedStyle(el).fontSize)")
    assert line.evaluate("el => el.scrollWidth <= el.clientWidth"), "the line is cut"
    assert seed.bounding_box()["height"] < 60, seed.bounding_box()


#: A recipe name of 30 characters that starts like the demo's own ones (``local-sim-single``).
THIRTY_NAME = "local-sim-single-ctx32k-fp8-b2"
#: Where the checks' screenshots are kept to be looked at by eye, outside the repository.
EYE_SHOTS = Path("/tmp/ceiling-wall-shots")


def _name_whole(page, pk: int, name: str) -> None:
    """The deployment tile's header shows ``#pk name`` whole: nothing of it is cut, and its title says the same."""
    head = page.locator(f'.deployment-tile[data-deployment="{pk}"] header h3')
    assert head.inner_text() == f"#{pk} {name}"
    assert head.evaluate("el => el.scrollWidth <= el.clientWidth"), \
        ("the name is cut", head.evaluate("el => [el.scrollWidth, el.clientWidth]"))
    assert head.get_attribute("title") == f"#{pk} {name}"


@pytest.fixture
def demo_thirty(demo_like) -> dict:
    """The demo's data with the newest live deployment's recipe renamed to ``THIRTY_NAME``."""
    Recipe.objects.filter(deployments__pk=demo_like["live"][0]).update(name=THIRTY_NAME)
    return demo_like


def _wall_login(page, base, viewer) -> None:
    page.goto(f"{base}/login/?next=/wall/", wait_until="domcontentloaded")
    page.fill("#id_username", viewer.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/wall/", wait_until="load")


def _open_wall(browser, base, viewer):
    """A new 1920x1080 browser context with the wall open, signed in as ``viewer``; the page's
    uncaught errors are collected in the list returned with the context and page."""
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    _wall_login(page, base, viewer)
    return context, page, errors


def test_the_wall_fits_1920x1080_with_live_deployments_first(live_server, demo_thirty, viewer, browser):
    # One of the three live recipes has a 30-character name: the wall's few tiles share the screen's
    # width, so it is shown whole at 1920x1080 and at 1400x900.
    demo_like = demo_thirty
    base = live_server.url
    context, page, errors = _open_wall(browser, base, viewer)

    # The PD tile gets a sample through the page's own renderer: its output figure is one line.
    page.evaluate(
        """id => window.CeilingDashboards.renderDeployment(document.querySelector(`.deployment-tile[data-deployment="${id}"]`),
             {t: Date.now() / 1000, interval_s: 0.5, status: "ready", tok_s: 32.2,
              processes: [{id: 1, role: "decode", engine: {running: 16, queued: 0}}]}, false)""",
        demo_like["pd"])
    figure = page.locator(f'.deployment-tile[data-deployment="{demo_like["pd"]}"] [data-f="tok_s"]')
    assert figure.inner_text() == "32.2 tok/s"
    lines = page.evaluate("""el => { const r = document.createRange(); r.selectNodeContents(el);
        return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; }""", figure.element_handle())
    assert lines == 1
    assert figure.evaluate("el => el.scrollWidth <= el.clientWidth"), "the figure is cut"

    order = page.evaluate("() => [...document.querySelectorAll('[data-deployment]')].map(e => +e.dataset.deployment)")
    assert order == demo_like["live"] + demo_like["ended"], order
    assert page.locator(".wall-ended-strip .ended").all_inner_texts()[1].startswith(f"#{demo_like['ended'][1]} seed-v4-flash-tp4")
    assert "cancelled before start" in page.locator(".wall-ended-strip").inner_text()

    for pk in demo_like["live"]:
        box = page.locator(f'.deployment-tile[data-deployment="{pk}"]').bounding_box()
        assert box and box["y"] >= 0 and box["x"] >= 0 and box["y"] + box["height"] <= 1080 and box["x"] + box["width"] <= 1920, (pk, box)
    strip = page.locator(".wall-ended-strip").bounding_box()
    assert strip["y"] + strip["height"] <= 1080, strip
    height = page.evaluate("() => document.documentElement.scrollHeight")
    assert height <= 1080, height
    # Six columns at 1920 px: the three live tiles share one row.
    tops = {round(page.locator(f'.deployment-tile[data-deployment="{pk}"]').bounding_box()["y"]) for pk in demo_like["live"]}
    assert len(tops) == 1, tops
    _name_whole(page, demo_like["live"][0], THIRTY_NAME)
    EYE_SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(EYE_SHOTS / "wall-1920x1080-thirty-name.png"))
    page.set_viewport_size({"width": 1400, "height": 900})
    _name_whole(page, demo_like["live"][0], THIRTY_NAME)
    page.screenshot(path=str(EYE_SHOTS / "wall-1400x900-thirty-name.png"))
    page.set_viewport_size({"width": 1920, "height": 1080})
    # The offline seed node that never sent a sample is one line, not eight empty bars.
    seed = page.locator(f'.node-tile[data-node="{demo_like["seed"]}"]')
    assert seed.locator(".wall-gpu").count() == 0
    assert seed.locator(".wall-node-summary").inner_text() == "8 GPUs · 95.6 GiB each · 64 CPUs · 512.0 GiB host memory"
    _assert_one_line(page, seed)
    page.set_viewport_size({"width": 1440, "height": 900})
    _assert_one_line(page, seed)
    page.set_viewport_size({"width": 1920, "height": 1080})
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "wall-1920x1080.png"))

    # Logged out in another tab: the wall's status line says its updates stopped (the tiles'
    # re-fetch, every 10 s, is answered 401). Nothing asks for the whole wall again to find that out
    # (the live client's session check reads one node).
    heads: list[str] = []
    page.on("request", lambda r: heads.append(r.url) if r.method == "HEAD" or r.url == f"{base}/wall/" else None)
    other = context.new_page()
    other.goto(f"{base}/deployments/", wait_until="domcontentloaded")
    other.click("nav button:has-text('Log out')")
    other.wait_for_url(re.compile(r"/login/"), wait_until="domcontentloaded")
    page.wait_for_function(
        "() => document.querySelector('.wall-head [data-live-status]').textContent.startsWith('updates stopped (signed out)')",
        timeout=20_000, polling=200)
    assert heads == [], heads
    context.close()
    assert errors == [], errors


@pytest.fixture
def six_live(demo_like) -> dict:
    """The demo's data plus three more live deployments: six in all, three of them PD (prefill,
    decode and router rows), newest first."""
    local = Node.objects.get(name="local")
    added = []
    for name, topology in (("local-sim-pd-b", "pd"), ("local-sim-single-b", "single"), ("local-sim-pd-c", "pd")):
        d = deployment_row_create(recipe=recipe_row_create(node=local, name=name, topology=topology))
        if topology == "pd":
            d.processes.all().delete()
            now = timezone.now()
            for role in (Role.PREFILL, Role.DECODE, Role.ROUTER):
                ServerProcess.objects.create(deployment=d, role=role, status=ProcessStatus.READY, last_probe_at=now, started_at=now)
        added.append(d.pk)
    return {**demo_like, "live": added[::-1] + demo_like["live"]}


def _tiles_inside(page, pks, width, height) -> None:
    for pk in pks:
        tile = page.locator(f'.deployment-tile[data-deployment="{pk}"]')
        box = tile.bounding_box()
        assert box and box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= width \
            and box["y"] + box["height"] <= height, (pk, box)
        # nothing inside the tile is cut off by it, and no figure or its label is cut short
        assert tile.evaluate("el => el.scrollHeight <= el.clientHeight + 1 && el.scrollWidth <= el.clientWidth + 1"), pk
        cut = tile.evaluate("""el => [...el.querySelectorAll('.wall-figures .live-value, .wall-figures .unit')]
            .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)""")
        assert cut == [], (pk, cut)


def test_six_live_deployments_nodes_and_the_ended_strip_fit_1920x1080(live_server, six_live, viewer, browser):
    base = live_server.url
    context, page, errors = _open_wall(browser, base, viewer)
    assert page.locator(".wall-grid .deployment-tile").count() == 6
    # every tile with figures drawn by the page's own renderer, as under live samples
    for pk in six_live["live"]:
        page.evaluate(
            """id => window.CeilingDashboards.renderDeployment(document.querySelector(`.deployment-tile[data-deployment="${id}"]`),
                 {t: Date.now() / 1000, interval_s: 0.5, status: "ready", tok_s: 1234.5,
                  processes: [{id: 1, role: "decode", engine: {running: 128, queued: 12}}]}, false)""", pk)

    _tiles_inside(page, six_live["live"], 1920, 1080)
    size = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
    assert size[0] <= 1920 and size[1] <= 1080, size
    strip = page.locator(".wall-ended-strip").bounding_box()
    assert strip["y"] + strip["height"] <= 1080, strip
    for node in page.locator(".node-tile").all():
        box = node.bounding_box()
        assert box["y"] + box["height"] <= 1080 and box["x"] + box["width"] <= 1920, box
    # the six live tiles share one row
    tops = {round(page.locator(f'.deployment-tile[data-deployment="{pk}"]').bounding_box()["y"]) for pk in six_live["live"]}
    assert len(tops) == 1, tops
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "wall-1920x1080-six-live.png"))

    # 1440x900 stays readable: no horizontal scrolling, every tile whole, type no smaller than 13 px
    page.set_viewport_size({"width": 1440, "height": 900})
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1440
    _tiles_inside(page, six_live["live"], 1440, 10_000)
    smallest = page.evaluate("""() => Math.min(...[...document.querySelectorAll('.wall-tile *')]
        .filter(e => e.childNodes.length && [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()))
        .map(e => parseFloat(getComputedStyle(e).fontSize)))""")
    assert smallest >= 12.5, smallest
    page.screenshot(path=str(SCREENSHOTS / "wall-1440x900-six-live.png"))
    context.close()
    assert errors == [], errors


def test_a_wall_tile_ignores_a_message_older_than_its_object(live_server, demo_like, viewer, browser):
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    page = context.new_page()
    _wall_login(page, live_server.url, viewer)
    accepts = page.evaluate("""id => { const t = document.querySelector(`.deployment-tile[data-deployment="${id}"]`);
        const created = +t.dataset.created;
        return [window.CeilingDashboards.wallAccepts(t, {ts: created - 1800}),
                window.CeilingDashboards.wallAccepts(t, {ts: created + 1})]; }""", demo_like["pd"])
    assert accepts == [False, True]
    context.close()


LONG_NAME = "local-sim-pd-with-a-long-recipe-name-for-the-wall"


@pytest.fixture
def long_named(demo_like) -> int:
    """The demo's data plus a live deployment whose recipe name is too long for a tile's header."""
    local = Node.objects.get(name="local")
    return deployment_row_create(recipe=recipe_row_create(node=local, name=LONG_NAME)).pk


def test_a_long_recipe_name_cut_short_on_the_wall_has_its_full_name_in_a_title(live_server, long_named, viewer, browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    _wall_login(page, live_server.url, viewer)
    head = page.locator(f'.deployment-tile[data-deployment="{long_named}"] header h3')
    # cut short with "…" at 1440 px, and the full name (with the id) is the element's title
    assert head.evaluate("el => getComputedStyle(el).textOverflow") == "ellipsis"
    assert head.evaluate("el => el.scrollWidth > el.clientWidth"), "the name is not cut at 1440 px"
    assert head.get_attribute("title") == f"#{long_named} {LONG_NAME}"
    # every tile's header, cut or not, carries what it shows in full
    heads = page.evaluate("() => [...document.querySelectorAll('.wall-tile:not(.compact) header h3')]"
                          ".map(h => [h.textContent, h.title])")
    assert heads and all(text == title for text, title in heads), heads
    context.close()


def _lines(locator) -> float:
    """How many lines ``locator``'s text takes: its height over its line height."""
    return locator.evaluate("el => el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight)")


def test_the_cpu_only_node_tiles_host_memory_label_stays_short(live_server, demo_like, viewer, browser):
    context, page, errors = _open_wall(browser, live_server.url, viewer)
    tile = page.locator('.node-tile[data-node="local"]')
    assert tile.locator(".wall-gpu").count() == 0 and tile.locator(".wall-no-gpu").count() == 1
    page.evaluate(
        """() => window.CeilingDashboards.renderNode(document.querySelector('.node-tile[data-node="local"]'),
             {t: Date.now() / 1000, interval_s: 0.5, gpus: [], nvml: "NVML Shared Library Not Found",
              host: {cpu_pct: 12, cpu_pct_per_numa: {"0": 12}, memory: {total_bytes: 17179869184, used_bytes: 5368709120}}},
             false)""")
    label = tile.locator(".wall-host-mem-label")
    value = tile.locator('[data-f="hostmem"]')
    assert value.inner_text() == "5.0 / 16.0 GiB"
    assert label.evaluate("el => getComputedStyle(el).lineHeight").endswith("px")
    assert _lines(label) < 1.5, _lines(label)
    assert _lines(value) < 1.5, _lines(value)
    page.set_viewport_size({"width": 1440, "height": 900})
    assert _lines(label) < 2.5, _lines(label)
    assert _lines(value) < 1.5, _lines(value)
    # the row says what it measures in full on hover
    assert tile.locator(".wall-host-mem").get_attribute("title").startswith("Host memory used. Used on the host by every process")
    context.close()
    assert errors == [], errors



def _tile_text(page, pk: int, what: str) -> str:
    return page.locator(f'.deployment-tile[data-deployment="{pk}"] {what}').first.inner_text()


def _agent_heartbeat(at) -> None:
    in_thread(lambda: Node.objects.filter(name="local").update(agent_heartbeat_at=at))


def test_a_deployment_tile_says_as_last_seen_while_its_agent_is_offline(live_server, demo_like, viewer, browser):
    # The node agent goes offline, then comes back: the tiles' re-fetch (every 10 s) follows, and
    # the socket's last sample and health change, drawn again on the fresh tile, do not make it
    # read live while the agent is away.
    single = demo_like["live"][0]
    process = in_thread(lambda: ServerProcess.objects.get(deployment_id=single))
    group = f"deployment-{single}"
    sockets: list = []
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.route_web_socket(re.compile(r".*/ws/live/.*"), lambda ws: sockets.append(ws))
    _wall_login(page, live_server.url, viewer)
    page.wait_for_function("() => document.querySelector('[data-wall]') !== null")
    assert sockets, "the wall opened no live socket"
    sample = {"type": "deployment.sample", "seq": 1, "group": group, "ts": time.time(),
              "data": {"t": time.time(), "interval_s": 0.5, "status": "ready", "tok_s": 12.5,
                       "processes": [{"id": process.pk, "role": "single", "health": "healthy", "status": "ready",
                                      "engine": {"running": 1, "queued": 0}}]}}
    sockets[-1].send(json.dumps({"type": "live.subscribed", "groups": {group: {"seq": 1, "latest": {"deployment.sample": sample}}}}))
    status = f'.deployment-tile[data-deployment="{single}"] [data-f="status"]'
    page.wait_for_function("s => document.querySelector(s).textContent === 'ready'", arg=status, timeout=10_000)
    assert _tile_text(page, single, '[data-f="tok_s"]') == "12.5 tok/s"
    assert _tile_text(page, single, '[data-f="health"]') == "healthy"
    assert page.locator(f'.deployment-tile[data-deployment="{single}"] .wall-as-last-seen').count() == 0

    seen = (timezone.now() - timedelta(minutes=20)).replace(microsecond=0)
    # created before that last heartbeat, as a deployment the agent took and then left
    in_thread(lambda: Deployment.objects.filter(pk=single).update(created_at=seen - timedelta(minutes=1)))
    _agent_heartbeat(seen)
    page.wait_for_function("s => document.querySelector(s).textContent === 'ready (as last seen)'", arg=status,
                           timeout=20_000, polling=200)
    assert _tile_text(page, single, ".wall-as-last-seen") == (
        f"agent offline As last seen by node agent local at {seen:%Y-%m-%d %H:%M:%S} UTC; not live: the agent is offline")
    assert _tile_text(page, single, '[data-f="tok_s"]') == "12.5 tok/s"  # the kept sample, drawn on the fresh tile
    assert _tile_text(page, single, '[data-f="health"]') == f"last seen healthy at {seen:%H:%M:%S} UTC (agent offline)"
    # a health change from before, re-sent, changes neither
    sockets[-1].send(json.dumps({"type": "health.change", "seq": 2, "group": group, "ts": time.time(),
                                 "data": {"process_id": process.pk, "role": "single", "from": "starting", "to": "healthy"}}))
    page.wait_for_timeout(300)
    assert _tile_text(page, single, '[data-f="status"]') == "ready (as last seen)"
    assert _tile_text(page, single, '[data-f="health"]') == f"last seen healthy at {seen:%H:%M:%S} UTC (agent offline)"

    _agent_heartbeat(timezone.now())
    page.wait_for_function("s => document.querySelector(s).textContent === 'ready'", arg=status,
                           timeout=20_000, polling=200)
    assert page.locator(f'.deployment-tile[data-deployment="{single}"] .wall-as-last-seen').count() == 0
    assert _tile_text(page, single, '[data-f="health"]') == "healthy"
    context.close()
    assert errors == [], errors


def test_long_health_badges_of_an_offline_agent_wrap_inside_their_tiles_at_1400(live_server, six_live, viewer,
                                                                                 browser):
    # Node local's agent last seen 20 minutes ago: every process's badge reads "last seen healthy at
    # HH:MM:SS UTC (agent offline)", longer than a quarter of a 1400 px screen holds on one line.
    seen = (timezone.now() - timedelta(minutes=20)).replace(microsecond=0)
    live = six_live["live"]
    in_thread(lambda: Deployment.objects.filter(pk__in=live).update(created_at=seen - timedelta(minutes=1)))
    in_thread(lambda: ServerProcess.objects.filter(deployment_id__in=live).update(
        status=ProcessStatus.READY, last_probe_at=seen, started_at=seen))
    _agent_heartbeat(seen)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    _wall_login(page, live_server.url, viewer)
    badges = page.locator('.deployment-tile [data-f="health"]')
    assert badges.count() >= 6
    assert all(t == f"last seen healthy at {seen:%H:%M:%S} UTC (agent offline)" for t in badges.all_inner_texts()), \
        badges.all_inner_texts()
    outside = page.evaluate("""() => [...document.querySelectorAll('.deployment-tile [data-f="health"]')].flatMap(b => {
        const t = b.closest('.deployment-tile').getBoundingClientRect(), r = b.getBoundingClientRect();
        return r.right > t.right + 0.5 || r.left < t.left - 0.5 ? [[b.textContent, r.right, t.right]] : []; })""")
    EYE_SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(EYE_SHOTS / "wall-1400x1000-agent-offline.png"))
    assert outside == [], outside
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1400
    context.close()
