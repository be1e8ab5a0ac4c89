"""OPTIONS on the API docs page and on the schema: the docs page names the methods it takes (200,
``Allow``, no body) instead of a 500 from a template it has not got for OPTIONS metadata; the
schema answers OPTIONS as every other API endpoint does, as JSON, not as an OpenAPI document. Both
keep their roles: a user in no role is refused, an anonymous one sent to sign in or told 401."""
from __future__ import annotations

import pytest
from django.test import Client
from deployments.tests.factories import signed_in_client

pytestmark = pytest.mark.django_db


def _client(user=None) -> Client:
    return signed_in_client(user, raise_request_exception=False)


@pytest.mark.parametrize("who", ["viewer", "operator", "admin_user"])
def test_options_on_the_docs_page_names_its_methods(request, who):
    response = _client(request.getfixturevalue(who)).options("/api/docs/")
    assert response.status_code == 200
    assert response["Allow"] == "GET, HEAD, OPTIONS"
    assert response.content == b""


def test_the_docs_page_still_shows_for_get_and_head(viewer):
    client = _client(viewer)
    page = client.get("/api/docs/")
    assert page.status_code == 200 and b"swagger" in page.content.lower()
    assert client.head("/api/docs/").status_code == 200


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_any_other_method_on_the_docs_page_is_not_allowed(operator, method):
    response = getattr(_client(operator), method)("/api/docs/")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD, OPTIONS"


def test_options_on_the_docs_page_keeps_its_roles(outsider):
    assert _client(outsider).options("/api/docs/").status_code == 403
    anonymous = _client().options("/api/docs/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")


@pytest.mark.parametrize("url", ["/api/schema/", "/api/schema.json", "/api/schema/?format=json",
                                 "/api/schema/?format=yaml"])
def test_options_on_the_schema_is_json(viewer, url):
    response = _client(viewer).options(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Allow"] == "GET, HEAD, OPTIONS"
    body = response.json()
    assert body["name"] == "Schema"
    assert body["description"].startswith("The OpenAPI 3 schema of this API")


def test_options_on_the_schema_keeps_its_roles(outsider):
    refused = _client(outsider).options("/api/schema/")
    assert refused.status_code == 403
    assert refused.json() == {"detail": "This needs the viewer role; your account has no role."}
    assert _client().options("/api/schema/").status_code == 401
