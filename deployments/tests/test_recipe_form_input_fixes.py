"""The recipe form's spec box and the model path rules: a leading UTF-8 byte order mark is
skipped as the API skips it; a model root itself is refused saying so; a path with a NUL gets
one message, on the form as in the API."""
from __future__ import annotations

import json

import pytest

from deployments.forms import spec_parse
from deployments.models import Recipe
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_views import operator_client  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db

SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}


@pytest.fixture
def node(db):
    return cpu_node_create(name="cpu-box")


def _post(client, node, spec_text: str, name: str = "bom-recipe"):
    return client.post("/recipes/new/", {"name": name, "description": "", "engine": "sim", "topology": "single",
                                         "node": node.pk, "spec": spec_text})


def test_the_spec_box_skips_a_leading_byte_order_mark(operator_client, node):
    assert spec_parse("\ufeff" + json.dumps(SPEC)) == SPEC
    response = _post(operator_client, node, "\ufeff" + json.dumps(SPEC))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Recipe.objects.get(name="bom-recipe").spec["served_model_name"] == "tiny"


def test_a_byte_order_mark_inside_the_text_is_still_invalid_json():
    with pytest.raises(Exception) as caught:
        spec_parse('{"a": \ufeff1}')
    assert "invalid JSON at line 1 column 7" in str(caught.value)


def _model_path_errors(api, node, path: str) -> list[str]:
    spec = {**SPEC, "model": {"path": path}}
    response = api.post("/api/recipes/", {"name": "path-recipe", "engine": "sim", "topology": "single",
                                          "node": node.pk, "spec": spec}, format="json")
    assert response.status_code == 400, response.content
    return response.json()["spec.model.path"]


def test_a_model_root_itself_is_refused_saying_it_is_the_root(operator_api, node, settings):
    settings.CEILING_MODEL_ROOTS = ["/models", "/srv/models"]
    assert _model_path_errors(operator_api, node, "/srv/models/") == [
        "'/srv/models' is a model root itself; give a model file or directory under it"]
    assert _model_path_errors(operator_api, node, "/srv/other") == [
        "'/srv/other' is not under a model root (/models, /srv/models)"]


def test_a_path_with_a_nul_gets_one_message(operator_api, operator_client, node):
    assert _model_path_errors(operator_api, node, "/models/a\x00b") == ["Must not contain NUL characters."]
    response = _post(operator_client, node, json.dumps({**SPEC, "model": {"path": "/models/a\x00b"}}), name="nul")
    assert response.status_code == 400
    html = response.content.decode()
    assert html.count("Must not contain NUL characters.") == 1
    assert "model path must not contain NUL" not in html


@pytest.mark.parametrize("literal", ["1e400", "-1E999", "NaN", "Infinity"])
def test_a_number_that_is_not_finite_gets_the_api_message_on_the_form(operator_api, operator_client, node, literal):
    text = json.dumps({**SPEC, "stop_grace_s": 30}).replace('"stop_grace_s": 30', f'"stop_grace_s": {literal}')
    api = operator_api.post("/api/recipes/", '{"name": "api-recipe", "engine": "sim", "topology": "single", '
                            f'"node": {node.pk}, "spec": {text}}}', content_type="application/json")
    assert api.status_code == 400, api.content
    assert api.json()["spec.stop_grace_s"] == [f"{literal} is not a finite number"]

    response = _post(operator_client, node, text, name="form-recipe")
    assert response.status_code == 400
    html = response.content.decode()
    assert f"spec.stop_grace_s: {literal} is not a finite number" in html
    assert "must be an integer" not in html
    assert not Recipe.objects.exists()
    with pytest.raises(Exception) as caught:
        spec_parse(text)
    assert str(caught.value) == str([f"spec.stop_grace_s: {literal} is not a finite number"])
