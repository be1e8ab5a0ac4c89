"""Cancel acts only on a deployment that has not become ready (pending, or starting for the first
time) and answers 409 otherwise, so it can never take down a live deployment; stop stays
idempotent. Also the admin's names of the deployments models."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from deployments.choices import DeploymentStatus
from deployments.models import Deployment, Gpu, NumaNode, ProcessEvent, ServerProcess
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def recipe(db):
    return recipe_row_create(node=cpu_node_create())


def deployment(recipe, status: str, **fields) -> Deployment:
    row = deployment_row_create(recipe=recipe, status=status)
    if fields:
        Deployment.objects.filter(pk=row.pk).update(**fields)
        row.refresh_from_db()
    return row


def cancel(api, row: Deployment):
    return api.post(f"/api/deployments/{row.pk}/cancel/")


def test_it_refuses_to_cancel_a_ready_deployment_and_leaves_it_running(operator_api, recipe):
    row = deployment(recipe, DeploymentStatus.READY, ready_at=timezone.now())

    response = cancel(operator_api, row)

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"Deployment #{row.pk} is ready; cancel only applies to a deployment that has not become "
                  f"ready yet (pending or starting). Use stop (POST /api/deployments/{row.pk}/stop/) to stop it.",
        "code": "conflict",
    }
    row.refresh_from_db()
    assert (row.status, row.cancel_requested) == (DeploymentStatus.READY, False)
    assert not ProcessEvent.objects.filter(deployment=row).exists()


def test_it_refuses_to_cancel_a_ready_deployment_restarting_a_process(operator_api, recipe):
    # A ready deployment whose process restarts goes back to starting, keeping its ready_at.
    row = deployment(recipe, DeploymentStatus.STARTING, ready_at=timezone.now())

    response = cancel(operator_api, row)

    assert response.status_code == 409
    assert response.json()["detail"].startswith(f"Deployment #{row.pk} was ready and is restarting a process; ")
    row.refresh_from_db()
    assert (row.status, row.cancel_requested) == (DeploymentStatus.STARTING, False)


@pytest.mark.parametrize("status", [DeploymentStatus.STOPPING, DeploymentStatus.STOPPED, DeploymentStatus.FAILED])
def test_it_answers_409_with_nothing_to_cancel_once_it_is_over(operator_api, recipe, status):
    row = deployment(recipe, status)

    response = cancel(operator_api, row)

    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"Deployment #{row.pk} is {status}; cancel only applies to a deployment that has not become ready yet "
        "(pending or starting). There is nothing to cancel.")
    row.refresh_from_db()
    assert row.status == status


def test_it_cancels_a_deployment_still_starting_for_the_first_time(operator_api, recipe):
    row = deployment(recipe, DeploymentStatus.STARTING)

    response = cancel(operator_api, row)

    assert response.status_code == 202
    assert (response.json()["cancel_requested"], response.json()["stop_requested"]) == (True, True)
    assert response.json()["status"] == "starting"  # the node agent stops what it started
    assert list(ProcessEvent.objects.filter(deployment=row).values_list("kind", "message")) == [
        ("cancel-requested", "oscar-operator cancelled it while starting (never ready); stop requested")]


def test_it_cancels_a_pending_deployment_at_once(operator_api, recipe):
    row = deployment(recipe, DeploymentStatus.PENDING)

    response = cancel(operator_api, row)

    assert response.status_code == 202
    assert (response.json()["status"], response.json()["reason"]) == ("stopped", "cancelled by oscar-operator before it became ready")
    assert (response.json()["cancel_requested"], response.json()["stop_requested"]) == (True, True)


def test_a_stop_of_a_pending_deployment_ends_it_without_calling_it_a_cancel_request(operator_api, recipe):
    row = deployment(recipe, DeploymentStatus.PENDING)

    response = operator_api.post(f"/api/deployments/{row.pk}/stop/")

    assert response.status_code == 202
    body = response.json()
    assert (body["status"], body["cancel_requested"], body["stop_requested"]) == ("stopped", False, True)


def test_it_keeps_cancel_for_operators_and_answers_404_for_an_unknown_deployment(viewer_api, operator_api, recipe):
    row = deployment(recipe, DeploymentStatus.PENDING)

    assert cancel(viewer_api, row).status_code == 403
    assert operator_api.post("/api/deployments/424242/cancel/").status_code == 404
    row.refresh_from_db()
    assert row.status == DeploymentStatus.PENDING


def test_it_still_stops_a_ready_deployment_and_stop_stays_idempotent(operator_api, recipe):
    row = deployment(recipe, DeploymentStatus.READY, ready_at=timezone.now())

    first = operator_api.post(f"/api/deployments/{row.pk}/stop/")
    second = operator_api.post(f"/api/deployments/{row.pk}/stop/")
    Deployment.objects.filter(pk=row.pk).update(status=DeploymentStatus.STOPPED)
    third = operator_api.post(f"/api/deployments/{row.pk}/stop/")

    assert [r.status_code for r in (first, second, third)] == [202, 202, 202]
    # A stop is not a cancel (cancelling a ready deployment is a 409): only the stop flag is set.
    assert (first.json()["cancel_requested"], first.json()["stop_requested"]) == (False, True)
    assert (second.json()["cancel_requested"], second.json()["stop_requested"]) == (False, True)
    assert Deployment.objects.filter(pk=row.pk, cancel_requested=False, stop_requested=True).exists()
    assert third.json()["status"] == "stopped"
    assert ProcessEvent.objects.filter(deployment=row, kind="stop-requested").count() == 1


# --- admin names -------------------------------------------------------------------------------


def test_the_models_have_proper_names_in_the_admin(db):
    assert (Gpu._meta.verbose_name, Gpu._meta.verbose_name_plural) == ("GPU", "GPUs")
    assert (NumaNode._meta.verbose_name, NumaNode._meta.verbose_name_plural) == ("NUMA node", "NUMA nodes")
    assert (ServerProcess._meta.verbose_name, ServerProcess._meta.verbose_name_plural) == (
        "server process", "server processes")
    client = Client()
    client.force_login(User.objects.create_superuser("sam-super", "sam@example.test", "correct-horse-battery"))
    page = client.get("/admin/").content.decode()
    assert ">GPUs<" in page and ">NUMA nodes<" in page and ">Server processes<" in page
    assert "Gpus" not in page and "processs" not in page and "Numa nodes" not in page
