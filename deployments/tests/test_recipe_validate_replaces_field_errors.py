"""Validate on the recipe form replaces the errors shown under its fields: an error an earlier
Create, Save or Validate put there (``spec: invalid JSON ...``) never stays beside a value that
now parses. The Validate partial carries every field's error box, and the form's own, out of band
with this validation's errors (empty when the recipe is valid)."""
from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from deployments.examples import example_recipe
from deployments.nodes import node_register, seed_node_facts
from deployments.services import recipe_create

FIELDS = ("name", "description", "engine", "topology", "node", "spec")


@pytest.fixture
def seed_node(db):
    return node_register(facts=seed_node_facts())


@pytest.fixture
def operator_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def _form_data(ex: dict, node, spec: str | None = None, **extra) -> dict:
    return {"name": ex["name"], "description": ex.get("description", ""), "engine": ex["engine"],
            "topology": ex["topology"], "node": str(node.pk),
            "spec": json.dumps(ex["spec"]) if spec is None else spec, **extra}


def _box(html: str, box_id: str) -> tuple[str, str]:
    """The opening tag and the text inside the error box ``box_id`` of ``html``."""
    match = re.search(rf'(<div[^>]* id="{box_id}"[^>]*>)(.*?)</div>', html, re.S)
    assert match, f"no {box_id} box in the page"
    return match.group(1), match.group(2)


def test_validate_replaces_a_stale_invalid_json_error_under_the_spec(operator_client, seed_node):
    ex = example_recipe("seed-v4-flash-pd")
    good = json.dumps(ex["spec"])
    created = operator_client.post(reverse("deployments:recipe-create"),
                                   _form_data(ex, seed_node, spec=good[:-1] + ",}"))
    assert created.status_code == 400
    tag, inside = _box(created.content.decode(), "errors-spec")
    assert "hx-swap-oob" not in tag
    assert f"spec: invalid JSON at line 1 column {len(good) + 1}" in inside
    assert 'class="field has-error" id="field-spec"' in created.content.decode()

    # The JSON fixed, a GPU the node lacks: Validate's answer replaces the box with that error.
    ex["spec"]["roles"]["prefill"]["gpus"] = [0, 1, 2, 99]
    html = operator_client.post(reverse("deployments:recipe-validate"), _form_data(ex, seed_node),
                                HTTP_HX_REQUEST="true").content.decode()
    assert 'id="validate-errors"' in html
    tag, inside = _box(html, "errors-spec")
    assert 'hx-swap-oob="true"' in tag
    assert "invalid JSON" not in inside
    assert "<code>spec.roles.prefill.gpus</code>" in inside and "99" in inside
    for name in FIELDS[:-1]:
        tag, inside = _box(html, f"errors-{name}")
        assert 'hx-swap-oob="true"' in tag and "<li>" not in inside, name
    tag, inside = _box(html, "form-errors-box")
    assert 'hx-swap-oob="true"' in tag and "<li>" not in inside

    # A field the form refuses gets its own message in its box, and only there.
    html = operator_client.post(reverse("deployments:recipe-validate"), _form_data(ex, seed_node, name="Bad Name!"),
                                HTTP_HX_REQUEST="true").content.decode()
    assert "Use 1-63 lowercase letters" in _box(html, "errors-name")[1]
    assert "Use 1-63 lowercase letters" not in _box(html, "errors-spec")[1]

    # A valid recipe empties every box.
    ex = example_recipe("seed-v4-flash-pd")
    html = operator_client.post(reverse("deployments:recipe-validate"), _form_data(ex, seed_node),
                                HTTP_HX_REQUEST="true").content.decode()
    assert 'id="validate-ok"' in html
    for box_id in [f"errors-{name}" for name in FIELDS] + ["form-errors-box"]:
        tag, inside = _box(html, box_id)
        assert 'hx-swap-oob="true"' in tag and inside.strip() == "", box_id


def test_the_edit_form_has_the_same_boxes_and_validate_replaces_them(operator_client, operator, seed_node):
    ex = example_recipe("seed-v4-flash-pd")
    recipe = recipe_create(user=operator, name=ex["name"], engine=ex["engine"], topology=ex["topology"],
                           node=seed_node, spec=ex["spec"])
    saved = operator_client.post(reverse("deployments:recipe-edit", args=[recipe.pk]),
                                 _form_data(ex, seed_node, spec="{", expected_version="1"))
    assert saved.status_code == 400
    assert "spec: invalid JSON at line 1 column 2" in _box(saved.content.decode(), "errors-spec")[1]
    html = operator_client.post(f"{reverse('deployments:recipe-validate')}?recipe={recipe.pk}",
                                _form_data(ex, seed_node, expected_version="1"),
                                HTTP_HX_REQUEST="true").content.decode()
    assert 'id="validate-ok"' in html
    tag, inside = _box(html, "errors-spec")
    assert 'hx-swap-oob="true"' in tag and inside.strip() == ""
