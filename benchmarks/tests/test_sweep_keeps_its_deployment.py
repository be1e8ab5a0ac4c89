"""A deployment a benchmark sweep was made against cannot be deleted (``PROTECT``): admin's
delete page lists the sweep as protected and refuses, so measured results never lose what they
measured. A sweep whose deployment was deleted before that rule names it from its snapshot."""
from __future__ import annotations

import pytest
from django.urls import reverse

from benchmarks.models import BenchmarkRun, BenchmarkSweep
from deployments.choices import DeploymentStatus
from deployments.models import Deployment
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def measured():
    recipe = recipe_row_create(node=cpu_node_create(name="n1"), name="test-j")
    deployment = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)
    sweep = BenchmarkSweep.objects.create(
        deployment=deployment, name="measured", status="done", grid={"concurrency": [1], "lengths": [[8, 8]]},
        points_total=1, points_done=1, engine="sim", topology="single",
        snapshot={"deployment_id": deployment.pk, "recipe": recipe.name, "recipe_version": recipe.version})
    BenchmarkRun.objects.create(sweep=sweep, status="done", source="measured", concurrency=1, input_len=8,
                                output_len=8)
    return sweep


def test_admin_refuses_to_delete_a_deployment_a_sweep_measured_and_lists_the_sweep(admin_client, measured):
    deployment = measured.deployment
    url = reverse("admin:deployments_deployment_delete", args=[deployment.pk])
    page = admin_client.get(url).content.decode()
    assert "would require deleting the following protected related objects" in page
    assert "measured" in page and reverse("admin:benchmarks_benchmarksweep_change", args=[measured.pk]) in page

    admin_client.post(url, {"post": "yes"})
    admin_client.post(reverse("admin:deployments_deployment_changelist"),
                      {"action": "delete_selected", "post": "yes", "_selected_action": [deployment.pk]})
    assert Deployment.objects.filter(pk=deployment.pk).exists()
    measured.refresh_from_db()
    assert measured.deployment_id == deployment.pk


def test_after_its_sweeps_are_deleted_the_deployment_can_be_deleted(admin_client, measured):
    deployment = measured.deployment
    assert admin_client.post(reverse("admin:benchmarks_benchmarksweep_delete", args=[measured.pk]),
                             {"post": "yes"}).status_code == 302
    response = admin_client.post(reverse("admin:deployments_deployment_delete", args=[deployment.pk]),
                                 {"post": "yes"})
    assert response.status_code == 302
    assert not Deployment.objects.filter(pk=deployment.pk).exists()


def test_the_api_still_names_the_deployment_a_refused_delete_left_in_place(admin_client, admin_api, measured):
    deployment = measured.deployment
    admin_client.post(reverse("admin:deployments_deployment_delete", args=[deployment.pk]), {"post": "yes"})
    sweep = admin_api.get(f"/api/sweeps/{measured.pk}/").json()
    assert sweep["deployment"] == deployment.pk
    run = measured.runs.get()
    assert admin_api.get(f"/api/runs/{run.pk}/").json()["source"] == "measured"
    page = admin_client.get(reverse("benchmarks:sweep-detail", args=[measured.pk])).content.decode()
    assert f"#{deployment.pk} test-j</a>" in page and "imported runs" not in page


def test_a_sweep_whose_deployment_was_deleted_earlier_names_it_from_its_snapshot(admin_client, measured):
    pk = measured.deployment_id
    BenchmarkSweep.objects.filter(pk=measured.pk).update(deployment=None)  # as SET_NULL left such rows
    page = admin_client.get(reverse("benchmarks:sweep-detail", args=[measured.pk])).content.decode()
    assert f"deployment #{pk} (deleted)" in page and "recipe test-j version 1" in page
    assert "none (imported runs)" not in page


def test_a_sweep_that_never_started_and_lost_its_deployment_does_not_read_as_imported(admin_client, measured):
    BenchmarkSweep.objects.filter(pk=measured.pk).update(deployment=None, snapshot={})
    page = admin_client.get(reverse("benchmarks:sweep-detail", args=[measured.pk])).content.decode()
    assert "a deployment since deleted" in page and "imported runs" not in page


def test_the_sweep_list_in_admin_names_each_sweeps_deployment(admin_client, measured):
    page = admin_client.get(reverse("admin:benchmarks_benchmarksweep_changelist")).content.decode()
    assert f"test-j#{measured.deployment_id}" in page
