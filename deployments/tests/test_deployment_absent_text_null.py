"""A deployment's, a process's and a node's text that is absent is null in the API, never ``""``:
a deployment with no reason, not waiting and not behind an offline node agent (``reason``,
``waiting_reason``, ``state_note``), a process that has not been pinned or probed, a node agent
that did not report its driver. Through a deployment made by the API."""
from __future__ import annotations

import pytest
from django.utils import timezone

from deployments import services
from deployments.choices import DeploymentStatus, ProcessStatus, Role
from deployments.models import Deployment, ServerProcess
from deployments.tests.factories import cpu_node_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def recipe(operator):
    node = cpu_node_create(name="cpu-box")
    spec = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
            "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 39123}}, "sim": {"profile": "demo-fast"}}
    return services.recipe_create(user=operator, name="api-sim", engine="sim", topology="single", node=node, spec=spec)


def test_a_stopped_deployment_and_its_process_answer_null_for_what_they_do_not_have(operator_api, recipe):
    created = operator_api.post("/api/deployments/", {"recipe": recipe.pk}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["reason"] is None and body["waiting_reason"].startswith("waiting for node agent cpu-box")
    Deployment.objects.filter(pk=body["id"]).update(status=DeploymentStatus.STOPPED, ended_at=timezone.now())
    ServerProcess.objects.create(deployment_id=body["id"], role=Role.SINGLE, status=ProcessStatus.PENDING)
    detail = operator_api.get(f"/api/deployments/{body['id']}/").json()
    assert (detail["reason"], detail["waiting_reason"], detail["state_note"]) == (None, None, None)
    listed = next(d for d in operator_api.get("/api/deployments/").json()["results"] if d["id"] == body["id"])
    assert (listed["reason"], listed["waiting_reason"], listed["state_note"]) == (None, None, None)
    process = operator_api.get(f"/api/processes/?deployment={body['id']}").json()["results"][0]
    absent = ("reason", "probe_detail", "end_reason", "cpus", "mem_nodes", "pin_method", "effective_cpus",
              "effective_mems", "health_url", "generate_url", "log_path")
    assert {key: process[key] for key in absent} == dict.fromkeys(absent)
    node = operator_api.get("/api/nodes/cpu-box/").json()
    assert (node["driver_version"], node["cuda_version"]) == (None, None)


def test_a_failed_deployment_keeps_its_reason_masked(operator_api, recipe):
    body = operator_api.post("/api/deployments/", {"recipe": recipe.pk}, format="json").json()
    Deployment.objects.filter(pk=body["id"]).update(status=DeploymentStatus.FAILED, ended_at=timezone.now(),
                                                    reason="exited with code 1: HF_TOKEN=hf_abcdefghijklmnopqrstuvwx")
    detail = operator_api.get(f"/api/deployments/{body['id']}/").json()
    assert detail["reason"].startswith("exited with code 1") and "hf_abcdefghij" not in detail["reason"]


def test_the_schema_says_they_may_be_null(viewer_api):
    schemas = viewer_api.get("/api/schema/?format=json").json()["components"]["schemas"]
    for key in ("reason", "waiting_reason", "state_note", "entry_url"):
        assert schemas["Deployment"]["properties"][key].get("nullable") is True, key
    for key in ("reason", "probe_detail", "end_reason", "health_url", "log_path"):
        assert schemas["ServerProcess"]["properties"][key].get("nullable") is True, key


def test_the_dry_run_gives_null_for_a_process_without_a_generate_route_as_the_processes_api(operator_api, recipe):
    from deployments.launch import ProcessSpec

    plan = operator_api.get(f"/api/recipes/{recipe.pk}/dry-run/").json()["plan"]
    assert all(p["generate_url"] is None or p["generate_url"].startswith("http") for p in plan["processes"])
    spec = services.recipe_plan(recipe=recipe).processes[0]
    fields = {**spec.__dict__, "generate_url": ""}
    assert ProcessSpec(**fields).to_dict()["generate_url"] is None


def test_the_dry_run_gives_null_for_the_routers_cpus_and_memory_nodes_as_the_processes_api(operator_api, operator):
    node = cpu_node_create(name="pd-box")
    spec = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
            "roles": {"prefill": {"cpus": "0", "host": "127.0.0.1", "port": 39131, "bootstrap_port": 39133},
                      "decode": {"cpus": "0", "host": "127.0.0.1", "port": 39132},
                      "router": {"host": "127.0.0.1", "port": 39130}},
            "sim": {"profile": "demo-fast"}}
    recipe = services.recipe_create(user=operator, name="api-sim-pd", engine="sim", topology="pd", node=node, spec=spec)

    plan = operator_api.get(f"/api/recipes/{recipe.pk}/dry-run/").json()["plan"]

    router = next(p for p in plan["processes"] if p["role"] == Role.ROUTER)
    assert (router["cpus"], router["mem_nodes"]) == (None, None)
    assert "" not in [p[key] for p in plan["processes"] for key in ("cpus", "mem_nodes", "health_url", "generate_url")]
    prefill = next(p for p in plan["processes"] if p["role"] == Role.PREFILL)
    assert prefill["cpus"] == "0"
