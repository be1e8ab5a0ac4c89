"""A stored secret's value is refused on write in every spelling a read masks it in (as typed,
base64, percent-encoded): in a recipe's plain values, its description and change reason, and a
sweep's name; the refusal names the field and the secret, never the value."""
from __future__ import annotations

import base64
import copy
import urllib.parse

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.redaction import REDACTED
from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.tests.factories import recipe_row_create, seed_node_create

pytestmark = pytest.mark.django_db

VALUE = "Super Secret/Value=1234"
SPELLED = {
    "plain": VALUE,
    "base64": base64.b64encode(VALUE.encode()).decode(),
    "percent-encoded": urllib.parse.quote(VALUE, safe=""),
}


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def secret(admin_api):
    made = admin_api.post("/api/secrets/", {"name": "s3", "value": VALUE}, format="json")
    assert made.status_code == 201, made.json()


def _create_body(node, **over):
    example = example_recipe("seed-v4-flash-pd")
    return {"name": "r1", "engine": example["engine"], "topology": example["topology"], "node": node.name,
            "spec": example["spec"], **over}


@pytest.mark.parametrize("spelling", SPELLED)
def test_the_api_refuses_a_spec_value_in_any_spelling(operator_api, secret, spelling):
    node = seed_node_create()
    body = _create_body(node)
    body["spec"] = {**body["spec"], "env": {"SGLANG_X": SPELLED[spelling]}}

    response = operator_api.post("/api/recipes/", body, format="json")

    assert response.status_code == 400
    text = response.content.decode()
    assert "spec.env.SGLANG_X holds the value of secret 's3'" in text
    assert all(form not in text for form in SPELLED.values())
    assert not Recipe.objects.exists()


@pytest.mark.parametrize("field", ["description", "change_reason"])
@pytest.mark.parametrize("spelling", SPELLED)
def test_the_api_refuses_free_text_holding_a_secret_value(operator_api, secret, field, spelling):
    node = seed_node_create()

    response = operator_api.post("/api/recipes/", _create_body(node, **{field: f"see {SPELLED[spelling]}"}),
                                 format="json")

    assert response.status_code == 400
    text = response.content.decode()
    assert f"{field} holds the value of secret" in text and "s3" in text
    assert all(form not in text for form in SPELLED.values())
    assert not Recipe.objects.exists()


@pytest.mark.parametrize("spelling", SPELLED)
def test_a_sweep_name_holding_a_secret_value_is_refused(operator_api, secret, spelling):
    response = operator_api.post("/api/sweeps/", {"deployment": 1, "grid": {}, "name": SPELLED[spelling]},
                                 format="json")

    assert response.status_code == 400
    text = response.content.decode()
    assert "name holds the value of secret" in text
    assert all(form not in text for form in SPELLED.values())


def test_manage_py_sweep_refuses_the_name(secret):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises((CommandError, SystemExit)) as refused:
        call_command("sweep", "--deployment", "1", "--name", SPELLED["base64"])
    assert VALUE not in str(refused.value) and SPELLED["base64"] not in str(refused.value)


@pytest.fixture
def operator_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


@pytest.mark.parametrize("spelling", ["plain", "base64"])
def test_the_edit_form_changing_only_the_description_is_refused_at_the_path(admin_api, operator_client, spelling):
    node = seed_node_create()
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    stored = recipe_row_create(node=node, name="stored-before", topology="pd", engine="sglang",
                               spec={**spec, "env": {"SGLANG_X": SPELLED[spelling]}})
    assert admin_api.post("/api/secrets/", {"name": "s3", "value": VALUE}, format="json").status_code == 201
    before = (stored.version, copy.deepcopy(Recipe.objects.get(pk=stored.pk).spec), stored.history.count())
    url = reverse("deployments:recipe-edit", args=[stored.pk])
    form = operator_client.get(url).context["form"]
    values = {bf.html_name: bf.value() for bf in form if bf.value() is not None}
    assert REDACTED in values["spec"]
    values["description"] = "only this changed"

    response = operator_client.post(url, values)

    assert response.status_code == 400
    page = response.content.decode()
    assert "<code>spec.env.SGLANG_X</code> holds the placeholder" in page
    assert all(form not in page for form in SPELLED.values())
    row = Recipe.objects.get(pk=stored.pk)
    assert (row.version, row.spec, row.history.count()) == before and row.description == ""


def test_the_edit_form_of_a_description_stored_with_a_secret_value_is_masked_and_refused(admin_api, operator_client):
    node = seed_node_create()
    spec = example_recipe("seed-v4-flash-pd")["spec"]
    stored = recipe_row_create(node=node, name="stored-before", topology="pd", engine="sglang", spec=spec,
                               description=f"key {VALUE}")
    assert admin_api.post("/api/secrets/", {"name": "s3", "value": VALUE}, format="json").status_code == 201
    url = reverse("deployments:recipe-edit", args=[stored.pk])
    form = operator_client.get(url).context["form"]
    values = {bf.html_name: bf.value() for bf in form if bf.value() is not None}
    assert values["description"] == f"key {REDACTED}"

    response = operator_client.post(url, values)

    assert response.status_code == 400
    assert "description holds the placeholder" in response.content.decode()
    assert Recipe.objects.get(pk=stored.pk).description == f"key {VALUE}"
