"""A recipe form refused because a plain value holds a stored secret's value (or looks like a
well-known credential) names the secret to reference, and the page it comes back on never
repeats the value: not in the error, not in the spec box re-shown. Everything else typed comes
back as typed."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.tests.factories import secret_api_store, seed_node_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_roots")]

VALUE = "hf_SUPERSECRETVALUE123456"


@pytest.fixture
def node(admin_api):
    secret_api_store(admin_api, name="hf-token", value=VALUE)
    return seed_node_create()


def _post(client, spec: dict, **fields):
    example = example_recipe("seed-v4-flash-pd")
    data = {"name": "pasted", "description": "typed  as is", "engine": example["engine"],
            "topology": example["topology"], "node": node_pk(), "spec": json.dumps(spec, indent=1), **fields}
    return client.post(reverse("deployments:recipe-create"), data)


def node_pk() -> int:
    from deployments.models import Node

    return Node.objects.get().pk


def test_the_refused_page_names_the_secret_and_never_shows_its_value(operator_client, node):
    spec = {**example_recipe("seed-v4-flash-pd")["spec"], "env": {"TZ": VALUE}}
    response = _post(operator_client, spec)
    assert response.status_code == 400
    page = response.content.decode()
    assert "<code>spec.env.TZ</code> holds the value of secret &#x27;hf-token&#x27;" in page
    assert VALUE not in page
    assert not Recipe.objects.filter(name="pasted").exists()


def test_the_rest_of_the_spec_and_the_other_fields_come_back_as_typed(operator_client, node):
    spec = {**example_recipe("seed-v4-flash-pd")["spec"], "env": {"TZ": VALUE, "LANG": "C.UTF-8"}}
    typed = json.dumps(spec, indent=1)
    response = _post(operator_client, spec)
    assert response.status_code == 400
    shown = response.context["form"]["spec"].value()
    assert shown == typed.replace(VALUE, "***redacted***")
    assert '"LANG": "C.UTF-8"' in shown
    assert response.context["form"]["description"].value() == "typed  as is"


def test_a_credential_typed_into_the_spec_is_shortened_on_the_refused_page(operator_client, node):
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
    spec = {**example_recipe("seed-v4-flash-pd")["spec"], "env": {"TZ": token}}
    response = _post(operator_client, spec)
    assert response.status_code == 400
    page = response.content.decode()
    assert "<code>spec.env.TZ</code> looks like a" in page
    assert token not in page


def test_an_edit_refused_for_the_value_does_not_show_it_either(operator_client, operator_api, node):
    example = example_recipe("seed-v4-flash-pd")
    created = operator_api.post("/api/recipes/", {k: example[k] for k in ("name", "engine", "topology", "node", "spec")},
                                format="json")
    assert created.status_code == 201, created.json()
    recipe = Recipe.objects.get(pk=created.json()["id"])
    response = operator_client.post(reverse("deployments:recipe-edit", args=[recipe.pk]), {
        "name": recipe.name, "description": "", "engine": recipe.engine, "topology": recipe.topology,
        "node": recipe.node_id, "expected_version": recipe.version,
        "spec": json.dumps({**recipe.spec, "env": {"TZ": f"UTC-{VALUE}"}})})
    assert response.status_code == 400
    page = response.content.decode()
    assert "holds the value of secret &#x27;hf-token&#x27;" in page and VALUE not in page
    assert Recipe.objects.get(pk=recipe.pk).version == 1
