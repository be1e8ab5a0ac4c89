"""The value of a stored secret pasted into a plain field of a recipe (an env value, a flag) is
refused at its path, naming the secret to reference instead, and never echoed: it would be
stored, shown and returned by the API in clear. Short values are not looked for. The dry-run
passes its env through the log redactor once more."""
from __future__ import annotations

import copy

import pytest

from controlplane.redaction import REDACTED, register_secret_value
from deployments.examples import example_recipe, seed_node_facts_example
from deployments.launch import launch_plan_render
from deployments.models import Recipe, Secret
from deployments.tests.factories import recipe_row_create, seed_node_create

pytestmark = pytest.mark.django_db

VALUE = "hf_SUPERSECRETVALUE123456"  # 25 characters: too short for the Hugging Face token pattern


@pytest.fixture(autouse=True)
def model_roots(settings):
    settings.CEILING_MODEL_ROOTS = ["/models"]


@pytest.fixture
def recipe_id(operator_api, admin_api) -> int:
    seed_node_create()
    stored = admin_api.post("/api/secrets/", {"name": "hf-token", "value": VALUE}, format="json")
    assert stored.status_code == 201, stored.json()
    example = example_recipe("seed-v4-flash-pd")
    created = operator_api.post("/api/recipes/", {k: example[k] for k in ("name", "engine", "topology", "node", "spec")},
                                format="json")
    assert created.status_code == 201, created.json()
    return created.json()["id"]


def patch_spec(api, recipe_id: int, **spec):
    return api.patch(f"/api/recipes/{recipe_id}/", {"spec": spec}, format="json")


def test_it_refuses_a_stored_secrets_value_in_an_env_value_naming_the_key_and_the_secret(operator_api, recipe_id):
    response = patch_spec(operator_api, recipe_id, secrets={"HF_TOKEN": "hf-token"}, env={"TZ": VALUE})

    assert response.status_code == 400
    assert response.json() == {"spec.env.TZ": [
        "spec.env.TZ holds the value of secret 'hf-token': reference that secret from spec.secrets instead (an "
        'environment variable named like a credential, e.g. {"HF_TOKEN": "hf-token"}); a plain value is stored and '
        "shown in clear"]}
    assert VALUE not in response.content.decode()
    recipe = Recipe.objects.get(pk=recipe_id)
    assert (recipe.version, "TZ" in recipe.spec.get("env", {})) == (1, False)


def test_it_refuses_the_value_inside_a_longer_text_and_in_a_flag(operator_api, recipe_id):
    spec = copy.deepcopy(Recipe.objects.get(pk=recipe_id).spec)
    spec["roles"]["prefill"].setdefault("flags", {})["--reasoning-parser"] = VALUE
    spec["roles"]["decode"]["env"] = {"TZ": f"UTC-{VALUE}"}
    response = operator_api.patch(f"/api/recipes/{recipe_id}/", {"spec": spec}, format="json")

    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {"spec.roles.prefill.flags.--reasoning-parser", "spec.roles.decode.env.TZ"}
    assert errors["spec.roles.prefill.flags.--reasoning-parser"][0].startswith(
        "spec.roles.prefill.flags.--reasoning-parser holds the value of secret 'hf-token': reference that secret")
    assert VALUE not in response.content.decode()


def test_it_takes_a_value_equal_to_a_secret_stored_before_the_minimum_of_8_characters(operator_api, recipe_id):
    Secret.objects.create(name="short", value="EST5EDT")  # as stored while the minimum was 4

    response = patch_spec(operator_api, recipe_id, env={"TZ": "EST5EDT"})

    assert response.status_code == 200, response.json()
    assert response.json()["spec"]["env"]["TZ"] == "EST5EDT"


def test_a_recipe_stored_with_the_value_before_is_refused_by_the_dry_run_without_echoing_it(viewer_api, recipe_id):
    recipe = Recipe.objects.get(pk=recipe_id)
    stored = recipe_row_create(node=recipe.node, name="stored-before", topology="pd",
                               engine="sglang", spec={**recipe.spec, "env": {"TZ": VALUE}})

    response = viewer_api.get(f"/api/recipes/{stored.pk}/dry-run/")

    assert response.status_code == 400
    assert list(response.json()) == ["spec.env.TZ"]
    assert response.json()["spec.env.TZ"][0].startswith("spec.env.TZ holds the value of secret 'hf-token': ")
    assert VALUE not in response.content.decode()


def test_the_plans_env_passes_through_the_redactor_once_more():
    register_secret_value("plain-pasted-value-4711")
    spec = copy.deepcopy(example_recipe("seed-v4-flash-pd")["spec"])
    spec["env"] = {"NCCL_DEBUG": "plain-pasted-value-4711"}
    plan = launch_plan_render(engine="sglang", topology="pd", spec=spec, node=seed_node_facts_example(),
                              secret_values=None)

    assert plan.processes[0].env_redacted["NCCL_DEBUG"] == "plain-pasted-value-4711"
    assert plan.to_dict()["processes"][0]["env"]["NCCL_DEBUG"] == REDACTED
