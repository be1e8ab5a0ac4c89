"""Django admin's recipe form judges everything the save would (the description's length, the
spec's rules) on the form, so a refused change comes back on the change form (200) with every
problem at once and the typed input kept; nothing is saved and no "changed successfully" shows."""
from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from django.urls import reverse

from deployments.models import Recipe
from deployments.tests.factories import SIM_TINY_SPEC, signed_in_client

pytestmark = pytest.mark.django_db

SPEC = SIM_TINY_SPEC
LONG = "d" * 4100


@pytest.fixture
def recipe(local_node) -> Recipe:
    return Recipe.objects.create(name="t1a", description="first", engine="sim", topology="single", node=local_node,
                                 spec=SPEC, version=1)


def _post(recipe: Recipe, *, description: str, spec: dict | str) -> dict:
    return {"name": recipe.name, "description": description, "engine": recipe.engine, "topology": recipe.topology,
            "node": recipe.node_id, "spec": spec if isinstance(spec, str) else json.dumps(spec),
            "expected_version": recipe.version}


def _textarea(page: str, name: str) -> str:
    match = re.search(rf'<textarea name="{name}"[^>]*>(.*?)</textarea>', page, flags=re.S)
    assert match, f"no {name} textarea"
    return html_lib.unescape(match.group(1)).strip("\r\n")


def _unchanged(recipe: Recipe) -> None:
    row = Recipe.objects.get(pk=recipe.pk)
    assert (row.version, row.description, row.spec) == (1, "first", SPEC)
    assert recipe.history.count() == 1  # the row as created, no version since


def test_a_description_over_the_limit_comes_back_on_the_form_with_no_success(admin_user, recipe):
    admin_user.is_staff = True
    admin_user.save(update_fields=["is_staff"])
    response = signed_in_client(admin_user).post(reverse("admin:deployments_recipe_change", args=[recipe.pk]),
                                        _post(recipe, description=LONG, spec=SPEC), follow=True)
    assert response.redirect_chain == []
    assert response.status_code == 200
    page = response.content.decode()
    assert "Use at most 4000 characters; got 4100." in page
    assert "Not saved" not in page
    assert "changed successfully" not in page
    assert _textarea(page, "description") == LONG
    _unchanged(recipe)


def test_a_long_description_and_a_bad_spec_value_are_both_named(admin_user, recipe):
    admin_user.is_staff = True
    admin_user.save(update_fields=["is_staff"])
    spec = dict(SPEC, stop_grace_s="abc")
    response = signed_in_client(admin_user).post(reverse("admin:deployments_recipe_change", args=[recipe.pk]),
                                        _post(recipe, description=LONG, spec=spec))
    assert response.status_code == 200
    page = html_lib.unescape(response.content.decode())
    assert "Use at most 4000 characters; got 4100." in page
    assert "spec.stop_grace_s:" in page
    assert "changed successfully" not in page
    assert _textarea(page, "description") == LONG
    assert json.loads(_textarea(page, "spec")) == spec
    _unchanged(recipe)


def test_a_long_description_beside_a_number_that_is_not_finite_is_named_too(admin_user, recipe):
    admin_user.is_staff = True
    admin_user.save(update_fields=["is_staff"])
    spec_text = json.dumps(SPEC)[:-1] + ', "stop_grace_s": 1e400, "startup_timeout_s": "x"}'
    response = signed_in_client(admin_user).post(reverse("admin:deployments_recipe_change", args=[recipe.pk]),
                                        _post(recipe, description=LONG, spec=spec_text))
    assert response.status_code == 200
    page = html_lib.unescape(response.content.decode())
    assert "Use at most 4000 characters; got 4100." in page
    assert page.count("spec.stop_grace_s: 1e400 is not a finite number") == 1
    assert "spec.startup_timeout_s:" in page
    assert _textarea(page, "spec") == spec_text
    _unchanged(recipe)


