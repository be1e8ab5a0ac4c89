"""JSON bodies of the deployments and sweeps API are taken as written: an id or an integer is a
JSON integer (``"1"``, ``1.0`` and ``true`` are a 400 naming the field and the type, never
coerced), a sweep's name a JSON string; stop and cancel take no body (an empty one or ``{}``), any
key a 400 at its name (the empty key ``""`` too); and a malformed revert request is a 400 even
against a recipe whose version would conflict."""
from __future__ import annotations

import json

import pytest
from django.utils import timezone

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from deployments.choices import DeploymentStatus
from deployments.models import Deployment, ProcessEvent, Recipe
from deployments.tests.factories import cpu_node_create, deployment_row_create, recipe_row_create

pytestmark = pytest.mark.django_db

GRID = {"concurrency": [1], "lengths": "64:16", "requests": 4}


def post_json(api, url: str, body: str):
    """POST ``body`` (JSON text, sent as written) to ``url``."""
    return api.generic("POST", url, body, content_type="application/json")


def integer_error(shown: str) -> list[str]:
    return [f"must be an integer (e.g. 8), got {shown}"]


@pytest.fixture
def recipe(db) -> Recipe:
    return recipe_row_create(node=cpu_node_create())


@pytest.fixture
def recipe_at_v2(recipe) -> Recipe:
    """A recipe with versions 1 and 2 in its history (now at 2)."""
    recipe.description = "second"
    recipe.version = 2
    recipe.save()
    return recipe


# --- 1. ids and integers are JSON integers ---------------------------------------------------


@pytest.mark.parametrize("value, shown", [
    ("'{pk}'", 'the string "{pk}"'),
    ("{pk}.0", "the number {pk} written with a decimal point or exponent (write {pk})"),
    ("true", "the boolean true"),
])
def test_a_deploy_refuses_a_recipe_id_that_is_not_a_json_integer(operator_api, recipe, value, shown):
    body = '{"recipe": %s}' % value.replace("'", '"').format(pk=recipe.pk)

    response = post_json(operator_api, "/api/deployments/", body)

    assert response.status_code == 400, response.content
    assert response.json() == {"recipe": integer_error(shown.format(pk=recipe.pk))}
    assert not Deployment.objects.exists()


def test_a_form_body_still_gives_a_recipe_id_as_text(operator_api):
    # A form can send nothing but text: its digits are an id as DRF reads them.
    form = operator_api.post("/api/deployments/", {"recipe": "424242"}, format="multipart")
    as_json = operator_api.post("/api/deployments/", {"recipe": "424242"}, format="json")

    assert form.status_code == 400
    assert form.json() == {"recipe": ["must be the id of an existing recipe, got '424242'"]}
    assert as_json.json() == {"recipe": integer_error('the string "424242"')}


@pytest.mark.parametrize("body, field, shown", [
    ('{"version": "1"}', "version", 'the string "1"'),
    ('{"version": 1.0}', "version", "the number 1 written with a decimal point or exponent (write 1)"),
    ('{"version": true}', "version", "the boolean true"),
    ('{"version": 1, "expected_version": "2"}', "expected_version", 'the string "2"'),
])
def test_a_revert_takes_versions_only_as_json_integers(operator_api, recipe_at_v2, body, field, shown):
    response = post_json(operator_api, f"/api/recipes/{recipe_at_v2.pk}/revert/", body)

    assert response.status_code == 400, response.content
    assert response.json() == {field: integer_error(shown)}
    assert Recipe.objects.get(pk=recipe_at_v2.pk).version == 2


def test_a_recipe_edit_takes_expected_version_only_as_a_json_integer(operator_api, recipe_at_v2):
    response = operator_api.patch(f"/api/recipes/{recipe_at_v2.pk}/",
                                  {"description": "third", "expected_version": "2"}, format="json")

    assert response.status_code == 400, response.content
    # (the stored row's empty spec is named too: every problem comes back at once)
    assert response.json()["expected_version"] == integer_error('the string "2"')
    assert Recipe.objects.get(pk=recipe_at_v2.pk).version == 2


@pytest.mark.parametrize("name, shown", [(5, "the number 5"), (False, "the boolean false")])
def test_a_sweep_name_is_taken_only_as_a_json_string(operator_api, recipe, name, shown):
    # 5 made a sweep named "5"
    ready = _ready_deployment(recipe)

    response = operator_api.post("/api/sweeps/", {"deployment": ready.pk, "grid": GRID, "name": name}, format="json")

    assert response.status_code == 400, response.content
    assert response.json() == {"name": [f"must be a string, got {shown}"]}
    assert not BenchmarkSweep.objects.exists()


def test_a_sweep_refuses_a_deployment_id_given_as_a_string_before_the_deployment_state(operator_api, recipe):
    # Coerced, "7" would reach the state check and get the 409 of a stopped deployment.
    stopped = deployment_row_create(recipe=recipe, status=DeploymentStatus.STOPPED)

    response = operator_api.post("/api/sweeps/", {"deployment": str(stopped.pk), "grid": GRID}, format="json")

    assert response.status_code == 400, response.content
    assert response.json() == {"deployment": integer_error(f'the string "{stopped.pk}"')}
    assert not BenchmarkSweep.objects.exists()


# --- 2. stop and cancel take no body ---------------------------------------------------------


def _pending_deployment(recipe) -> Deployment:
    return deployment_row_create(recipe=recipe, status=DeploymentStatus.PENDING)


def _ready_deployment(recipe) -> Deployment:
    row = deployment_row_create(recipe=recipe, status=DeploymentStatus.READY)
    Deployment.objects.filter(pk=row.pk).update(ready_at=timezone.now())
    return row


ACTIONS = {
    # action: (url of a fresh object it acts on, status it answers when it acts)
    "deployment-stop": (lambda recipe: f"/api/deployments/{_ready_deployment(recipe).pk}/stop/", 202),
    "deployment-cancel": (lambda recipe: f"/api/deployments/{_pending_deployment(recipe).pk}/cancel/", 202),
    "sweep-cancel": (lambda recipe: "/api/sweeps/%d/cancel/" % BenchmarkSweep.objects.create(
        deployment=_ready_deployment(recipe), status=SweepStatus.PENDING).pk, 200),
}


def _nothing_changed() -> None:
    assert not Deployment.objects.filter(cancel_requested=True).exists()
    assert not Deployment.objects.filter(stop_requested=True).exists()
    assert not Deployment.objects.exclude(status__in=[DeploymentStatus.PENDING, DeploymentStatus.READY]).exists()
    assert not ProcessEvent.objects.exists()
    assert not BenchmarkSweep.objects.filter(cancel_requested=True).exists()
    assert not BenchmarkSweep.objects.exclude(status=SweepStatus.PENDING).exists()


@pytest.mark.parametrize("action", list(ACTIONS))
def test_stop_and_cancel_refuse_a_body_with_keys_and_change_nothing(operator_api, recipe, action):
    url, _ = ACTIONS[action]

    response = post_json(operator_api, url(recipe), '{"force": true, "reason": "x"}')

    assert response.status_code == 400, response.content
    assert response.json() == {"force": ["unknown field 'force'; allowed: none"],
                               "reason": ["unknown field 'reason'; allowed: none"]}
    _nothing_changed()


@pytest.mark.parametrize("action", list(ACTIONS))
def test_stop_and_cancel_name_an_empty_key_as_any_other_unknown_key(operator_api, recipe, action):
    url, _ = ACTIONS[action]

    response = post_json(operator_api, url(recipe), '{"": 1}')

    assert response.status_code == 400, response.content
    # under its own name, "", not under "detail" (the key of an error about no field)
    assert response.json() == {"": ["unknown field ''; allowed: none"]}
    _nothing_changed()


@pytest.mark.parametrize("action", list(ACTIONS))
def test_stop_and_cancel_refuse_a_body_that_is_not_an_object(operator_api, recipe, action):
    url, _ = ACTIONS[action]

    response = post_json(operator_api, url(recipe), "[1]")

    assert response.status_code == 400, response.content
    assert list(response.json()) == ["non_field_errors"]
    _nothing_changed()


@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize("body", [None, "{}"])
def test_stop_and_cancel_still_act_on_an_empty_body_or_an_empty_object(operator_api, recipe, action, body):
    url, acted = ACTIONS[action]

    if body is None:
        response = operator_api.post(url(recipe))
    else:
        response = post_json(operator_api, url(recipe), body)

    assert response.status_code == acted, response.content


def test_a_cancel_with_keys_is_a_400_even_where_the_state_would_conflict(operator_api, recipe):
    ready = _ready_deployment(recipe)
    ended = BenchmarkSweep.objects.create(deployment=ready, status=SweepStatus.DONE)

    deployment = post_json(operator_api, f"/api/deployments/{ready.pk}/cancel/", '{"now": 1}')
    sweep = post_json(operator_api, f"/api/sweeps/{ended.pk}/cancel/", '{"now": 1}')

    assert (deployment.status_code, deployment.json()) == (400, {"now": ["unknown field 'now'; allowed: none"]})
    assert (sweep.status_code, sweep.json()) == (400, {"now": ["unknown field 'now'; allowed: none"]})
    # the same requests without a body get the state's 409
    assert operator_api.post(f"/api/deployments/{ready.pk}/cancel/").status_code == 409
    assert operator_api.post(f"/api/sweeps/{ended.pk}/cancel/").status_code == 409


# --- 3. a malformed revert is a 400 before the version conflict ------------------------------


@pytest.mark.parametrize("body, errors", [
    ('{"version": 1, "expected_version": 1, "foo": 1}', {"foo": ["unknown field 'foo'; allowed: version, "
                                                                  "expected_version, keep_name"]}),
    ('{"version": "first", "expected_version": 1}', {"version": integer_error('the string "first"')}),
    ('{"version": 0, "expected_version": 1}', {"version": ["must be between 1 and 2147483647, got 0"]}),
    ('{"version": "1", "expected_version": 1}', {"version": integer_error('the string "1"')}),
    ('{"version": 1.0, "expected_version": 1}', {"version": integer_error("the number 1 written with a decimal point or exponent (write 1)")}),
    ('{"version": 1e400, "expected_version": 1}', {"version": ["1e400 is not a finite number"]}),
    ('{"expected_version": 1}', {"version": ["This field is required."]}),
    ("[1]", {"non_field_errors": ["the body must be a JSON object, got an array"]}),
])
def test_a_malformed_revert_is_a_400_before_the_stale_version_409(operator_api, recipe_at_v2, body, errors):
    url = f"/api/recipes/{recipe_at_v2.pk}/revert/"

    response = post_json(operator_api, url, body)

    assert response.status_code == 400, response.content
    assert response.json() == errors
    # the well-formed request with the same stale expected_version conflicts
    stale = post_json(operator_api, url, json.dumps({"version": 1, "expected_version": 1}))
    assert stale.status_code == 409, stale.content
    assert Recipe.objects.get(pk=recipe_at_v2.pk).version == 2
