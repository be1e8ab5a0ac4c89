"""Refusals that name a recipe mask a stored secret's value in its name as every read does: the
409 of an edit based on a stale version (API and page), a revert whose old name another recipe
holds now, and the 409 of deleting a secret a recipe references. A description stored before
credentials were refused is shown with the credential shortened (``hf_…(37 chars)``); saving that
shortened text back is refused, naming it, instead of storing text nobody wrote."""
from __future__ import annotations

import json

import pytest

from controlplane.errors import InvalidInput
from controlplane.redaction import REDACTED
from deployments.examples import example_recipe
from deployments.models import Recipe, Secret
from deployments.services import recipe_revert, recipe_stale_message
from deployments.tests.factories import recipe_row_create, secret_api_store, seed_node_create

pytestmark = pytest.mark.django_db

VALUE = "k9x-prod-7c1e9a3b5d2f"
OLD_NAME = f"llm-{VALUE}"
NEW_NAME = f"llm2-{VALUE}"
TOKEN = "hf_" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3h"  # 37 characters, a Hugging Face token's shape
SHORT = f"hf_…({len(TOKEN)} chars)"


@pytest.fixture
def renamed(admin_api) -> Recipe:
    """A recipe written straight to the table as ``OLD_NAME`` (v1), renamed ``NEW_NAME`` (v2),
    both holding secret ``stored-key``'s value, stored afterwards; it references secret
    ``hf-token``."""
    spec = {**example_recipe("seed-v4-flash-pd")["spec"], "secrets": {"HF_TOKEN": "hf-token"}}
    recipe = recipe_row_create(node=seed_node_create(), name=OLD_NAME, topology="pd", engine="sglang", spec=spec)
    recipe.name = NEW_NAME
    recipe.version = 2
    recipe.save()
    secret_api_store(admin_api, name="stored-key", value=VALUE)
    secret_api_store(admin_api, name="hf-token", value="hf_" + "x" * 34)
    return recipe


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


def test_a_stale_api_edit_is_a_409_naming_the_recipe_masked(renamed, admin_api):
    answer = admin_api.patch(f"/api/recipes/{renamed.pk}/", {"expected_version": 1, "description": "x"},
                             format="json")
    assert answer.status_code == 409, answer.content
    text = answer.content.decode()
    assert VALUE not in text and f"llm2-{REDACTED}" in text and "is at version 2, not 1" in text


def test_the_pages_stale_message_names_the_recipe_masked(renamed):
    said = recipe_stale_message(recipe=renamed, expected_version=1)
    assert said.startswith(f"Recipe 'llm2-{REDACTED}' is at version 2, not 1") and VALUE not in said


def test_a_revert_whose_old_name_is_taken_names_both_names_masked(renamed, admin_user):
    recipe_row_create(node=renamed.node, name=OLD_NAME)
    with pytest.raises(InvalidInput) as refused:
        recipe_revert(recipe=renamed, user=admin_user, version=1)
    said = " ".join(refused.value.errors["name"])
    assert VALUE not in said, said
    assert f"A recipe named 'llm-{REDACTED}' already exists" in said and f"'llm2-{REDACTED}'" in said


def test_deleting_a_secret_a_recipe_references_names_the_recipe_masked(renamed, admin_api):
    answer = admin_api.delete(f"/api/secrets/{Secret.objects.get(name='hf-token').pk}/")
    assert answer.status_code == 409, answer.content
    text = answer.content.decode()
    assert VALUE not in text and f"used by recipe(s): llm2-{REDACTED}" in text
    assert Secret.objects.filter(name="hf-token").exists()


def test_a_recipe_description_shown_shortened_is_refused_when_sent_back(admin_api):
    recipe = recipe_row_create(node=seed_node_create(), name="plain", description=f"token {TOKEN} here")
    shown = admin_api.get(f"/api/recipes/{recipe.pk}/").json()["description"]
    assert shown == f"token {SHORT} here"
    answer = admin_api.patch(f"/api/recipes/{recipe.pk}/", {"description": shown, "change_reason": "tidy"},
                             format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["description"] == [
        f"description holds {SHORT}, shown in place of a credential: remove it, or store the credential as a "
        f"secret and refer to it by its name"]
    recipe.refresh_from_db()
    assert (recipe.version, recipe.description) == (1, f"token {TOKEN} here")


def test_a_secret_description_shown_shortened_is_refused_when_sent_back(admin_api):
    secret_api_store(admin_api, name="db-pass", value="a-long-enough-value-1234")
    Secret.objects.filter(name="db-pass").update(description=f"rotated from {TOKEN}")
    url = f"/api/secrets/{Secret.objects.get(name='db-pass').pk}/"
    shown = admin_api.get(url).json()["description"]
    assert shown == f"rotated from {SHORT}"
    answer = admin_api.patch(url, {"description": shown}, format="json")
    assert answer.status_code == 400, answer.content
    assert SHORT in json.dumps(answer.json(), ensure_ascii=False)
    assert Secret.objects.get(name="db-pass").description == f"rotated from {TOKEN}"
