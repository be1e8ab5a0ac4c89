"""Django admin's recipe and secret forms judge what the save judges, so the services' own
checks are the last line: a save they refuse only at that moment (a change that landed between
the form's checks and the save) says ``Not saved: ...`` and reopens the page it came from,
showing what is stored now, with no "... was changed successfully" beside it and no log entry.

Such a change is made here by running the form's own checks and then saving another edit, as a
second admin would in that moment."""
from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from deployments import services
from deployments.forms import RecipeAdminForm, SecretAdminForm
from deployments.models import Recipe, Secret
from deployments.tests.factories import SIM_TINY_SPEC

pytestmark = pytest.mark.django_db

SPEC = SIM_TINY_SPEC
VALUE = "hf_AdminRaceSecretValue0123456789"


@pytest.fixture
def recipe(local_node, operator) -> Recipe:
    return services.recipe_create(user=operator, name="t1a", description="first", engine="sim", topology="single",
                                  node=local_node, spec=SPEC)


@pytest.fixture
def recipe_edited_meanwhile(monkeypatch, operator):
    """Once the recipe form's checks have passed, another user saves an edit of the recipe (or, for
    a new recipe, creates one under the same name) before this save runs."""
    real_post_clean = RecipeAdminForm._post_clean

    def checked_then_edited(form):
        real_post_clean(form)
        if form.errors:
            return
        current = Recipe.objects.filter(pk=form.instance.pk).first() if form.instance.pk else None
        if current is None:
            services.recipe_create(user=operator, name=form.cleaned_data["name"], engine="sim", topology="single",
                                   node=form.cleaned_data["node"], spec=SPEC, description="made meanwhile")
        else:
            services.recipe_update(recipe=current, user=operator, description="edited meanwhile")

    monkeypatch.setattr(RecipeAdminForm, "_post_clean", checked_then_edited)


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def _textarea(page: str, name: str) -> str:
    match = re.search(rf'<textarea name="{name}"[^>]*>(.*?)</textarea>', page, flags=re.S)
    assert match, f"no {name} textarea"
    return html_lib.unescape(match.group(1)).strip("\r\n")


def test_an_edit_refused_only_at_save_says_not_saved_and_nothing_else(admin_client, recipe, recipe_edited_meanwhile):
    url = reverse("admin:deployments_recipe_change", args=[recipe.pk])
    response = admin_client.post(url, {"name": "t1a", "description": "mine", "engine": "sim", "topology": "single",
                                 "node": recipe.node_id, "spec": json.dumps(SPEC), "expected_version": 1},
                           follow=True)
    assert response.redirect_chain == [(url, 302)]
    assert response.status_code == 200
    assert _messages(response) == [
        "Not saved: Recipe 't1a' is at version 2, not 1; reload it and apply the change again."]
    page = response.content.decode()
    assert "successfully" not in page
    assert _textarea(page, "description") == "edited meanwhile"
    row = Recipe.objects.get(pk=recipe.pk)
    assert (row.version, row.description) == (2, "edited meanwhile")
    assert not LogEntry.objects.exists()


def test_a_new_recipe_refused_only_at_save_says_not_saved_and_nothing_else(admin_client, local_node,
                                                                          recipe_edited_meanwhile):
    url = reverse("admin:deployments_recipe_add")
    response = admin_client.post(url, {"name": "fresh", "description": "mine", "engine": "sim", "topology": "single",
                                 "node": local_node.pk, "spec": json.dumps(SPEC)}, follow=True)
    assert response.redirect_chain == [(url, 302)]
    assert _messages(response) == ["Not saved: name: A recipe named 'fresh' already exists."]
    assert "successfully" not in response.content.decode()
    assert list(Recipe.objects.filter(name="fresh").values_list("description", flat=True)) == ["made meanwhile"]
    assert not LogEntry.objects.exists()


def test_a_revert_refused_only_at_save_says_not_saved_and_nothing_else(admin_client, recipe, operator,
                                                                       recipe_edited_meanwhile):
    services.recipe_update(recipe=recipe, user=operator, description="second")
    first = recipe.history.get(version=1)
    url = reverse("admin:deployments_recipe_simple_history", args=[recipe.pk, first.history_id])
    response = admin_client.post(url, {"expected_version": 2}, follow=True)
    assert response.redirect_chain == [(url, 302)]
    assert _messages(response) == [
        "Not saved: Recipe 't1a' is at version 3, not 2; reload it and apply the change again."]
    assert "successfully" not in response.content.decode()
    row = Recipe.objects.get(pk=recipe.pk)
    assert (row.version, row.description) == (3, "edited meanwhile")
    assert not LogEntry.objects.exists()


def test_a_new_secret_refused_only_at_save_says_not_saved_and_nothing_else(admin_client, monkeypatch, admin_user):
    real_post_clean = SecretAdminForm._post_clean

    def checked_then_taken(form):
        real_post_clean(form)
        if not form.errors:
            services.secret_create(user=admin_user, name=form.cleaned_data["name"], value=VALUE + "x",
                                   description="made meanwhile")

    monkeypatch.setattr(SecretAdminForm, "_post_clean", checked_then_taken)
    url = reverse("admin:deployments_secret_add")
    response = admin_client.post(url, {"name": "hf-token", "description": "mine", "value": VALUE}, follow=True)
    assert response.redirect_chain == [(url, 302)]
    assert _messages(response) == ["Not saved: name: A secret named 'hf-token' already exists."]
    assert "successfully" not in response.content.decode()
    secret = Secret.objects.get(name="hf-token")
    assert (secret.description, secret.plaintext()) == ("made meanwhile", VALUE + "x")
    assert not LogEntry.objects.exists()
