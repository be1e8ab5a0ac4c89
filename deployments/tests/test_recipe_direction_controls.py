"""Text-direction controls (U+202A-U+202E, U+2066-U+2069) are refused in a recipe's description
and spec text, naming the character by code point and position, on the API and the form; text
stored before holds them shows them as ``<U+202E>`` on the pages."""
from __future__ import annotations

import html as html_lib

import pytest

from deployments.models import Recipe
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_views import operator_client  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db

SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}
RLO = ("Must not contain text-direction control characters: U+202E (RIGHT-TO-LEFT OVERRIDE) at character 5 "
       "would make the text display differently from what it says.")


@pytest.fixture
def node(db):
    return cpu_node_create(name="local")


def _api(api, node, **fields):
    body = {"name": "r", "engine": "sim", "topology": "single", "node": node.name, "spec": SPEC, **fields}
    return api.post("/api/recipes/", body, format="json")


def test_the_api_refuses_an_override_in_the_description(operator_api, node):
    response = _api(operator_api, node, description="use \u202eLTR")
    assert response.status_code == 400, response.content
    assert response.json() == {"description": [RLO]}
    assert not Recipe.objects.exists()


@pytest.mark.parametrize("char, name", [("\u202a", "LEFT-TO-RIGHT EMBEDDING"), ("\u2066", "LEFT-TO-RIGHT ISOLATE"),
                                        ("\u2069", "POP DIRECTIONAL ISOLATE")])
def test_the_api_names_each_control(operator_api, node, char, name):
    response = _api(operator_api, node, description="ab" + char)
    assert response.json()["description"] == [
        f"Must not contain text-direction control characters: U+{ord(char):04X} ({name}) at character 3 "
        "would make the text display differently from what it says."]


def test_marks_and_other_text_are_taken(operator_api, node):
    response = _api(operator_api, node, description="\u05e9\u05dc\u05d5\u05dd \u200fabc\u200e, \U0001F468\u200d\U0001F4BB")
    assert response.status_code == 201, response.content


def test_the_api_patch_refuses_it_in_a_spec_string(operator_api, node):
    recipe = Recipe.objects.create(name="kept", engine="sim", topology="single", node=node, spec=SPEC, version=1)
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/",
                                  {"spec": {"env": {"CEILING_SIM_NOTE": "abcd\u202e"}}}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["spec.env.CEILING_SIM_NOTE"] == [RLO]  # an allowed name: the one problem


def test_the_form_refuses_it_in_the_description(operator_client, node):
    import json

    response = operator_client.post("/recipes/new/", {"name": "r", "description": "use \u202eLTR", "engine": "sim",
                                                      "topology": "single", "node": node.pk,
                                                      "spec": json.dumps(SPEC)})
    assert response.status_code == 400
    assert RLO in html_lib.unescape(response.content.decode())
    assert not Recipe.objects.exists()


def test_a_stored_description_shows_its_controls_visibly(operator_client, node):
    recipe = Recipe.objects.create(name="old", description="RTL\u202e is fine", engine="sim", topology="single",
                                   node=node, spec=SPEC, version=1)
    for url in (f"/recipes/{recipe.pk}/", "/recipes/"):
        page = operator_client.get(url).content.decode()
        assert "\u202e" not in page, url
        assert "RTL&lt;U+202E&gt; is fine" in page, url
