"""Deleting a recipe: one whose deployments never started (cancelled while pending, failed before
any process was spawned, no sweep) goes with those rows; any deployment that ran keeps it, and
the 409 (API) or admin's delete page names those deployments and what to do instead."""
from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from benchmarks.models import BenchmarkSweep
from deployments.choices import DeploymentStatus, ProcessStatus, Role
from deployments.models import Deployment, ProcessEvent, Recipe, ServerProcess
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db

RULE = ("A recipe is deleted only when none of its deployments ever started a process (each one cancelled while "
        "pending, or failed before its first process was spawned, with no benchmark sweep made against it), and "
        "those deployments go with it.")


def _kept_for_good(recipe: Recipe, named: str, why: str) -> str:
    return (f"Recipe '{recipe.name}' cannot be deleted: {named} to it. {RULE} This recipe is kept for good: {why}. "
            "It is the record of what its deployments ran and what their benchmark sweeps measured, so stopping or "
            f"cancelling a deployment will not make it deletable. Instead: change the recipe with PATCH "
            f"/api/recipes/{recipe.pk}/ (each save is a new version; deployments keep the version they ran), or "
            "create a new recipe under another name.")


def _unstarted(recipe: Recipe, status: str = DeploymentStatus.PENDING) -> Deployment:
    """A deployment of ``recipe`` whose process row was written but never spawned."""
    deployment = Deployment.objects.create(recipe=recipe, recipe_version=recipe.version, spec_snapshot=recipe.spec,
                                           node=recipe.node, status=status)
    ServerProcess.objects.create(deployment=deployment, role=Role.SINGLE, status=ProcessStatus.PENDING)
    return deployment


def test_a_recipe_whose_only_deployment_was_cancelled_before_it_started_is_deleted_with_it(admin_api):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"), name="test-j")
    deployment = _unstarted(recipe)
    assert admin_api.post(f"/api/deployments/{deployment.pk}/cancel/").status_code == 202
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.STOPPED

    response = admin_api.delete(f"/api/recipes/{recipe.pk}/")
    assert response.status_code == 204, response.content
    assert not Recipe.objects.filter(pk=recipe.pk).exists()
    assert not Deployment.objects.filter(pk=deployment.pk).exists()
    assert not ProcessEvent.objects.filter(deployment_id=deployment.pk).exists()
    assert Recipe.history.filter(id=recipe.pk, history_type="-").count() == 1


def test_a_failed_deployment_that_never_spawned_goes_with_its_recipe(admin_api):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"))
    deployment = _unstarted(recipe, status=DeploymentStatus.FAILED)
    assert admin_api.delete(f"/api/recipes/{recipe.pk}/").status_code == 204
    assert not Deployment.objects.filter(pk=deployment.pk).exists()


def test_a_recipe_that_ran_is_kept_and_the_409_names_its_deployments_and_the_way_out(admin_api):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"), name="test-j")
    cancelled = _unstarted(recipe, status=DeploymentStatus.STOPPED)
    ran = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)
    live = deployment_row_create(recipe=recipe, status=DeploymentStatus.READY)

    response = admin_api.delete(f"/api/recipes/{recipe.pk}/")
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "conflict"
    detail = body["detail"]
    assert detail.startswith(f"Recipe 'test-j' cannot be deleted: deployments #{live.pk} (ready), "
                             f"#{ran.pk} (stopped; it ran) refer to it.")
    assert f"#{cancelled.pk}" not in detail
    # one of them ran: stopping or cancelling can never make the recipe deletable, so neither is offered
    assert detail.endswith(
        "This recipe is kept for good: a deployment of it ran. It is the record of what its deployments ran and "
        "what their benchmark sweeps measured, so stopping or cancelling a deployment will not make it deletable. "
        f"Instead: change the recipe with PATCH /api/recipes/{recipe.pk}/ (each save is a new version; "
        "deployments keep the version they ran), or create a new recipe under another name.")
    assert "/stop/" not in detail and "/cancel/" not in detail
    # nothing deleted, the never-started row included
    assert Recipe.objects.filter(pk=recipe.pk).exists()
    assert Deployment.objects.filter(recipe=recipe).count() == 3


def test_a_pending_deployment_keeps_the_recipe_until_it_is_cancelled(admin_api):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"))
    pending = _unstarted(recipe)
    refused = admin_api.delete(f"/api/recipes/{recipe.pk}/")
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"Recipe '{recipe.name}' cannot be deleted: deployment #{pending.pk} (pending) refers to it. "
        f"{RULE} It has not started a process yet, so it goes with the recipe once ended: cancel it "
        f"(POST /api/deployments/<id>/cancel/), then delete the recipe again. Or change the recipe with "
        f"PATCH /api/recipes/{recipe.pk}/ (each save is a new version; deployments keep the version they ran), "
        f"or create a new recipe under another name.")
    admin_api.post(f"/api/deployments/{pending.pk}/cancel/")
    assert admin_api.delete(f"/api/recipes/{recipe.pk}/").status_code == 204


def test_a_deployment_a_sweep_was_made_against_keeps_the_recipe(admin_api):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"))
    deployment = _unstarted(recipe, status=DeploymentStatus.STOPPED)
    BenchmarkSweep.objects.create(deployment=deployment, grid={"concurrency": [1]}, status="failed")
    response = admin_api.delete(f"/api/recipes/{recipe.pk}/")
    assert response.status_code == 409
    assert f"#{deployment.pk} (stopped; a benchmark sweep was made against it)" in response.json()["detail"]
    assert Deployment.objects.filter(pk=deployment.pk).exists()


def test_the_409_names_ten_deployments_then_how_many_more(admin_api):
    node = cpu_node_create(name="n1")
    recipe = recipe_row_create(node=node)
    rows = [deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED) for _ in range(13)]
    detail = admin_api.delete(f"/api/recipes/{recipe.pk}/").json()["detail"]
    named = [d for d in rows if f"#{d.pk} (stopped; it ran)" in detail]
    assert len(named) == 10 and "and 3 more refer to it" in detail


def test_admin_deletes_a_never_started_recipe_with_its_deployment_and_protects_one_that_ran(admin_client):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"), name="test-j")
    cancelled = _unstarted(recipe, status=DeploymentStatus.STOPPED)
    url = reverse("admin:deployments_recipe_delete", args=[recipe.pk])
    page = admin_client.get(url).content.decode()
    assert f"test-j#{cancelled.pk} (stopped, never started: deleted with its recipe)" in page

    ran = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)
    page = admin_client.get(url).content.decode()
    assert f"#{ran.pk} (stopped; it ran) refers to it" in page
    admin_client.post(url, {"post": "yes"})
    assert Recipe.objects.filter(pk=recipe.pk).exists()

    ran.delete()
    response = admin_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not Recipe.objects.filter(pk=recipe.pk).exists()
    assert not Deployment.objects.filter(pk=cancelled.pk).exists()


def test_a_spawned_process_counts_as_ran():
    from deployments.services import deployment_never_started
    recipe = recipe_row_create(node=cpu_node_create(name="n1"))
    deployment = _unstarted(recipe, status=DeploymentStatus.FAILED)
    assert deployment_never_started(deployment)
    ServerProcess.objects.filter(deployment=deployment).update(started_at=timezone.now())
    assert not deployment_never_started(deployment)


def test_a_recipe_kept_by_a_swept_stopped_deployment_offers_no_stop_or_cancel_on_the_api_and_admin(
        admin_api, admin_client):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"), name="test-swept")
    ran = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)
    BenchmarkSweep.objects.create(deployment=ran, grid={"concurrency": [1]}, status="done")
    expected = _kept_for_good(
        recipe, f"deployment #{ran.pk} (stopped; a benchmark sweep was made against it) refers",
        "a deployment of it ran and measured benchmark history refers to it")

    response = admin_api.delete(f"/api/recipes/{recipe.pk}/")
    assert response.status_code == 409
    assert response.json()["detail"] == expected

    from html import unescape
    page = unescape(admin_client.get(reverse("admin:deployments_recipe_delete", args=[recipe.pk])).content.decode())
    assert expected in page
    assert "/stop/" not in page and "/cancel/" not in page


def test_a_ready_deployment_keeps_the_recipe_for_good(admin_api):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"), name="test-live")
    live = deployment_row_create(recipe=recipe, status=DeploymentStatus.READY)
    assert admin_api.delete(f"/api/recipes/{recipe.pk}/").json()["detail"] == _kept_for_good(
        recipe, f"deployment #{live.pk} (ready) refers", "a deployment of it ran")


def test_a_pending_and_a_starting_deployment_that_spawned_nothing_are_cancelled_then_the_recipe_goes(
        admin_api, admin_client):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"), name="test-two")
    starting = _unstarted(recipe, status=DeploymentStatus.STARTING)
    Deployment.objects.filter(pk=starting.pk).update(node=cpu_node_create(name="n2"))  # one active per node
    pending = _unstarted(recipe)
    expected = (
        f"Recipe 'test-two' cannot be deleted: deployments #{pending.pk} (pending), #{starting.pk} (starting) "
        f"refer to it. {RULE} None of them has started a process yet, so they go with the recipe once ended: "
        f"cancel the pending and starting ones (POST /api/deployments/<id>/cancel/), then delete the recipe again. "
        f"Or change the recipe with PATCH /api/recipes/{recipe.pk}/ (each save is a new version; deployments keep "
        f"the version they ran), or create a new recipe under another name.")
    assert admin_api.delete(f"/api/recipes/{recipe.pk}/").json()["detail"] == expected
    from html import unescape
    page = unescape(admin_client.get(reverse("admin:deployments_recipe_delete", args=[recipe.pk])).content.decode())
    assert expected in page

    for d in (pending, starting):
        assert admin_api.post(f"/api/deployments/{d.pk}/cancel/").status_code == 202
    Deployment.objects.filter(pk=starting.pk).update(status=DeploymentStatus.STOPPED)  # as the node agent ends it
    assert admin_api.delete(f"/api/recipes/{recipe.pk}/").status_code == 204


def test_a_pending_deployment_beside_one_that_ran_gets_no_cancel_advice(admin_api):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"), name="test-mixed")
    ran = deployment_row_create(recipe=recipe, status=DeploymentStatus.FAILED)
    pending = _unstarted(recipe)
    assert admin_api.delete(f"/api/recipes/{recipe.pk}/").json()["detail"] == _kept_for_good(
        recipe, f"deployments #{pending.pk} (pending), #{ran.pk} (failed; it ran) refer", "a deployment of it ran")
