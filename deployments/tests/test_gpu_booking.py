"""Two deployments on the same GPUs of one node: refused like a port clash (409 naming the GPUs
and the deployment holding them), and said in the dry-run before. Pending, starting, ready and
stopping deployments book their GPUs (a stopping one's engines may still hold GPU memory); an
ended one frees them."""
from __future__ import annotations

import copy

import pytest

from deployments.choices import DeploymentStatus
from deployments.examples import example_recipe
from deployments.models import Deployment
from deployments.tests.factories import seed_node_create


def _create(api, name: str, gpus: list[int] | None = None) -> dict:
    tp4 = copy.deepcopy(example_recipe("seed-v4-flash-tp4"))
    payload = {k: tp4[k] for k in ("engine", "topology", "node", "spec")}
    payload["name"] = name
    if gpus is not None:
        payload["spec"]["roles"]["single"]["gpus"] = gpus
        payload["spec"]["roles"]["single"]["numa_node"] = 1
        payload["spec"]["roles"]["single"].pop("cpus", None)
    # A port of its own, so the GPUs alone decide.
    payload["spec"]["roles"]["single"]["port"] = payload["spec"]["roles"]["single"]["port"] + len(name)
    response = api.post("/api/recipes/", payload, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


@pytest.mark.django_db
def test_a_deploy_onto_gpus_another_deployment_books_is_refused_and_the_dry_run_says_so(
        operator_api, django_capture_on_commit_callbacks):
    seed_node_create()
    first = _create(operator_api, "seed-v4-flash-tp4")
    copy_ = _create(operator_api, "tp4-copy")
    other_half = _create(operator_api, "tp4-other-half", gpus=[4, 5, 6, 7])
    with django_capture_on_commit_callbacks(execute=False):  # no agent: it stays pending
        response = operator_api.post("/api/deployments/", {"recipe": first["id"]}, format="json")
    assert response.status_code == 201, response.json()
    held = response.json()["id"]

    expected = (f"single GPUs 0-3 are booked by the single of deployment #{held} (recipe 'seed-v4-flash-tp4', "
                "pending) on node 'seed-8gpu'")
    warnings = operator_api.get(f"/api/recipes/{copy_['id']}/dry-run/").json()["plan"]["warnings"]
    assert f"{expected}: a deploy now would be refused" in warnings
    refused = operator_api.post("/api/deployments/", {"recipe": copy_["id"]}, format="json")
    assert refused.status_code == 409
    assert refused.json()["detail"] == f"S{expected[1:]}; stop that deployment or choose other GPUs."
    assert Deployment.objects.filter(recipe_id=copy_["id"]).count() == 0

    # Other GPUs of the node are free.
    assert not any("booked" in w for w in
                   operator_api.get(f"/api/recipes/{other_half['id']}/dry-run/").json()["plan"]["warnings"])
    with django_capture_on_commit_callbacks(execute=False):
        assert operator_api.post("/api/deployments/", {"recipe": other_half["id"]}, format="json").status_code == 201

    # Starting, ready and stopping deployments book their GPUs too; a stopped one frees them.
    for status in (DeploymentStatus.STARTING, DeploymentStatus.READY, DeploymentStatus.STOPPING):
        Deployment.objects.filter(pk=held).update(status=status)
        assert operator_api.post("/api/deployments/", {"recipe": copy_["id"]}, format="json").status_code == 409
    Deployment.objects.filter(pk=held).update(status=DeploymentStatus.STOPPED)
    with django_capture_on_commit_callbacks(execute=False):
        assert operator_api.post("/api/deployments/", {"recipe": copy_["id"]}, format="json").status_code == 201


@pytest.mark.django_db
def test_it_refuses_a_deploy_onto_the_gpus_of_a_stopping_deployment_naming_it(
        operator_api, django_capture_on_commit_callbacks):
    seed_node_create()
    first = _create(operator_api, "seed-v4-flash-tp4")
    copy_ = _create(operator_api, "tp4-copy")
    with django_capture_on_commit_callbacks(execute=False):
        held = operator_api.post("/api/deployments/", {"recipe": first["id"]}, format="json").json()["id"]
    # Its engines got SIGTERM but may not have exited yet: their GPU memory is not free.
    Deployment.objects.filter(pk=held).update(status=DeploymentStatus.STOPPING)

    expected = (f"single GPUs 0-3 are booked by the single of deployment #{held} (recipe 'seed-v4-flash-tp4', "
                "stopping) on node 'seed-8gpu'")
    warnings = operator_api.get(f"/api/recipes/{copy_['id']}/dry-run/").json()["plan"]["warnings"]
    assert f"{expected}: a deploy now would be refused" in warnings
    refused = operator_api.post("/api/deployments/", {"recipe": copy_["id"]}, format="json")
    assert refused.status_code == 409
    assert refused.json() == {"detail": f"S{expected[1:]}; stop that deployment or choose other GPUs.",
                              "code": "conflict"}
    assert Deployment.objects.filter(recipe_id=copy_["id"]).count() == 0


@pytest.mark.django_db
def test_it_names_both_the_port_and_the_gpus_when_a_deploy_clashes_on_both(
        operator_api, django_capture_on_commit_callbacks):
    seed_node_create()
    first = _create(operator_api, "seed-v4-flash-tp4")
    twin = copy.deepcopy(example_recipe("seed-v4-flash-tp4"))
    twin = {**{k: twin[k] for k in ("engine", "topology", "node", "spec")}, "name": "tp4-twin"}
    twin["spec"]["roles"]["single"]["port"] = first["spec"]["roles"]["single"]["port"]  # same port, same GPUs
    created = operator_api.post("/api/recipes/", twin, format="json")
    assert created.status_code == 201, created.json()
    with django_capture_on_commit_callbacks(execute=False):
        held = operator_api.post("/api/deployments/", {"recipe": first["id"]}, format="json").json()["id"]
    port = first["spec"]["roles"]["single"]["port"]

    refused = operator_api.post("/api/deployments/", {"recipe": created.json()["id"]}, format="json")

    assert refused.status_code == 409
    assert refused.json() == {
        "detail": (f"Port {port} (single http port) is already used by the single of deployment #{held} "
                   "(recipe 'seed-v4-flash-tp4', pending) on node 'seed-8gpu'; single GPUs 0-3 are booked by "
                   f"the single of deployment #{held} (recipe 'seed-v4-flash-tp4', pending) on node "
                   "'seed-8gpu'; stop that deployment or choose another port and other GPUs."),
        "code": "conflict",
    }
    assert Deployment.objects.filter(recipe_id=created.json()["id"]).count() == 0

    # The port of one deployment and the GPUs of another: both named, both to stop.
    other_half = _create(operator_api, "tp4-other-half", gpus=[4, 5, 6, 7])
    with django_capture_on_commit_callbacks(execute=False):
        second = operator_api.post("/api/deployments/", {"recipe": other_half["id"]}, format="json").json()["id"]
    twin["spec"]["roles"]["single"]["port"] = other_half["spec"]["roles"]["single"]["port"]
    assert operator_api.put(f"/api/recipes/{created.json()['id']}/", twin, format="json").status_code == 200

    refused = operator_api.post("/api/deployments/", {"recipe": created.json()["id"]}, format="json")

    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert detail.startswith(f"Port {twin['spec']['roles']['single']['port']} (single http port) is already "
                             f"used by the single of deployment #{second} (recipe 'tp4-other-half', pending)")
    assert f"; single GPUs 0-3 are booked by the single of deployment #{held} " in detail
    assert detail.endswith("; stop those deployments or choose another port and other GPUs.")
