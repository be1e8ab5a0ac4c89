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


def _validated_router(recipe) -> dict:
    """The router role of ``recipe``'s spec as every validation fills it (what a deploy runs)."""
    return services.recipe_spec_validate(engine=recipe.engine, topology=recipe.topology, spec=recipe.spec,
                                         node=recipe.node)["roles"]["router"]


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
    assert second.spec["roles"]["router"]["flags"] == {}   # derived from the router's port: not stored
    assert _validated_router(second)["flags"] == {"prometheus-port": 20001}   # filled in by Ceiling
    with pytest.raises(Conflict) as refused:
        services.deployment_create(recipe=second, user=operator)
    assert str(refused.value).startswith(
        "Port 20001 (router metrics port, --prometheus-port) is already used by the router of deployment")
    assert "prometheus_port" not in str(refused.value)


def test_a_held_metrics_port_warning_says_which_flag_sets_it(node, operator, settings):
    settings.CEILING_NODE_NAME = node.name
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # The filled-in port is the first one above the router's that the recipe does not use, which
        # another process on the host may hold: new ports until the test can hold it itself.
        for attempt in range(20):
            router, prefill, decode, bootstrap = free_ports(4)
            recipe = services.recipe_create(user=operator, name=f"held-{attempt}", engine="sim", topology="pd",
                                            node=node, spec=_spec(router, prefill, decode, bootstrap))
            metrics = _validated_router(recipe)["flags"]["prometheus-port"]
            try:
                sock.bind(("127.0.0.1", metrics))
                break
            except OSError:
                continue
        else:
            pytest.fail("no filled-in metrics port was free in 20 tries")
        sock.listen()
        lines = services.port_holder_warnings(plan=services.recipe_plan(recipe=recipe), recipe=recipe)
    finally:
        sock.close()
    [line] = [ln for ln in lines if ln.startswith("router metrics ")]
    assert line.endswith("stop that process or choose another port (set it with router flag --prometheus-port)")


def test_the_node_agents_reason_for_a_held_metrics_port_names_the_flag(node, operator):
    """The reason the node agent gives a process whose metrics port is held names the flag that
    sets it, as the deploy's 409 and the dry-run do; a port kind is written in words."""
    from types import SimpleNamespace

    from deployments.agent import _ports_busy

    free, held = free_ports(2)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", held))
        sock.listen()
        metrics = _ports_busy(SimpleNamespace(host="127.0.0.1", ports={"http": free, "metrics": held}))
        side = _ports_busy(SimpleNamespace(host="127.0.0.1", ports={"http": free, "side_channel": held}))
        http = _ports_busy(SimpleNamespace(host="127.0.0.1", ports={"http": held}))
    finally:
        sock.close()
    assert metrics.startswith(f"metrics port {held} (--prometheus-port) on 127.0.0.1 is already in use by pid ")
    assert side.startswith(f"side channel port {held} on 127.0.0.1 is already in use by pid ")
    assert http.startswith(f"port {held} on 127.0.0.1 is already in use by pid ")


def test_a_port_kind_is_written_in_words_wherever_it_is_named():
    from deployments.launch import port_kind_text, port_kind_words, port_reason_named

    assert [port_kind_words(k) for k in ("http", "bootstrap", "side_channel", "metrics")] == [
        "http", "bootstrap", "side channel", "metrics"]
    assert port_kind_text("prefill", "side_channel") == "prefill side channel port"
    assert port_kind_text("router", "metrics") == "router metrics port, --prometheus-port"
    assert port_reason_named("metrics", 31081, "port 31081 on 127.0.0.1 cannot be bound: no such address") == (
        "metrics port 31081 (--prometheus-port) on 127.0.0.1 cannot be bound: no such address")
    assert port_reason_named("http", 31000, "port 31000 on 127.0.0.1 already in use") == (
        "port 31000 on 127.0.0.1 already in use")


def test_an_engines_own_bind_failure_names_the_kind_of_the_port_it_names():
    from types import SimpleNamespace

    from deployments.agent import _cause_text

    row = SimpleNamespace(ports={"http": 8100, "side_channel": 5600}, health_url="http://127.0.0.1:8100/health")
    line = "OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 5600): address already in use"
    assert _cause_text(line, row) == "side channel port 5600 on 127.0.0.1 already in use"
    assert _cause_text(line.replace("5600", "8100"), row) == "port 8100 on 127.0.0.1 already in use"


def test_the_plan_pages_name_a_side_channel_port_in_words(settings):
    from deployments.examples import example_recipe, seed_node_facts_example
    from deployments.launch import launch_plan_render
    from deployments.tests.test_launch_golden import vllm_pd_spec
    from deployments.views.recipe_pages import _process_view

    settings.CEILING_MODEL_ROOTS = ["/models"]
    recipe = example_recipe("seed-v4-flash-pd")
    plan = launch_plan_render(engine="vllm", topology=recipe["topology"], spec=vllm_pd_spec(),
                              node=seed_node_facts_example())
    prefill = next(p for p in plan.processes if p.role == "prefill")
    assert prefill.ports == {"http": 8100, "side_channel": 5600}   # the plan's key is unchanged
    assert _process_view(prefill, plan)["ports"] == [("http", 8100), ("side channel", 5600)]
