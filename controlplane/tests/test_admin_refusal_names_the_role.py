"""Django admin refuses in the wording of every other page and the API: the role needed and the
user's own (``This needs the admin role; you are a viewer.``), never a bare "not allowed"."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from deployments.models import Recipe
from deployments.tests.factories import cpu_node_create, recipe_row_create

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _reason(response) -> str:
    assert response.status_code == 403
    html = response.content.decode()
    assert "Your role does not allow this." not in html
    return html


def test_a_viewer_refused_the_users_page_is_told_the_admin_role_is_needed(viewer):
    html = _reason(_client(viewer).get("/admin/auth/user/"))
    assert "<p>This needs the admin role; you are a viewer.\n" in html


def test_an_operator_refused_the_users_and_secrets_pages_is_told_so(operator):
    client = _client(operator)
    for url in ("/admin/auth/user/", "/admin/auth/user/add/", reverse("admin:deployments_secret_changelist")):
        assert "<p>This needs the admin role; you are an operator.\n" in _reason(client.get(url))


def test_a_viewer_changing_a_recipe_in_admin_is_told_the_operator_role_is_needed(viewer):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"))
    client = _client(viewer)
    html = _reason(client.post(reverse("admin:deployments_recipe_change", args=[recipe.pk]), {"name": "x"}))
    assert "<p>This needs the operator role; you are a viewer.\n" in html
    html = _reason(client.get(reverse("admin:deployments_recipe_add")))
    assert "<p>This needs the operator role; you are a viewer.\n" in html


def test_an_operator_deleting_a_recipe_in_admin_is_told_the_admin_role_is_needed(operator):
    recipe = recipe_row_create(node=cpu_node_create(name="n1"))
    html = _reason(_client(operator).post(reverse("admin:deployments_recipe_delete", args=[recipe.pk]),
                                          {"post": "yes"}))
    assert "<p>This needs the admin role; you are an operator.\n" in html
    assert Recipe.objects.filter(pk=recipe.pk).exists()
