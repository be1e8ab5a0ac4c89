"""Django admin refuses to delete the row of a deployment that is not over (or one of its
processes): deleting it would leave its engines running with no row to stop them by. Rows of
stopped and failed deployments stay deletable for clean-up."""
from __future__ import annotations

import pytest

from deployments.choices import DeploymentStatus
from deployments.models import Deployment, ServerProcess
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create


@pytest.mark.django_db
@pytest.mark.parametrize("status", [DeploymentStatus.PENDING, DeploymentStatus.STARTING, DeploymentStatus.READY,
                                    DeploymentStatus.STOPPING])
def test_an_active_deployment_and_its_processes_cannot_be_deleted_in_admin(admin_client, status):
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create(name="adm")), status=status)
    process = deployment.processes.get()
    url = f"/admin/deployments/deployment/{deployment.pk}/delete/"

    page = admin_client.get(url).content.decode()
    assert f"deployment #{deployment.pk} ({deployment.recipe.name}) is {status}: stop it first" in page
    admin_client.post(url, {"post": "yes"})
    admin_client.post(f"/admin/deployments/serverprocess/{process.pk}/delete/", {"post": "yes"})
    admin_client.post("/admin/deployments/deployment/", {"action": "delete_selected", "post": "yes",
                                                          "_selected_action": [deployment.pk]})
    assert Deployment.objects.filter(pk=deployment.pk).exists()
    assert ServerProcess.objects.filter(pk=process.pk).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("status", [DeploymentStatus.STOPPED, DeploymentStatus.FAILED])
def test_an_ended_deployment_can_be_deleted_in_admin(admin_client, status):
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create(name="adm")), status=status)
    response = admin_client.post(f"/admin/deployments/deployment/{deployment.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Deployment.objects.filter(pk=deployment.pk).exists()
    assert not ServerProcess.objects.filter(deployment_id=deployment.pk).exists()


@pytest.mark.django_db
def test_the_delete_page_names_each_event_it_would_remove_by_deployment_process_kind_and_time(admin_client):
    from datetime import datetime, timezone

    from deployments.models import ProcessEvent

    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create(name="adm")),
                                       status=DeploymentStatus.STOPPED)
    process = deployment.processes.get()
    at = datetime(2026, 12, 7, 7, 33, 25, tzinfo=timezone.utc)
    ProcessEvent.objects.create(deployment=deployment, process=process, kind="started", at=at, message="pid 42")
    ProcessEvent.objects.create(deployment=deployment, kind="stopped", at=at, message="by a stop")

    page = admin_client.get(f"/admin/deployments/deployment/{deployment.pk}/delete/").content.decode()

    assert f"deployment {deployment.pk} single0 started at 2026-12-07 07:33:25 UTC" in page
    assert f"deployment {deployment.pk} stopped at 2026-12-07 07:33:25 UTC" in page
    assert "ProcessEvent object" not in page
