"""C0 and C1 control characters and DEL (but tab, newline and carriage return) are refused wherever
text-direction controls are: a recipe's description and spec text, its change reason, a secret's
description and a sweep's name, naming the character by code point and position; text stored
before shows them as ``<U+001B>`` on the pages and in the terminal. A refusal that quotes a value
shows such characters the same way (``'h6<U+202E>test'``), never raw or as Python's escapes."""
from __future__ import annotations

import html as html_lib
import json

import pytest

from benchmarks.models import BenchmarkSweep
from deployments.models import Recipe, Secret
from deployments.recipes import unknown_flag_message
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_views import operator_client  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db

SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}
BEL = ("Must not contain control characters other than tab, newline and carriage return: U+0007 (BEL) at "
       "character 4 could change what a terminal or log printing the text shows.")
ESC = ("Must not contain control characters other than tab, newline and carriage return: U+001B (ESC) at "
       "character 4 could change what a terminal or log printing the text shows.")
RLO = ("Must not contain text-direction control characters: U+202E (RIGHT-TO-LEFT OVERRIDE) at character 3 "
       "would make the text display differently from what it says.")
NAME_RULE = "Use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit; got 'h6<U+202E>test'."


@pytest.fixture
def recipe(db):
    node = cpu_node_create(name="local")
    return Recipe.objects.create(name="kept", engine="sim", topology="single", node=node, spec=SPEC, version=1)


def _form(recipe, **fields):
    return {"name": "kept", "description": "new", "engine": "sim", "topology": "single", "node": recipe.node.pk,
            "spec": json.dumps(SPEC), "expected_version": 1, **fields}


@pytest.mark.parametrize("description, message", [("abc\u0007def", BEL), ("abc\u001b[31mred", ESC)])
def test_the_api_refuses_bel_and_esc_in_a_description(operator_api, recipe, description, message):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": description}, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {"description": [message]}
    recipe.refresh_from_db()
    assert (recipe.version, recipe.description) == (1, "")


@pytest.mark.parametrize("description, message", [("abc\u0007def", BEL), ("abc\u001b[31mred", ESC)])
def test_the_form_refuses_bel_and_esc_in_a_description(operator_client, recipe, description, message):
    response = operator_client.post(f"/recipes/{recipe.pk}/edit/", _form(recipe, description=description))
    assert response.status_code == 400
    assert message in html_lib.unescape(response.content.decode())  # the textarea keeps what was typed
    recipe.refresh_from_db()
    assert recipe.version == 1


@pytest.mark.parametrize("char", ["\u0001", "\u000b", "\u000c", "\u007f", "\u0085", "\u009b"])
def test_every_other_control_is_refused(operator_api, recipe, char):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "abc" + char + "d"}, format="json")
    assert response.status_code == 400, response.content
    assert f"U+{ord(char):04X} (" in response.json()["description"][0]


def test_tab_and_line_breaks_are_taken(operator_api, recipe):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "a\tb\nc\r\nd"}, format="json")
    assert response.status_code == 200, response.content


def test_the_first_refused_character_is_named(operator_api, recipe):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "ab\u202e\u001b"}, format="json")
    assert response.json() == {"description": [RLO]}


def test_change_reason_secret_description_sweep_name_and_spec_text(operator_api, admin_api, recipe):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "new", "change_reason": "fix\u001b[0m"},
                                  format="json")
    assert response.json() == {"change_reason": [ESC]}
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"spec": {"env": {"NOTE": "abc\u001b"}}}, format="json")
    # the value's escape, and (every problem at once) the name outside the allowlist
    [escape, name] = response.json()["spec.env.NOTE"]
    assert escape == ESC and name.startswith("NOTE is not in the allowlist (names ")
    response = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefghijklmnop",
                                                "description": "abc\u0007"}, format="json")
    assert response.json() == {"description": [BEL]}
    assert not Secret.objects.exists()
    response = operator_api.post("/api/sweeps/", {"deployment": 999999, "grid": {"concurrency": [1], "requests": 4},
                                                  "name": "abc\u001b"}, format="json")
    # (a sweep's name is one line: its message says so, tab and newline refused too)
    assert response.json()["name"] == ["Must not contain control characters: U+001B (ESC) at character 4; a name is "
                                       "one line of text."]
    assert not BenchmarkSweep.objects.exists()


def test_the_edit_form_refuses_esc_in_a_change_reason(operator_client, recipe):
    response = operator_client.post(f"/recipes/{recipe.pk}/edit/", _form(recipe, change_reason="fix\u001b[0m"))
    assert response.status_code == 400
    assert ESC in html_lib.unescape(response.content.decode())


def test_stored_controls_show_as_code_points(operator_client, recipe):
    Recipe.objects.filter(pk=recipe.pk).update(description="abc\u001b[31mred\u0007")
    for url in (f"/recipes/{recipe.pk}/", "/recipes/"):
        page = operator_client.get(url).content.decode()
        assert "\u001b" not in page and "\u0007" not in page, url
        assert "abc&lt;U+001B&gt;[31mred&lt;U+0007&gt;" in page, url


def test_a_stored_sweep_name_shows_as_code_points_in_the_terminal_and_on_the_page(operator_client):
    from benchmarks.services.sweeps import sweep_report_text

    sweep = BenchmarkSweep.objects.create(name="nightly\u001b[2J", grid={"concurrency": [1], "requests": 4})
    text = sweep_report_text(sweep=sweep)
    assert "\u001b" not in text and text.splitlines()[0].startswith(f"Sweep #{sweep.pk} nightly<U+001B>[2J")
    page = operator_client.get(f"/benchmarks/sweeps/{sweep.pk}/").content.decode()
    assert "\u001b" not in page and "nightly&lt;U+001B&gt;[2J" in page


def test_the_api_quotes_a_recipe_name_with_an_override_as_code_points(operator_api, recipe):
    body = {"name": "h6\u202etest", "engine": "sim", "topology": "single", "node": "local", "spec": SPEC}
    response = operator_api.post("/api/recipes/", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {"name": [NAME_RULE]}


def test_the_form_quotes_a_recipe_name_with_an_override_as_code_points(operator_client, recipe):
    response = operator_client.post("/recipes/new/", {"name": "h6\u202etest", "description": "", "engine": "sim",
                                                      "topology": "single", "node": recipe.node.pk,
                                                      "spec": json.dumps(SPEC)})
    assert response.status_code == 400
    assert NAME_RULE in html_lib.unescape(response.content.decode())


def test_a_flag_key_is_quoted_as_code_points(operator_api, recipe):
    spec = {**SPEC, "roles": {"single": {**SPEC["roles"]["single"], "flags": {"time\u202e-scale": 0.05}}}}
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"spec": spec}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["spec.roles.single.flags"] == [
        "Key 'time<U+202E>-scale': Must not contain text-direction control characters: U+202E (RIGHT-TO-LEFT "
        "OVERRIDE) at character 5 would make the text display differently from what it says."]


def test_the_allowlist_message_quotes_a_flag_as_code_points():
    assert unknown_flag_message("time\u202e", {}, "sim") == "unknown sim flag 'time<U+202E>': sim takes no flags"
