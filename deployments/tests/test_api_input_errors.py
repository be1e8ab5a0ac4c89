"""The recipe API's 400s: unknown top-level fields refused, and every problem of a body (field
errors, the engine/topology rule, spec errors) in one flat ``{path: [messages]}``. On the seed
node (8 GPUs; GPU0-3 + CPUs 0-31 on NUMA node 0, GPU4-7 + CPUs 32-63 on NUMA node 1)."""
from __future__ import annotations

import copy

import pytest

from deployments.examples import example_recipe
from deployments.models import Recipe
from deployments.recipes import engine_topology_errors
from deployments.tests.factories import seed_node_create

pytestmark = pytest.mark.django_db

NAME_RULE = "Use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit; got 'Bad Name!'."


def name_rule(name: str) -> str:
    """The name rule's refusal of ``name``, which it quotes as every refusal quotes a value."""
    return NAME_RULE.replace("'Bad Name!'", f"'{name}'")
ALLOWED = "name, description, engine, topology, node, spec, change_reason, expected_version"


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture(autouse=True)
def node(db):
    return seed_node_create()


def payload(**overrides) -> dict:
    """The seed PD example (prefill TP4 on GPU0-3 / NUMA 0, decode TP4 on GPU4-7 / NUMA 1)."""
    example = example_recipe("seed-v4-flash-pd")
    data = copy.deepcopy({k: example[k] for k in ("name", "description", "engine", "topology", "node", "spec")})
    data.update(overrides)
    return data


def bad_spec() -> dict:
    spec = payload()["spec"]
    spec["roles"]["decode"]["gpus"] = [3, 4, 5, 6]  # GPU 3 is prefill's too
    spec["stop_grace_s"] = 0
    return spec


# --- unknown top-level fields ------------------------------------------------------------------


def test_it_refuses_an_unknown_top_level_field_on_create_at_its_path(operator_api):
    response = operator_api.post("/api/recipes/", payload(foo=1), format="json")

    assert response.status_code == 400
    assert response.json() == {"foo": [f"unknown field 'foo'; allowed: {ALLOWED}"]}
    assert Recipe.objects.count() == 0


def test_it_refuses_an_unknown_top_level_field_on_patch_and_put_and_keeps_the_version(operator_api):
    pk = operator_api.post("/api/recipes/", payload(), format="json").json()["id"]

    patch = operator_api.patch(f"/api/recipes/{pk}/", {"description": "x", "replicas": 2}, format="json")
    put = operator_api.put(f"/api/recipes/{pk}/", payload(description="y", foo=1), format="json")

    assert patch.status_code == 400
    assert patch.json() == {"replicas": [f"unknown field 'replicas'; allowed: {ALLOWED}"]}
    assert put.status_code == 400
    assert put.json() == {"foo": [f"unknown field 'foo'; allowed: {ALLOWED}"]}
    recipe = Recipe.objects.get(pk=pk)
    assert (recipe.version, recipe.description) == (1, payload()["description"])


def test_it_still_accepts_the_update_only_fields(operator_api):
    pk = operator_api.post("/api/recipes/", payload(), format="json").json()["id"]

    response = operator_api.patch(
        f"/api/recipes/{pk}/", {"description": "x", "change_reason": "why", "expected_version": 1}, format="json"
    )

    assert response.status_code == 200, response.json()
    assert response.json()["version"] == 2
    assert Recipe.objects.get(pk=pk).history.first().history_change_reason == "why"


# --- every error at once -----------------------------------------------------------------------


def test_it_answers_a_bad_name_an_unknown_node_and_an_engine_topology_mismatch_together(operator_api):
    response = operator_api.post(
        "/api/recipes/", payload(name="Bad Name!", node="no-such-node", engine="llamacpp"), format="json"
    )

    assert response.status_code == 400
    body = response.json()
    assert body["name"] == [NAME_RULE]
    assert body["node"][0] == "no node named 'no-such-node'"
    assert body["node"][1].startswith("The spec was checked without a node")
    assert body["topology"][0] == "engine llamacpp supports topology single only, not pd"
    assert body["topology"][1].startswith("spec.roles, spec.transfer_backend, spec.kernels")
    # the rest of the spec is still checked, for the engine given
    assert body["spec.model.path"] == ["llama.cpp needs a .gguf file, got '/models/DeepSeek-V4-Flash'"]
    assert set(body) == {"name", "node", "topology", "spec.model.path"}
    assert Recipe.objects.count() == 0


def test_it_answers_a_bad_name_and_spec_errors_together(operator_api):
    response = operator_api.post("/api/recipes/", payload(name="Bad Name!", spec=bad_spec()), format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["name"] == [NAME_RULE]
    assert body["spec.roles.prefill.gpus"] == ["GPU 3 is also used by role decode"]
    assert body["spec.stop_grace_s"] == ["must be between 1 and 3600, got 0"]
    assert all(isinstance(v, list) and all(isinstance(m, str) for m in v) for v in body.values())
    assert Recipe.objects.count() == 0


def test_it_answers_a_taken_name_an_unknown_field_and_spec_errors_together(operator_api):
    assert operator_api.post("/api/recipes/", payload(), format="json").status_code == 201

    response = operator_api.post("/api/recipes/", payload(spec=bad_spec(), foo=1), format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["name"] == ["A recipe named 'seed-v4-flash-pd' already exists."]
    assert body["foo"] == [f"unknown field 'foo'; allowed: {ALLOWED}"]
    assert body["spec.roles.prefill.gpus"] == ["GPU 3 is also used by role decode"]
    assert Recipe.objects.count() == 1


def test_it_checks_a_patch_against_the_stored_recipe_and_reports_name_and_spec_together(operator_api):
    pk = operator_api.post("/api/recipes/", payload(), format="json").json()["id"]

    # Only the engine changes: llama.cpp does not run pd, whatever the spec says.
    engine = operator_api.patch(f"/api/recipes/{pk}/", {"engine": "llamacpp", "name": "UPPER"}, format="json")
    # Only the spec changes: checked against the stored engine, topology and node.
    spec = operator_api.patch(f"/api/recipes/{pk}/", {"spec": bad_spec(), "name": "UPPER"}, format="json")

    assert engine.status_code == 400
    body = engine.json()
    assert set(body) == {"name", "topology", "spec.model.path"} and body["name"] == [name_rule("UPPER")]
    assert body["topology"][0] == "engine llamacpp supports topology single only, not pd"
    assert body["spec.model.path"] == ["llama.cpp needs a .gguf file, got '/models/DeepSeek-V4-Flash'"]
    assert spec.status_code == 400
    assert spec.json()["name"] == [name_rule("UPPER")]
    assert spec.json()["spec.roles.prefill.gpus"] == ["GPU 3 is also used by role decode"]
    recipe = Recipe.objects.get(pk=pk)
    assert (recipe.version, recipe.name, recipe.engine) == (1, "seed-v4-flash-pd", "sglang")


def test_it_reports_a_spec_that_is_not_an_object_with_the_other_field_errors(operator_api):
    response = operator_api.post("/api/recipes/", payload(name="-x", spec=[1]), format="json")

    assert response.status_code == 400
    assert response.json() == {"name": [name_rule("-x")], "spec": ["Must be a JSON object."]}


def test_engine_topology_errors_names_each_problem():
    assert engine_topology_errors(engine="sglang", topology="pd") == {}
    assert engine_topology_errors(engine="llamacpp", topology="pd") == {
        "topology": ["engine llamacpp supports topology single only, not pd"]}
    assert engine_topology_errors(engine="tgi", topology="ring") == {
        "engine": ["unknown engine 'tgi'; choose one of sglang, vllm, llamacpp, sim"],
        "topology": ["unknown topology 'ring'; choose one of single, pd"],
    }


def test_an_unknown_engine_still_reports_what_of_the_spec_does_not_depend_on_it(operator_api):
    spec = {"roles": 1, "stop_grace_s": 0, "env": {"LD_PRELOAD": "/tmp/x.so"}, "model": {"name": "bad name"},
            "colour": "red"}
    response = operator_api.post("/api/recipes/", payload(engine="nope", node="no-such-node", spec=spec, foo=1),
                                 format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["engine"][0] == "must be one of sglang, vllm, llamacpp, sim; got 'nope'"
    assert body["engine"][1] == (
        "spec.roles, spec.transfer_backend, spec.kernels, spec.sim were not checked (but for spec.roles being an "
        "object with the topology's roles): what they may hold depends on the engine; the rest of the spec was checked")
    assert body["foo"] == [f"unknown field 'foo'; allowed: {ALLOWED}"]
    assert body["node"][0] == "no node named 'no-such-node'"
    assert body["spec.roles"] == ["must be an object with roles prefill, decode, router, got 1"]
    assert body["spec.stop_grace_s"] == ["must be between 1 and 3600, got 0"]
    assert body["spec.colour"][0].startswith("unknown field 'colour'; allowed: ")
    assert body["spec.model.name"][0].startswith("must look like org/name")
    assert "spec.env.LD_PRELOAD" in body
    assert Recipe.objects.count() == 0


def test_an_unknown_engine_and_topology_leave_the_roles_unjudged_but_not_the_rest(operator_api):
    spec = {"roles": 1, "stop_grace_s": "30", "sim": {"profile": "x"}}
    response = operator_api.post("/api/recipes/", payload(engine="nope", topology="ring", spec=spec), format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["topology"] == ["must be one of single, pd; got 'ring'"]
    assert body["engine"][1].startswith("spec.roles, spec.transfer_backend, spec.kernels, spec.sim were not checked: ")
    assert body["spec.stop_grace_s"] == ["must be an integer, got '30'"]
    assert body["spec.model"] == ['is required: {"path": "/models/X"} or {"name": "org/Model"}']
    assert set(body) == {"engine", "topology", "spec.stop_grace_s", "spec.model"}  # no role, sim or kernel rule


@pytest.mark.parametrize("engine,shown", [(["sim"], 'the list ["sim"]'), (7, "the number 7"), (True, "the boolean true"),
                                          ({"name": "sim"}, 'the object {"name": "sim"}')])
def test_an_engine_that_is_no_string_is_named_by_its_json_type_and_spelling(operator_api, engine, shown):
    response = operator_api.post("/api/recipes/", payload(engine=engine), format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["engine"][0] == f"must be one of sglang, vllm, llamacpp, sim; got {shown}"
    # the note on what could not be checked without an engine stays with the engine it depends on
    assert body["engine"][1].startswith("spec.roles, spec.transfer_backend, spec.kernels, spec.sim were not checked")


def test_an_env_value_no_column_can_hold_does_not_hide_what_else_is_wrong_with_it(operator_api):
    spec = payload()["spec"]
    spec["env"] = {"FOO": "\u0000bar", "BAR": "x", "SGLANG_OK": "a\u0000b", "SGLANG_FOO": "/etc/\u0000x"}
    response = operator_api.post("/api/recipes/", payload(spec=spec), format="json")
    assert response.status_code == 400
    body = response.json()
    nul, allowlist = body["spec.env.FOO"]
    assert nul == "Must not contain NUL characters."
    assert allowlist.startswith("FOO is not in the allowlist (names ")
    assert body["spec.env.BAR"][0].startswith("BAR is not in the allowlist (names ")
    # a value whose one problem is its NUL is told that once, not again in the env rule's words
    assert body["spec.env.SGLANG_OK"] == ["Must not contain NUL characters."]
    # what is wrong with the rest of the value is told beside it
    assert body["spec.env.SGLANG_FOO"] == [
        "Must not contain NUL characters.",
        "SGLANG_FOO's value contains '/': a value may not name a file or folder (only HF_HOME takes a path, "
        "under the model roots)"]
    assert Recipe.objects.count() == 0
