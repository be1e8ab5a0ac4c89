"""A change reason over 100 characters is refused in the product's wording of every length limit
(``Use at most 100 characters; got 200.``), on the API and on the recipe page's form alike, never
Django's ``Ensure this field has no more than 100 characters.``"""
from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from deployments.examples import example_recipe
from deployments.forms import RecipeForm
from deployments.models import Recipe
from deployments.services import recipe_create
from deployments.tests.factories import seed_node_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def recipe(operator) -> Recipe:
    example = example_recipe("seed-v4-flash-pd")
    return recipe_create(user=operator, name=example["name"], description="", engine=example["engine"],
                         topology=example["topology"], node=seed_node_create(), spec=example["spec"])

TOO_LONG = "Use at most 100 characters; got 200."


def test_the_api_refuses_a_long_change_reason_in_the_products_wording(operator_api, recipe):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "d", "change_reason": "x" * 200},
                                  format="json")
    assert response.status_code == 400
    assert response.json()["change_reason"] == [TOO_LONG]
    recipe.refresh_from_db()
    assert recipe.version == 1

    ok = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "d", "change_reason": "y" * 100},
                            format="json")
    assert ok.status_code == 200, ok.content
    assert recipe.history.order_by("-history_date").first().history_change_reason == "y" * 100


def test_the_edit_form_refuses_a_long_change_reason_in_the_products_wording():
    form = RecipeForm({"change_reason": "x" * 200}, editing=True)
    assert not form.is_valid()
    assert form.errors["change_reason"] == [TOO_LONG]
    assert 'maxlength="100"' in str(form["change_reason"])


def test_the_edit_page_shows_the_products_wording(operator, recipe):
    client = Client()
    client.force_login(operator)
    data = {"name": recipe.name, "description": "", "engine": recipe.engine, "topology": recipe.topology,
            "node": str(recipe.node_id), "spec": json.dumps(recipe.spec), "change_reason": "x" * 200,
            "expected_version": "1"}
    response = client.post(reverse("deployments:recipe-edit", args=[recipe.pk]), data)
    assert response.status_code == 400
    html = response.content.decode()
    assert TOO_LONG in html
    assert "Ensure this field has no more than" not in html
    recipe.refresh_from_db()
    assert recipe.version == 1
