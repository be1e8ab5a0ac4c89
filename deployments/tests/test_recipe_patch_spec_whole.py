"""A PATCH of a recipe changes only the fields it gives, but ``spec`` is one field, taken whole: a
spec sent replaces the stored one (a key it leaves out takes its default, or is refused where
required), never merged into it. The schema and docs/api.md say so."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from deployments.examples import example_recipe
from deployments.tests.factories import seed_node_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def node():
    return seed_node_create()


def _created(api) -> dict:
    example = example_recipe("seed-v4-flash-pd")
    payload = copy.deepcopy({k: example[k] for k in ("name", "description", "engine", "topology", "node", "spec")})
    payload["spec"]["stop_grace_s"] = 90
    response = api.post("/api/recipes/", payload, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_patched_spec_replaces_the_stored_one_whole(operator_api, node) -> None:
    created = _created(operator_api)
    assert created["spec"]["stop_grace_s"] == 90
    assert created["spec"]["env"] == {"SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": "1"}

    # a spec without env and stop_grace_s: both are gone (the default grace), not kept from before
    spec = {k: v for k, v in copy.deepcopy(created["spec"]).items() if k not in ("env", "stop_grace_s")}
    spec["startup_timeout_s"] = 900
    patched = operator_api.patch(f"/api/recipes/{created['id']}/", {"spec": spec}, format="json")
    assert patched.status_code == 200, patched.json()
    body = patched.json()
    assert body["version"] == 2 and body["description"] == created["description"]  # other fields kept
    assert body["spec"]["startup_timeout_s"] == 900
    assert body["spec"]["stop_grace_s"] == 30
    assert not body["spec"].get("env")

    # one key alone is a whole spec without model and roles: refused, nothing stored
    alone = operator_api.patch(f"/api/recipes/{created['id']}/", {"spec": {"stop_grace_s": 60}}, format="json")
    assert alone.status_code == 400
    assert {"spec.model", "spec.roles"} <= set(alone.json())
    assert operator_api.get(f"/api/recipes/{created['id']}/").json()["version"] == 2


def test_the_schema_and_the_docs_say_a_patched_spec_is_replaced_whole(operator_api) -> None:
    schema = operator_api.get("/api/schema/?format=json").json()
    patch = schema["paths"]["/api/recipes/{id}/"]["patch"]
    assert "`spec` is not merged: a `spec` sent replaces the whole stored spec" in patch["description"]
    spec = schema["components"]["schemas"]["PatchedRecipeWriteRequest"]["properties"]["spec"]
    assert "a spec sent replaces the stored one, never merged into it" in spec["description"]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    assert "a spec sent replaces the stored one and is never merged into it" in docs
