"""A request body sent with ``Transfer-Encoding: chunked`` is refused with 411 Length Required,
never answered 200 having ignored the body (a chunked ``PATCH /api/recipes/N/`` changed nothing,
a chunked ``POST /api/deployments/`` was told the recipe was missing): the API's JSON ``{"detail",
"code": "length_required"}``, a page's plain 411 page, the row untouched
(:mod:`controlplane.body_length`). Through the test client, a real daphne (whose Twisted decodes the
chunks and passes the header on) and Django's own WSGI server (which never reads such a body)."""
from __future__ import annotations

import http.client
import json
import logging
from urllib.parse import urlsplit

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from controlplane.body_length import LENGTH_REQUIRED_TEXT, transfer_codings
from controlplane.tests.test_reason_phrases import _request, daphne  # noqa: F401 - the fixture
from deployments.models import Deployment, Recipe
from deployments.tests.factories import SIM_TINY_SPEC, cpu_node_create

REFUSED = {"detail": LENGTH_REQUIRED_TEXT, "code": "length_required"}


@pytest.fixture
def recipe(db) -> Recipe:
    node = cpu_node_create(name="cpu-box")
    return Recipe.objects.create(name="plain", engine="sim", topology="single", node=node, spec=SIM_TINY_SPEC,
                                 description="as stored")


def _chunked(body: bytes) -> bytes:
    """``body`` framed as a chunked transfer coding sends it: one chunk, then the last."""
    return f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"


# --- through the test client ----------------------------------------------------------------------


def test_a_chunked_api_patch_is_the_json_411_and_changes_nothing(operator, recipe, caplog):
    token = Token.objects.create(user=operator).key
    body = json.dumps({"description": "sent chunked"}).encode()

    with caplog.at_level(logging.WARNING):
        # the header alone (no Content-Length), as a WSGI server hands such a request on
        bare = Client().generic("PATCH", f"/api/recipes/{recipe.pk}/", b"", content_type="application/json",
                                HTTP_AUTHORIZATION=f"Token {token}", HTTP_TRANSFER_ENCODING="chunked")
        # and with the body too, as daphne hands it on (decoded, the header kept)
        whole = Client().generic("PATCH", f"/api/recipes/{recipe.pk}/", body, content_type="application/json",
                                 HTTP_AUTHORIZATION=f"Token {token}", HTTP_TRANSFER_ENCODING="chunked")

    for response in (bare, whole):
        assert response.status_code == 411
        assert response["Content-Type"] == "application/json"
        assert response.json() == REFUSED
    recipe.refresh_from_db()
    assert (recipe.description, recipe.version) == ("as stored", 1)
    lines = [r.getMessage() for r in caplog.records if r.name == "django.request"]
    assert lines == [f"Length Required: /api/recipes/{recipe.pk}/"] * 2


def test_the_same_patch_with_its_content_length_is_saved(operator_api, recipe):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "sent whole"}, format="json")

    assert response.status_code == 200, response.json()
    recipe.refresh_from_db()
    assert recipe.description == "sent whole"


def test_a_chunked_deployment_create_is_the_411_not_a_missing_recipe(operator_api, recipe):
    response = operator_api.generic("POST", "/api/deployments/", json.dumps({"recipe": recipe.pk}),
                                    content_type="application/json", HTTP_TRANSFER_ENCODING="chunked")

    assert (response.status_code, response.json()) == (411, REFUSED)
    assert not Deployment.objects.exists()


def test_a_chunked_page_post_is_the_plain_411_page(operator):
    client = Client()
    client.force_login(operator)

    response = client.post("/logout/", HTTP_TRANSFER_ENCODING="chunked")

    assert response.status_code == 411
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "<h1>Length required</h1>" in html and f"<p>{LENGTH_REQUIRED_TEXT}</p>" in html
    assert client.get("/recipes/").status_code == 200  # still signed in: the logout never ran


@pytest.mark.parametrize(("path", "api"), [("/api", True), ("/api/recipes/", True), ("/apiary", False)])
def test_api_or_page_is_told_by_the_path(db, path, api):
    response = Client().post(path, HTTP_TRANSFER_ENCODING="chunked")

    assert response.status_code == 411
    assert response["Content-Type"].startswith("application/json" if api else "text/html")


@pytest.mark.parametrize(("header", "codings"), [
    ("chunked", ["chunked"]), ("Chunked", ["chunked"]), ("gzip, chunked", ["gzip", "chunked"]),
    ("identity", []), ("", []), (None, []),
])
def test_the_transfer_codings_a_request_names(rf, header, codings):
    extra = {} if header is None else {"HTTP_TRANSFER_ENCODING": header}
    assert transfer_codings(rf.post("/api/recipes/", **extra)) == codings


def test_identity_alone_is_let_through(operator_api, recipe):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "identity"}, format="json",
                                  HTTP_TRANSFER_ENCODING="identity")

    assert response.status_code == 200, response.json()


# --- through a real daphne and Django's WSGI server -----------------------------------------------


def _chunked_request(port: int, method: str, path: str, body: bytes,
                     headers: dict[str, str]) -> tuple[http.client.HTTPResponse, bytes]:
    """``body`` sent chunked (``Transfer-Encoding: chunked``, no ``Content-Length``), as ``curl -H
    'Transfer-Encoding: chunked' --data-binary`` sends it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path)
        for name, value in {**headers, "Transfer-Encoding": "chunked"}.items():
            conn.putheader(name, value)
        conn.endheaders()
        conn.send(_chunked(body))
        response = conn.getresponse()
        return response, response.read()
    finally:
        conn.close()


@pytest.mark.slow
def test_daphne_refuses_a_chunked_patch_and_saves_the_same_patch_sent_whole(daphne, operator, recipe):  # noqa: F811
    headers = {"Authorization": f"Token {Token.objects.create(user=operator).key}",
               "Content-Type": "application/json"}
    body = json.dumps({"description": "sent chunked"}).encode()

    response, text = _chunked_request(daphne, "PATCH", f"/api/recipes/{recipe.pk}/", body, headers)

    assert (response.status, response.reason) == (411, "Length Required")
    assert response.getheader("Content-Type") == "application/json"
    assert json.loads(text) == REFUSED
    recipe.refresh_from_db()
    assert (recipe.description, recipe.version) == ("as stored", 1)

    whole, text = _request(daphne, "PATCH", f"/api/recipes/{recipe.pk}/",
                           json.dumps({"description": "sent whole"}).encode(), headers)

    assert whole.status == 200, text
    recipe.refresh_from_db()
    assert recipe.description == "sent whole"


@pytest.mark.slow
def test_daphne_refuses_a_chunked_deployment_create(daphne, operator, recipe):  # noqa: F811
    headers = {"Authorization": f"Token {Token.objects.create(user=operator).key}",
               "Content-Type": "application/json"}

    response, text = _chunked_request(daphne, "POST", "/api/deployments/",
                                      json.dumps({"recipe": recipe.pk}).encode(), headers)

    assert (response.status, json.loads(text)) == (411, REFUSED)
    assert not Deployment.objects.exists()


@pytest.mark.slow
def test_daphne_answers_a_chunked_page_post_with_the_411_page(daphne):  # noqa: F811
    response, html = _chunked_request(daphne, "POST", "/login/", b"username=a&password=b",
                                      {"Content-Type": "application/x-www-form-urlencoded"})

    assert response.status == 411
    assert response.getheader("Content-Type").startswith("text/html")
    assert b"<h1>Length required</h1>" in html


@pytest.mark.slow
def test_djangos_wsgi_server_refuses_a_chunked_patch(transactional_db, live_server, operator, recipe):
    port = urlsplit(live_server.url).port
    headers = {"Authorization": f"Token {Token.objects.create(user=operator).key}",
               "Content-Type": "application/json"}

    response, text = _chunked_request(port, "PATCH", f"/api/recipes/{recipe.pk}/",
                                      json.dumps({"description": "sent chunked"}).encode(), headers)

    assert (response.status, json.loads(text)) == (411, REFUSED)
    recipe.refresh_from_db()
    assert recipe.description == "as stored"
