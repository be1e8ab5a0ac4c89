"""Django admin judges a recipe's (and a secret's) name as the API and the recipe form do
(:func:`deployments.models.name_validator`): an 80-character name gets one message, ``Use at most
63 characters; got 80.``, never that and the character rule."""
from __future__ import annotations

import json

import pytest

from deployments.forms import RecipeAdminForm, SecretAdminForm
from deployments.models import Recipe
from deployments.tests.factories import cpu_node_create

pytestmark = pytest.mark.django_db

SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}
LONG = "a" * 80


def _recipe_data(node, name: str) -> dict:
    return {"name": name, "description": "", "engine": "sim", "topology": "single", "node": node.pk,
            "spec": json.dumps(SPEC)}


def test_the_admin_recipe_form_gives_a_long_name_one_message(db):
    node = cpu_node_create(name="local")
    form = RecipeAdminForm(data=_recipe_data(node, LONG))
    assert not form.is_valid()
    assert form.errors["name"] == ["Use at most 63 characters; got 80."]


def test_the_admin_recipe_form_quotes_a_bad_name_as_the_api_does(db):
    node = cpu_node_create(name="local")
    form = RecipeAdminForm(data=_recipe_data(node, "Bad Name!"))
    assert not form.is_valid()
    assert form.errors["name"] == [
        "Use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit; got 'Bad Name!'."]


def test_the_admin_recipe_edit_page_gives_one_message(admin_user, client):
    node = cpu_node_create(name="local")
    recipe = Recipe.objects.create(name="kept", engine="sim", topology="single", node=node, spec=SPEC, version=1)
    client.force_login(admin_user)
    response = client.post(f"/admin/deployments/recipe/{recipe.pk}/change/",
                           {**_recipe_data(node, LONG), "expected_version": 1})
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count("Use at most 63 characters; got 80.") == 1
    assert "Ensure this value has at most" not in page
    recipe.refresh_from_db()
    assert (recipe.name, recipe.version) == ("kept", 1)


def test_the_admin_secret_form_gives_a_long_name_one_message(db):
    form = SecretAdminForm(data={"name": LONG, "description": "", "value": "hf_abcdefghijklmnop"})
    assert not form.is_valid()
    assert form.errors["name"] == ["Use at most 63 characters; got 80."]
