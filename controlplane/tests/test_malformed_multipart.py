"""A multipart body that cannot be read (no boundary in its Content-Type) is named, never a bare
400: the API answers its JSON 400 under ``non_field_errors``, a page the 400 page with the same
words, and one warning line is logged without the body. Through the test client (the raw bytes
``curl -d x`` sends) and through a real daphne, whose Twisted used to answer such a body itself,
empty, before Django saw it (:mod:`controlplane.daphne_bodies`)."""
from __future__ import annotations

import json
import logging
import re

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from controlplane.daphne_bodies import twisted_form_parsing_off
from controlplane.tests.test_reason_phrases import _request, daphne  # noqa: F401 - the fixture

NO_BOUNDARY = ("the request body is not valid multipart form data: its Content-Type gives no boundary "
               "(multipart/form-data; boundary=...)")
API_PATHS = ["/api/recipes/", "/api/deployments/", "/api/runs/import/"]


@pytest.mark.parametrize("path", API_PATHS)
def test_an_api_post_without_a_boundary_is_the_json_400_naming_it(operator, path):
    token = Token.objects.create(user=operator).key

    response = Client().post(path, data=b"x", content_type="multipart/form-data",
                             HTTP_AUTHORIZATION=f"Token {token}")

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"non_field_errors": [NO_BOUNDARY]}


def _signed_in_with_csrf(user) -> tuple[Client, str]:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/login/")
    return client, client.cookies["csrftoken"].value


def test_a_signed_in_api_post_read_by_the_csrf_check_first_is_the_same_json_400(operator):
    client, csrf = _signed_in_with_csrf(operator)

    response = client.post("/api/recipes/", data=b"x", content_type="multipart/form-data", HTTP_X_CSRFTOKEN=csrf)

    assert response.status_code == 400
    assert response.json() == {"non_field_errors": [NO_BOUNDARY]}


def test_a_page_post_without_a_boundary_is_the_400_page_naming_it_with_one_warning(operator, caplog):
    client, csrf = _signed_in_with_csrf(operator)

    with caplog.at_level(logging.WARNING):
        response = client.post("/login/", data=b"secret-body-text", content_type="multipart/form-data",
                               HTTP_X_CSRFTOKEN=csrf)

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert f"<p>{NO_BOUNDARY[0].upper()}{NO_BOUNDARY[1:]}.</p>" in response.content.decode()
    records = [r for r in caplog.records if r.name == "django.request"]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert records[0].getMessage().startswith("Bad request (Unable to parse request body): /login/")
    assert "secret-body-text" not in caplog.text


def test_the_api_handler400_answer_is_the_apis_body_error_too():
    from django.http.multipartparser import MultiPartParserError
    from django.test import RequestFactory

    from controlplane.views import bad_request

    request = RequestFactory().post("/api/recipes/")
    response = bad_request(request, MultiPartParserError("Invalid boundary in multipart: None"))

    assert response.status_code == 400
    assert json.loads(response.content) == {"non_field_errors": [NO_BOUNDARY]}


def test_daphnes_requests_leave_the_body_to_django():
    from daphne import http_protocol

    twisted_form_parsing_off()
    assert twisted_form_parsing_off() is False  # once is enough
    assert http_protocol.WebRequest.body_left_to_django


# --- through a real daphne ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("content_type", ["multipart/form-data", "multipart/form-data; boundary=abc"])
def test_daphne_hands_a_malformed_multipart_api_body_to_the_api(daphne, operator, content_type):  # noqa: F811
    token = Token.objects.create(user=operator).key
    headers = {"Authorization": f"Token {token}", "Content-Type": content_type}

    response, body = _request(daphne, "POST", "/api/recipes/", b"x", headers)

    assert response.status == 400
    assert response.getheader("Content-Type") == "application/json"
    if content_type == "multipart/form-data":
        assert body == b'{"non_field_errors":["' + NO_BOUNDARY.encode() + b'"]}'
    else:  # a boundary no part starts with: an empty form, judged as one
        assert b'"name":["This field is required."]' in body


@pytest.mark.slow
def test_daphne_answers_a_page_post_without_a_boundary_with_the_400_page(daphne):  # noqa: F811
    page, html = _request(daphne, "GET", "/login/")
    cookie = re.search(r"csrftoken=([^;]+)", page.getheader("Set-Cookie") or "").group(1)
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1).decode()
    headers = {"Cookie": f"csrftoken={cookie}", "X-CSRFToken": token, "Content-Type": "multipart/form-data"}

    response, body = _request(daphne, "POST", "/login/", b"x", headers)

    assert response.status == 400
    assert response.getheader("Content-Type").startswith("text/html")
    assert b"its Content-Type gives no boundary" in body
