"""The live parts of the pages as the server renders them: the wall display and its tiles
partial, the node page's GPU tiles and host panel, the deployment page's telemetry panel (or
stored telemetry and sweeps once it ended), and the sweep page's live progress panel. What the
browser then does with them is covered by the browser tests."""
from __future__ import annotations

import re
from html import unescape
from datetime import timedelta
from datetime import timezone as dt_timezone

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from benchmarks.models import BenchmarkSweep
from deployments.choices import DeploymentStatus, ProcessStatus, Role
from deployments.models import Deployment, Node, ServerProcess
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create, seed_node_create

POLL = 'hx-trigger="every 2s"'


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer_client(viewer) -> Client:
    return _client(viewer)


@pytest.fixture
def gpu_node(db):
    return seed_node_create(name="gpu-box")


@pytest.fixture
def cpu_node(db):
    return cpu_node_create(name="cpu-box")


@pytest.fixture
def pd_deployment(gpu_node):
    """A ready PD deployment: prefill ready, decode ready but failing probes, router ready."""
    recipe = recipe_row_create(node=gpu_node, name="pd-recipe", topology="pd")
    deployment = deployment_row_create(recipe=recipe)
    deployment.processes.all().delete()
    now = timezone.now()
    for role, failures in ((Role.PREFILL, 0), (Role.DECODE, 2), (Role.ROUTER, 0)):
        ServerProcess.objects.create(deployment=deployment, role=role, status=ProcessStatus.READY,
                                     probe_failures=failures, last_probe_at=now, started_at=now)
    return deployment


# --- the wall ---------------------------------------------------------------------------------


def test_it_shows_every_node_and_running_deployment_on_the_wall(viewer_client, gpu_node, cpu_node, pd_deployment):
    Node.objects.filter(pk=gpu_node.pk).update(agent_heartbeat_at=timezone.now())  # health is live
    html = viewer_client.get(reverse("deployments:wall")).content.decode()
    assert 'class="wall-html"' in html and "data-wall " in html
    assert 'data-group="node-gpu-box"' in html and 'data-group="node-cpu-box"' in html
    assert html.count('class="wall-gpu"') == 8
    assert "— / 95.6 GiB" in html                       # 102641958912 bytes, before the first sample
    assert "GPUs unknown (not reported yet) · 8 CPUs" in html  # the factory's row was never discovered
    tile = html[html.index(f'data-group="deployment-{pd_deployment.pk}"'):]
    assert f"#{pd_deployment.pk} pd-recipe" in tile
    roles = re.findall(r'<li data-process-id="\d+"><span class="role">(\w+)</span> <span class="tag ?(\w*)" data-f="health">([^<]+)<', tile)
    assert roles == [("decode", "warn", "degraded"), ("prefill", "ok", "healthy"), ("router", "ok", "healthy")]
    assert 'data-live-status' in html and "static/ceiling/live.js" in html


@pytest.mark.parametrize("name", ["deployments:wall", "deployments:wall-tiles"])
def test_it_shows_a_deployment_of_an_offline_agent_on_the_wall_as_last_seen(viewer_client, gpu_node, pd_deployment, name):
    seen = (timezone.now() - timedelta(minutes=5)).replace(microsecond=0)
    Node.objects.filter(pk=gpu_node.pk).update(agent_heartbeat_at=seen)  # stale: the agent is offline
    # created, taken and last probed before that last heartbeat, as an agent that went away then left it
    before = seen - timedelta(minutes=1)
    Deployment.objects.filter(pk=pd_deployment.pk).update(created_at=before)
    ServerProcess.objects.filter(deployment=pd_deployment).update(started_at=before, last_probe_at=before)
    pending = deployment_row_create(recipe=recipe_row_create(node=gpu_node, name="later"), status=DeploymentStatus.PENDING)
    html = viewer_client.get(reverse(name)).content.decode()
    tile = html[html.index(f'data-group="deployment-{pd_deployment.pk}"'):].split("</article>")[0]
    # the same wording as the deployment page's note, and the status says it is not live
    assert ' data-as-last-seen>' in tile
    assert '<span class="tag ok" data-f="status">ready (as last seen)</span>' in tile
    assert ('<p class="wall-as-last-seen"><span class="tag bad">agent offline</span> As last seen by node agent '
            f'gpu-box at {seen:%Y-%m-%d %H:%M:%S} UTC; not live: the agent is offline</p>') in tile
    roles = re.findall(r'<span class="role">(\w+)</span> <span class="tag ?(\w*)" data-f="health">([^<]+)<', tile)
    assert roles == [("decode", "warn", f"last seen degraded at {seen:%H:%M:%S} UTC (agent offline)"),
                     ("prefill", "warn", f"last seen healthy at {seen:%H:%M:%S} UTC (agent offline)"),
                     ("router", "warn", f"last seen healthy at {seen:%H:%M:%S} UTC (agent offline)")]
    # a pending one was never taken by the agent: its status is its own, the note says why it waits
    waiting = html[html.index(f'data-group="deployment-{pending.pk}"'):].split("</article>")[0]
    assert "data-as-last-seen" not in waiting and '<span class="tag warn" data-f="status">pending</span>' in waiting
    assert (f'<span class="tag bad">agent offline</span> Not live: node agent gpu-box is offline (last heartbeat '
            f'{seen:%Y-%m-%d %H:%M:%S} UTC)</p>') in waiting

    Node.objects.filter(pk=gpu_node.pk).update(agent_heartbeat_at=timezone.now())  # back online
    ServerProcess.objects.filter(deployment=pd_deployment).update(last_probe_at=timezone.now())  # and probing
    html = viewer_client.get(reverse(name)).content.decode()
    tile = html[html.index(f'data-group="deployment-{pd_deployment.pk}"'):].split("</article>")[0]
    assert "data-as-last-seen" not in tile and "wall-as-last-seen" not in tile and "agent offline" not in tile
    assert '<span class="tag ok" data-f="status">ready</span>' in tile


def test_it_keeps_an_ended_deployment_on_the_wall_for_a_while_then_drops_it(viewer_client, gpu_node):
    recipe = recipe_row_create(node=gpu_node, name="ended-recipe")
    recent = deployment_row_create(recipe=recipe, status=DeploymentStatus.FAILED)
    recent.ended_at = timezone.now() - timedelta(minutes=2)
    recent.reason = "decode exited with code 1"
    recent.save()
    old = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)
    old.ended_at = timezone.now() - timedelta(hours=2)
    old.save()
    html = viewer_client.get(reverse("deployments:wall-tiles")).content.decode()
    assert f'data-deployment="{recent.pk}"' in html and "decode exited with code 1" in html
    assert f'data-deployment="{old.pk}"' not in html


def test_it_changes_the_wall_roster_when_a_deployment_appears_or_changes_state(viewer_client, gpu_node):
    def roster() -> str:
        html = viewer_client.get(reverse("deployments:wall-tiles")).content.decode()
        return re.search(r'data-roster="([^"]*)"', html).group(1)

    empty = roster()
    assert "n:gpu-box:0:8" in empty and "d:" not in empty
    recipe = recipe_row_create(node=gpu_node, name="new-recipe")
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.STARTING)
    starting = roster()
    assert f"d:{deployment.pk}:starting:" in starting
    deployment.status = DeploymentStatus.READY
    deployment.save()
    assert roster() not in (empty, starting)


@pytest.mark.parametrize("name", ["deployments:wall", "deployments:wall-tiles"])
def test_it_sends_anonymous_visitors_of_the_wall_to_login_and_refuses_users_without_a_role(client, outsider, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert _client(outsider).get(reverse(name)).status_code == 403


def test_it_links_the_wall_from_the_navigation(viewer_client, gpu_node):
    html = viewer_client.get(reverse("deployments:node-list")).content.decode()
    assert f'href="{reverse("deployments:wall")}"' in html


# --- node page --------------------------------------------------------------------------------


def test_it_renders_a_live_tile_per_gpu_on_the_node_page(viewer_client, gpu_node):
    html = viewer_client.get(reverse("deployments:node-detail", args=["gpu-box"])).content.decode()
    assert 'data-live-node="gpu-box" data-group="node-gpu-box"' in html
    assert len(re.findall(r'<article class="gpu-tile" data-gpu-index="\d"', html)) == 8
    for spark in ("util", "power", "temp"):
        assert html.count(f'data-spark="{spark}"') == 9   # 8 tiles + the template for a GPU found later
    assert "vendor/uplot/uPlot.iife.min.js" in html and "No GPU on this node" not in html


def test_it_says_a_node_has_no_gpu_and_still_shows_its_host_panel(viewer_client, cpu_node):
    html = viewer_client.get(reverse("deployments:node-detail", args=["cpu-box"])).content.decode()
    assert "No GPU reported yet" in html  # the factory's row was never discovered
    assert 'data-f="numa"' in html and 'data-f="hostmem">— / 16.0 GiB' in html


# --- deployment page --------------------------------------------------------------------------


def test_it_shows_a_live_telemetry_row_per_process_of_a_running_deployment(viewer_client, pd_deployment):
    html = viewer_client.get(reverse("deployments:deployment-detail", args=[pd_deployment.pk])).content.decode()
    assert f'data-live-deployment="{pd_deployment.pk}" data-group="deployment-{pd_deployment.pk}"' in html
    ids = [str(p.pk) for p in pd_deployment.processes.all()]
    panel = html[html.index('id="deployment-telemetry"'):html.index("<template data-process-template>")]
    assert sorted(re.findall(r'<tr data-process-id="(\d+)">', panel)) == sorted(ids)
    assert html.count(POLL) == 1 + 3                       # the htmx polls are unchanged: live part + 3 log tails
    assert "Stored telemetry" not in html


def test_it_shows_the_stored_telemetry_and_sweeps_of_an_ended_deployment(viewer_client, pd_deployment):
    started = timezone.now() - timedelta(minutes=30)
    pd_deployment.status = DeploymentStatus.STOPPED
    pd_deployment.started_at = started
    pd_deployment.ended_at = timezone.now()
    pd_deployment.save()
    sweep = BenchmarkSweep.objects.create(deployment=pd_deployment, name="c-scan", points_total=3, points_done=3,
                                          status="done")
    html = viewer_client.get(reverse("deployments:deployment-detail", args=[pd_deployment.pk])).content.decode()
    assert f'data-telemetry-history="{pd_deployment.pk}" data-since="{int(started.timestamp())}"' in html
    assert "data-live-deployment" not in html
    assert f'href="{reverse("benchmarks:sweep-detail", args=[sweep.pk])}">#{sweep.pk} c-scan</a>' in html
    assert "3 / 3" in html


NO_TOK_S_LLAMACPP = ("llama-cpp-python's server exposes no /metrics, so there is no live tok/s; sweeps measure it "
                     "(see the benchmark sweeps below)")


@pytest.mark.parametrize("status", [DeploymentStatus.READY, DeploymentStatus.STOPPED])
def test_it_says_an_engine_without_metrics_will_never_chart_tok_s_not_yet(viewer_client, cpu_node, pd_deployment,
                                                                          status):
    llamacpp = deployment_row_create(recipe=recipe_row_create(node=cpu_node, name="gguf", engine="llamacpp"),
                                     status=status)
    html = viewer_client.get(reverse("deployments:deployment-detail", args=[llamacpp.pk])).content.decode()
    said = re.findall(r'data-no-tok-s="([^"]*)"', html)
    assert [unescape(t) for t in said] == [NO_TOK_S_LLAMACPP]
    assert ('data-live-deployment' in html) is (status == DeploymentStatus.READY)
    # An engine with /metrics: the chart's own "no tok/s recorded yet" stands.
    html = viewer_client.get(reverse("deployments:deployment-detail", args=[pd_deployment.pk])).content.decode()
    assert "data-no-tok-s" not in html


# --- sweep page -------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "live"), [("running", True), ("done", False)])
def test_it_adds_the_live_progress_panel_to_an_active_sweep_only(viewer_client, pd_deployment, status, live):
    sweep = BenchmarkSweep.objects.create(deployment=pd_deployment, name="live", status=status)
    html = viewer_client.get(reverse("benchmarks:sweep-detail", args=[sweep.pk])).content.decode()
    assert (f'data-live-sweep="{sweep.pk}"' in html) is live


def test_the_wall_names_its_memory_figure_as_the_node_page_does(viewer_client, gpu_node):
    Node.objects.filter(pk=gpu_node.pk).update(agent_heartbeat_at=timezone.now())  # an offline, unsampled node is one line
    wall = viewer_client.get(reverse("deployments:wall")).content.decode()
    node = viewer_client.get(reverse("deployments:node-detail", args=["gpu-box"])).content.decode()
    host = wall[wall.index('class="wall-host-mem"'):].split("</div>")[0]
    # a short label, so it stays on one line in a narrow tile; the title names the figure in full
    assert '<span class="wall-host-mem-label">Host mem</span>' in host and 'data-f="hostmem"' in host
    assert 'title="Host memory used. Used on the host by every process' in host
    assert "Used on the host by every process (total − available), of the kernel's total" in host
    assert "the node page's Memory line is the sum of the NUMA nodes' MemTotal at discovery" in host
    panel = node[node.index('class="host-mem"'):].split("</div>")[0]
    assert "Host memory used</h3>" in panel
    assert "Used on the host by every process (total − available), of the kernel's total" in panel
    assert "sum of the NUMA nodes' MemTotal at discovery; the live figure below is the kernel's total" in node


def test_the_walls_ended_strip_shows_times_as_the_deployment_pages_do(viewer_client, gpu_node, monkeypatch):
    """Today's (UTC) end time without its date, one of another day with it, each in the
    deployment pages' ``<time>`` form (``utc_time``), the full time in the attribute and the tooltip."""
    midnight = timezone.now().astimezone(dt_timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    frozen = midnight + timedelta(minutes=5)
    monkeypatch.setattr(timezone, "now", lambda: frozen)
    recipe = recipe_row_create(node=gpu_node, name="ended-recipe")
    today = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)
    yesterday = deployment_row_create(recipe=recipe, status=DeploymentStatus.FAILED)
    today.ended_at = midnight + timedelta(minutes=2, seconds=24)
    yesterday.ended_at = midnight - timedelta(minutes=1, seconds=50)
    today.save()
    yesterday.save()
    html = viewer_client.get(reverse("deployments:wall-tiles")).content.decode()
    day, before = midnight.strftime("%Y-%m-%d"), (midnight - timedelta(days=1)).strftime("%Y-%m-%d")
    assert (f'<span class="wall-ended"><time datetime="{day}T00:02:24Z" title="{day}T00:02:24Z">00:02:24 UTC</time>'
            in html), html
    assert (f'<span class="wall-ended"><time datetime="{before}T23:58:10Z" title="{before}T23:58:10Z">'
            f"{before} 23:58:10 UTC</time>" in html), html


def test_a_node_never_sampled_names_no_live_memory_figure(viewer_client, db):
    from deployments.tests.factories import seed_node_create

    seed_node_create()
    node = viewer_client.get(reverse("deployments:node-detail", args=["seed-8gpu"])).content.decode()
    assert "the live figure below" not in node
    assert "sum of the NUMA nodes' MemTotal at discovery; never sampled, so there is no live figure" in node

    Node.objects.filter(name="seed-8gpu").update(agent_heartbeat_at=timezone.now())  # sampling now
    node = viewer_client.get(reverse("deployments:node-detail", args=["seed-8gpu"])).content.decode()
    assert "the live figure below is the kernel's total" in node
