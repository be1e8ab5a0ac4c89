"""A PATCH of a recipe changes only the fields it gives, and its ``spec`` is a JSON Merge Patch
(RFC 7396) of the stored spec: objects merge recursively, null removes a key, arrays and other
values replace; the merged spec is validated whole and the version's diff names only what
changed. A PUT, and the recipe page's edit form, still replace the whole spec. The schema and
docs/api.md say so."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.services import json_merge_patch
from deployments.tests.factories import seed_node_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def node():
    return seed_node_create()


@pytest.fixture
def operator_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def _payload() -> dict:
    example = example_recipe("seed-v4-flash-pd")
    payload = copy.deepcopy({k: example[k] for k in ("name", "description", "engine", "topology", "node", "spec")})
    payload["spec"]["stop_grace_s"] = 90
    payload["spec"]["restart"] = {"policy": "on-failure", "max_failures": 5}
    payload["spec"]["roles"]["prefill"]["flags"] = {"mem-fraction-static": 0.8, "chunked-prefill-size": 8192}
    return payload


def _created(api) -> dict:
    response = api.post("/api/recipes/", _payload(), format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_merge_patch_follows_rfc_7396() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None, "h": {"i": 1}}, "l": [3]}
    assert json_merge_patch(target, patch) == {"a": "z", "c": {"d": "e", "h": {"i": 1}}, "l": [3]}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}  # not changed in place
    assert json_merge_patch({"a": 1}, [1]) == [1]
    assert json_merge_patch([1], {"a": {"b": None}}) == {"a": {}}
    assert json_merge_patch({"a": 1}, {}) == {"a": 1}


def test_a_patched_spec_changes_only_the_keys_it_gives(operator_api, node) -> None:
    created = _created(operator_api)
    assert created["spec"]["restart"]["policy"] == "on-failure"
    assert created["spec"]["env"] == {"SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": "1"}
    decode_gpus = created["spec"]["roles"]["decode"]["gpus"]

    patched = operator_api.patch(f"/api/recipes/{created['id']}/", {"spec": {"startup_timeout_s": 900}}, format="json")
    assert patched.status_code == 200, patched.json()
    body = patched.json()
    assert body["version"] == 2 and body["description"] == created["description"]  # other fields kept
    assert body["spec"]["startup_timeout_s"] == 900
    # what the patch left out is kept, not reset to its default
    assert body["spec"]["restart"] == created["spec"]["restart"]
    assert body["spec"]["stop_grace_s"] == 90
    assert body["spec"]["env"] == created["spec"]["env"]
    assert body["spec"]["roles"]["decode"]["gpus"] == decode_gpus
    assert body["spec"] == dict(created["spec"], startup_timeout_s=900)

    # nested objects merge: one key of restart changes, max_failures stays
    nested = operator_api.patch(f"/api/recipes/{created['id']}/", {"spec": {"restart": {"policy": "never"}}},
                                format="json")
    assert nested.status_code == 200, nested.json()
    assert nested.json()["spec"]["restart"] == {**created["spec"]["restart"], "policy": "never"}

    # the diff of that version names the one key
    diff = operator_api.get(f"/api/recipes/{created['id']}/diff/?a=2&b=3").json()
    assert diff["changes"] == [{"path": "spec.restart.policy", "change": "changed", "old": "on-failure", "new": "never"}]


def test_null_removes_a_key_and_arrays_replace(operator_api, node) -> None:
    created = _created(operator_api)
    rid = created["id"]
    patch = {"spec": {"env": None, "stop_grace_s": None, "roles": {"prefill": {"flags": {"chunked-prefill-size": None}}}}}
    flags = created["spec"]["roles"]["prefill"]["flags"]
    assert "chunked-prefill-size" in flags
    response = operator_api.patch(f"/api/recipes/{rid}/", patch, format="json")
    assert response.status_code == 200, response.json()
    spec = response.json()["spec"]
    assert not spec.get("env")
    assert spec["stop_grace_s"] == 30  # removed: the default applies
    assert spec["roles"]["prefill"]["flags"] == {k: v for k, v in flags.items() if k != "chunked-prefill-size"}
    assert spec["restart"] == created["spec"]["restart"]

    # an array replaces: the decode role's GPUs are given whole
    gpus = operator_api.patch(f"/api/recipes/{rid}/", {"spec": {"roles": {"decode": {"gpus": [5, 6], "tp": 2}}}},
                              format="json")
    assert gpus.status_code == 200, gpus.json()
    assert gpus.json()["spec"]["roles"]["decode"]["gpus"] == [5, 6]
    assert gpus.json()["spec"]["roles"]["decode"]["port"] == 30001

    # the merged spec is validated whole: removing a required key is refused, nothing stored
    refused = operator_api.patch(f"/api/recipes/{rid}/", {"spec": {"model": None, "stop_grace_s": 60}},
                                 format="json")
    assert refused.status_code == 400
    assert "spec.model" in refused.json()
    clash = operator_api.patch(f"/api/recipes/{rid}/", {"spec": {"roles": {"decode": {"gpus": [0]}}}},
                               format="json")
    assert clash.status_code == 400
    assert any("spec.roles" in path for path in clash.json()), clash.json()
    stored = operator_api.get(f"/api/recipes/{rid}/").json()
    assert stored["version"] == 3 and stored["spec"]["stop_grace_s"] == 30
    assert stored["spec"]["roles"]["decode"]["gpus"] == [5, 6]

    # an empty patch changes nothing: no new version
    same = operator_api.patch(f"/api/recipes/{rid}/", {"spec": {}}, format="json")
    assert same.status_code == 200 and same.json()["version"] == 3


def test_a_put_still_replaces_the_whole_spec(operator_api, node) -> None:
    created = _created(operator_api)
    payload = _payload()
    del payload["spec"]["restart"], payload["spec"]["stop_grace_s"]
    response = operator_api.put(f"/api/recipes/{created['id']}/", payload, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["spec"]["restart"]["policy"] == "never"
    assert response.json()["spec"]["stop_grace_s"] == 30


def test_the_recipe_page_edit_sends_the_whole_spec_and_replaces_it(operator_client, operator_api, node) -> None:
    created = _created(operator_api)
    spec = {k: v for k, v in copy.deepcopy(created["spec"]).items() if k != "restart"}
    data = {"name": created["name"], "description": created["description"] or "", "engine": created["engine"],
            "topology": created["topology"], "node": str(node.pk), "spec": json.dumps(spec),
            "expected_version": "1"}
    response = operator_client.post(reverse("deployments:recipe-edit", args=[created["id"]]), data)
    assert response.status_code == 302, response.content[:2000]
    recipe = Recipe.objects.get(pk=created["id"])
    assert recipe.version == 2
    assert recipe.spec["restart"]["policy"] == "never"  # left out of the form's spec: the default


def test_the_schema_and_the_docs_say_a_patched_spec_is_merged(operator_api) -> None:
    schema = operator_api.get("/api/schema/?format=json").json()
    patch = schema["paths"]["/api/recipes/{id}/"]["patch"]
    assert "`spec` is a JSON Merge Patch (RFC 7396) of the stored spec" in patch["description"]
    assert "A PUT replaces the whole recipe: name, engine, topology, node and spec are all required there." \
        in patch["description"]
    spec = schema["components"]["schemas"]["PatchedRecipeWriteRequest"]["properties"]["spec"]
    assert "A PATCH merges it into the stored spec as a JSON Merge Patch (RFC 7396)" in spec["description"]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    assert "its `spec` is a JSON Merge Patch\n(RFC 7396) of the stored spec" in docs
    assert "A `PUT` replaces the whole recipe: `name`, `engine`, `topology`, `node` and\n`spec` are all required" in docs


def test_a_put_of_spec_alone_is_told_a_put_replaces_the_whole_recipe(operator_api, node) -> None:
    created = _created(operator_api)
    spec = dict(created["spec"], stop_grace_s=30)
    hint = "A PUT replaces the whole recipe; use PATCH to change only spec."

    put = operator_api.put(f"/api/recipes/{created['id']}/", {"spec": spec}, format="json")

    assert put.status_code == 400
    body = put.json()
    assert body["name"] == [f"This field is required. {hint}"]
    for field in ("engine", "topology", "node"):  # notes on what could not be checked follow
        assert body[field][0] == f"This field is required. {hint}"
    assert Recipe.objects.get(pk=created["id"]).version == 1

    described = operator_api.put(f"/api/recipes/{created['id']}/", {"spec": spec, "description": "x"},
                                 format="json").json()
    assert described["name"] == [
        "This field is required. A PUT replaces the whole recipe; use PATCH to change only description, spec."]

    patch = operator_api.patch(f"/api/recipes/{created['id']}/", {"spec": spec}, format="json")
    assert patch.status_code == 200 and patch.json()["spec"]["stop_grace_s"] == 30
    whole = dict(_payload(), spec=spec, name=created["name"])
    assert operator_api.put(f"/api/recipes/{created['id']}/", whole, format="json").status_code == 200


def test_a_create_missing_a_field_gets_no_put_hint(operator_api, node) -> None:
    payload = _payload()
    del payload["name"]

    response = operator_api.post("/api/recipes/", payload, format="json")

    assert response.status_code == 400 and response.json()["name"] == ["This field is required."]
