"""The recipe pages take a version number once: ``?a=1&a=2`` on the diff or history page (or
``?version=`` given twice on the recipe and dry-run pages) is refused with the page's message for a
version it cannot read, never answered with the last value."""
from __future__ import annotations

import html

import pytest
from django.urls import reverse

from deployments.examples import example_recipe, local_node_facts_example
from deployments.nodes import node_register
from deployments.services import recipe_create, recipe_update


@pytest.fixture
def recipe_v3(db, operator):
    node = node_register(facts=local_node_facts_example(cpu_count=4))
    ex = example_recipe("local-sim-single")
    recipe = recipe_create(user=operator, name=ex["name"], description="", engine=ex["engine"],
                           topology=ex["topology"], node=node, spec=ex["spec"])
    for grace in (11, 12):
        recipe = recipe_update(recipe=recipe, user=operator, spec=dict(recipe.spec, stop_grace_s=grace))
    assert recipe.version == 3
    return recipe


@pytest.mark.parametrize("page, query, message", [
    ("recipe-diff", "a=1&a=2&b=3", "a is given 2 times (1, 2): give it once"),
    ("recipe-diff", "a=1&b=3&b=2", "b is given 2 times (3, 2): give it once"),
    ("recipe-history", "a=1&a=2&b=3", "a is given 2 times (1, 2): give it once"),
    ("recipe-detail", "version=1&version=2", "version is given 2 times (1, 2): give it once"),
    ("recipe-dry-run", "version=1&version=2", "version is given 2 times (1, 2): give it once"),
])
def test_a_version_given_twice_is_refused_with_a_message(client, viewer, recipe_v3, page, query, message):
    client.force_login(viewer)
    url = reverse(f"deployments:{page}", args=[recipe_v3.pk]) + "?" + query

    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = client.get(url, **headers)

        assert response.status_code == 404, (url, response.status_code)
        assert html.escape(message) in response.content.decode()


def test_a_version_given_once_still_diffs(client, viewer, recipe_v3):
    client.force_login(viewer)
    url = reverse("deployments:recipe-diff", args=[recipe_v3.pk])

    response = client.get(url, {"a": 1, "b": 3}, HTTP_HX_REQUEST="true")

    assert response.status_code == 200 and "spec.stop_grace_s" in response.content.decode()


@pytest.mark.parametrize("page, query, message", [
    ("recipe-detail", "version=x", "version must be a version number (a whole number of at least 1), got 'x'"),
    ("recipe-dry-run", "version=0", "version must be a version number (a whole number of at least 1), got '0'"),
    ("recipe-diff", "a=-1&b=3", "a must be a version number (a whole number of at least 1), got '-1'"),
    ("recipe-history", "a=1&b=1.5", "b must be a version number (a whole number of at least 1), got '1.5'"),
])
def test_a_version_that_is_not_a_number_is_quoted(client, viewer, recipe_v3, page, query, message):
    client.force_login(viewer)
    url = reverse(f"deployments:{page}", args=[recipe_v3.pk]) + "?" + query

    response = client.get(url)

    assert response.status_code == 404, (url, response.status_code)
    assert html.escape(message) in response.content.decode()
