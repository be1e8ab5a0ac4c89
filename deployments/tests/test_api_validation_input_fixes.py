"""The API's 400s list every problem of a body in the flat ``{path: [messages]}`` shape: a recipe
with an unknown node or a topology its engine does not run is checked for everything else, a
number that is not finite (``1e400``, ``NaN``) is named at its path, keys an endpoint does not
take are refused at their names (deployments, secrets), texts and node names are taken only as
JSON strings (recipes, secrets), and secret values with NUL or line breaks are refused. On the
seed node (8 GPUs; GPU0-3 + CPUs 0-31 on NUMA node 0, GPU4-7 + CPUs 32-63 on NUMA node 1)."""
from __future__ import annotations

import copy
import json

import pytest

from controlplane.errors import InvalidInput
from deployments import services
from deployments.examples import example_recipe
from deployments.models import Deployment, Recipe, Secret
from deployments.tests.factories import seed_node_create
from deployments.services import secret_value_problem

pytestmark = pytest.mark.django_db

NO_NODE = ("The spec was checked without a node: its GPU, NUMA node and CPU ids are checked against the node's "
           "hardware once it names a registered node.")
LINE_BREAKS = secret_value_problem("abc\ndef1234")


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture(autouse=True)
def node(db):
    return seed_node_create()


def payload(example: str = "seed-v4-flash-tp4", **overrides) -> dict:
    data = copy.deepcopy({k: v for k, v in example_recipe(example).items()
                          if k in ("name", "description", "engine", "topology", "node", "spec")})
    data.update(overrides)
    return data


def post_text(client, url: str, text: str):
    return client.post(url, text, content_type="application/json")


# --- every problem at once -----------------------------------------------------------------


def test_an_unknown_node_still_gets_the_spec_checked_and_says_so(operator_api):
    body = payload(node="nonexistent")
    body["spec"]["model"] = {"name": "not a model"}
    body["spec"]["roles"]["single"]["flags"] = {"no-such-flag": 1}

    response = operator_api.post("/api/recipes/", body, format="json")

    assert response.status_code == 400
    errors = response.json()
    assert errors["node"] == ["no node named 'nonexistent'", NO_NODE]
    assert errors["spec.model.name"][0].startswith("must look like org/name")
    assert any("no-such-flag" in m for m in errors["spec.roles.single.flags.no-such-flag"]), errors
    # The GPUs and CPUs the spec names are not judged against a node that is not there.
    assert not [p for p in errors if p.endswith((".gpus", ".cpus", ".numa_node", ".membind"))], errors
    assert Recipe.objects.count() == 0


def test_a_topology_the_engine_does_not_run_still_gets_the_rest_of_the_spec_checked(operator_api):
    body = payload("seed-v4-flash-pd", engine="llamacpp")
    body["spec"]["stop_grace_s"] = 0

    response = operator_api.post("/api/recipes/", body, format="json")

    assert response.status_code == 400
    errors = response.json()
    assert errors["topology"][0] == "engine llamacpp supports topology single only, not pd"
    assert "were not checked" in errors["topology"][1] and "spec.roles" in errors["topology"][1]
    assert errors["spec.model.path"] == ["llama.cpp needs a .gguf file, got '/models/DeepSeek-V4-Flash'"], errors
    assert errors["spec.stop_grace_s"] == ["must be between 1 and 3600, got 0"]
    assert not [p for p in errors if p.startswith(("spec.roles", "spec.transfer_backend"))], errors


def test_a_number_too_large_for_a_float_is_named_at_its_path_with_the_other_errors(operator_api):
    body = payload(name="Bad Name!")
    body["spec"]["stop_grace_s"] = 0
    text = json.dumps(body).replace('"port": 30000', '"port": 1e400', 1)
    assert "1e400" in text

    response = post_text(operator_api, "/api/recipes/", text)

    assert response.status_code == 400
    errors = response.json()
    assert errors["spec.roles.single.port"] == ["1e400 is not a finite number"]
    assert errors["spec.stop_grace_s"] == ["must be between 1 and 3600, got 0"]
    assert errors["name"][0].startswith("Use 1-63 lowercase letters")
    assert "spec" not in errors
    assert Recipe.objects.count() == 0


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "-1E999"])
def test_nan_and_infinity_are_named_at_their_paths_with_the_other_errors(operator_api, literal):
    body = payload(name="Bad Name!")
    text = json.dumps(body).replace('"port": 30000', f'"port": {literal}', 1)
    text = text.replace('"stop_grace_s": 30', '"stop_grace_s": 0') if '"stop_grace_s": 30' in text else text

    response = post_text(operator_api, "/api/recipes/", text)

    assert response.status_code == 400
    errors = response.json()
    assert "detail" not in errors
    assert errors["spec.roles.single.port"] == [f"{literal} is not a finite number"]
    assert errors["name"][0].startswith("Use 1-63 lowercase letters")
    assert Recipe.objects.count() == 0


def test_a_patch_with_nan_names_it_and_changes_nothing(operator_api):
    pk = operator_api.post("/api/recipes/", payload(), format="json").json()["id"]

    response = operator_api.patch(f"/api/recipes/{pk}/", '{"description": NaN, "spec": {"stop_grace_s": 1e400}}',
                                  content_type="application/json")

    assert response.status_code == 400
    errors = response.json()
    assert errors["description"] == ["NaN is not a finite number"]
    assert errors["spec.stop_grace_s"] == ["1e400 is not a finite number"]
    assert Recipe.objects.get(pk=pk).version == 1


def test_nan_on_any_endpoint_is_a_flat_400_at_its_path(operator_api, admin_api):
    deploy = post_text(operator_api, "/api/deployments/", '{"recipe": NaN}')
    nested = post_text(admin_api, "/api/secrets/", '{"name": "hf", "value": [1, {"x": Infinity}]}')
    bare = post_text(admin_api, "/api/secrets/", "NaN")

    assert deploy.status_code == 400 and deploy.json() == {"recipe": ["NaN is not a finite number"]}
    assert nested.status_code == 400 and nested.json()["value.1.x"] == ["Infinity is not a finite number"]
    assert bare.status_code == 400 and bare.json() == {"non_field_errors": ["NaN is not a finite number"]}
    assert not Secret.objects.exists() and not Deployment.objects.exists()


def test_a_number_too_large_for_a_float_is_refused_where_text_is_expected(admin_api):
    response = post_text(admin_api, "/api/secrets/", '{"name": "hf-token", "value": 1e400}')

    assert response.status_code == 400
    assert response.json() == {"value": ["1e400 is not a finite number"]}
    assert not Secret.objects.exists()


def test_the_service_checks_the_spec_of_a_recipe_without_a_node(operator):
    spec = payload()["spec"]
    spec["stop_grace_s"] = 0
    with pytest.raises(InvalidInput) as exc:
        services.recipe_create(user=operator, name="x", engine="sglang", topology="single", node=None, spec=spec)
    assert exc.value.errors["node"] == ["A registered node is required."]
    assert exc.value.errors["spec.stop_grace_s"] == ["must be between 1 and 3600, got 0"]


# --- keys an endpoint does not take ----------------------------------------------------------


def test_a_deploy_refuses_node_status_and_unknown_keys_by_name(operator_api, operator, node):
    recipe = services.recipe_create(user=operator, **{**payload(), "node": node})

    response = operator_api.post("/api/deployments/", {"recipe": recipe.pk, "node": "seed-8gpu",
                                                       "status": "ready", "colour": "red"}, format="json")

    assert response.status_code == 400
    errors = response.json()
    assert sorted(errors) == ["colour", "node", "status"]
    assert errors["node"] == ["'node' is read-only: a deployment runs on its recipe's node (change the recipe to "
                              "deploy elsewhere); allowed: recipe"]
    assert errors["status"][0].startswith("'status' is read-only: ")
    assert errors["colour"] == ["unknown field 'colour'; allowed: recipe"]
    assert not Deployment.objects.exists()


def test_a_deploy_reports_a_bad_recipe_with_the_unknown_keys(operator_api):
    response = operator_api.post("/api/deployments/", {"recipe": 999, "extra": 1}, format="json")

    assert response.status_code == 400
    assert sorted(response.json()) == ["extra", "recipe"]


@pytest.mark.parametrize("recipe, shown", [(1.5, "the number 1.5"), (1.0, "the number 1 written with a decimal point or exponent (write 1)"), (True, "the boolean true"),
                                           ("1.5", 'the string "1.5"'), ("1", 'the string "1"'), ([1], "the list [1]")])
def test_a_deploy_refuses_a_recipe_id_that_is_not_a_whole_number(operator_api, operator, node, recipe, shown):
    services.recipe_create(user=operator, **{**payload(), "node": node})  # recipe #1 exists: 1.5 must not hit it

    response = operator_api.post("/api/deployments/", {"recipe": recipe}, format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["recipe"] == [f"must be an integer (e.g. 8), got {shown}"]
    assert not Deployment.objects.exists()


def test_a_secret_create_reports_a_bad_or_taken_name_with_the_other_fields(admin_api):
    bad = admin_api.post("/api/secrets/", {"name": "Bad Name", "value": "x", "description": "y" * 300}, format="json")
    assert bad.status_code == 400
    assert sorted(bad.json()) == ["description", "name", "value"]
    admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefgh"}, format="json")
    taken = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "x"}, format="json")
    assert taken.status_code == 400
    assert taken.json()["name"] == ["A secret named 'hf-token' already exists."] and "value" in taken.json()
    assert list(Secret.objects.values_list("name", flat=True)) == ["hf-token"]


def test_a_secret_rename_is_refused_with_the_reason_and_changes_nothing(admin_api):
    pk = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefgh"}, format="json").json()["id"]
    before = Secret.objects.get(pk=pk).updated_at

    patch = admin_api.patch(f"/api/secrets/{pk}/", {"name": "renamed"}, format="json")
    put = admin_api.put(f"/api/secrets/{pk}/", {"name": "renamed", "description": "d", "foo": 1}, format="json")

    assert patch.status_code == 400
    [message] = patch.json()["name"]
    assert "cannot be renamed" in message and "recipes reference it by name" in message
    assert put.status_code == 400 and sorted(put.json()) == ["foo", "name"]
    assert put.json()["foo"] == ["unknown field 'foo'; allowed: value, description"]
    secret = Secret.objects.get(pk=pk)
    assert (secret.name, secret.description, secret.updated_at) == ("hf-token", "", before)


def test_a_secret_create_refuses_read_only_and_unknown_keys(admin_api):
    response = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefgh", "id": 7, "x": 1},
                              format="json")

    assert response.status_code == 400
    assert sorted(response.json()) == ["id", "x"]
    assert response.json()["id"][0].startswith("'id' is read-only: it is set by the server")
    assert not Secret.objects.exists()


def test_a_secret_update_still_takes_value_and_description(admin_api):
    pk = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefgh"}, format="json").json()["id"]

    response = admin_api.patch(f"/api/secrets/{pk}/", {"value": "hf_ijklmnop", "description": "d"}, format="json")

    assert response.status_code == 200, response.json()
    assert Secret.objects.get(pk=pk).plaintext() == "hf_ijklmnop"


# --- texts are JSON strings ------------------------------------------------------------------


@pytest.mark.parametrize("field, value, shown", [
    ("name", 5, 'must be a string (e.g. "seed-v4-flash-pd"), got the number 5'),
    ("description", 5, "must be a string, got the number 5"),
    ("description", ["a"], 'must be a string, got the list ["a"]'),
    ("change_reason", 5, "must be a string, got the number 5"),
    ("change_reason", True, "must be a string, got the boolean true"),
])
def test_a_recipe_text_that_is_not_a_json_string_is_refused_not_turned_into_text(operator_api, operator, node,
                                                                                  field, value, shown):
    # "name": 5 made a recipe named "5"
    response = operator_api.post("/api/recipes/", payload(**{field: value}), format="json")

    assert response.status_code == 400, response.json()
    assert response.json() == {field: [shown]}
    assert not Recipe.objects.exists()
    recipe = services.recipe_create(user=operator, **{**payload(), "node": node})
    edit = operator_api.patch(f"/api/recipes/{recipe.pk}/", {field: value}, format="json")
    assert edit.status_code == 400 and edit.json() == {field: [shown]}
    assert Recipe.objects.get(pk=recipe.pk).version == 1


@pytest.mark.parametrize("value, shown", [(1, "the number 1"), (True, "the boolean true"),
                                          (["seed-8gpu"], 'the list ["seed-8gpu"]'),
                                          ({"name": "seed-8gpu"}, 'the object {"name": "seed-8gpu"}')])
def test_a_node_that_is_not_a_node_name_is_refused_saying_so(operator_api, value, shown):
    response = operator_api.post("/api/recipes/", payload(node=value), format="json")

    assert response.status_code == 400
    # one message: not "Object with name=1 does not exist." followed by the note on a missing node
    assert response.json() == {"node": [f"must be a node name (a string), got {shown}"]}
    assert not Recipe.objects.exists()
    ok = operator_api.post("/api/recipes/", payload(node="seed-8gpu"), format="json")
    assert ok.status_code == 201, ok.json()


@pytest.mark.parametrize("body, field, shown", [
    ({"name": 5, "value": "hf_abcdefgh"}, "name", "the number 5"),
    # a secret's value is named by its type alone, never quoted
    ({"name": "hf-token", "value": 123456789012}, "value", "a number"),
    ({"name": "hf-token", "value": ["hf_abcdefgh"]}, "value", "a list"),
    ({"name": "hf-token", "value": {"token": "hf_abcdefgh"}}, "value", "an object"),
    ({"name": "hf-token", "value": "hf_abcdefgh", "description": 5}, "description", "the number 5"),
    ({"name": "hf-token", "value": "hf_abcdefgh", "description": False}, "description", "the boolean false"),
])
def test_a_secret_text_that_is_not_a_json_string_is_refused(admin_api, body, field, shown):
    response = admin_api.post("/api/secrets/", body, format="json")

    assert response.status_code == 400
    assert response.json() == {field: [f"must be a string, got {shown}"]}
    assert not Secret.objects.exists()


@pytest.mark.parametrize("field, value, shown", [("value", 123456789012, "a number"),
                                                 ("value", ["hf_abcdefgh"], "a list"),
                                                 ("description", 5, "the number 5")])
def test_a_secret_update_refuses_a_text_that_is_not_a_json_string(admin_api, field, value, shown):
    pk = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefgh"}, format="json").json()["id"]

    response = admin_api.patch(f"/api/secrets/{pk}/", {field: value}, format="json")

    assert response.status_code == 400
    assert response.json() == {field: [f"must be a string, got {shown}"]}
    secret = Secret.objects.get(pk=pk)
    assert (secret.plaintext(), secret.description) == ("hf_abcdefgh", "")


# --- secret values -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc\ndef1234", "abcdefgh\r", "abcd\x00efgh", "abc\x85def1", "abc\u2028def",
                                   "abc\u2029def", "abc\x0bdef", "abc\x1b[0mdef", "abc\x1edef", "abc\x7fdef"])
def test_a_secret_value_with_nul_or_a_line_break_is_refused_in_the_api(admin_api, value):
    create = admin_api.post("/api/secrets/", {"name": "hf-token", "value": value, "description": "x" * 300},
                            format="json")
    assert create.status_code == 400
    assert create.json()["value"] == [LINE_BREAKS] if "\x00" not in value else create.json()["value"]
    assert "description" in create.json()  # reported together
    assert not Secret.objects.exists()

    pk = admin_api.post("/api/secrets/", {"name": "hf-token", "value": "hf_abcdefgh"}, format="json").json()["id"]
    update = admin_api.patch(f"/api/secrets/{pk}/", {"value": value}, format="json")
    assert update.status_code == 400 and list(update.json()) == ["value"]
    assert Secret.objects.get(pk=pk).plaintext() == "hf_abcdefgh"


def test_the_service_refuses_line_breaks_in_a_secret_value(admin_user):
    with pytest.raises(InvalidInput) as exc:
        services.secret_create(user=admin_user, name="hf-token", value="abc\ndef1234")
    assert exc.value.errors == {"value": [LINE_BREAKS]}
    secret = services.secret_create(user=admin_user, name="hf-token", value="hf_abcdefgh")
    with pytest.raises(InvalidInput):
        services.secret_update(secret=secret, user=admin_user, value="hf_abc\r\nxyz")
    assert services.secret_value_problem("hf_abcdefgh") is None


def test_the_admin_refuses_a_secret_value_with_a_line_break(admin_user, client):
    client.force_login(admin_user)

    response = client.post("/admin/deployments/secret/add/", {"name": "hf-token", "description": "",
                                                               "value": "abc\ndef1234"}, follow=True)

    assert not Secret.objects.exists()
    assert "Must not contain NUL, line breaks" in response.content.decode()


def test_the_admin_refuses_a_long_secret_description_in_the_products_wording(admin_user, client):
    client.force_login(admin_user)

    response = client.post("/admin/deployments/secret/add/", {"name": "hf-token", "description": "d" * 300,
                                                               "value": "hf_abcdefgh"})

    page = response.content.decode()
    assert response.status_code == 200 and not Secret.objects.exists()
    assert "Use at most 255 characters; got 300." in page
    assert "Ensure this value" not in page
