"""What the deployment page and the deployments list give their scripts and polls to keep up
without a reload (the browser side: ``controlplane/tests/browser/test_deployment_pages_follow_browser.py``):

* the deployment page offers "Run a sweep" only for a ready deployment with no stop requested,
  says why not for a stopped or stopping one, and its live part brings the header's actions along
  out of band, so the button goes with the stop; the server refuses a sweep of an ended deployment
  anyway, from the form and the API, in one clear sentence;
* the page's Node line carries what the node page's script judges the agent by (last heartbeat,
  the server's time, offline limit, read interval), and every age beside a time its ISO value;
* its sweep list re-reads itself while it can change and says it is final once it cannot;
* the deployments list re-reads its rows every 5 s (first page and later pages), says as of when,
  and a running deployment's time serving carries the time it counts from.
"""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.tests.sweep_support import sim_deployment_create
from deployments.choices import DeploymentStatus, ProcessStatus
from deployments.models import Deployment
from deployments.services import deployment_cancel
from deployments.tests.factories import signed_in_client

pytestmark = pytest.mark.django_db

GRID = {"concurrency": [1], "lengths": "64:16", "requests": 4}
RUN_A_SWEEP = re.compile(r'<a class="button" href="/benchmarks/sweeps/new/\?deployment=\d+">Run a sweep</a>')


def _ready(**extra) -> Deployment:
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9")
    now = timezone.now()
    Deployment.objects.filter(pk=deployment.pk).update(ready_at=now - timedelta(seconds=60), **extra)
    return Deployment.objects.get(pk=deployment.pk)


def _stopped(deployment: Deployment) -> Deployment:
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPED, ended_at=timezone.now())
    return Deployment.objects.get(pk=deployment.pk)


def _page(user, name: str, *args, **query) -> str:
    response = signed_in_client(user).get(reverse(name, args=args), query)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def test_a_ready_deployment_offers_a_sweep_and_a_stopped_one_says_why_not(operator):
    deployment = _ready()
    page = _page(operator, "deployments:deployment-detail", deployment.pk)
    assert RUN_A_SWEEP.search(page)

    _stopped(deployment)
    page = _page(operator, "deployments:deployment-detail", deployment.pk)
    assert "Run a sweep" not in page
    assert "No sweep: the deployment was stopped" in page


def test_a_deployment_being_stopped_offers_no_sweep(operator):
    deployment = _ready(stop_requested=True)
    page = _page(operator, "deployments:deployment-detail", deployment.pk)
    assert "Run a sweep" not in page and "No sweep: the deployment is being stopped" in page


def test_a_viewer_is_offered_no_sweep_either_way(viewer):
    deployment = _ready()
    assert "Run a sweep" not in _page(viewer, "deployments:deployment-detail", deployment.pk)
    _stopped(deployment)
    assert "No sweep" not in _page(viewer, "deployments:deployment-detail", deployment.pk)


def test_the_live_part_brings_the_header_actions_out_of_band(operator):
    deployment = _ready()
    live = _page(operator, "deployments:deployment-live", deployment.pk)
    actions = re.search(r'<div class="actions" id="deployment-actions" hx-swap-oob="true">.*?</div>\n?$', live, re.S)
    assert actions and RUN_A_SWEEP.search(actions.group(0))
    # the full page renders them once, in its header, not out of band
    page = _page(operator, "deployments:deployment-detail", deployment.pk)
    assert page.count('id="deployment-actions"') == 1 and "hx-swap-oob" not in page

    _stopped(deployment)
    live = _page(operator, "deployments:deployment-live", deployment.pk)
    actions = re.search(r'<div class="actions" id="deployment-actions" hx-swap-oob="true">.*?</div>\n?$', live, re.S)
    assert actions and "Run a sweep" not in actions.group(0)
    assert "No sweep: the deployment was stopped" in actions.group(0)
    assert "hx-trigger" not in live  # the terminal answer ends the polling


def test_the_server_refuses_a_sweep_of_a_stopped_deployment_from_the_form_and_the_api(operator, operator_api):
    deployment = _stopped(_ready())
    refusal = f"deployment #{deployment.pk} is stopped; deploy its recipe again and sweep the new deployment"

    answer = operator_api.post("/api/sweeps/", {"deployment": deployment.pk, "grid": GRID}, format="json")
    assert answer.status_code == 409, answer.content
    assert answer.json() == {"detail": refusal, "code": "conflict"}

    form = signed_in_client(operator).post(reverse("benchmarks:sweep-create"), {
        "deployment": deployment.pk, "concurrency": "1", "lengths": "64:16", "requests": "4", "duration": "",
        "warmup": "0", "seed": "0"})
    assert form.status_code == 409
    body = form.content.decode()
    assert refusal in body
    assert f"Deployment #{deployment.pk} is <strong>stopped</strong>: a sweep cannot run on it." in body
    assert not BenchmarkSweep.objects.filter(deployment=deployment).exists()


def test_the_node_line_carries_what_the_agent_is_judged_by(viewer, settings):
    settings.CEILING_HEARTBEAT_TIMEOUT_S = 30.0
    settings.CEILING_AGENT_HEARTBEAT_S = 5.0
    deployment = _ready()
    page = _page(viewer, "deployments:deployment-detail", deployment.pk)
    line = re.search(r'<dd data-agent-line data-heartbeat-scope data-follows-live>.*?</dd>', page, re.S).group(0)
    assert 'data-agent-badge="local"' in line and ">agent online</span>" in line
    assert re.search(r'data-heartbeat-of="local" data-heartbeat-at="\d{4}-\d\d-\d\dT[\d:.]+Z" '
                     r'data-server-now="\d{4}-\d\d-\d\dT[\d:.]+Z" data-offline-after="30" data-heartbeat-every="5"', line)
    # the page's clock for the counted ages, and the ISO time each age counts from
    assert re.search(r'<meta name="server-now" content="\d{4}-\d\d-\d\dT[^"]+">', page)
    assert re.search(r'<dt>Created</dt><dd><time datetime="([^"]+)" title="\1">[^<]+</time> '
                     r'<span class="muted small">\(<span data-age data-age-of="\1">', page)
    assert re.search(r'<span data-age data-duration-from="[^"]+">1 min 0\d s</span>', page)

    # an ended deployment's page has no socket: the line is stale only while its reads fail
    _stopped(deployment)
    page = _page(viewer, "deployments:deployment-detail", deployment.pk)
    assert "<dd data-agent-line data-heartbeat-scope>" in page
    assert "data-follows-live" not in page.split("<dd data-agent-line", 1)[1].split("</dd>", 1)[0]


def test_the_sweep_list_re_reads_itself_while_it_can_change(viewer, admin_user):
    deployment = _ready()
    page = _page(viewer, "deployments:deployment-detail", deployment.pk)
    assert re.search(rf'<section class="panel" id="deployment-sweeps" hx-get="/deployments/{deployment.pk}/sweeps/" '
                     r'hx-trigger="every 5s" hx-swap="outerHTML">', page)
    assert "None yet." in page and "updates every 5 s" in page

    sweep = BenchmarkSweep.objects.create(deployment=deployment, status=SweepStatus.RUNNING, points_total=2,
                                          points_done=1, grid={"concurrency": [1, 2]}, created_by=admin_user)
    part = _page(viewer, "deployments:deployment-sweeps", deployment.pk)
    assert f'<tr data-sweep-id="{sweep.pk}">' in part and "1 / 2" in part and 'hx-trigger="every 5s"' in part
    assert re.search(r"as of <time datetime=\"[^\"]+\" title=\"[^\"]+\" data-sweeps-as-of>\d{4}-\d\d-\d\d [\d:]{8} UTC</time>",
                     part)

    # ended, with a sweep still running: still read (the sweep moves on)
    _stopped(deployment)
    assert 'hx-trigger="every 5s"' in _page(viewer, "deployments:deployment-sweeps", deployment.pk)
    # ended and every sweep over: final, the polling ends
    BenchmarkSweep.objects.filter(pk=sweep.pk).update(status=SweepStatus.DONE, points_done=2)
    part = _page(viewer, "deployments:deployment-sweeps", deployment.pk)
    assert "hx-trigger" not in part and "hx-get" not in part
    assert "(final: the deployment ended and no sweep of it is active)" in part and "2 / 2" in part


def test_the_deployments_list_re_reads_its_rows(viewer):
    deployment = _ready()
    page = _page(viewer, "deployments:deployment-list")
    assert re.search(r'<div id="deployment-rows" hx-get="/deployments/rows/" hx-trigger="every 5s" hx-swap="outerHTML">',
                     page)
    assert re.search(r'As of <time datetime="[^"]+" title="[^"]+" data-rows-as-of>\d{4}-\d\d-\d\d [\d:]{8} UTC</time>, '
                     r'<span data-live-cadence>updates every 5 s</span>\.', page)
    assert re.search(r'<span data-age data-duration-from="[^"]+">1 min 0\d s</span> <span class="muted">\(running\)</span>',
                     page)

    rows = _page(viewer, "deployments:deployment-list-rows")
    assert rows.lstrip().startswith('<div id="deployment-rows"')
    assert f"<td>{deployment.pk}</td>" in rows and "<html" not in rows

    _stopped(deployment)
    rows = _page(viewer, "deployments:deployment-list-rows")
    assert ">stopped</span>" in rows and "(running)" not in rows


def test_a_later_page_of_the_list_re_reads_that_page(viewer):
    first = _ready()
    for _ in range(20):
        Deployment.objects.create(recipe=first.recipe, recipe_version=1, spec_snapshot=first.spec_snapshot,
                                  node=first.node, status=DeploymentStatus.STOPPED, ended_at=timezone.now())
    page = _page(viewer, "deployments:deployment-list", page="2")
    assert 'hx-get="/deployments/rows/?page=2"' in page
    rows = _page(viewer, "deployments:deployment-list-rows", page="2")
    assert f"<td>{first.pk}</td>" in rows and "page 2 of 2" in rows
    assert signed_in_client(viewer).get(reverse("deployments:deployment-list-rows"), {"page": "3"}).status_code == 404


def _starting_with_a_process_not_yet_healthy() -> Deployment:
    """A deployment starting for 3 s whose one process is spawned and not yet healthy."""
    deployment = sim_deployment_create(base_url="http://127.0.0.1:9", status=DeploymentStatus.STARTING)
    now = timezone.now()
    Deployment.objects.filter(pk=deployment.pk).update(created_at=now - timedelta(seconds=3), started_at=now)
    deployment.processes.update(status=ProcessStatus.SPAWNED, started_at=now, pid=4242)
    return Deployment.objects.get(pk=deployment.pk)


def test_a_starting_deployment_asked_to_stop_reads_stopping_everywhere_on_its_page(operator):
    deployment = _starting_with_a_process_not_yet_healthy()
    live = _page(operator, "deployments:deployment-live", deployment.pk)
    assert re.search(r">Serving</dt><dd>not ready yet; starting for \d s since created</dd>", live)
    assert "starting: not yet healthy" in live
    assert re.search(r'<button type="submit" class="danger">Stop deployment</button>', live)

    stopped = signed_in_client(operator).post(reverse("deployments:deployment-stop", args=[deployment.pk]))
    assert stopped.status_code == 302
    deployment.refresh_from_db()
    assert (deployment.status, deployment.stop_requested) == (DeploymentStatus.STARTING, True)

    for page in (_page(operator, "deployments:deployment-live", deployment.pk),
                 _page(operator, "deployments:deployment-detail", deployment.pk)):
        assert '<span class="tag warn">stop requested</span>' in page
        assert re.search(r">Serving</dt><dd>stopping: stop requested [0-2] s ago; not serving</dd>", page), re.findall(
            r">Serving</dt><dd>[^<]*", page)
        assert "not ready yet" not in page and "starting for" not in page
        assert "starting: not yet healthy" not in page and ">stopping: not healthy</span>" in page
        assert "Stop deployment" not in page
        assert re.search(r'<button type="button" class="danger" disabled title="A stop was requested: the node agent '
                         r'is stopping every process">Stop requested</button>', page)
    rows = _page(operator, "deployments:deployment-list")
    assert re.search(r"stopping: stop requested [0-2] s ago; not serving</td>", rows)

    # Once the agent has begun (status stopping), the page reads the same.
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPING)
    live = _page(operator, "deployments:deployment-live", deployment.pk)
    assert re.search(r">Serving</dt><dd>stopping: stop requested [0-2] s ago; not serving</dd>", live)
    assert ">stopping: not healthy</span>" in live and "Stop deployment" not in live


def test_a_starting_deployment_cancelled_says_a_cancel_was_requested(operator):
    deployment = _starting_with_a_process_not_yet_healthy()
    deployment_cancel(deployment=deployment, user=operator)
    live = _page(operator, "deployments:deployment-live", deployment.pk)
    assert re.search(r">Serving</dt><dd>stopping: cancel requested [0-2] s ago; not serving</dd>", live)
    assert ">Cancel requested</button>" in live and "Stop deployment" not in live
