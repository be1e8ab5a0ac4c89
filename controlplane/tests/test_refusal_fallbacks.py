"""The 403 page without a refusal text names the user's role (or says they are not signed in),
and the API's role check never answers its class-level fallback text."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.template.loader import render_to_string
from django.test import RequestFactory
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def _page(user) -> str:
    request = RequestFactory().get("/recipes/")
    request.user = user
    return " ".join(render_to_string("403.html", {"exception": ""}, request=request).split())


def test_a_bare_refusal_page_names_the_users_role(viewer):
    html = _page(viewer)
    assert "<p>Your role, viewer, does not allow this." in html
    assert "Your role does not allow this." not in html


def test_a_bare_refusal_page_for_no_user_says_so():
    html = _page(AnonymousUser())
    assert "<p>You are not signed in." in html and "Your role" not in html


def test_the_api_refuses_no_user_as_not_authenticated_never_with_the_fallback():
    resp = APIClient().post("/api/recipes/", {}, format="json")
    assert resp.status_code in (401, 403)
    assert resp.json() == {"detail": "Authentication credentials were not provided."}
