"""A JSON request body the API cannot read is a 400 under ``non_field_errors``, as every other body
error is, in plain words with where the problem is (``the request body is not valid JSON: expecting
',' delimiter (line 3 column 5)``), not REST framework's ``{"detail": "JSON parse error - ..."}``;
a body that starts with a UTF-8 byte order mark is read as the same JSON without it. Through the API with a real token (the operator's)."""
from __future__ import annotations

import json

import pytest

from deployments.models import Recipe
from deployments.tests.factories import cpu_node_create

BOM = b"\xef\xbb\xbf"


def _post(api, body: bytes, path: str = "/api/recipes/"):
    return api.post(path, data=body, content_type="application/json")


@pytest.mark.parametrize(("body", "detail"), [
    (b'{"name": "x",\n "engine": "sim"\n "topology": "single"}',
     "the request body is not valid JSON: expecting ',' delimiter (line 3 column 2)"),
    (b'{"name": }', "the request body is not valid JSON: expecting value (line 1 column 10)"),
    (b'{"name": "x"} trailing', "the request body is not valid JSON: extra data (line 1 column 15)"),
    (b'{"name": "unterminated}', "the request body is not valid JSON: unterminated string starting at (line 1 column 10)"),
    (b"{'name': 'x'}",
     "the request body is not valid JSON: expecting property name enclosed in double quotes (line 1 column 2)"),
    (b'{"name": "caf\xe9"}', "the request body is not valid UTF-8 text: byte 0xe9 at offset 13 (invalid continuation byte)"),
    (b'{"n": ' + b"1" * 5000 + b"}",
     "the request body holds a whole number of more than 4300 digits, which is not read"),
])
def test_a_body_that_cannot_be_read_is_refused_in_plain_words(operator_api, body, detail):
    response = _post(operator_api, body)

    assert response.status_code == 400
    assert response.json() == {"non_field_errors": [detail]}
    assert not Recipe.objects.exists()


def test_a_body_with_a_byte_order_mark_reads_as_the_same_json(operator_api, db):
    node = cpu_node_create(name="cpu-box")
    recipe = {"name": "bom-recipe", "engine": "sim", "topology": "single", "node": node.name,
              "spec": {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
                       "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31555}},
                       "sim": {"profile": "demo-fast"}}}

    created = _post(operator_api, BOM + json.dumps(recipe).encode())

    assert created.status_code == 201, created.content
    assert created.json()["name"] == "bom-recipe"
    assert Recipe.objects.get(name="bom-recipe").spec["roles"]["single"]["port"] == 31555
    # Only at the start: a mark between values is not JSON.
    inside = _post(operator_api, b'{"name":' + BOM + b' "x"}')
    assert inside.json() == {"non_field_errors": ["the request body is not valid JSON: expecting value (line 1 column 9)"]}


def test_a_bom_alone_is_an_empty_body_refused_as_such(operator_api, db):
    response = _post(operator_api, BOM)

    assert response.status_code == 400
    assert response.json() == {"non_field_errors": ["the request body is not valid JSON: expecting value (line 1 column 1)"]}


def test_the_token_endpoint_words_it_the_same(db):
    from rest_framework.test import APIClient

    response = APIClient().post("/api/auth/token/", data=b'{"username": "a"', content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "non_field_errors": ["the request body is not valid JSON: expecting ',' delimiter (line 1 column 17)"]}


def test_a_multipart_body_without_a_boundary_is_refused_in_plain_words(operator_api, db):
    response = operator_api.post("/api/recipes/", data=b"name=x", content_type="multipart/form-data")

    assert response.status_code == 400
    assert response.json() == {"non_field_errors": [
        "the request body is not valid multipart form data: its Content-Type gives no boundary "
        "(multipart/form-data; boundary=...)"]}


def test_a_content_type_no_parser_takes_is_a_415_with_detail(operator_api, db):
    # not a validation error: the body was never judged, so it is not a field map
    response = operator_api.post("/api/recipes/", data=b'{"name": "x"}', content_type="text/plain")

    assert response.status_code == 415
    assert response.json() == {"detail": 'Unsupported media type "text/plain" in request; send application/json '
                                         '(or application/x-www-form-urlencoded or multipart/form-data)'}
