"""While a node agent is offline, a deployment's state is shown "as of" the last time the agent
confirmed it: the latest of its last heartbeat, its clean shutdown and what it wrote on the
deployment (taken, spawned, probed), never the heartbeat alone. An agent heartbeats every few
seconds, so one that takes a deployment a second after its last heartbeat and then stops used to
date the state before the deployment existed ("starting ... since created as of 10:09:20" for one
created at 10:09:21). The real deploy and the real agent code take it here; the engine is real."""
from __future__ import annotations

import datetime as dt
import os
import re
import time

import pytest
from django.urls import reverse

from deployments import services
from deployments.agent import deployment_launch, deployment_teardown
from deployments.models import Deployment, Node, ServerProcess
from deployments.nodes import node_agent_stopped, node_heartbeat
from deployments.tests.factories import cpu_node_create, recipe_row_create
from deployments.tests.test_agent_support import sim_single_recipe

pytestmark = pytest.mark.django_db


def _iso(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _read(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def taken_after_the_heartbeat(operator, settings, tmp_path, django_capture_on_commit_callbacks):
    """A deployment created a second after its agent's last heartbeat and taken by the agent's own
    code (claimed, its engine spawned) without a heartbeat since; the engine is torn down after."""
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    node = cpu_node_create()
    recipe = sim_single_recipe(node=node, user=operator)
    node_heartbeat(name=node.name, pid=os.getpid())
    time.sleep(1.1)
    with django_capture_on_commit_callbacks(execute=False):  # the agent is called below, not through the queue
        deployment = services.deployment_create(recipe=recipe, user=operator)
    assert deployment_launch(deployment_id=deployment.pk) == "launched"
    yield Deployment.objects.select_related("node", "recipe").get(pk=deployment.pk)
    deployment_teardown(deployment_id=deployment.pk)


def _page(client, deployment) -> str:
    return client.get(reverse("deployments:deployment-detail", args=[deployment.pk])).content.decode()


def test_a_clean_stop_just_after_taking_it_dates_the_state_at_the_stop(operator_client, operator_api,
                                                                      taken_after_the_heartbeat):
    deployment = taken_after_the_heartbeat
    node = deployment.node
    assert node.agent_heartbeat_at < deployment.created_at   # the cause: the last heartbeat came first
    assert node_agent_stopped(name=node.name, pid=os.getpid())
    stopped = Node.objects.get(pk=node.pk).agent_stopped_at

    body = operator_api.get(f"/api/deployments/{deployment.pk}/").json()
    page = _page(operator_client, deployment)

    assert (body["status"], body["live"]) == ("starting", False)
    assert _read(body["state_as_of"]) == stopped
    assert body["state_note"] == f"as last seen by node agent cpu-box at {_iso(stopped)}; not live: the agent is offline"
    assert f"since created as of {stopped:%H:%M:%S} UTC (agent offline)" in page
    assert f"last seen starting at {stopped:%H:%M:%S} UTC (agent offline)" in page
    shown = set(re.findall(r"as of (\d\d:\d\d:\d\d) UTC|last seen \w+ at (\d\d:\d\d:\d\d) UTC", page))
    assert all(max(pair) >= f"{deployment.created_at:%H:%M:%S}" for pair in shown), shown


def test_an_agent_gone_silent_dates_the_state_at_its_last_write(operator_api, settings, taken_after_the_heartbeat):
    # killed: no clean stop; its heartbeat, a second before the deploy, is past the timeout now
    settings.CEILING_HEARTBEAT_TIMEOUT_S = 1.0
    deployment = taken_after_the_heartbeat
    row = ServerProcess.objects.get(deployment=deployment)
    last_write = max(deployment.started_at, row.started_at)
    assert last_write > deployment.created_at > deployment.node.agent_heartbeat_at

    body = operator_api.get(f"/api/deployments/{deployment.pk}/").json()

    assert body["live"] is False
    assert _read(body["state_as_of"]) == last_write


def test_an_agent_clock_behind_never_dates_it_before_it_was_created(operator_api):
    # The agent's host clock runs 10 s behind this one: its times read before the deployment's creation.
    node = cpu_node_create()
    deployment = Deployment.objects.create(recipe=recipe_row_create(node=node), recipe_version=1, node=node,
                                           status="starting")
    behind = deployment.created_at - dt.timedelta(seconds=10)
    Node.objects.filter(pk=node.pk).update(agent_heartbeat_at=behind - dt.timedelta(seconds=60))
    Deployment.objects.filter(pk=deployment.pk).update(started_at=behind)

    body = operator_api.get(f"/api/deployments/{deployment.pk}/").json()

    assert _read(body["state_as_of"]) == deployment.created_at
