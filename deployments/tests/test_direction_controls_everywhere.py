"""Text-direction controls (U+202A-U+202E, U+2066-U+2069) are refused wherever a user writes text
that other users read, with the message a recipe's description gets: a recipe's change reason
(API and edit form), a secret's description (API create and update, admin) and a sweep's name."""
from __future__ import annotations

import html as html_lib
import json

import pytest

from benchmarks.models import BenchmarkSweep
from deployments.models import Recipe, Secret
from deployments.tests.factories import cpu_node_create
from deployments.tests.test_views import operator_client  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db

SPEC = {"model": {"name": "sim/tiny"}, "served_model_name": "tiny",
        "roles": {"single": {"cpus": "0", "host": "127.0.0.1", "port": 31234}}, "sim": {"profile": "demo-fast"}}
RLO = ("Must not contain text-direction control characters: U+202E (RIGHT-TO-LEFT OVERRIDE) at character 5 "
       "would make the text display differently from what it says.")
LRI = ("Must not contain text-direction control characters: U+2066 (LEFT-TO-RIGHT ISOLATE) at character 1 "
       "would make the text display differently from what it says.")


@pytest.fixture
def recipe(db):
    node = cpu_node_create(name="local")
    return Recipe.objects.create(name="kept", engine="sim", topology="single", node=node, spec=SPEC, version=1)


def test_the_api_refuses_it_in_a_change_reason(operator_api, recipe):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "new", "change_reason": "fix \u202eLTR"},
                                  format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {"change_reason": [RLO]}
    recipe.refresh_from_db()
    assert (recipe.version, recipe.description) == (1, "")


def test_the_edit_form_refuses_it_in_a_change_reason(operator_client, recipe):
    response = operator_client.post(f"/recipes/{recipe.pk}/edit/", {
        "name": "kept", "description": "new", "engine": "sim", "topology": "single", "node": recipe.node.pk,
        "spec": json.dumps(SPEC), "expected_version": 1, "change_reason": "fix \u202eLTR"})
    assert response.status_code == 400
    assert RLO in html_lib.unescape(response.content.decode())
    recipe.refresh_from_db()
    assert recipe.version == 1


def test_a_change_reason_with_marks_is_taken(operator_api, recipe):
    response = operator_api.patch(f"/api/recipes/{recipe.pk}/", {"description": "new",
                                                                 "change_reason": "\u05e9\u05dc\u05d5\u05dd \u200f"},
                                  format="json")
    assert response.status_code == 200, response.content


def test_the_api_refuses_it_in_a_secret_description(admin_api):
    response = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefghijklmnop",
                                                "description": "\u2066abc"}, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {"description": [LRI]}
    assert not Secret.objects.exists()

    created = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefghijklmnop",
                                               "description": "read"}, format="json")
    assert created.status_code == 201, created.content
    response = admin_api.patch(f"/api/secrets/{created.json()['id']}/", {"description": "note\u202e"}, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {"description": [RLO]}
    assert Secret.objects.get().description == "read"


def test_the_admin_refuses_it_in_a_secret_description(admin_user, client):
    client.force_login(admin_user)
    response = client.post("/admin/deployments/secret/add/", {"name": "hf-token", "description": "\u2066abc",
                                                               "value": "hf_abcdefghijklmnop"})
    assert response.status_code == 200
    assert LRI in html_lib.unescape(response.content.decode())
    assert not Secret.objects.exists()


def test_the_api_refuses_it_in_a_sweep_name(operator_api):
    response = operator_api.post("/api/sweeps/", {"deployment": 999999, "grid": {"concurrency": [1], "requests": 4},
                                                  "name": "nigh\u202etly"}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["name"] == [RLO]
    assert not BenchmarkSweep.objects.exists()
