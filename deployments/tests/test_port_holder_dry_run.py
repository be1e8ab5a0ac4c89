"""A port the recipe needs that a program outside Ceiling's deployments holds on this host: the
dry-run (API and page) names it with the holder's pid and name, a deploy records it as a warning,
and the node agent fails the deployment before it spawns anything. Every holder is a real
listening socket of this test process (or of a child it starts)."""
from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from deployments import services
from deployments.choices import ProcessStatus
from deployments.models import Deployment, ProcessEvent, ServerProcess
from deployments.supervisor.procfs import proc_stat
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_agent_support import (  # noqa: F401 - fixtures
    agent_env,
    agents,
    deployer,
    engines_under,
    free_ports,
    node_of,
    sim_pd_recipe,
    wait_status,
)
from deployments.tests.test_views import operator_client  # noqa: F401 - fixture

def _me() -> str:
    """This process as the warning names it, read when asked: a test runner may rename it (its comm)
    after this module is imported."""
    return f"pid {os.getpid()} ({proc_stat(os.getpid()).comm})"


@pytest.fixture
def local_node(db, settings):
    """A CPU node that is this host (the name the local node agent registers)."""
    settings.CEILING_NODE_NAME = "cpu-box"
    return cpu_node_create(name="cpu-box")


def _listen(port: int, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, port))
    sock.listen()
    return sock


@pytest.fixture
def held() -> Iterator[socket.socket]:
    """A plain TCP listener of this test process on a free port of 127.0.0.1."""
    sock = _listen(0)
    yield sock
    sock.close()


def _single(user, node, port: int, *, name: str = "sim-single"):
    role = {"cpus": "0", "host": "127.0.0.1", "port": port}
    spec = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny", "roles": {"single": role},
            "sim": {"profile": "demo-fast"}}
    return services.recipe_create(user=user, name=name, engine="sim", topology="single", node=node, spec=spec)


def _this_host_warnings(api, recipe_id: int) -> list[str]:
    response = api.get(f"/api/recipes/{recipe_id}/dry-run/")
    assert response.status_code == 200, response.content
    return [w for w in response.json()["plan"]["warnings"] if "(this host)" in w]


def test_the_dry_run_names_the_port_and_the_process_holding_it(operator_api, operator, local_node, held):
    port = held.getsockname()[1]
    recipe = _single(operator, local_node, port)

    assert _this_host_warnings(operator_api, recipe.pk) == [
        f"single http port {port} on 127.0.0.1 is already in use by {_me()} on node 'cpu-box' (this host), and no "
        "active deployment books it: a launch now would fail at start; stop that process or choose another port"]

    held.close()
    assert _this_host_warnings(operator_api, recipe.pk) == []


def test_a_listener_on_every_address_clashes_with_an_engine_on_one(operator_api, operator, local_node):
    (port,) = free_ports(1)
    with _listen(port, host="0.0.0.0"):
        recipe = _single(operator, local_node, port)
        lines = _this_host_warnings(operator_api, recipe.pk)
    assert len(lines) == 1
    assert lines[0].startswith(f"single http port {port} on 127.0.0.1 is already in use by {_me()} on node 'cpu-box'")


def test_the_dry_run_page_shows_the_same_line(operator_client, operator, local_node, held):
    port = held.getsockname()[1]
    recipe = _single(operator, local_node, port)

    page = operator_client.get(reverse("deployments:recipe-dry-run", args=[recipe.pk]))

    assert page.status_code == 200
    text = page.content.decode()
    assert (f"single http port {port} on 127.0.0.1 is already in use by {_me()} on node &#x27;cpu-box&#x27; "
            "(this host), and no active deployment books it: a launch now would fail at start") in text


def test_it_says_nothing_of_another_nodes_ports(operator_api, operator, local_node, held, settings):
    recipe = _single(operator, local_node, held.getsockname()[1])
    settings.CEILING_NODE_NAME = "control-host"  # this server runs elsewhere: 'cpu-box' is remote

    assert _this_host_warnings(operator_api, recipe.pk) == []


def test_a_port_an_active_deployment_books_is_not_called_foreign(operator_api, operator, local_node,
                                                                 django_capture_on_commit_callbacks):
    # The recipe's own pending deployment books the port; whatever listens on it is not news (and
    # another recipe's booking is the 409 clash line the dry-run already gives).
    (port,) = free_ports(1)
    recipe = _single(operator, local_node, port)
    with django_capture_on_commit_callbacks(execute=False):
        services.deployment_create(recipe=recipe, user=operator)
    other = _single(operator, local_node, port, name="sim-other")
    with _listen(port):
        assert _this_host_warnings(operator_api, recipe.pk) == []
        warnings = operator_api.get(f"/api/recipes/{other.pk}/dry-run/").json()["plan"]["warnings"]
    assert [w for w in warnings if "(this host)" in w] == []
    assert any(w.startswith(f"port {port} (single http port) is in use by the single of deployment #") for w in warnings)


def test_a_deploy_records_the_held_port_on_its_timeline(operator, local_node, held,
                                                         django_capture_on_commit_callbacks):
    port = held.getsockname()[1]
    recipe = _single(operator, local_node, port)

    with django_capture_on_commit_callbacks(execute=False):
        deployment = services.deployment_create(recipe=recipe, user=operator)

    messages = ProcessEvent.objects.filter(deployment=deployment, kind="warning").values_list("message", flat=True)
    assert [m for m in messages if "(this host)" in m] == [
        f"single http port {port} on 127.0.0.1 is already in use by {_me()} on node 'cpu-box' (this host), and no "
        "active deployment books it: a launch now would fail at start; stop that process or choose another port"]


@pytest.mark.slow
def test_the_agent_fails_a_pd_deployment_whose_router_port_is_held_before_spawning_anything(
        agents, deployer, tmp_path, settings):
    agent = agents()
    node = node_of(agent)
    settings.CEILING_NODE_NAME = node.name
    recipe = sim_pd_recipe(node=node, user=deployer)
    port = recipe.spec["roles"]["router"]["port"]
    with _listen(port):
        deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "failed")
        assert engines_under(tmp_path) == []

    reason = f"port {port} on 127.0.0.1 is already in use by {_me()}"
    assert deployment.reason == f"router failed: {reason}"
    rows = {row.role: row for row in ServerProcess.objects.filter(deployment=deployment)}
    # Prefill and decode were never spawned: their rows say so and why; the router's row says why.
    assert sorted(rows) == ["decode", "prefill", "router"]
    assert rows["router"].status == ProcessStatus.FAILED and rows["router"].pid is None
    assert rows["router"].reason == reason
    for role in ("prefill", "decode"):
        assert (rows[role].status, rows[role].end_reason, rows[role].pid, rows[role].started_at) == (
            ProcessStatus.EXITED, "not started", None, None)
        assert rows[role].reason == f"not started: router {reason}"
    kinds = list(deployment.events.values_list("kind", "message"))
    assert not [k for k, _ in kinds if k in ("spawned", "ready", "stopped")]
    assert ("failed", f"router: {reason}") in kinds
    assert ("not-started", f"prefill: not started: router {reason}") in kinds
    assert ("not-started", f"decode: not started: router {reason}") in kinds
    # The deploy itself said so first, as the dry-run does.
    assert any(k == "warning" and m.startswith(f"router http {reason} on node {node.name!r} (this host)")
               for k, m in kinds)
    assert Deployment.objects.get(pk=deployment.pk).status == "failed"


@pytest.mark.slow
def test_a_held_router_metrics_port_lists_every_process_with_the_unstarted_ones_saying_why(
        agents, deployer, tmp_path, settings, client, viewer):
    agent = agents()
    node = node_of(agent)
    settings.CEILING_NODE_NAME = node.name
    recipe = sim_pd_recipe(node=node, user=deployer)
    port = recipe.spec["roles"]["router"]["flags"]["prometheus-port"]
    with _listen(port):
        deployment = wait_status(services.deployment_create(recipe=recipe, user=deployer), "failed")
        assert engines_under(tmp_path) == []

    busy = f"metrics port {port} (--prometheus-port) on 127.0.0.1 is already in use by {_me()}"
    assert deployment.reason == f"router failed: {busy}"
    api = APIClient()
    api.force_authenticate(viewer)
    listed = api.get(f"/api/processes/?deployment={deployment.pk}")
    assert listed.status_code == 200, listed.content
    body = listed.json()
    rows = {p["role"]: p for p in (body["results"] if isinstance(body, dict) else body)}
    assert sorted(rows) == ["decode", "prefill", "router"]
    assert (rows["router"]["status"], rows["router"]["reason"]) == ("failed", busy)
    for role in ("prefill", "decode"):
        assert (rows[role]["status"], rows[role]["end_reason"], rows[role]["pid"]) == ("exited", "not started", None)
        assert rows[role]["reason"] == f"not started: router {busy}"

    client.force_login(viewer)
    page = client.get(reverse("deployments:deployment-detail", args=[deployment.pk])).content.decode()
    for label in ("prefill #0", "decode #0", "router #0"):
        assert label in page
    # Each unstarted process's health cell says why, and the timeline has its not-started event.
    badge = f'<span class="tag">not started: router metrics port {port} (--prometheus-port) on 127.0.0.1 is already in use by pid'
    assert page.count(badge) == 2
    assert page.count(f"not started: router metrics port {port} (--prometheus-port) on 127.0.0.1 is already in use by pid") == 4
