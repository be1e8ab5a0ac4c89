"""A JSON body that is not an object (an array, a string, a number, true, null) is refused in JSON
terms by every endpoint, from the one exception handler (controlplane.api.json_object_wording):
``the body must be a JSON object, got an array``, never REST framework's ``Invalid data. Expected a
dictionary, but got list.`` or ``No data provided``."""
from __future__ import annotations

import pytest
from rest_framework.exceptions import ErrorDetail

from controlplane.api import json_object_wording

BODIES = [("[1]", "an array"), ('"x"', "a string"), ("7", "a number"), ("true", "a boolean"), ("null", "null")]


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/recipes/", "/api/auth/token/", "/api/deployments/"])
@pytest.mark.parametrize(("body", "kind"), BODIES)
def test_it_names_a_body_that_is_not_an_object_in_json_terms(operator_api, url, body, kind):
    response = operator_api.post(url, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json() == {"non_field_errors": [f"the body must be a JSON object, got {kind}"]}


def test_it_words_a_nested_value_and_an_empty_body_too():
    errors = {"spec": [ErrorDetail("Invalid data. Expected a dictionary, but got list.", code="invalid")],
              "non_field_errors": [ErrorDetail("No data provided", code="null")],
              "name": [ErrorDetail("This field is required.", code="required")]}
    assert json_object_wording(errors, {}) == {
        "spec": ["must be a JSON object, got an array"],
        "non_field_errors": ["the body is empty: give a JSON object"],
        "name": ["This field is required."],
    }
    assert json_object_wording({"non_field_errors": [ErrorDetail("No data provided", code="null")]}, None) == {
        "non_field_errors": ["the body must be a JSON object, got null"]}
