"""A recipe's name holding a stored secret's value is refused on every write path (the API's
create and update, the create and edit pages, the admin form), naming the field and the secret,
never the value; a name refused for its characters shows a secret's value masked; a slash written
as its JSON escape ``\\/`` is refused as the value itself."""
from __future__ import annotations

import base64
import urllib.parse

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.redaction import REDACTED, secret_value_found, secret_values_mask
from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.tests.factories import recipe_row_create, seed_node_create

pytestmark = pytest.mark.django_db

VALUE = "leakyname12345"
SLUG_SPELLINGS = {"plain": VALUE}
ODD = "Sup3rS3cretVal!x"
ODD_SPELLED = {
    "plain": ODD,
    "base64": base64.b64encode(ODD.encode()).decode(),
    "percent-encoded": urllib.parse.quote(ODD, safe=""),
}
SLASHED = "a/b c+d=e&f?g"


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def secrets(admin_api):
    for name, value in (("s-name", VALUE), ("s-odd", ODD), ("s-slash", SLASHED)):
        made = admin_api.post("/api/secrets/", {"name": name, "value": value}, format="json")
        assert made.status_code == 201, made.json()


@pytest.fixture
def operator_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def _create_body(node, **over):
    example = example_recipe("seed-v4-flash-pd")
    return {"name": "r1", "engine": example["engine"], "topology": example["topology"], "node": node.name,
            "spec": example["spec"], **over}


def _refused_for_the_secret(text: str) -> None:
    assert "name holds the value of secret 's-name'" in text
    assert VALUE not in text


@pytest.mark.parametrize("name", [f"{VALUE}-r", f"x-{VALUE}-y"])
def test_the_api_refuses_a_new_name_holding_a_secret_value(operator_api, secrets, name):
    node = seed_node_create()

    response = operator_api.post("/api/recipes/", _create_body(node, name=name), format="json")

    assert response.status_code == 400
    _refused_for_the_secret(response.content.decode())
    assert not Recipe.objects.exists()


def test_the_api_refuses_a_rename_holding_a_secret_value(operator_api, secrets):
    node = seed_node_create()
    made = operator_api.post("/api/recipes/", _create_body(node), format="json")
    assert made.status_code == 201, made.json()
    pk = made.json()["id"]

    response = operator_api.patch(f"/api/recipes/{pk}/", {"name": f"x-{VALUE}-y"}, format="json")

    assert response.status_code == 400
    _refused_for_the_secret(response.content.decode())
    assert Recipe.objects.get(pk=pk).name == "r1"


@pytest.mark.parametrize("spelling", ODD_SPELLED)
def test_a_name_refused_for_its_characters_masks_the_secret_value(operator_api, secrets, spelling):
    node = seed_node_create()
    made = operator_api.post("/api/recipes/", _create_body(node), format="json")
    assert made.status_code == 201, made.json()

    response = operator_api.patch(f"/api/recipes/{made.json()['id']}/", {"name": f"n-{ODD_SPELLED[spelling]}"},
                                  format="json")

    assert response.status_code == 400
    text = response.content.decode()
    assert all(form not in text for form in ODD_SPELLED.values())
    assert "name holds the value of secret 's-odd'" in text or REDACTED in text


def test_the_create_page_refuses_a_name_holding_a_secret_value(operator_client, secrets):
    node = seed_node_create()
    example = example_recipe("seed-v4-flash-pd")
    import json

    response = operator_client.post(reverse("deployments:recipe-create"), {
        "name": f"{VALUE}-r", "description": "", "engine": example["engine"], "topology": example["topology"],
        "node": node.pk, "spec": json.dumps(example["spec"]),
    })

    assert response.status_code in (200, 400)
    page = response.content.decode()
    assert "name holds the value of secret" in page and "s-name" in page
    assert not Recipe.objects.exists()


def test_the_edit_page_refuses_a_rename_holding_a_secret_value(operator_client, secrets):
    node = seed_node_create()
    stored = recipe_row_create(node=node, name="kept", topology="pd", engine="sglang",
                               spec=example_recipe("seed-v4-flash-pd")["spec"])
    url = reverse("deployments:recipe-edit", args=[stored.pk])
    form = operator_client.get(url).context["form"]
    values = {bf.html_name: bf.value() for bf in form if bf.value() is not None}
    values["name"] = f"x-{VALUE}-y"

    response = operator_client.post(url, values)

    assert response.status_code in (200, 400)
    page = response.content.decode()
    assert "name holds the value of secret" in page and "s-name" in page
    assert Recipe.objects.get(pk=stored.pk).name == "kept"


def test_the_admin_form_refuses_a_name_holding_a_secret_value(secrets):
    from deployments.forms import RecipeAdminForm

    form = RecipeAdminForm()
    with pytest.raises(Exception) as refused:
        form.fields["name"].clean(f"{VALUE}-r")
    assert "name holds the value of secret" in str(refused.value) and VALUE not in str(refused.value)


def test_the_service_refuses_a_name_holding_a_secret_value(secrets):
    from deployments.services import InvalidInput, recipe_create

    example = example_recipe("seed-v4-flash-pd")
    with pytest.raises(InvalidInput) as refused:
        recipe_create(user=None, name=f"{VALUE}-r", engine=example["engine"], topology=example["topology"],
                      node=seed_node_create(), spec=example["spec"])
    assert "name" in refused.value.errors and VALUE not in str(refused.value.errors)


def test_a_json_escaped_slash_is_found_and_masked_as_the_value(secrets):
    escaped = SLASHED.replace("/", "\\/")
    assert secret_value_found(f"see {escaped} here", SLASHED)
    assert secret_value_found(f"see {urllib.parse.quote(escaped, safe='')}", SLASHED)
    assert secret_values_mask(f"see {escaped} here") == f"see {REDACTED} here"
    assert not secret_value_found("see a\\/b c+d=e&f?h here", SLASHED)


@pytest.mark.parametrize("field", ["description", "change_reason"])
def test_the_api_refuses_free_text_with_a_json_escaped_slash(operator_api, secrets, field):
    node = seed_node_create()
    escaped = SLASHED.replace("/", "\\/")

    response = operator_api.post("/api/recipes/", _create_body(node, **{field: f"see {escaped}"}), format="json")

    assert response.status_code == 400
    text = response.content.decode()
    assert f"{field} holds the value of secret" in text and "s-slash" in text
    assert not Recipe.objects.exists()


def test_a_sweep_name_with_a_json_escaped_slash_is_refused(operator_api, secrets):
    response = operator_api.post("/api/sweeps/", {"deployment": 1, "grid": {}, "name": SLASHED.replace("/", "\\/")},
                                 format="json")

    assert response.status_code == 400
    assert "name holds the value of secret" in response.content.decode()
