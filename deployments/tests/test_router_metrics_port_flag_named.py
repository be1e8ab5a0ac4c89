"""A PD router's metrics port is the one Ceiling fills in when the recipe gives no
``prometheus-port`` (the first free port above the router's own). A refusal or warning about that
port names the flag that sets it as the user writes it, ``--prometheus-port``, not only a "metrics
port" the recipe never mentions."""
from __future__ import annotations

import socket

import pytest

from controlplane.errors import Conflict
from deployments import services
from deployments.models import Node
from deployments.tests.test_agent_support import free_ports
from deployments.tests.factories import cpu_node_create


def _spec(router: int, prefill: int, decode: int, bootstrap: int) -> dict:
    # No router flags: Ceiling fills in prometheus-port.
    return {"model": {"name": "sim/tiny"}, "served_model_name": "tiny", "sim": {"profile": "demo-fast"},
            "roles": {"prefill": {"cpus": "0", "host": "127.0.0.1", "port": prefill, "bootstrap_port": bootstrap},
                      "decode": {"cpus": "1", "host": "127.0.0.1", "port": decode},
                      "router": {"host": "127.0.0.1", "port": router}}}


@pytest.fixture
def node(db) -> Node:
    node = cpu_node_create(name="local")
    Node.objects.filter(pk=node.pk).update(cpu_count=4)
    node.refresh_from_db()
    return node


def test_a_clash_on_the_filled_in_metrics_port_names_the_flag(node, operator):
    first = services.recipe_create(user=operator, name="first", engine="sim", topology="pd", node=node,
                                   spec=_spec(20001, 20010, 20011, 20012))
    services.deployment_create(recipe=first, user=operator)
    second = services.recipe_create(user=operator, name="second", engine="sim", topology="pd", node=node,
                                    spec=_spec(20000, 20020, 20021, 20022))
    assert second.spec["roles"]["router"]["flags"] == {"prometheus-port": 20001}   # filled in by Ceiling
    with pytest.raises(Conflict) as refused:
        services.deployment_create(recipe=second, user=operator)
    assert str(refused.value).startswith(
        "Port 20001 (router metrics port, --prometheus-port) is already used by the router of deployment")
    assert "prometheus_port" not in str(refused.value)


def test_a_held_metrics_port_warning_says_which_flag_sets_it(node, operator, settings):
    settings.CEILING_NODE_NAME = node.name
    router, prefill, decode, bootstrap = free_ports(4)
    recipe = services.recipe_create(user=operator, name="held", engine="sim", topology="pd", node=node,
                                    spec=_spec(router, prefill, decode, bootstrap))
    metrics = recipe.spec["roles"]["router"]["flags"]["prometheus-port"]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", metrics))
        sock.listen()
        lines = services.port_holder_warnings(plan=services.recipe_plan(recipe=recipe), recipe=recipe)
    finally:
        sock.close()
    [line] = [ln for ln in lines if ln.startswith("router metrics ")]
    assert line.endswith("stop that process or choose another port (set it with router flag --prometheus-port)")
