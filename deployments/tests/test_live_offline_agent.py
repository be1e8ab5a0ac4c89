"""A deployment that has not ended is live only while its node agent is online: one whose agent
never connected (heartbeat never) or went away reads ``live: false`` with a note naming the agent,
pending ones included; an ended deployment is final, so live whatever the agent."""
from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from benchmarks.tests.page_support import logged_in_client
from deployments.choices import DeploymentStatus
from deployments.models import Deployment, Node
from deployments.tests.factories import cpu_node_create, recipe_row_create

pytestmark = pytest.mark.django_db


def _deployment(status: str, *, heartbeat_age_s: float | None) -> Deployment:
    node = cpu_node_create(name="gpu-a")
    if heartbeat_age_s is not None:
        Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=timezone.now() - dt.timedelta(seconds=heartbeat_age_s))
    recipe = recipe_row_create(node=node)
    return Deployment.objects.create(recipe=recipe, recipe_version=1, node=node, status=status)


def _shown(api, deployment: Deployment) -> tuple:
    body = api.get(f"/api/deployments/{deployment.pk}/").json()
    return body["live"], body["state_as_of"], body["state_note"]


def test_a_pending_deployment_of_an_agent_never_seen_is_not_live(viewer_api, viewer):
    deployment = _deployment(DeploymentStatus.PENDING, heartbeat_age_s=None)

    assert _shown(viewer_api, deployment) == (False, None, "not live: node agent gpu-a is offline (never seen)")
    page = logged_in_client(viewer).get(f"/deployments/{deployment.pk}/").content.decode()
    assert "Not live: node agent gpu-a is offline (never seen)</strong>. Nothing below is live" in page


def test_a_pending_deployment_of_an_agent_gone_quiet_names_its_last_heartbeat(viewer_api):
    deployment = _deployment(DeploymentStatus.PENDING, heartbeat_age_s=300)
    seen = Node.objects.get(name="gpu-a").agent_heartbeat_at.strftime("%Y-%m-%dT%H:%M:%SZ")

    assert _shown(viewer_api, deployment) == (False, None, f"not live: node agent gpu-a is offline (last heartbeat {seen})")


def test_a_starting_deployment_of_an_agent_never_seen_is_not_live(viewer_api):
    deployment = _deployment(DeploymentStatus.STARTING, heartbeat_age_s=None)

    live, as_of, note = _shown(viewer_api, deployment)
    assert (live, note) == (False, "not live: node agent gpu-a is offline (never seen)")
    assert as_of is not None


@pytest.mark.parametrize("status", [DeploymentStatus.PENDING, DeploymentStatus.READY])
def test_a_deployment_of_an_online_agent_is_live(viewer_api, status):
    deployment = _deployment(status, heartbeat_age_s=1)

    assert _shown(viewer_api, deployment) == (True, None, None)


@pytest.mark.parametrize("status", [DeploymentStatus.STOPPED, DeploymentStatus.FAILED])
def test_an_ended_deployment_is_final_whatever_the_agent(viewer_api, status):
    deployment = _deployment(status, heartbeat_age_s=None)

    assert _shown(viewer_api, deployment) == (True, None, None)


def test_the_schema_says_live_is_about_the_state_shown_not_about_running():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    live = schema["components"]["schemas"]["Deployment"]["properties"]["live"]["description"]
    assert live.startswith("whether the status and processes shown are current, not whether the deployment is running")
    assert "true for a stopped or failed deployment" in live


def test_a_ready_deployment_of_an_offline_agent_says_its_page_is_not_updating(operator):
    deployment = _deployment(DeploymentStatus.READY, heartbeat_age_s=300)
    Deployment.objects.filter(pk=deployment.pk).update(entry_url="http://127.0.0.1:30000",
                                                       created_at=timezone.now() - dt.timedelta(seconds=410),
                                                       started_at=timezone.now() - dt.timedelta(seconds=400),
                                                       ready_at=timezone.now() - dt.timedelta(seconds=390))
    seen = Node.objects.get(name="gpu-a").agent_heartbeat_at
    page = logged_in_client(operator).get(f"/deployments/{deployment.pk}/").content.decode()

    assert "updates every 2 s" not in page
    assert "not updating while node agent gpu-a is offline" in page
    # the note's time reads as the rest of the page does
    assert f"As last seen by node agent gpu-a at {seen:%Y-%m-%d %H:%M:%S} UTC; not live" in page
    assert f"{seen:%Y-%m-%dT%H:%M:%S}Z;" not in page
    # a sweep would not wait for the agent: not offered; a stop is queued for the agent: offered
    assert "Run a sweep" not in page and "No sweep while the node agent is offline" in page
    assert "Stop deployment</button>" in page

    Node.objects.filter(pk=deployment.node_id).update(agent_heartbeat_at=timezone.now())
    page = logged_in_client(operator).get(f"/deployments/{deployment.pk}/").content.decode()
    assert "updates every 2 s" in page and "not updating" not in page
    assert "Run a sweep" in page and "No sweep while" not in page


def test_a_stop_requested_while_the_agent_is_offline_waits_for_it_in_page_time_format(operator):
    deployment = _deployment(DeploymentStatus.READY, heartbeat_age_s=300)
    seen = Node.objects.get(name="gpu-a").agent_heartbeat_at
    client = logged_in_client(operator)
    client.post(f"/deployments/{deployment.pk}/stop/")
    deployment.refresh_from_db()
    assert deployment.stop_requested and deployment.status == DeploymentStatus.READY
    page = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert f"(last heartbeat {seen:%Y-%m-%d %H:%M:%S} UTC)" in page
    assert "the stop runs when the agent is back" in page
