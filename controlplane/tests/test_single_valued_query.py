"""One value a query parameter on every API endpoint, and a token body of two strings and nothing
else: a repeated parameter is a 400 naming it (the view would take the last one silently), after
the request's authentication and role are checked."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from deployments.tests.factories import cpu_node_create, recipe_row_create


@pytest.mark.django_db
@pytest.mark.parametrize("url, name", [
    ("/api/processes/?deployment=1&deployment=2", "deployment"),
    ("/api/deployments/?status=ready&status=stopped", "status"),
    ("/api/recipes/?engine=sim&engine=llamacpp", "engine"),
    ("/api/recipes/{recipe}/diff/?a=1&a=2&b=1", "a"),
    ("/api/recipes/{recipe}/dry-run/?version=1&version=2", "version"),
    ("/api/kernel-jobs/?status=done&status=failed", "status"),
    ("/api/kernel-whatif/?sweep=1&speedup=2&speedup=3", "speedup"),
])
def test_a_query_parameter_given_twice_is_a_400_naming_it_on_every_endpoint(viewer_api, url, name):
    recipe = recipe_row_create(node=cpu_node_create(), name="r1")
    answer = viewer_api.get(url.format(recipe=recipe.pk))
    assert answer.status_code == 400, (url, answer.content)
    [message] = answer.json()[name]
    assert message.startswith("is given 2 times (") and message.endswith("): give it once"), message


@pytest.mark.django_db
def test_the_role_is_checked_before_the_query(anon_api, outsider_api, viewer_api):
    url = "/api/recipes/?engine=sim&engine=llamacpp"
    assert anon_api.get(url).status_code == 401
    assert outsider_api.get(url).status_code == 403
    # one value each, or distinct parameters, pass as before
    assert viewer_api.get("/api/recipes/?engine=sim").status_code == 200
    assert viewer_api.get("/api/recipes/?engine=sim&limit=5&offset=0").status_code == 200


def test_the_token_body_takes_two_strings_and_no_other_key(viewer):
    client = APIClient()
    good = {"username": "vera-viewer", "password": "correct-horse-battery"}
    extra = client.post("/api/auth/token/", {**good, "extra": 1}, format="json")
    assert extra.status_code == 400 and "token" not in extra.json()
    assert extra.json()["extra"] == ["unknown field 'extra'; allowed: username, password"]
    number = client.post("/api/auth/token/", {**good, "username": 123}, format="json")
    assert number.status_code == 400 and number.json() == {"username": ["must be a string, got the number 123"]}
    assert client.post("/api/auth/token/", good, format="json").status_code == 200


def test_a_form_body_that_repeats_the_username_gets_no_token(viewer):
    answer = APIClient().post("/api/auth/token/", "username=nobody&username=vera-viewer&password=correct-horse-battery",
                              content_type="application/x-www-form-urlencoded")
    assert answer.status_code == 400 and "token" not in answer.json()
    assert answer.json()["username"] == ["is given 2 times (nobody, vera-viewer): give it once"]


@pytest.mark.django_db
def test_the_schema_refuses_a_repeated_format(viewer_api):
    answer = viewer_api.get("/api/schema/?format=json&format=yaml")
    assert answer.status_code == 400 and answer.json() == {"format": ["is given 2 times (json, yaml): give it once"]}

