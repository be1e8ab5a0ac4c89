"""A deployment shows the name its recipe had at the deployed version, not the name the recipe
was given later: in the API, and on its page, in the deployment list and on the wall with the
current name beside it; rows from before the name was kept get it from the recipe's history."""
from __future__ import annotations

import importlib
import re

import pytest
from django.apps import apps
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from deployments.choices import DeploymentStatus
from deployments.examples import example_recipe
from deployments.models import Deployment, Recipe
from deployments.nodes import node_register, seed_node_facts
from deployments.services import deployment_create, recipe_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def recipe(operator) -> Recipe:
    ex = example_recipe("seed-v4-flash-pd")
    return recipe_create(user=operator, name="probe-sim-b", description="", engine=ex["engine"],
                         topology=ex["topology"], node=node_register(facts=seed_node_facts()), spec=ex["spec"])


@pytest.fixture
def renamed(recipe, operator, operator_api) -> Deployment:
    """Deployment of v1 as probe-sim-b, ended a minute ago; the recipe then renamed (v2)."""
    deployment = deployment_create(recipe=recipe, user=operator)
    Deployment.objects.filter(pk=deployment.pk).update(
        status=DeploymentStatus.STOPPED, ended_at=timezone.now() - timezone.timedelta(minutes=1))
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"name": "probe-renamed"}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["version"] == 2
    deployment.refresh_from_db()
    return deployment


def _page(user, url: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_it_keeps_the_recipe_name_at_deploy_time(renamed):
    assert (renamed.recipe_name, renamed.recipe_version, renamed.recipe.name) == ("probe-sim-b", 1, "probe-renamed")
    assert str(renamed) == f"probe-sim-b#{renamed.pk}"


def test_the_api_gives_the_name_at_the_deployed_version(viewer_api, renamed):
    body = viewer_api.get(f"/api/deployments/{renamed.pk}/").json()
    assert (body["recipe_name"], body["recipe_version"]) == ("probe-sim-b", 1)
    listed = viewer_api.get("/api/deployments/").json()["results"]
    assert [(d["id"], d["recipe_name"]) for d in listed] == [(renamed.pk, "probe-sim-b")]


def test_the_deployment_page_names_it_as_deployed_and_says_the_current_name(viewer, renamed):
    html = _page(viewer, reverse("deployments:deployment-detail", args=[renamed.pk]))
    assert (f'<h1>Deployment #{renamed.pk} <span class="muted">·</span> probe-sim-b <span class="tag">v1</span> '
            '<span class="muted small">(now probe-renamed)</span></h1>') in html
    assert 'probe-sim-b v1</a> <span class="muted small">(recipe is now v2, named probe-renamed)</span>' in html


def test_the_deployment_page_says_no_current_name_when_it_is_unchanged(viewer, recipe, operator):
    deployment = deployment_create(recipe=recipe, user=operator)
    html = _page(viewer, reverse("deployments:deployment-detail", args=[deployment.pk]))
    assert re.findall(r"<h1>.*</h1>", html) == [
        f'<h1>Deployment #{deployment.pk} <span class="muted">·</span> probe-sim-b <span class="tag">v1</span></h1>']
    assert "(now " not in html and "named probe-sim-b" not in html


def test_the_list_and_the_walls_ended_strip_name_it_as_deployed(viewer, renamed):
    listing = _page(viewer, reverse("deployments:deployment-list"))
    hint = ' <span class="muted small recipe-renamed">(now probe-renamed)</span>'
    assert f'<a href="{reverse("deployments:deployment-detail", args=[renamed.pk])}">probe-sim-b</a>{hint}' in listing
    wall = _page(viewer, reverse("deployments:wall-tiles"))
    assert f"<strong>#{renamed.pk} probe-sim-b</strong>{hint}" in wall


def test_the_migration_names_an_earlier_deployment_from_the_recipes_history(renamed):
    Deployment.objects.filter(pk=renamed.pk).update(recipe_name="")
    migration = importlib.import_module("deployments.migrations.0010_deployment_recipe_name")
    migration.fill_recipe_names(apps, None)
    renamed.refresh_from_db()
    assert renamed.recipe_name == "probe-sim-b"
