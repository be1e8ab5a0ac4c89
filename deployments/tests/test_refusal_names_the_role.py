"""A 403 names the role the action needs and the user's own, on pages and in the API alike, and
nothing more."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_page_refusal_names_the_role_needed_and_the_users(viewer, outsider):
    refused = _client(viewer).post(reverse("deployments:recipe-create"), {"name": "x"})
    assert refused.status_code == 403
    html = refused.content.decode()
    assert "<p>This needs the operator role; you are a viewer.\n" in html
    assert "Your role does not allow this." not in html

    refused = _client(outsider).get(reverse("deployments:deployment-list"))
    assert refused.status_code == 403
    html = refused.content.decode()
    assert "This needs the viewer role; your account has no role." in html
    assert "ask an admin to add you to one" in html


def test_an_operator_refused_an_admin_action_is_told_so(operator, operator_api):
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create(), name="kept"))
    refused = operator_api.delete(f"/api/recipes/{deployment.recipe_id}/")
    assert refused.status_code == 403
    assert refused.json() == {"detail": "This needs the admin role; you are an operator."}
    refused = operator_api.get("/api/secrets/")
    assert refused.json() == {"detail": "This needs the admin role; you are an operator."}


def test_the_api_names_the_role_for_a_viewer_writing(viewer_api):
    deployment = deployment_row_create(recipe=recipe_row_create(node=cpu_node_create(), name="running"))
    refused = viewer_api.post(f"/api/deployments/{deployment.pk}/cancel/")
    assert refused.status_code == 403
    assert refused.json() == {"detail": "This needs the operator role; you are a viewer."}
