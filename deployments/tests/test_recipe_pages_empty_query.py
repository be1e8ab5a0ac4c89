"""A recipe page that reads a query parameter refuses it given empty, as the API does, rather
than taking it as left out: ``?b=`` on the history page is a 400 that names the parameter and the
versions there are (``b is empty: give a version number 1–3 or leave it out``). The copy link
``/recipes/new/?from=<id>`` names a recipe that exists: an empty or malformed id is a 400, one no
recipe has a 404 (``no recipe #999 to copy from``), never a blank form."""
from __future__ import annotations

import html

import pytest
from django.urls import reverse

from deployments.examples import example_recipe, local_node_facts_example
from deployments.nodes import node_register
from deployments.services import recipe_create, recipe_update

pytestmark = pytest.mark.django_db


def _recipe(operator, versions: int):
    node = node_register(facts=local_node_facts_example(cpu_count=4))
    ex = example_recipe("local-sim-single")
    recipe = recipe_create(user=operator, name=ex["name"], description="", engine=ex["engine"],
                           topology=ex["topology"], node=node, spec=ex["spec"])
    for grace in range(11, 10 + versions):
        recipe = recipe_update(recipe=recipe, user=operator, spec=dict(recipe.spec, stop_grace_s=grace))
    assert recipe.version == versions
    return recipe


@pytest.fixture
def recipe_v3(operator):
    return _recipe(operator, 3)


def _bad_request(response) -> str:
    assert response.status_code == 400, response.status_code
    text = response.content.decode()
    assert "<title>Bad request · Ceiling</title>" in text
    start = text.index("<h1>Bad request</h1>\n<p>") + len("<h1>Bad request</h1>\n<p>")
    return html.unescape(text[start:text.index("</p>", start)])


@pytest.mark.parametrize("page, query, message", [
    ("recipe-history", "a=1&b=", "b is empty: give a version number 1–3 or leave it out"),
    ("recipe-history", "a=&b=2", "a is empty: give a version number 1–3 or leave it out"),
    ("recipe-history", "a=&b=", "a is empty: give a version number 1–3 or leave it out"),
    ("recipe-diff", "a=1&b=", "b is empty: give a version number 1–3 or leave it out"),
    ("recipe-detail", "version=", "version is empty: give a version number 1–3 or leave it out"),
    ("recipe-dry-run", "version=", "version is empty: give a version number 1–3 or leave it out"),
])
def test_an_empty_version_is_a_400_naming_it_and_the_versions(client, viewer, recipe_v3, page, query, message):
    client.force_login(viewer)
    url = reverse(f"deployments:{page}", args=[recipe_v3.pk]) + "?" + query

    assert _bad_request(client.get(url, HTTP_HX_REQUEST="true" if page == "recipe-diff" else None)) == message


def test_a_recipe_with_one_version_names_that_one(client, viewer, operator):
    recipe = _recipe(operator, 1)
    client.force_login(viewer)
    url = reverse("deployments:recipe-history", args=[recipe.pk]) + "?b="

    assert _bad_request(client.get(url)) == "b is empty: give version number 1 or leave it out"


def test_the_api_refuses_the_same_empty_versions(viewer_api, recipe_v3):
    response = viewer_api.get(f"/api/recipes/{recipe_v3.pk}/diff/?a=1&b=")
    assert response.status_code == 400 and list(response.json()) == ["b"]
    assert "is empty" in response.json()["b"][0]


def test_one_version_the_recipe_lacks_is_a_404_even_alone(client, viewer, recipe_v3):
    client.force_login(viewer)
    url = reverse("deployments:recipe-history", args=[recipe_v3.pk])

    for query in ("a=44", "b=44", "a=1&b=44"):
        response = client.get(url + "?" + query)
        assert response.status_code == 404, query
        assert html.escape("Recipe 'local-sim-single' has no version 44.") in response.content.decode()


def test_versions_given_or_left_out_still_show_the_history(client, viewer, recipe_v3):
    client.force_login(viewer)
    url = reverse("deployments:recipe-history", args=[recipe_v3.pk])

    assert client.get(url).status_code == 200
    assert client.get(url + "?a=2").status_code == 200
    diffed = client.get(url + "?a=1&b=3")
    assert diffed.status_code == 200 and "spec.stop_grace_s" in diffed.content.decode()
    assert client.get(reverse("deployments:recipe-detail", args=[recipe_v3.pk]) + "?version=2").status_code == 200


@pytest.mark.parametrize("value, code, message", [
    ("999", 404, "no recipe #999 to copy from"),
    ("", 400, "from is empty: give the id of the recipe to copy or leave it out"),
    ("abc", 400, "from must be a whole number between 1 and 2147483647, got 'abc'"),
    ("0", 400, "from must be a whole number between 1 and 2147483647, got '0'"),
])
def test_a_copy_from_a_recipe_that_is_not_there_says_so(client, operator, recipe_v3, value, code, message):
    client.force_login(operator)

    response = client.get(reverse("deployments:recipe-create") + "?from=" + value)

    assert response.status_code == code, response.status_code
    assert html.escape(message) in response.content.decode()
    assert 'name="spec"' not in response.content.decode()


def test_a_copy_from_a_recipe_that_is_there_fills_the_form(client, operator, recipe_v3):
    client.force_login(operator)

    copied = client.get(reverse("deployments:recipe-create") + f"?from={recipe_v3.pk}")
    blank = client.get(reverse("deployments:recipe-create"))

    assert copied.status_code == 200 and 'value="local-sim-single-copy"' in copied.content.decode()
    assert blank.status_code == 200 and "local-sim-single-copy" not in blank.content.decode()
