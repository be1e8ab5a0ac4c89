"""The landing page (``/``) is authorised like every other page: a signed-in user in no role group
is refused there with the same 403 and words as on the recipe list it would lead to, instead of
being sent on to a page that refuses them; every role goes on to the recipe list, and an anonymous
visitor to the login page."""
from __future__ import annotations

import html

import pytest
from django.test import Client
from deployments.tests.factories import signed_in_client

pytestmark = pytest.mark.django_db


def _client(user=None) -> Client:
    return signed_in_client(user, raise_request_exception=False)


def test_a_user_in_no_role_is_refused_at_home_as_on_the_recipe_list(outsider):
    client = _client(outsider)
    home = client.get("/")
    recipes = client.get("/recipes/")
    assert home.status_code == recipes.status_code == 403
    message = "This needs the viewer role; your account has no role."
    assert message in html.unescape(home.content.decode())
    assert message in html.unescape(recipes.content.decode())
    assert client.head("/").status_code == 403


@pytest.mark.parametrize("who", ["viewer", "operator", "admin_user"])
def test_every_role_goes_on_to_the_recipe_list(request, who):
    response = _client(request.getfixturevalue(who)).get("/")
    assert response.status_code == 302 and response["Location"] == "/recipes/"


def test_an_anonymous_visitor_is_sent_to_sign_in():
    response = _client().get("/")
    assert response.status_code == 302 and response["Location"] == "/login/?next=/"
