"""Reverting to a version whose name another recipe has taken since: the refusal says how to
restore it anyway, and ``keep_name`` restores every other field under the recipe's current name,
on the revert page and through ``POST /api/recipes/<id>/revert/``."""
from __future__ import annotations

import html as html_lib

import pytest
from django.test import Client
from django.urls import reverse

from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.nodes import node_register, seed_node_facts
from deployments.services import recipe_create, recipe_update

TAKEN = ("A recipe named 'hist-test' already exists; restore it with the current name 'hist-renamed' "
         "instead (keep_name).")


@pytest.fixture
def renamed(db, operator) -> Recipe:
    """``hist-test`` v1 (stop grace 30 s), renamed to ``hist-renamed`` with a 90 s grace in v2;
    another recipe is then created under the old name."""
    node = node_register(facts=seed_node_facts())
    ex = example_recipe("seed-v4-flash-pd")
    recipe = recipe_create(user=operator, name="hist-test", description="first", engine=ex["engine"],
                           topology=ex["topology"], node=node, spec=ex["spec"])
    recipe = recipe_update(recipe=recipe, user=operator, name="hist-renamed", description="second",
                           spec=dict(recipe.spec, stop_grace_s=90))
    recipe_create(user=operator, name="hist-test", engine=ex["engine"], topology=ex["topology"], node=node,
                  spec=ex["spec"])
    return recipe


@pytest.fixture
def operator_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def _text(response) -> str:
    return html_lib.unescape(response.content.decode())


def _assert_restored_with_current_name(recipe: Recipe, version: int) -> None:
    recipe.refresh_from_db()
    old = recipe.history.get(version=1)
    assert recipe.version == version
    assert (recipe.name, recipe.description, recipe.spec) == ("hist-renamed", old.description, old.spec)
    assert recipe.spec["stop_grace_s"] == 30
    assert recipe.history.get(version=version).history_change_reason == (
        "Reverted to version 1 keeping the name 'hist-renamed'"
    )


def test_the_revert_page_says_how_to_restore_a_version_whose_name_is_taken(operator_client, renamed):
    url = reverse("deployments:recipe-revert", args=[renamed.pk, 1])
    response = operator_client.post(url, {"expected_version": "2"}, follow=True)
    assert f"Version 1 cannot be restored: name: {TAKEN}" in _text(response)
    renamed.refresh_from_db()
    assert (renamed.version, renamed.name) == (2, "hist-renamed")

    confirm = _text(operator_client.get(url))
    assert '<input type="checkbox" name="keep_name">' in confirm
    assert "Keep the current name “hist-renamed” (v1 was named “hist-test”)" in confirm
    response = operator_client.post(url, {"expected_version": "2", "keep_name": "on"}, follow=True)
    assert "reverted to version 1 (now version 3)" in _text(response)
    _assert_restored_with_current_name(renamed, 3)


def test_the_revert_page_offers_no_checkbox_when_the_names_are_equal(operator_client, renamed):
    assert 'name="keep_name"' not in _text(operator_client.get(reverse("deployments:recipe-revert", args=[renamed.pk, 2])))


def test_the_revert_page_refuses_a_keep_name_that_is_not_the_checkbox(operator_client, renamed):
    url = reverse("deployments:recipe-revert", args=[renamed.pk, 1])
    response = operator_client.post(url, {"expected_version": "2", "keep_name": "yes"}, follow=True)
    assert "Version 1 cannot be restored: keep_name: is 'yes': tick the box (on) or leave it out" in _text(response)
    renamed.refresh_from_db()
    assert renamed.version == 2


def test_the_api_revert_says_how_to_restore_a_version_whose_name_is_taken(operator_api, renamed):
    url = f"/api/recipes/{renamed.pk}/revert/"
    refused = operator_api.post(url, {"version": 1}, format="json")
    assert refused.status_code == 400
    assert refused.json() == {"name": [TAKEN]}
    bad = operator_api.post(url, {"version": 1, "keep_name": "yes"}, format="json")
    assert bad.status_code == 400
    assert bad.json() == {"keep_name": ['must be true or false, got the string "yes"']}
    renamed.refresh_from_db()
    assert renamed.version == 2

    response = operator_api.post(url, {"version": 1, "expected_version": 2, "keep_name": True}, format="json")
    assert response.status_code == 200, response.json()
    assert (response.json()["name"], response.json()["version"]) == ("hist-renamed", 3)
    _assert_restored_with_current_name(renamed, 3)


def test_keep_name_false_restores_the_version_s_own_name_when_it_is_free(operator_api, renamed):
    Recipe.objects.filter(name="hist-test").delete()
    response = operator_api.post(f"/api/recipes/{renamed.pk}/revert/", {"version": 1, "keep_name": False}, format="json")
    assert response.status_code == 200, response.json()
    assert (response.json()["name"], response.json()["version"]) == ("hist-test", 3)


@pytest.mark.parametrize("version", ["0", "00"])
def test_the_revert_page_of_version_0_is_a_404_that_says_why(operator_client, renamed, version):
    response = operator_client.get(f"/recipes/{renamed.pk}/revert/{version}/")
    assert response.status_code == 404
    assert "0 is not a version number: versions count from 1." in html_lib.unescape(response.content.decode())
