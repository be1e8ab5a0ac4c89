"""While a node agent is offline (its heartbeat is stale), pages and the API show the stored
state as last seen by it, not as live; the stored rows stay as they are. Real agent (SIGKILLed),
real sim engine, real Redis and database."""
from __future__ import annotations

import os
import re
import signal
import time

import pytest
from django.test import Client
from django.urls import reverse

from deployments import services
from deployments.choices import ProcessStatus
from deployments.models import Node, ServerProcess
from deployments.tests.test_agent_support import (  # noqa: F401 - fixtures
    agent_env,
    agents,
    deployer,
    engines_under,
    node_of,
    sim_single_recipe,
    wait_for,
    wait_status,
)

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT_S = 2.0


def _offline(node: Node) -> None:
    wait_for(lambda: not Node.objects.get(pk=node.pk).agent_online, timeout_s=HEARTBEAT_TIMEOUT_S + 10,
             what="the agent to read offline")


def test_a_dead_engine_of_an_offline_agent_reads_as_last_seen_not_live(agents, deployer, viewer, viewer_api, settings, tmp_path):
    settings.CEILING_HEARTBEAT_TIMEOUT_S = HEARTBEAT_TIMEOUT_S
    agent = agents()
    node = node_of(agent)
    deployment = wait_status(services.deployment_create(recipe=sim_single_recipe(node=node, user=deployer),
                                                        user=deployer), "ready")
    row = ServerProcess.objects.get(deployment=deployment)
    agent.kill()
    os.kill(row.pid, signal.SIGKILL)
    _offline(node)
    heartbeat = Node.objects.get(pk=node.pk).agent_heartbeat_at
    row.refresh_from_db()
    deployment.refresh_from_db()
    # the last time the agent confirmed the state: its last heartbeat or, when later, its last probe
    seen = max(at for at in (heartbeat, row.last_probe_at, row.started_at, row.ready_at, deployment.ready_at) if at)

    body = viewer_api.get(f"/api/deployments/{deployment.pk}/").json()
    assert body["status"] == "ready"  # stored as the agent left it
    assert body["live"] is False
    assert body["state_as_of"].startswith(seen.strftime("%Y-%m-%dT%H:%M:%S"))
    assert body["state_note"] == (f"as last seen by node agent {node.name} at "
                                  f"{seen.strftime('%Y-%m-%dT%H:%M:%SZ')}; not live: the agent is offline")

    page = Client()
    page.force_login(viewer)
    url = reverse("deployments:deployment-live", args=[deployment.pk])
    first = page.get(url).content.decode()
    time.sleep(1.5)
    second = page.get(url).content.decode()
    assert "As last seen by node agent" in first
    assert f"last seen healthy at {seen:%H:%M:%S} UTC (agent offline)" in first
    assert ">healthy<" not in first
    # The text without its markup (a serving time is wrapped so that a stale panel can freeze it).
    up = [re.sub(r"<[^>]+>", "", re.search(r">Serving for</dt><dd>(.*?)</dd>", text).group(1))
          for text in (first, second)]
    assert up[0] == up[1] and up[0].endswith("(agent offline)"), up
    assert ServerProcess.objects.get(pk=row.pk).status == ProcessStatus.READY  # rows untouched


def test_a_starting_deployment_of_a_killed_agent_names_the_missing_agent(agents, deployer, viewer, viewer_api, settings, tmp_path):
    settings.CEILING_HEARTBEAT_TIMEOUT_S = HEARTBEAT_TIMEOUT_S
    agent = agents(CEILING_FAULT_PAUSE_AFTER_SPAWN_S="60")
    node = node_of(agent)
    deployment = services.deployment_create(recipe=sim_single_recipe(node=node, user=deployer), user=deployer)
    wait_for(lambda: engines_under(tmp_path), timeout_s=20, what="the engine to be spawned")
    agent.kill()
    _offline(node)

    deployment.refresh_from_db()
    assert deployment.status == "starting"
    body = viewer_api.get(f"/api/deployments/{deployment.pk}/").json()
    assert re.fullmatch(rf"waiting for node agent {node.name} \(last heartbeat \S+\): nobody watches the "
                        r"startup or enforces its 30s startup timeout until the agent is back",
                        body["waiting_reason"]), body["waiting_reason"]
    assert body["live"] is False
