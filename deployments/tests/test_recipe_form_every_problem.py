"""The recipe form lists every problem at once, as the API's 400 does: a bad name does not hide
the spec's errors, and a number in the spec that is not finite does not hide the rest of it."""
from __future__ import annotations

import html as html_lib
import json

import pytest

from deployments.models import Recipe
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_views import operator_client  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db

BAD_SPEC = ('{"model":{"name":"deepseek-ai/DeepSeek-V4-Flash"},"roles":{"single":{"cpus":"7","port":70000,'
            '"flags":{"bogus":1}}},"stop_grace_s":true}')
SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}


@pytest.fixture
def node(db):
    return cpu_node_create(name="local")


def _api_errors(api, node, name: str, spec_text: str) -> dict[str, list[str]]:
    response = api.post("/api/recipes/", f'{{"name": {json.dumps(name)}, "engine": "sim", "topology": "single", '
                        f'"node": {json.dumps(node.name)}, "spec": {spec_text}}}', content_type="application/json")
    assert response.status_code == 400, response.content
    return response.json()


def _form_html(client, url: str, node, name: str, spec_text: str, **extra) -> str:
    response = client.post(url, {"name": name, "description": "", "engine": "sim", "topology": "single",
                                 "node": node.pk, "spec": spec_text, **extra})
    assert response.status_code == 400
    return html_lib.unescape(response.content.decode())


def _assert_all_shown(errors: dict[str, list[str]], page: str) -> None:
    assert len(errors) > 2, errors
    for path, messages in errors.items():
        for message in messages:
            assert message in page, (path, message)
        assert path in page or path == "name"


def test_a_bad_name_does_not_hide_the_spec_errors(operator_api, operator_client, node):
    errors = _api_errors(operator_api, node, "Bad Name!", BAD_SPEC)
    assert {"name", "spec.roles.single.port", "spec.stop_grace_s"} <= errors.keys()
    _assert_all_shown(errors, _form_html(operator_client, "/recipes/new/", node, "Bad Name!", BAD_SPEC))
    assert not Recipe.objects.exists()


def test_the_edit_form_shows_them_all_too(operator_api, operator_client, node):
    recipe = Recipe.objects.create(name="kept", engine="sim", topology="single", node=node, spec=SPEC, version=1)
    errors = _api_errors(operator_api, node, "Bad Name!", BAD_SPEC)
    page = _form_html(operator_client, f"/recipes/{recipe.pk}/edit/", node, "Bad Name!", BAD_SPEC,
                      expected_version=1)
    _assert_all_shown(errors, page)
    recipe.refresh_from_db()
    assert recipe.version == 1 and recipe.name == "kept"


def test_a_number_that_is_not_finite_does_not_hide_the_rest_of_the_spec(operator_api, operator_client, node):
    text = BAD_SPEC.replace('"stop_grace_s":true', '"time-scale":1e400')
    errors = _api_errors(operator_api, node, "fine-name", text)
    assert errors["spec.time-scale"] == ["1e400 is not a finite number"]
    assert "spec.roles.single.port" in errors
    page = _form_html(operator_client, "/recipes/new/", node, "fine-name", text)
    _assert_all_shown(errors, page)
    assert page.count("1e400 is not a finite number") == 1


def test_an_env_value_with_a_nul_does_not_hide_its_name_outside_the_allowlist(operator_api, operator_client, node):
    text = BAD_SPEC.replace('"stop_grace_s":true', '"env":{"FOO":"\\u0000bar","BAR":"x"}')
    errors = _api_errors(operator_api, node, "fine-name", text)
    assert errors["spec.env.FOO"][0] == "Must not contain NUL characters."
    assert errors["spec.env.FOO"][1].startswith("FOO is not in the allowlist (names ")
    assert errors["spec.env.BAR"][0].startswith("BAR is not in the allowlist (names ")
    _assert_all_shown(errors, _form_html(operator_client, "/recipes/new/", node, "fine-name", text))
