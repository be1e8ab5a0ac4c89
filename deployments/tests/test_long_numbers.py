"""A number of thousands of digits (Python's int() refuses more than 4300) gets the field's own
refusal, never a 500: the recipe edit form's and the admin's ``expected_version``, and a node id
in the API's path."""
from __future__ import annotations

import html as html_lib
import json

import pytest
from django.test import Client
from django.urls import reverse

from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.services import recipe_create
from deployments.tests.test_admin import admin_client, seed_node, superuser  # noqa: F401 - fixtures
from deployments.tests.test_admin_recipe_conflicts import _errors, _page_form
from deployments.tests.factories import LONG_DIGITS, cpu_node_create, signed_in_client

pytestmark = pytest.mark.django_db

LONG = LONG_DIGITS
SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}


def _client(user=None) -> Client:
    return signed_in_client(user, raise_request_exception=False)


def _edit_posted(operator, expected_version: str):
    """A stored sim recipe (v1) and the answer to its edit form posted with ``expected_version``."""
    node = cpu_node_create(name="local")
    recipe = Recipe.objects.create(name="kept", engine="sim", topology="single", node=node, spec=SPEC, version=1)
    response = _client(operator).post(f"/recipes/{recipe.pk}/edit/", {
        "name": "kept", "description": "typed", "engine": "sim", "topology": "single", "node": node.pk,
        "spec": json.dumps(SPEC), "expected_version": expected_version})
    return recipe, response


@pytest.mark.parametrize("sent", [LONG, "0" * 5000 + "1" * 19, "1" * 19], ids=["5000-digits", "zeros-then-19", "19-digits"])
def test_the_edit_form_refuses_an_expected_version_of_too_many_digits(operator, sent):
    recipe, response = _edit_posted(operator, sent)
    assert response.status_code == 400
    page = html_lib.unescape(response.content.decode())
    assert f'expected_version "{sent[:40]}" is not a version number (a whole number from 1)' in page
    assert "reload the page to edit the current version; nothing was saved." in page
    recipe.refresh_from_db()
    assert (recipe.version, recipe.description) == (1, "")


def test_an_expected_version_of_eighteen_digits_is_read_as_a_stale_version(operator):
    _, response = _edit_posted(operator, "9" * 18)
    assert response.status_code in (400, 409)
    assert f"is at version 1, not {'9' * 18}" in html_lib.unescape(response.content.decode())


def test_the_admin_change_form_refuses_an_expected_version_of_thousands_of_digits(admin_client, seed_node,
                                                                                   superuser):
    ex = example_recipe("seed-v4-flash-pd")
    recipe = recipe_create(user=superuser, name=ex["name"], description=ex["description"], engine=ex["engine"],
                           topology=ex["topology"], node=seed_node, spec=ex["spec"])
    url = reverse("admin:deployments_recipe_change", args=[recipe.pk])
    form = _page_form(admin_client.get(url).content.decode())
    response = admin_client.post(url, dict(form, expected_version=LONG, description="typed in admin"))
    assert response.status_code == 200
    errors = _errors(response.content.decode().split('class="errorlist nonfield"', 1)[1].split("</ul>", 1)[0])
    assert f'expected_version "{LONG[:40]}" is not a version number (a whole number from 1)' in errors
    recipe.refresh_from_db()
    assert (recipe.version, recipe.description) == (1, ex["description"])


@pytest.mark.parametrize("key, shown", [(LONG, "9" * 40 + "… (5000 digits)"), ("9" * 30, "9" * 30)],
                         ids=["5000-digits", "30-digits"])
def test_a_node_id_of_too_many_digits_is_no_node(viewer_api, key, shown):
    response = viewer_api.get(f"/api/nodes/{key}/")
    assert response.status_code == 404
    assert response.json() == {"detail": f"no node with id {shown}"}   # never the whole 5000 digits back


def test_a_node_id_with_leading_zeros_is_named_as_its_number(viewer_api):
    response = viewer_api.get("/api/nodes/0042/")
    assert response.status_code == 404
    assert response.json() == {"detail": "no node with id 42"}
