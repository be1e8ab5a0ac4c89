"""The PD router's metrics port: sglang-router starts a Prometheus server whether asked or not
(port 29000 unless ``--prometheus-port`` says otherwise), so a router without that flag used to
take 29000, unseen by the port checks, and a second such deployment died on it. A router without
the flag now gets a port of its own (the first one above its HTTP port that the recipe does not
use), written into the normalised spec and listed in the plan's ports.

Real parts: node agents (``manage.py node_agent``), ``sim`` workers, the real sglang-router,
real Redis.
"""
from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest

from controlplane.errors import Conflict
from deployments import services
from deployments.examples import local_node_facts_example
from deployments.launch import launch_plan_render
from deployments.models import Node, Recipe, ServerProcess
from deployments.recipes import recipe_validate
from deployments.tests.test_agent_support import (  # noqa: F401 - fixtures
    agent_env,
    agents,
    deployer,
    free_ports,
    node_of,
    sim_single_recipe,
    wait_status,
)

SGLANG_ROUTER_DEFAULT_METRICS_PORT = 29000


def _pd_spec(prefill: int, decode: int, bootstrap: int, router: int, router_flags: dict | None = None) -> dict:
    return {
        "model": {"name": "sim/tiny"},
        "served_model_name": "tiny",
        "roles": {
            "prefill": {"cpus": "0", "host": "127.0.0.1", "port": prefill, "bootstrap_port": bootstrap,
                        "flags": {"time-scale": 0.05}},
            "decode": {"cpus": "0", "host": "127.0.0.1", "port": decode, "flags": {"time-scale": 0.05}},
            "router": {"host": "127.0.0.1", "port": router, "flags": dict(router_flags or {})},
        },
        "sim": {"profile": "demo-fast"},
        "startup_timeout_s": 60,
        "stop_grace_s": 5,
    }


def test_it_gives_a_router_without_prometheus_port_the_next_port_the_recipe_leaves_free():
    node = local_node_facts_example()
    out = recipe_validate(engine="sim", topology="pd", node=node, spec=_pd_spec(31000, 31001, 31998, 31080))
    assert out["roles"]["router"]["flags"] == {"prometheus-port": 31081}

    # 31081 and 31082 are the workers' ports here: the default skips them.
    out = recipe_validate(engine="sim", topology="pd", node=node, spec=_pd_spec(31081, 31082, 31998, 31080))
    assert out["roles"]["router"]["flags"] == {"prometheus-port": 31083}

    # At the top of the port space it counts down instead.
    out = recipe_validate(engine="sim", topology="pd", node=node, spec=_pd_spec(31000, 31001, 31998, 65535))
    assert out["roles"]["router"]["flags"] == {"prometheus-port": 65534}

    # An explicit port is kept.
    out = recipe_validate(engine="sim", topology="pd", node=node,
                          spec=_pd_spec(31000, 31001, 31998, 31080, {"prometheus-port": 32000}))
    assert out["roles"]["router"]["flags"] == {"prometheus-port": 32000}


def test_the_plan_lists_the_metrics_port_and_the_router_argv_carries_it():
    spec = _pd_spec(31000, 31001, 31998, 31080)
    plan = launch_plan_render(engine="sim", topology="pd", spec=spec, node=local_node_facts_example())
    router = plan.process("router")
    assert router.ports == {"http": 31080, "metrics": 31081}
    assert router.argv[-4:] == ["--prometheus-port", "31081", "--prometheus-host", "127.0.0.1"]


def test_a_spec_stored_without_the_flag_renders_the_same_default():
    # A normalised spec saved before validation filled the port in: rendering derives the same one.
    from deployments.engines.base import RenderContext
    from deployments.engines.sim import ADAPTER

    spec = recipe_validate(engine="sim", topology="pd", node=local_node_facts_example(),
                           spec=_pd_spec(31000, 31001, 31998, 31080))
    spec["roles"]["router"]["flags"] = {}
    ctx = RenderContext(spec=spec, topology="pd", role_name="router", role=spec["roles"]["router"],
                        executables={"python": "python3"})
    rendered = ADAPTER.render_router(ctx)
    assert rendered.ports == {"http": 31080, "metrics": 31081}
    assert "--prometheus-port" in rendered.argv
    assert rendered.argv[rendered.argv.index("--prometheus-port") + 1] == "31081"


def _ports_with_free_neighbour(count: int, taken: set[int] | None = None) -> list[int]:
    """``count`` free ports for workers plus, last, a router port whose next port is free too
    (the router's default metrics port), none of them (nor that neighbour) in ``taken``, which
    gets them all: the kernel may hand out a port it just released again, so two recipes made
    one after the other before either deploys could otherwise share one."""
    taken = set() if taken is None else taken
    for _ in range(50):
        *workers, router = free_ports(count + 1)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", router + 1))
            except OSError:
                continue
        chosen = {*workers, router, router + 1}
        if router + 1 not in workers and len(chosen) == count + 2 and not chosen & taken:
            taken |= chosen
            return [*workers, router]
    raise AssertionError("no free port with a free neighbour")


def _pd_recipe(node: Node, user: Any, name: str, taken: set[int] | None = None) -> Recipe:
    prefill, decode, boot, router = _ports_with_free_neighbour(3, taken)
    spec = _pd_spec(prefill, decode, boot, router)
    return services.recipe_create(user=user, name=name, engine="sim", topology="pd", node=node, spec=spec)


def _validated(recipe: Recipe) -> dict:
    """``recipe``'s spec as every validation fills it (what a deploy runs)."""
    return services.recipe_spec_validate(engine=recipe.engine, topology=recipe.topology, spec=recipe.spec,
                                         node=recipe.node)


def _router_row(deployment) -> ServerProcess:
    return ServerProcess.objects.get(deployment=deployment, role="router")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_pd_deployments_without_prometheus_port_run_side_by_side(agents, deployer):
    agent = agents()
    node = node_of(agent)
    taken: set[int] = set()
    first_recipe = _pd_recipe(node, deployer, "pd-one", taken)
    second_recipe = _pd_recipe(node, deployer, "pd-two", taken)
    for recipe in (first_recipe, second_recipe):
        assert "prometheus-port" not in recipe.spec["roles"]["router"]["flags"]   # derived: not stored
        router = _validated(recipe)["roles"]["router"]
        assert router["flags"]["prometheus-port"] == router["port"] + 1

    first = wait_status(services.deployment_create(recipe=first_recipe, user=deployer), "ready", timeout_s=90)
    second = wait_status(services.deployment_create(recipe=second_recipe, user=deployer), "ready", timeout_s=90)

    metrics_ports = []
    for deployment, recipe in ((first, first_recipe), (second, second_recipe)):
        row = _router_row(deployment)
        expected = _validated(recipe)["roles"]["router"]["flags"]["prometheus-port"]
        assert row.ports == {"http": recipe.spec["roles"]["router"]["port"], "metrics": expected}
        # The real router serves its exposition on that port, and not on sglang-router's default.
        answer = httpx.get(f"http://127.0.0.1:{expected}/metrics", timeout=5)
        assert answer.status_code == 200 and "# TYPE" in answer.text
        metrics_ports.append(expected)
    assert len(set(metrics_ports)) == 2 and SGLANG_ROUTER_DEFAULT_METRICS_PORT not in metrics_ports

    # The deploy-time port check sees the metrics port: a recipe serving on it is refused.
    clash = sim_single_recipe(node=node, user=deployer, name="on-metrics-port")
    spec = dict(clash.spec)
    spec["roles"] = {"single": {**spec["roles"]["single"], "port": metrics_ports[0]}}
    clash = services.recipe_update(recipe=clash, user=deployer, spec=spec)
    with pytest.raises(Conflict) as refused:
        services.deployment_create(recipe=clash, user=deployer)
    assert f"Port {metrics_ports[0]} (single http port) is already used by the router of deployment #{first.pk}" \
        in str(refused.value)

    for deployment in (first, second):
        services.deployment_stop(deployment=deployment, user=deployer)
    for deployment in (first, second):
        wait_status(deployment, "stopped", timeout_s=60)


def test_a_bind_failure_that_names_no_port_is_explained_with_the_port_held():
    # sglang-router says only "Address already in use (os error 98)": the reason names the port
    # of the process's row that is still held, and by whom.
    import os
    import socket as socketlib
    from types import SimpleNamespace

    from deployments.agent import _cause_text

    with socketlib.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        held = holder.getsockname()[1]
        with socketlib.socket() as free_probe:
            free_probe.bind(("127.0.0.1", 0))
            free = free_probe.getsockname()[1]
        row = SimpleNamespace(ports={"http": free, "metrics": held}, health_url=f"http://127.0.0.1:{free}/health")

        text = _cause_text("RuntimeError: Address already in use (os error 98)", row)

    assert text.startswith(f"address already in use: metrics port {held} (--prometheus-port) on 127.0.0.1 is already in use")
    assert f"pid {os.getpid()}" in text
    assert _cause_text("RuntimeError: Address already in use (os error 98)") == "address already in use"


def test_a_port_held_by_an_outgoing_connection_is_named_with_its_owner():
    # A port from the ephemeral range can be the source port of one of this host's own
    # connections (the node agent's, to another engine): the reason says so, with the owner.
    import os
    import socket as socketlib

    from deployments.agent import port_busy_reason

    with socketlib.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server_port = server.getsockname()[1]
        with socketlib.create_connection(server.getsockname()) as client:
            accepted, _ = server.accept()
            with accepted:
                source = client.getsockname()[1]

                reason = port_busy_reason(host="127.0.0.1", port=source)

    # The same local port may also be the source of another of this process's connections (to
    # Redis, say: a source port is unique per destination, not per host), so the test's connection
    # is one of those named, not necessarily the first.
    assert reason.startswith(f"port {source} on 127.0.0.1 is already in use: it is the local port of an established "
                             "connection to ")
    assert f"connection to 127.0.0.1:{server_port} of pid {os.getpid()} (" in reason
