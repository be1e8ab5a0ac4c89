"""Recipe CRUD, dry-run and secrets references through the REST API, on the seed node
(8 GPUs; GPU0-3 + CPUs 0-31 on NUMA node 0, GPU4-7 + CPUs 32-63 on NUMA node 1)."""
from __future__ import annotations

import copy

import pytest

from controlplane.redaction import register_secret_value
from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.tests.factories import (
    cpu_node_create,
    deployment_row_create,
    recipe_row_create,
    secret_row_create,
    seed_node_create,
)

pytestmark = pytest.mark.django_db

HF_VALUE = "hf_abcdefghijklmnopqrstuvwx"


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def node():
    return seed_node_create()


def seed_pd_payload(**overrides) -> dict:
    """The seed PD example (prefill TP4 on GPU0-3 / NUMA 0, decode TP4 on GPU4-7 / NUMA 1)."""
    example = example_recipe("seed-v4-flash-pd")
    payload = {k: example[k] for k in ("name", "description", "engine", "topology", "node", "spec")}
    payload.update(overrides)
    return copy.deepcopy(payload)


def create(api, **overrides):
    return api.post("/api/recipes/", seed_pd_payload(**overrides), format="json")


def test_it_creates_a_recipe_as_version_1_with_the_normalised_spec(operator_api, node):
    response = create(operator_api, change_reason="first cut")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["name"] == "seed-v4-flash-pd"
    assert body["node"] == "seed-8gpu"
    assert body["version"] == 1
    assert body["created_by"] == "oscar-operator"
    prefill = body["spec"]["roles"]["prefill"]
    assert (prefill["gpus"], prefill["tp"], prefill["dp"], prefill["numa_node"]) == ([0, 1, 2, 3], 4, 1, 0)
    # membind is derived from numa_node: not stored, filled again at every validation
    assert "membind" not in prefill
    assert body["spec"]["roles"]["decode"]["gpus"] == [4, 5, 6, 7]
    assert body["spec"]["transfer_backend"] == "nixl"
    recipe = Recipe.objects.get(pk=body["id"])
    assert recipe.spec == body["spec"]
    assert recipe.history.get().history_change_reason == "first cut"


def test_it_lists_and_filters_recipes(viewer, viewer_api, operator_api, node):
    assert create(operator_api).status_code == 201
    tp4 = example_recipe("seed-v4-flash-tp4")
    assert operator_api.post(
        "/api/recipes/", {k: tp4[k] for k in ("name", "engine", "topology", "node", "spec")}, format="json"
    ).status_code == 201

    everything = viewer_api.get("/api/recipes/").json()
    assert everything["count"] == 2
    assert [r["name"] for r in everything["results"]] == ["seed-v4-flash-pd", "seed-v4-flash-tp4"]
    pd_only = viewer_api.get("/api/recipes/?topology=pd").json()
    assert [r["name"] for r in pd_only["results"]] == ["seed-v4-flash-pd"]
    assert viewer_api.get("/api/recipes/?node=elsewhere").json()["count"] == 0


def test_it_refuses_an_unknown_filter_value_by_name(viewer_api, node):
    response = viewer_api.get("/api/recipes/?engine=tensorrt")
    assert response.status_code == 400
    assert list(response.json()) == ["engine"]


def test_it_names_the_allowed_values_of_a_refused_filter(viewer_api, node):
    for url, field, message in (
        ("/api/recipes/?engine=tensorrt", "engine", "must be one of sglang, vllm, llamacpp, sim; got 'tensorrt'"),
        ("/api/deployments/?status=exploded", "status",
         "must be one of pending, starting, ready, stopping, stopped, failed; got 'exploded'"),
        ("/api/processes/?role=wizard", "role", "must be one of prefill, decode, single, router; got 'wizard'"),
        # int() reads a fullwidth "１" as 1; an id in a query string is ASCII digits only
        ("/api/processes/?deployment=%EF%BC%91", "deployment", "must be a whole number between 1 and 2147483647, got '\uff11'"),
        ("/api/deployments/?recipe=%EF%BC%91", "recipe", "must be a whole number between 1 and 2147483647, got '\uff11'"),
    ):
        response = viewer_api.get(url)
        assert response.status_code == 400, url
        assert response.json() == {field: [message]}, url


def test_it_bumps_the_version_on_patch_and_keeps_the_rest(operator_api, node):
    pk = create(operator_api).json()["id"]
    response = operator_api.patch(f"/api/recipes/{pk}/", {"description": "now with notes"}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["version"], body["description"]) == (2, "now with notes")
    assert body["spec"]["roles"]["prefill"]["gpus"] == [0, 1, 2, 3]


def test_it_writes_no_version_for_a_patch_that_changes_nothing(operator_api, node):
    created = create(operator_api).json()
    response = operator_api.patch(f"/api/recipes/{created['id']}/", {"spec": created["spec"]}, format="json")
    assert response.status_code == 200
    assert response.json()["version"] == 1
    assert Recipe.objects.get(pk=created["id"]).history.count() == 1


def test_it_replaces_a_recipe_with_put(operator_api, node):
    pk = create(operator_api).json()["id"]
    payload = seed_pd_payload(name="seed-pd-renamed")
    payload["spec"]["roles"]["decode"]["flags"] = {"mem-fraction-static": 0.85}
    response = operator_api.put(f"/api/recipes/{pk}/", payload, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["name"], body["version"]) == ("seed-pd-renamed", 2)
    assert body["spec"]["roles"]["decode"]["flags"] == {"mem-fraction-static": 0.85}


def test_it_requires_every_field_on_put(operator_api, node):
    pk = create(operator_api).json()["id"]
    response = operator_api.put(f"/api/recipes/{pk}/", {"description": "only this"}, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"name", "engine", "topology", "node", "spec"}


def test_it_answers_409_for_an_edit_based_on_a_stale_version(operator_api, node):
    pk = create(operator_api).json()["id"]
    first = operator_api.patch(f"/api/recipes/{pk}/", {"description": "a", "expected_version": 1}, format="json")
    assert first.status_code == 200
    second = operator_api.patch(f"/api/recipes/{pk}/", {"description": "b", "expected_version": 1}, format="json")
    assert second.status_code == 409
    assert second.json()["code"] == "conflict"
    assert "version 2" in second.json()["detail"]
    assert Recipe.objects.get(pk=pk).description == "a"


def test_it_refuses_a_taken_name_on_create_and_rename(operator_api, node):
    assert create(operator_api).status_code == 201
    again = create(operator_api)
    assert again.status_code == 400
    assert list(again.json()) == ["name"]
    other = create(operator_api, name="other").json()
    rename = operator_api.patch(f"/api/recipes/{other['id']}/", {"name": "seed-v4-flash-pd"}, format="json")
    assert rename.status_code == 400
    assert list(rename.json()) == ["name"]


def test_it_revalidates_the_spec_when_the_node_changes(operator_api, node):
    cpu_node_create()
    pk = create(operator_api).json()["id"]
    response = operator_api.patch(f"/api/recipes/{pk}/", {"node": "cpu-box"}, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert "spec.roles.prefill.gpus" in errors
    assert "spec.roles.decode.numa_node" in errors
    assert Recipe.objects.get(pk=pk).node.name == "seed-8gpu"


def test_it_deletes_a_recipe_unless_it_has_deployments(operator_api, admin_api, node):
    keep = create(operator_api).json()["id"]
    drop = create(operator_api, name="to-drop").json()["id"]
    deployment_row_create(recipe=Recipe.objects.get(pk=keep))
    assert admin_api.delete(f"/api/recipes/{drop}/").status_code == 204
    refused = admin_api.delete(f"/api/recipes/{keep}/")
    assert refused.status_code == 409
    assert list(Recipe.objects.values_list("name", flat=True)) == ["seed-v4-flash-pd"]


def test_it_answers_404_for_a_missing_recipe(viewer_api, node):
    assert viewer_api.get("/api/recipes/424242/").status_code == 404
    assert viewer_api.get("/api/recipes/99999999999999999999999/").status_code == 404


def test_it_renders_a_dry_run_of_the_current_version(viewer_api, operator_api, node):
    pk = create(operator_api).json()["id"]
    response = viewer_api.get(f"/api/recipes/{pk}/dry-run/")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["recipe"], body["version"]) == (pk, 1)
    plan = body["plan"]
    assert [p["role"] for p in plan["processes"]] == ["prefill", "decode", "router"]
    prefill = plan["processes"][0]
    assert prefill["gpu_ids"] == [0, 1, 2, 3]
    assert prefill["argv"][0] == "/usr/bin/numactl"
    assert "--cpunodebind=0" in prefill["argv"]
    assert prefill["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    decode = plan["processes"][1]
    assert decode["env"]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert "--cpunodebind=1" in decode["argv"]
    assert plan["entry_url"].endswith(":30080")


def test_it_renders_a_dry_run_of_an_older_version(operator_api, node):
    pk = create(operator_api).json()["id"]
    payload = seed_pd_payload()
    payload["spec"]["roles"]["decode"]["port"] = 30555
    assert operator_api.put(f"/api/recipes/{pk}/", payload, format="json").status_code == 200
    current = operator_api.get(f"/api/recipes/{pk}/dry-run/").json()
    old = operator_api.get(f"/api/recipes/{pk}/dry-run/?version=1").json()
    assert (current["version"], old["version"]) == (2, 1)
    assert current["plan"]["processes"][1]["ports"]["http"] == 30555
    assert old["plan"]["processes"][1]["ports"]["http"] == 30001


def test_it_answers_dry_run_version_errors_by_field(viewer_api, operator_api, node):
    pk = create(operator_api).json()["id"]
    assert viewer_api.get(f"/api/recipes/{pk}/dry-run/?version=7").status_code == 404
    bad = viewer_api.get(f"/api/recipes/{pk}/dry-run/?version=seven")
    assert bad.status_code == 400
    assert list(bad.json()) == ["version"]
    huge = viewer_api.get(f"/api/recipes/{pk}/dry-run/?version=99999999999999999999999")
    assert huge.status_code == 400
    assert list(huge.json()) == ["version"]


def test_it_references_secrets_by_name_and_never_shows_their_values(admin_api, operator_api, node):
    secret_row_create(name="hf-token", value=HF_VALUE)
    payload = seed_pd_payload()
    payload["spec"]["secrets"] = {"HF_TOKEN": "hf-token"}
    created = operator_api.post("/api/recipes/", payload, format="json")
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    assert created.json()["spec"]["secrets"] == {"HF_TOKEN": "hf-token"}

    plan = operator_api.get(f"/api/recipes/{pk}/dry-run/")
    assert plan.status_code == 200
    assert HF_VALUE not in plan.content.decode()
    assert plan.json()["plan"]["processes"][0]["env"]["HF_TOKEN"] == "***redacted***"

    secret_id = admin_api.get("/api/secrets/").json()["results"][0]["id"]
    refused = admin_api.delete(f"/api/secrets/{secret_id}/")
    assert refused.status_code == 409
    assert "seed-v4-flash-pd" in refused.json()["detail"]


def test_it_shows_deployments_and_their_processes_read_only(viewer_api, operator_api, node):
    pk = create(operator_api).json()["id"]
    deployment = deployment_row_create(recipe=Recipe.objects.get(pk=pk))
    listed = viewer_api.get(f"/api/deployments/?recipe={pk}").json()
    assert listed["count"] == 1
    row = listed["results"][0]
    assert (row["id"], row["recipe_name"], row["recipe_version"], row["node"], row["status"]) == (
        deployment.pk,
        "seed-v4-flash-pd",
        1,
        "seed-8gpu",
        "ready",
    )
    processes = viewer_api.get(f"/api/processes/?deployment={deployment.pk}").json()["results"]
    assert [(p["role"], p["pid"], p["gpu_ids"], p["ports"]) for p in processes] == [
        ("single", 4242, [0], {"http": 30000})
    ]
    assert viewer_api.get("/api/deployments/?status=ready").json()["count"] == 1
    assert viewer_api.get("/api/deployments/?status=stopped").json()["count"] == 0
    bad = viewer_api.get("/api/processes/?deployment=abc")
    assert bad.status_code == 400
    assert list(bad.json()) == ["deployment"]


def test_it_redacts_secret_values_in_process_rows_on_the_way_out(viewer_api, node):
    deployment = deployment_row_create(recipe=recipe_row_create(node=node))
    proc = deployment.processes.get()
    register_secret_value("leaked-value-123")
    proc.argv = ["/usr/bin/python", "--token", "leaked-value-123"]
    proc.save()
    body = viewer_api.get(f"/api/processes/{proc.pk}/").json()
    assert body["argv"] == ["/usr/bin/python", "--token", "***redacted***"]


def test_it_shows_nodes_with_gpus_and_numa_nodes(viewer_api, node):
    body = viewer_api.get(f"/api/nodes/{node.pk}/").json()
    assert body["name"] == "seed-8gpu"
    assert [g["index"] for g in body["gpus"]] == list(range(8))
    assert [g["numa_node"] for g in body["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [(n["index"], n["cpus"]) for n in body["numa_nodes"]] == [(0, "0-31"), (1, "32-63")]
    assert body["queue_name"] == "node.seed-8gpu"
    assert body["agent_online"] is False
