"""A llama.cpp recipe whose model file is missing saves (validation is lexical: the path names a
file on the node), but its dry-run warns when the node is this host, where the engine would fail
at start with "Model path does not exist". Another node's files are not visible here: no warning.
The sim engine never reads the path: none for it either, and it starts and serves."""
from __future__ import annotations

import pytest

from deployments.examples import example_recipe, local_node_facts_example
from deployments.nodes import node_register


@pytest.fixture
def models(settings, tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    settings.CEILING_MODEL_ROOTS = [str(root)]
    settings.CEILING_NODE_NAME = "local"
    return root


def llamacpp_payload(path) -> dict:
    payload = example_recipe("local-llamacpp")
    payload["spec"]["model"]["path"] = str(path)
    return payload


def warnings_of(api, recipe_id: int) -> list[str]:
    resp = api.get(f"/api/recipes/{recipe_id}/dry-run/")
    assert resp.status_code == 200, resp.content
    return resp.json()["plan"]["warnings"]


def test_it_warns_of_a_missing_model_file_on_this_host_without_refusing(operator_api, models, db):
    node_register(facts=local_node_facts_example())
    missing = models / "absent.gguf"
    created = operator_api.post("/api/recipes/", llamacpp_payload(missing), format="json")
    assert created.status_code == 201, created.content
    said = [w for w in warnings_of(operator_api, created.json()["id"]) if "does not exist" in w]
    assert said == [f"model path {missing} does not exist on node 'local' (this host): the engine would fail at "
                    "start; put the file there before a deploy"]


def test_it_says_nothing_once_the_file_is_there(operator_api, models, db):
    node_register(facts=local_node_facts_example())
    there = models / "tiny.gguf"
    there.write_bytes(b"GGUF")
    created = operator_api.post("/api/recipes/", llamacpp_payload(there), format="json")
    assert not [w for w in warnings_of(operator_api, created.json()["id"]) if "does not exist" in w]


def test_it_says_nothing_of_another_nodes_files(operator_api, models, settings, db):
    node_register(facts=local_node_facts_example())
    settings.CEILING_NODE_NAME = "control-host"   # this server runs elsewhere: node 'local' is remote
    created = operator_api.post("/api/recipes/", llamacpp_payload(models / "absent.gguf"), format="json")
    assert created.status_code == 201, created.content
    assert not [w for w in warnings_of(operator_api, created.json()["id"]) if "model path" in w]


def test_a_deploy_records_the_warning_on_its_timeline(operator, operator_api, models, db,
                                                      django_capture_on_commit_callbacks):
    from deployments import services
    from deployments.models import ProcessEvent, Recipe

    node_register(facts=local_node_facts_example())
    missing = models / "absent.gguf"
    created = operator_api.post("/api/recipes/", llamacpp_payload(missing), format="json")
    with django_capture_on_commit_callbacks(execute=False):
        deployment = services.deployment_create(recipe=Recipe.objects.get(pk=created.json()["id"]), user=operator)
    messages = ProcessEvent.objects.filter(deployment=deployment, kind="warning").values_list("message", flat=True)
    assert [m for m in messages if "does not exist" in m] == [
        f"model path {missing} does not exist on node 'local' (this host): the engine would fail at start; put the "
        "file there before a deploy"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sim_recipe_with_a_missing_model_path_warns_of_nothing_and_serves(operator, operator_api, models, db,
                                                                         settings, tmp_path,
                                                                         django_capture_on_commit_callbacks):
    """The sim engine never opens ``model.path``: neither the dry-run nor the deploy warns of a
    missing one, and the engine started from that recipe answers /health (a real process)."""
    import os
    import urllib.request

    from deployments import services
    from deployments.agent import deployment_launch, deployment_teardown
    from deployments.models import Node, NumaNode, ProcessEvent, Recipe
    from deployments.tests.test_agent_support import free_ports, wait_for
    from deployments.topology import format_cpulist

    settings.CEILING_LOG_DIR = tmp_path / "engines"
    usable = sorted(os.sched_getaffinity(0))
    node = Node.objects.create(name="local", hostname="local", cpu_count=len(usable), tools={})
    NumaNode.objects.create(node=node, index=0, cpus=format_cpulist(usable))
    (port,) = free_ports(1)
    missing = models / "sim-x"
    payload = {"name": "sim-missing-path", "engine": "sim", "topology": "single", "node": "local",
               "spec": {"model": {"path": str(missing)}, "served_model_name": "tiny",
                        "roles": {"single": {"cpus": str(usable[0]), "host": "127.0.0.1", "port": port,
                                             "flags": {"time-scale": 0.05}}},
                        "sim": {"profile": "demo-fast"}, "startup_timeout_s": 30, "stop_grace_s": 5}}
    created = operator_api.post("/api/recipes/", payload, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["spec"]["model"]["path"] == str(missing) and not missing.exists()
    assert not [w for w in warnings_of(operator_api, created.json()["id"]) if "model path" in w]

    with django_capture_on_commit_callbacks(execute=False):
        deployment = services.deployment_create(recipe=Recipe.objects.get(pk=created.json()["id"]), user=operator)
    warnings = ProcessEvent.objects.filter(deployment=deployment, kind="warning").values_list("message", flat=True)
    assert not [m for m in warnings if "model path" in m]
    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        assert deployment_launch(deployment_id=deployment.pk) == "launched"
        wait_for(healthy, timeout_s=60, what="the sim engine's /health")
    finally:
        assert deployment_teardown(deployment_id=deployment.pk) == "stopped"
