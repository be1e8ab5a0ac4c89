"""GET /logout/ (the address typed in the address bar) answers a page with the Log out button
for a signed-in user and sends a signed-out visitor to the login page; logging out stays a POST
with its CSRF token."""
from __future__ import annotations

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_a_get_shows_a_log_out_button_and_logs_nobody_out(operator):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)

    response = client.get("/logout/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "<title>Log out · Ceiling</title>" in page and "<h1>Log out</h1>" in page
    assert "Signed in as <strong>oscar-operator</strong>." in page
    form = re.search(r'<form method="post" action="/logout/" class="stacked">(.*?)</form>', page, re.S)
    assert form is not None
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.group(1)).group(1)
    assert '<button type="submit">Log out</button>' in form.group(1)
    # Still signed in after the GET.
    assert client.get("/recipes/").status_code == 200

    # The page's form logs out; without its token the POST is refused.
    assert client.post("/logout/").status_code == 403
    assert client.get("/recipes/").status_code == 200
    out = client.post("/logout/", {"csrfmiddlewaretoken": token})
    assert (out.status_code, out["Location"]) == (302, "/login/")
    assert client.get("/recipes/")["Location"].startswith("/login/")


def test_a_signed_out_get_goes_to_the_login_page():
    response = Client().get("/logout/")
    assert (response.status_code, response["Location"]) == (302, "/login/")


def test_other_methods_stay_refused(operator):
    client = Client()
    client.force_login(operator)
    assert client.put("/logout/").status_code == 405
    assert client.delete("/logout/").status_code == 405
    assert client.get("/recipes/").status_code == 200
