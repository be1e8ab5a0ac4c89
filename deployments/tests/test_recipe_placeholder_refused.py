"""A recipe saved before a stored secret's value (or a credential) was refused in plain values
shows it masked: ``***redacted***``, or ``hf_…(37 chars)``. Sent back unchanged (its edit form
saved as opened, a refused form resubmitted, an API read put back), that placeholder would become
what the engine is given; it is refused at its path, naming the secret where it can be known, and
the stored recipe stays as it was."""
from __future__ import annotations

import copy
import json

import pytest
from django.urls import reverse

from controlplane.redaction import REDACTED
from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.tests.factories import STORED_BEFORE_VALUE, recipe_stored_before_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_roots")]

VALUE = STORED_BEFORE_VALUE
TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"


@pytest.fixture
def stored(admin_api):
    return recipe_stored_before_create(admin_api)


def _snapshot(recipe: Recipe):
    row = Recipe.objects.get(pk=recipe.pk)
    return (row.version, copy.deepcopy(row.spec), row.history.count())


def _form_values(response) -> dict:
    form = response.context["form"]
    return {bf.html_name: bf.value() for bf in form if bf.value() is not None}


def _expected_tz(names: str = " (secret 'db-pass')") -> str:
    return (f"spec.env.TZ holds the placeholder {REDACTED} shown in place of a secret's value: reference the "
            f"secret from spec.secrets{names} or type the value")


def _shown(message: str) -> str:
    """``message`` as a form page lists it: its path as code, given once, the rest continuing it."""
    path, rest = message.split(" ", 1)
    return f"<code>{path}</code> {rest}".replace("'", "&#x27;")


def test_the_edit_form_saved_as_opened_is_refused_and_changes_nothing(operator_client, stored):
    before = _snapshot(stored)
    url = reverse("deployments:recipe-edit", args=[stored.pk])
    opened = operator_client.get(url)
    assert opened.status_code == 200
    values = _form_values(opened)
    assert VALUE not in values["spec"] and REDACTED in values["spec"]

    response = operator_client.post(url, values)

    assert response.status_code == 400
    page = response.content.decode()
    assert VALUE not in page
    assert _shown(_expected_tz()) in page
    assert "<code>spec.env.NOTE</code> holds the placeholder" in page
    assert _snapshot(stored) == before


def test_a_refused_form_resubmitted_as_shown_is_refused_again(operator_client, stored):
    example = example_recipe("seed-v4-flash-pd")
    spec = {**example["spec"], "env": {"TZ": VALUE}}
    data = {"name": "pasted", "description": "", "engine": example["engine"], "topology": example["topology"],
            "node": stored.node.pk, "spec": json.dumps(spec, indent=1)}
    first = operator_client.post(reverse("deployments:recipe-create"), data)
    assert first.status_code == 400
    again = _form_values(first)
    assert REDACTED in again["spec"]

    second = operator_client.post(reverse("deployments:recipe-create"), again)

    assert second.status_code == 400
    assert _shown(_expected_tz("")) in second.content.decode()
    assert not Recipe.objects.filter(name="pasted").exists()


@pytest.mark.parametrize("method", ["put", "patch"])
def test_the_api_read_put_back_is_refused_and_changes_nothing(operator_api, stored, method):
    before = _snapshot(stored)
    read = operator_api.get(f"/api/recipes/{stored.pk}/").json()
    body = {k: read[k] for k in ("name", "engine", "topology", "node", "spec")}
    if method == "patch":
        body = {"spec": read["spec"]}

    response = getattr(operator_api, method)(f"/api/recipes/{stored.pk}/", body, format="json")

    assert response.status_code == 400, response.json()
    errors = response.json()
    assert VALUE not in response.content.decode()
    assert _expected_tz() in str(errors)
    assert "spec.env.NOTE holds the placeholder" in str(errors)
    assert _snapshot(stored) == before


def test_a_shortened_credential_put_back_is_refused(operator_api, stored):
    stored.spec = {**stored.spec, "env": {"NOTE": TOKEN}}
    stored.save()
    before = _snapshot(stored)
    read = operator_api.get(f"/api/recipes/{stored.pk}/").json()
    assert read["spec"]["env"]["NOTE"] == "hf_…(37 chars)"

    response = operator_api.patch(f"/api/recipes/{stored.pk}/", {"spec": read["spec"]}, format="json")

    assert response.status_code == 400
    assert ("spec.env.NOTE holds the placeholder hf_…(37 chars) shown in place of a credential: store it as a "
            "secret") in str(response.json())
    assert TOKEN not in response.content.decode()
    assert _snapshot(stored) == before


def test_a_placeholder_in_a_new_recipe_is_refused_at_its_path(operator_api, stored):
    example = example_recipe("seed-v4-flash-pd")
    spec = copy.deepcopy(example["spec"])
    spec["env"] = {"TZ": f"x{REDACTED}"}
    body = {"name": "fresh", "engine": example["engine"], "topology": example["topology"], "node": stored.node.name,
            "spec": spec}

    response = operator_api.post("/api/recipes/", body, format="json")

    assert response.status_code == 400
    assert response.json()["spec.env.TZ"] == [_expected_tz("")]


def test_the_secret_referenced_instead_saves(operator_api, stored):
    read = operator_api.get(f"/api/recipes/{stored.pk}/").json()
    spec = {**read["spec"], "env": {"TZ": "UTC"}}

    response = operator_api.put(f"/api/recipes/{stored.pk}/", {**{k: read[k] for k in ("name", "engine", "topology",
                                                                                          "node")}, "spec": spec},
                                format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["secret_values_held"] == []
