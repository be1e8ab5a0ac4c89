"""One rule for how long a deployment ran, on the list and on its page: time serving runs from
Ready to Ended (or now), the startup (Created to Ready) is shown apart, so pressing Stop does not
make the number jump; a deployment that never became ready says so and counts from Created.
Times read ``2026-12-06 13:32:24 UTC`` everywhere on the deployments pages, the ISO value in the
``<time datetime>`` attribute; the API keeps its machine-readable values."""
from __future__ import annotations

import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deployments.choices import DeploymentStatus
from deployments.models import Deployment, Node, ServerProcess
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db

CREATED = datetime(2026, 12, 6, 13, 32, 24, tzinfo=dt_timezone.utc)


def _online_node() -> Node:
    """A node whose agent heartbeats, so a page counts to now, not to the agent's last word."""
    node = cpu_node_create()
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now(), agent_stopped_at=None)
    return node


def _get(user, name: str, *args) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(reverse(name, args=list(args)))
    assert response.status_code == 200
    return response.content.decode()


def _row(html: str, pk: int) -> str:
    return re.search(rf"<tr>\s*<td>{pk}</td>.*?</tr>", html, re.S).group(0)


def _serving_cell(html: str, pk: int) -> str:
    return re.sub(r"<[^>]+>", "", re.findall(r'<td class="small">(.*?)</td>', _row(html, pk), re.S)[2]).strip()


def test_a_running_and_then_stopped_deployment_shows_the_same_time_serving_and_its_startup(viewer):
    now = timezone.now()
    deployment = deployment_row_create(recipe=recipe_row_create(node=_online_node(), name="serves"))
    Deployment.objects.filter(pk=deployment.pk).update(
        created_at=now - timedelta(seconds=551.5), started_at=now - timedelta(seconds=550),
        ready_at=now - timedelta(seconds=538.3))
    ServerProcess.objects.filter(deployment=deployment).update(started_at=now - timedelta(seconds=549))

    listed = _get(viewer, "deployments:deployment-list")
    # still running: counted to the render, a few seconds at most after ``now``
    assert re.fullmatch(r"(8 min 5[89]|9 min 0\d) s \(running\)startup 13\.2 s \(created → ready\)", _serving_cell(listed, deployment.pk))
    assert '<th title="Time serving, from Ready to Ended (or now); the startup, from Created to Ready, under it">Serving</th>' in listed
    live = _get(viewer, "deployments:deployment-live", deployment.pk)
    # (the running time is wrapped so that a stale panel can freeze it)
    assert re.search(r'>Serving for</dt><dd><span data-age data-duration-from="[^"]+">(8 min 5[89]|9 min 0\d) s</span></dd>', live), \
        re.findall(r"<dt[^>]*>[^<]*</dt><dd>.{0,60}", live)
    assert '>Startup</dt><dd>13.2 s (created → ready)</dd>' in live

    # Stopped at ``now``: the time serving is the same number, not 13 s more (the startup stays apart).
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPED, ended_at=now)
    listed = _get(viewer, "deployments:deployment-list")
    assert _serving_cell(listed, deployment.pk) == "8 min 58 sstartup 13.2 s (created → ready)"
    live = _get(viewer, "deployments:deployment-live", deployment.pk)
    assert '>Served for</dt><dd>8 min 58 s</dd>' in live
    assert '>Startup</dt><dd>13.2 s (created → ready)</dd>' in live


def test_a_deployment_that_never_became_ready_says_so_and_counts_from_created(viewer):
    now = timezone.now()
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create(), name="never-ready"),
                                       status=DeploymentStatus.FAILED)
    Deployment.objects.filter(pk=deployment.pk).update(
        created_at=now - timedelta(seconds=684), started_at=now - timedelta(seconds=680), ended_at=now)
    ServerProcess.objects.filter(deployment=deployment).update(started_at=now - timedelta(seconds=679))

    assert _serving_cell(_get(viewer, "deployments:deployment-list"), deployment.pk) == \
        "never ready; ran 11 min 24 s from created"
    live = _get(viewer, "deployments:deployment-live", deployment.pk)
    assert '>Serving</dt><dd>never ready; ran 11 min 24 s from created</dd>' in live
    assert "Startup</dt>" not in live


def test_a_startup_of_a_minute_or_more_is_in_minutes_and_seconds(viewer):
    now = timezone.now()
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create(), name="slow-start"))
    Deployment.objects.filter(pk=deployment.pk).update(created_at=now - timedelta(seconds=200.2),
                                                       ready_at=now - timedelta(seconds=75.2), ended_at=now,
                                                       status=DeploymentStatus.STOPPED)
    live = _get(viewer, "deployments:deployment-live", deployment.pk)
    assert '>Served for</dt><dd>1 min 15 s</dd>' in live
    assert '>Startup</dt><dd>2 min 05 s (created → ready)</dd>' in live


def test_times_on_the_deployments_pages_are_one_utc_form_and_the_api_keeps_iso(viewer, viewer_api):
    recipe = recipe_row_create(node=cpu_node_create(), name="dated")
    deployment = deployment_row_create(recipe=recipe)
    Deployment.objects.filter(pk=deployment.pk).update(created_at=CREATED, ready_at=CREATED + timedelta(seconds=13))
    tag = ('<time datetime="2026-12-06T13:32:24Z" title="2026-12-06T13:32:24Z">2026-12-06 13:32:24 UTC</time>')
    assert tag in _get(viewer, "deployments:deployment-list")
    assert tag in _get(viewer, "deployments:deployment-live", deployment.pk)
    assert ('<time datetime="2026-12-06T13:32:37Z" title="2026-12-06T13:32:37Z">2026-12-06 13:32:37 UTC</time>'
            in _get(viewer, "deployments:deployment-live", deployment.pk))
    # The recipe page's deployment rows use the same form.
    assert tag in _get(viewer, "deployments:recipe-detail", recipe.pk)

    body = viewer_api.get(f"/api/deployments/{deployment.pk}/").json()
    assert datetime.fromisoformat(body["created_at"].replace("Z", "+00:00")) == CREATED
    assert "UTC" not in body["created_at"]
