"""A recipe form whose spec text is refused before its rules are judged (broken JSON, a key given
twice, a number that is not finite) still names a description over its length, as
``PATCH /api/recipes/ID/`` names both in one 400; the page keeps what was typed and saves nothing."""
from __future__ import annotations

import html as html_lib
import re

import pytest

from deployments.models import Recipe


pytestmark = pytest.mark.django_db

SPEC_TEXT = ('{"model": {"name": "sim/tiny"}, "served_model_name": "tiny", "roles": {"single": {"cpus": "0", '
             '"host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}, "stop_grace_s": %s}')
LONG = "d" * 5000
TOO_LONG = "Use at most 4000 characters; got 5000."
REFUSED_SPECS = {
    "not finite": (SPEC_TEXT % "1e400", "spec.stop_grace_s: 1e400 is not a finite number"),
    "key twice": (SPEC_TEXT % '5, "stop_grace_s": 6', "spec.stop_grace_s is given 2 times (5, 6): give it once"),
    "broken JSON": (SPEC_TEXT % "5,", "invalid JSON at line 1 column"),
}


@pytest.fixture
def recipe(local_node) -> Recipe:
    return Recipe.objects.create(name="kept", description="first", engine="sim", topology="single", node=local_node,
                                 spec={"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
                                       "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}},
                                       "sim": {"profile": "demo-fast"}}, version=1)


def _textarea(page: str, name: str) -> str:
    match = re.search(rf'<textarea name="{name}"[^>]*>(.*?)</textarea>', page, flags=re.S)
    assert match, f"no {name} textarea"
    return html_lib.unescape(match.group(1)).strip("\r\n")


def _sent(node, spec_text: str, **extra) -> dict:
    return {"name": "kept", "description": LONG, "engine": "sim", "topology": "single", "node": node.pk,
            "spec": spec_text, **extra}


def _refused_with_both(response, spec_error: str) -> str:
    """The refused page (400) naming the description too long and ``spec_error``, the description kept."""
    assert response.status_code == 400
    page = response.content.decode()
    shown = html_lib.unescape(page)
    assert TOO_LONG in shown and spec_error in shown
    assert _textarea(page, "description") == LONG
    return page


@pytest.mark.parametrize("case", sorted(REFUSED_SPECS))
def test_the_edit_page_names_the_description_beside_a_refused_spec(operator_client, recipe, case):
    spec_text, spec_error = REFUSED_SPECS[case]
    response = operator_client.post(f"/recipes/{recipe.pk}/edit/", _sent(recipe.node, spec_text, expected_version=1))
    page = _refused_with_both(response, spec_error)
    assert _textarea(page, "spec") == spec_text
    row = Recipe.objects.get(pk=recipe.pk)
    assert (row.version, row.description) == (1, "first")


def test_the_api_names_both_as_the_page_does(operator_api, recipe):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", '{"description": "%s", "spec": %s}'
                                  % (LONG, SPEC_TEXT % "1e400"), content_type="application/json")
    assert response.status_code == 400
    errors = response.json()
    assert errors["description"] == [TOO_LONG]
    assert errors["spec.stop_grace_s"] == ["1e400 is not a finite number"]


@pytest.mark.parametrize("case", sorted(REFUSED_SPECS))
def test_the_new_recipe_page_names_the_description_beside_a_refused_spec(operator_client, local_node, case):
    spec_text, spec_error = REFUSED_SPECS[case]
    response = operator_client.post("/recipes/new/", dict(_sent(local_node, spec_text), name="fresh"))
    _refused_with_both(response, spec_error)
    assert not Recipe.objects.filter(name="fresh").exists()


def test_a_long_description_with_a_valid_spec_is_named_once_and_kept(operator_client, recipe):
    response = operator_client.post(f"/recipes/{recipe.pk}/edit/",
                                    _sent(recipe.node, SPEC_TEXT % "5", expected_version=1))
    assert response.status_code == 400
    page = response.content.decode()
    assert html_lib.unescape(page).count(TOO_LONG) == 1
    assert _textarea(page, "description") == LONG
    assert Recipe.objects.get(pk=recipe.pk).version == 1
