"""A spec field that must be a JSON object and holds another type is refused as the wrong type,
quoting the value as the product quotes refused values, never reported as missing: through the
rules, the API (a create and a PATCH) and the recipe edit form alike."""
from __future__ import annotations

import html as html_lib
import json

import pytest

from deployments.models import Recipe
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_recipes_validation import errors_of, seed_pd_spec
from deployments.tests.test_views import operator_client  # noqa: F401 - fixture

MODEL_SHAPE = 'must be an object ({"path": ...} or {"name": ...}), got '
SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}


@pytest.mark.parametrize("value, shown", [(1, "1"), ("abc", "'abc'"), ([], "[]"), (True, "true"), (1.5, "1.5")])
def test_a_model_of_another_type_is_the_wrong_type_not_missing(value, shown):
    spec = seed_pd_spec()
    spec["model"] = value
    assert errors_of(spec)["spec.model"] == [MODEL_SHAPE + shown]


def test_a_model_left_out_or_null_is_still_required():
    spec = seed_pd_spec()
    del spec["model"]
    assert errors_of(spec)["spec.model"] == ['is required: {"path": "/models/X"} or {"name": "org/Model"}']
    spec["model"] = None
    assert errors_of(spec)["spec.model"] == ['is required: {"path": "/models/X"} or {"name": "org/Model"}']


@pytest.mark.parametrize("field, value, message", [
    ("roles", 1, "must be an object with roles prefill, decode, router, got 1"),
    ("roles", ["prefill"], "must be an object with roles prefill, decode, router, got ['prefill']".replace("'", '"')),
    ("restart", "never", "must be an object, got 'never'"),
    ("restart", [], "must be an object, got []"),
    ("env", ["A=1"], 'must be an object of NAME: value, got ["A=1"]'),
    ("secrets", "hf", "must be an object of ENV_NAME: secret name, got 'hf'"),
])
def test_top_level_object_fields_quote_what_came(field, value, message):
    spec = seed_pd_spec()
    spec[field] = value
    assert errors_of(spec)[f"spec.{field}"] == [message]


def test_roles_left_out_are_required():
    spec = seed_pd_spec()
    del spec["roles"]
    assert errors_of(spec)["spec.roles"] == ["is required: an object with roles prefill, decode, router"]


@pytest.mark.parametrize("role, value, message", [
    ("decode", 1, "must be an object, got 1"),
    ("decode", [0, 1], "must be an object, got [0, 1]"),
    ("router", "r", "must be an object, got 'r'"),
    ("decode", None, "role decode is required for topology pd"),
])
def test_a_role_of_another_type_is_the_wrong_type(role, value, message):
    spec = seed_pd_spec()
    spec["roles"][role] = value
    assert errors_of(spec)[f"spec.roles.{role}"] == [message]


@pytest.mark.parametrize("field, value, message", [
    ("flags", ["--x"], 'must be an object of flag: value, got ["--x"]'),
    ("flags", 0, "must be an object of flag: value, got 0"),
    ("env", "A=1", "must be an object of NAME: value, got 'A=1'"),
])
def test_a_role_s_object_fields_quote_what_came(field, value, message):
    spec = seed_pd_spec()
    spec["roles"]["prefill"][field] = value
    assert errors_of(spec)[f"spec.roles.prefill.{field}"] == [message]


@pytest.fixture
def node(db):
    return cpu_node_create(name="local")


@pytest.mark.django_db
@pytest.mark.parametrize("value, shown", [(1, "1"), ("abc", "'abc'")])
def test_the_api_patch_names_the_wrong_type(operator_api, node, value, shown):
    recipe = Recipe.objects.create(name="kept", engine="sim", topology="single", node=node, spec=SPEC, version=1)
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"spec": {"model": value}}, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {"spec.model": [MODEL_SHAPE + shown]}


@pytest.mark.django_db
def test_the_api_names_a_wrong_type_sim(operator_api, node):
    response = operator_api.post("/api/recipes/", {"name": "r", "engine": "sim", "topology": "single",
                                                   "node": node.name, "spec": {**SPEC, "sim": [1]}}, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {"spec.sim": ["must be an object, got [1]"]}


@pytest.mark.django_db
def test_the_edit_form_names_the_wrong_type(operator_client, node):
    recipe = Recipe.objects.create(name="kept", engine="sim", topology="single", node=node, spec=SPEC, version=1)
    response = operator_client.post(f"/recipes/{recipe.pk}/edit/", {
        "name": "kept", "description": "", "engine": "sim", "topology": "single", "node": node.pk,
        "spec": json.dumps({**SPEC, "model": 1}), "expected_version": 1})
    assert response.status_code == 400
    page = html_lib.unescape(response.content.decode())
    assert "<code>spec.model</code>: " + MODEL_SHAPE + "1</li>" in page
    assert "is required" not in page
    recipe.refresh_from_db()
    assert recipe.version == 1
