"""A deployment ended while starting (never ready) says which request ended it and who asked:
``cancelled by <user> before it became ready`` for a cancel, ``stopped by <user> before it became
ready`` for a stop, as a sweep says ``cancelled by admin``; a teardown nobody asked for (the
agent's teardown called directly, with no request on the timeline) says ``stopped before it became
ready``. Real sim engines, stopped by the agent."""
from __future__ import annotations

import io
import os

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def starting(db, operator, settings, tmp_path):
    """A sim deployment launched (its engine spawned) and still starting: never ready."""
    from deployments import services
    from deployments.agent import deployment_launch
    from deployments.models import Node, NumaNode, ServerProcess
    from deployments.supervisor import process_find_by_tag
    from deployments.tests.test_agent_support import free_ports, wait_for
    from deployments.topology import format_cpulist

    usable = sorted(os.sched_getaffinity(0))
    settings.CEILING_LOG_DIR = tmp_path / "engines"
    node = Node.objects.create(name="here", hostname="here", cpu_count=len(usable), tools={})
    NumaNode.objects.create(node=node, index=0, cpus=format_cpulist(usable))
    (port,) = free_ports(1)
    spec = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
            "roles": {"single": {"cpus": str(usable[0]), "host": "127.0.0.1", "port": port,
                                 "flags": {"time-scale": 0.05}}},
            "sim": {"profile": "demo-fast"}, "startup_timeout_s": 30, "stop_grace_s": 5}
    recipe = services.recipe_create(user=operator, name="never-ready", engine="sim", topology="single", node=node,
                                    spec=spec)
    deployment = services.deployment_create(recipe=recipe, user=operator)
    assert deployment_launch(deployment_id=deployment.pk) == "launched"
    row = ServerProcess.objects.get(deployment=deployment)
    wait_for(lambda: process_find_by_tag(row.tag), timeout_s=30, what="the sim engine")
    deployment.refresh_from_db()
    assert (deployment.status, deployment.ready_at) == ("starting", None)
    yield deployment
    from deployments.agent import deployment_teardown

    deployment_teardown(deployment_id=deployment.pk)


@pytest.mark.parametrize("action, reason", [
    ("cancel", "cancelled by {user} before it became ready"),
    ("stop", "stopped by {user} before it became ready"),
])
def test_a_cancel_or_stop_while_starting_names_itself_and_who_asked(operator, operator_api, starting, action, reason):
    from deployments.agent import deployment_teardown

    response = operator_api.post(f"/api/deployments/{starting.pk}/{action}/", format="json")
    assert response.status_code == 202, response.content
    assert deployment_teardown(deployment_id=starting.pk) == "stopped"

    starting.refresh_from_db()
    expected = reason.format(user=operator.username)
    assert (starting.status, starting.reason) == ("stopped", expected)
    assert operator_api.get(f"/api/deployments/{starting.pk}/").json()["reason"] == expected
    stopped = starting.events.filter(kind="stopped", process=None).get().message
    assert stopped.endswith(f"({expected})")
    assert "cancelled or stopped" not in stopped


def test_a_teardown_nobody_asked_for_says_only_that_it_stopped(starting):
    from deployments.agent import deployment_teardown

    assert deployment_teardown(deployment_id=starting.pk) == "stopped"
    starting.refresh_from_db()
    assert starting.reason == "stopped before it became ready"


def test_a_stop_of_a_ready_deployment_names_who_asked(operator, operator_api, starting):
    """One that had been ready ends ``stopped by <user>``; its timeline's stopped event is unchanged."""
    from django.utils import timezone

    from deployments.agent import deployment_teardown
    from deployments.models import Deployment

    Deployment.objects.filter(pk=starting.pk).update(status="ready", ready_at=timezone.now())
    assert operator_api.post(f"/api/deployments/{starting.pk}/stop/", format="json").status_code == 202
    assert deployment_teardown(deployment_id=starting.pk) == "stopped"

    starting.refresh_from_db()
    assert (starting.status, starting.reason) == ("stopped", f"stopped by {operator.username}")
    assert operator_api.get(f"/api/deployments/{starting.pk}/").json()["reason"] == "stopped by oscar-operator"
    stopped = starting.events.filter(kind="stopped", process=None).get().message
    assert stopped.startswith("all processes stopped in ") and "(" not in stopped


@pytest.mark.parametrize("action", ["cancel", "stop"])
def test_a_pending_deployment_ended_by_a_cancel_or_stop_names_who_asked(db, operator, operator_api, action):
    """Pending (never sent to a node agent): cancelled at once, its reason naming who asked; the
    timeline keeps its ``cancelled`` event as it was."""
    from deployments import services
    from deployments.tests.factories import cpu_node_create

    node = cpu_node_create(name="local")
    spec = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
            "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}
    recipe = services.recipe_create(user=operator, name="pending-one", engine="sim", topology="single", node=node,
                                    spec=spec)
    deployment = services.deployment_create(recipe=recipe, user=operator)

    response = operator_api.post(f"/api/deployments/{deployment.pk}/{action}/", format="json")

    assert response.status_code == 202, response.content
    assert (response.json()["status"], response.json()["reason"]) == (
        "stopped", "cancelled by oscar-operator before it became ready")
    assert list(deployment.events.filter(kind="cancelled").values_list("message", flat=True)) == [
        "oscar-operator cancelled before start"]


def test_a_command_stopping_with_no_user_names_itself(db, operator):
    """``manage.py undeploy`` (which ``make stop`` runs) asks with no user: the reason names the
    command, never "someone"."""
    from django.core.management import call_command

    from deployments import services
    from deployments.tests.factories import cpu_node_create

    node = cpu_node_create(name="local")
    spec = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
            "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31235}}, "sim": {"profile": "demo-fast"}}
    recipe = services.recipe_create(user=operator, name="pending-two", engine="sim", topology="single", node=node,
                                    spec=spec)
    deployment = services.deployment_create(recipe=recipe, user=operator)
    call_command("undeploy", "--node", "local", "--wait", "0", stdout=io.StringIO())
    deployment.refresh_from_db()
    assert (deployment.status, deployment.reason) == ("stopped", "cancelled by manage.py undeploy before it became ready")
