"""The recipe pages take a version number once: ``?a=1&a=2`` on the diff or history page (or
``?version=`` given twice on the recipe and dry-run pages) is refused with the page's message for a
version it cannot read, never answered with the last value. A malformed value is the client's
error (400); a well-formed version the recipe does not have is a 404."""
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

        assert response.status_code == 400, (url, response.status_code)
        assert html.escape(message) in response.content.decode()
        assert "<title>Bad request · Ceiling</title>" in response.content.decode()


def test_a_version_given_once_still_diffs(client, viewer, recipe_v3):
    client.force_login(viewer)
    url = reverse("deployments:recipe-diff", args=[recipe_v3.pk])

    response = client.get(url, {"a": 1, "b": 3}, HTTP_HX_REQUEST="true")

    assert response.status_code == 200 and "spec.stop_grace_s" in response.content.decode()


@pytest.mark.parametrize("page, query, message", [
    ("recipe-detail", "version=x", "version must be a whole number between 1 and 2147483647, got 'x'"),
    ("recipe-dry-run", "version=0", "version must be a whole number between 1 and 2147483647, got '0'"),
    ("recipe-diff", "a=-1&b=3", "a must be a whole number between 1 and 2147483647, got '-1'"),
    ("recipe-history", "a=1&b=1.5", "b must be a whole number between 1 and 2147483647, got '1.5'"),
    ("recipe-history", "a=x", "a must be a whole number between 1 and 2147483647, got 'x'"),
    ("recipe-dry-run", "version=abc", "version must be a whole number between 1 and 2147483647, got 'abc'"),
])
def test_a_version_that_is_not_a_number_is_quoted(client, viewer, recipe_v3, page, query, message):
    client.force_login(viewer)
    url = reverse(f"deployments:{page}", args=[recipe_v3.pk]) + "?" + query

    response = client.get(url)

    assert response.status_code == 400, (url, response.status_code)
    page_text = response.content.decode()
    assert f"<h1>Bad request</h1>\n<p>{html.escape(message)}</p>" in page_text
    assert "<title>Bad request · Ceiling</title>" in page_text


@pytest.mark.parametrize("page, query", [
    ("recipe-detail", "version=99"), ("recipe-dry-run", "version=99"), ("recipe-history", "a=1&b=99"),
])
def test_a_well_formed_version_the_recipe_lacks_stays_a_404(client, viewer, recipe_v3, page, query):
    client.force_login(viewer)
    url = reverse(f"deployments:{page}", args=[recipe_v3.pk]) + "?" + query

    response = client.get(url)

    assert response.status_code == 404, (url, response.status_code)
    assert "99" in response.content.decode()


def test_the_api_keeps_its_codes_for_the_same_values(viewer_api, recipe_v3):
    """The API's equivalents answer as docs/api.md says: a malformed version a 400, a version the
    recipe lacks a 404, an unknown list key (``page``: the API pages by limit and offset) a 400."""
    pk = recipe_v3.pk
    bad_a = viewer_api.get(f"/api/recipes/{pk}/diff/?a=x&b=1")
    bad_version = viewer_api.get(f"/api/recipes/{pk}/dry-run/?version=abc")
    missing = viewer_api.get(f"/api/recipes/{pk}/dry-run/?version=99")
    page = viewer_api.get("/api/deployments/?page=abc")
    assert (bad_a.status_code, bad_a.json()) == (400, {"a": ["must be a whole number between 1 and 2147483647, got 'x'"]})
    assert (bad_version.status_code, bad_version.json()) == (
        400, {"version": ["must be a whole number between 1 and 2147483647, got 'abc'"]})
    assert (missing.status_code, missing.json()) == (404, {"detail": "Recipe 'local-sim-single' has no version 99."})
    assert (page.status_code, page.json()) == (
        400, {"page": ["unknown field 'page'; allowed: recipe, recipe_name, status, limit, offset, format"]})


def test_a_revert_with_a_malformed_expected_version_restores_nothing_and_says_why(client, operator, recipe_v3):
    client.force_login(operator)
    url = reverse("deployments:recipe-revert", args=[recipe_v3.pk, 1])

    response = client.post(url, {"expected_version": "abc"}, follow=True)

    assert response.redirect_chain == [(reverse("deployments:recipe-history", args=[recipe_v3.pk]), 302)]
    assert html.escape("Version 1 cannot be restored: expected_version: must be a whole number between 1 "
                       "and 2147483647, got 'abc'") in response.content.decode()
    recipe_v3.refresh_from_db()
    assert recipe_v3.version == 3


def test_the_page_the_api_and_the_docs_say_the_same_of_a_version_that_is_no_number(client, viewer, viewer_api,
                                                                                    recipe_v3):
    from pathlib import Path
    client.force_login(viewer)
    said = "must be a whole number between 1 and 2147483647, got 'x'"
    page = client.get(reverse("deployments:recipe-detail", args=[recipe_v3.pk]), {"version": "x"})
    assert page.status_code == 400 and html.escape(f"version {said}") in page.content.decode()
    api = viewer_api.get(f"/api/recipes/{recipe_v3.pk}/dry-run/?version=x")
    assert api.status_code == 400 and api.json() == {"version": [said]}
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text().split())
    assert f"`version {said}`" in docs and "a version number (a whole number of at least 1)" not in docs
