"""Admin's delete page of a secret a recipe references lists it as protected, naming the recipes
and what to do, and refuses the delete (as ``DELETE /api/secrets/ID/`` does, 409), instead of
reporting the refusal beside Django's "deleted successfully"; one no recipe references is deleted."""
from __future__ import annotations

import html as html_lib

import pytest
from django.urls import reverse

from deployments.models import Secret
from deployments.tests.factories import cpu_node_create, recipe_row_create, secret_row_create

pytestmark = pytest.mark.django_db

REFUSAL = ("Secret 'hf-token' is used by recipe(s): uses-token. Remove it from their spec.secrets (each edit is a "
           "new version), then delete it.")


@pytest.fixture
def secret(db) -> Secret:
    secret = secret_row_create(name="hf-token")
    recipe_row_create(node=cpu_node_create(name="n1"), name="uses-token",
                      spec={"model": {"name": "sim/tiny"}, "secrets": {"HF_TOKEN": "hf-token"},
                            "roles": {"single": {"cpus": "0", "port": 31234}}})
    return secret


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_the_delete_page_lists_the_recipes_and_refuses(admin_client, secret):
    url = reverse("admin:deployments_secret_delete", args=[secret.pk])
    page = html_lib.unescape(admin_client.get(url).content.decode())
    assert "Cannot delete secret" in page and REFUSAL in page
    response = admin_client.post(url, {"post": "yes"}, follow=True)
    assert response.status_code == 200 and response.redirect_chain == []
    assert REFUSAL in html_lib.unescape(response.content.decode())
    assert _messages(response) == []
    assert Secret.objects.filter(pk=secret.pk).exists()


def test_the_list_s_delete_action_refuses_too(admin_client, secret):
    other = secret_row_create(name="unused", value="hf_unusedValue0123456789abcdefgh")
    response = admin_client.post(reverse("admin:deployments_secret_changelist"),
                              {"action": "delete_selected", "_selected_action": [secret.pk, other.pk], "post": "yes"},
                              follow=True)
    assert REFUSAL in html_lib.unescape(response.content.decode())
    assert "Successfully deleted" not in response.content.decode()
    assert set(Secret.objects.values_list("name", flat=True)) == {"hf-token", "unused"}


def test_the_api_refuses_in_the_same_words(admin_api, secret):
    response = admin_api.delete(f"/api/secrets/{secret.pk}/")
    assert response.status_code == 409
    assert response.json()["detail"] == REFUSAL


def test_a_secret_no_recipe_references_is_deleted(admin_client, db):
    secret = secret_row_create(name="unused")
    response = admin_client.post(reverse("admin:deployments_secret_delete", args=[secret.pk]), {"post": "yes"},
                              follow=True)
    assert _messages(response) == ["The secret “unused” was deleted successfully."]
    assert not Secret.objects.filter(pk=secret.pk).exists()
