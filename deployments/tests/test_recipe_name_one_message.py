"""A recipe name over 63 characters gets one message, its length, on the API and the recipe
form; the character rule is said once the length is fine, also alone."""
from __future__ import annotations

import html as html_lib

import pytest

from deployments.models import Recipe
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_views import operator_client  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db

SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}
LONG = "Use at most 63 characters; got 80."
RULE = ("Use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit; "
        "got 'Bad Name!'.")


@pytest.fixture
def node(db):
    return cpu_node_create(name="local")


def _api(api, node, name):
    return api.post("/api/recipes/", {"name": name, "engine": "sim", "topology": "single", "node": node.name,
                                      "spec": SPEC}, format="json")


@pytest.mark.parametrize("name, message", [("a" * 80, LONG), ("A" * 80, LONG), ("Bad Name!", RULE)])
def test_the_api_gives_one_message_per_problem(operator_api, node, name, message):
    response = _api(operator_api, node, name)
    assert response.status_code == 400, response.content
    assert response.json() == {"name": [message]}


def test_a_name_of_63_characters_is_taken(operator_api, node):
    assert _api(operator_api, node, "a" * 63).status_code == 201


def test_the_api_patch_gives_one_message(operator_api, node):
    recipe = Recipe.objects.create(name="kept", engine="sim", topology="single", node=node, spec=SPEC, version=1)
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"name": "b" * 80}, format="json")
    assert response.status_code == 400
    assert response.json() == {"name": [LONG]}


def test_the_schema_still_says_the_length(operator_api):
    schema = operator_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    write = [c for n, c in schema["components"]["schemas"].items() if n.startswith("RecipeWrite")]
    assert write and all(c["properties"]["name"]["maxLength"] == 63 for c in write)


@pytest.mark.parametrize("name, message", [("a" * 80, LONG), ("Bad Name!", RULE)])
def test_the_form_gives_one_message_per_problem(operator_client, node, name, message):
    response = operator_client.post("/recipes/new/", {"name": name, "description": "", "engine": "sim",
                                                      "topology": "single", "node": node.pk,
                                                      "spec": '{"model": {"name": "sim/tiny"}}'})
    assert response.status_code == 400
    page = html_lib.unescape(response.content.decode())
    assert message in page
    assert "at most 63 characters (it has" not in page
    assert "no more than 63" not in page
    if name != "Bad Name!":
        assert "starting with a letter or digit; got" not in page
    assert 'maxlength="63"' in page
    assert not Recipe.objects.exists()
