"""A llama.cpp recipe whose model file is missing saves (validation is lexical: the path names a
file on the node), but its dry-run warns when the node is this host, where the engine would fail
at start with "Model path does not exist". Another node's files are not visible here: no warning."""
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
