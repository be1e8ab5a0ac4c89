"""A key given more than once in one object of a JSON body is refused, at its dotted path, as a
query parameter given twice is (``is given 2 times (1, 2): give it once``): neither value is taken,
where Python's ``json`` would silently keep the last. The rule holds for every JSON body of the
API (one parser) and for the pages' JSON text fields (the recipe spec, the kernel job's grid
subset); numbers that are not finite are still named beside it."""
from __future__ import annotations

import html
import io
import json

import pytest

from controlplane.drf_defaults import SafeJSONParser
from deployments.examples import example_recipe, local_node_facts_example
from deployments.models import Deployment, Recipe
from deployments.nodes import node_register
from deployments.services import recipe_create

pytestmark = pytest.mark.django_db


def post_json(api, url: str, body: str, method: str = "POST"):
    """Send ``body`` (JSON text, as written) to ``url``."""
    return api.generic(method, url, body, content_type="application/json")


@pytest.fixture
def local_node(db):
    return node_register(facts=local_node_facts_example(cpu_count=4))


@pytest.fixture
def sim_recipe(local_node, operator) -> Recipe:
    ex = example_recipe("local-sim-single")
    return recipe_create(user=operator, name=ex["name"], description=ex["description"], engine=ex["engine"],
                         topology=ex["topology"], node=local_node, spec=ex["spec"])


def pd_body(**top) -> dict:
    ex = example_recipe("local-sim-pd")
    return {"name": "pd-copy", "engine": ex["engine"], "topology": ex["topology"], "node": ex["node"],
            "spec": ex["spec"], **top}


# --- the parser -----------------------------------------------------------------------------------


def test_it_names_every_repeated_key_at_its_path_and_keeps_naming_numbers_that_are_not_finite():
    body = (b'{"a": 1, "a": 2, "b": {"c": "x", "c": "y", "c": "z"}, "grid": [{"n": 1}, {"n": 1, "n": 2}],'
            b' "d": NaN, "e": 1e400}')
    from controlplane.drf_defaults import RefusedBody

    with pytest.raises(RefusedBody) as exc:
        SafeJSONParser().parse(io.BytesIO(body))

    assert exc.value.detail == {
        "a": ["is given 2 times (1, 2): give it once"],
        "b.c": ['is given 3 times ("x", "y", "z"): give it once'],
        "grid.1.n": ["is given 2 times (1, 2): give it once"],
        "d": ["NaN is not a finite number"],
        "e": ["1e400 is not a finite number"],
    }
    # the body as read is kept for a view that reports every other problem with these
    assert exc.value.data["b"]["c"] == "z" and exc.value.data["grid"][0] == {"n": 1}


def test_a_body_without_a_repeated_key_or_a_nan_literal_still_parses():
    assert SafeJSONParser().parse(io.BytesIO(b'{"a": {"a": 1}, "b": [{"a": 1}, {"a": 1}]}')) == {
        "a": {"a": 1}, "b": [{"a": 1}, {"a": 1}]}


# --- the API -------------------------------------------------------------------------------------


def test_a_deploy_that_names_its_recipe_twice_deploys_nothing(operator_api, sim_recipe, local_node, operator):
    ex = example_recipe("local-sim-pd")
    other = recipe_create(user=operator, name="other", description="", engine=ex["engine"],
                          topology=ex["topology"], node=local_node, spec=ex["spec"])

    response = post_json(operator_api, "/api/deployments/", '{"recipe": %d, "recipe": %d}' % (sim_recipe.pk, other.pk))

    assert response.status_code == 400, response.content
    assert response.json() == {"recipe": [f"is given 2 times ({sim_recipe.pk}, {other.pk}): give it once"]}
    assert not Deployment.objects.exists()


def test_a_recipe_edit_that_gives_expected_version_twice_changes_nothing(operator_api, sim_recipe):
    sim_recipe.refresh_from_db()
    current = sim_recipe.version
    body = '{"expected_version": 1, "expected_version": %d, "description": "dupkey"}' % current

    response = post_json(operator_api, f"/api/recipes/{sim_recipe.pk}/", body, method="PATCH")

    assert response.status_code == 400, response.content
    assert response.json() == {"expected_version": [f"is given 2 times (1, {current}): give it once"]}
    sim_recipe.refresh_from_db()
    assert sim_recipe.description != "dupkey" and sim_recipe.version == current


def test_a_nested_repeated_key_is_named_at_its_dotted_path_with_every_other_problem(operator_api, local_node):
    text = json.dumps(pd_body(name="Bad Name"))
    text = text.replace('"port": 31001', '"port": 31001, "port": 31002')
    assert text.count('"port": 31002') == 1

    response = post_json(operator_api, "/api/recipes/", text)

    assert response.status_code == 400, response.content
    errors = response.json()
    assert errors["spec.roles.decode.port"] == ["is given 2 times (31001, 31002): give it once"]
    assert errors["name"][0].startswith("Use 1-63 lowercase letters")
    assert not Recipe.objects.filter(name__in=["pd-copy", "Bad Name"]).exists()


def test_a_repeated_object_is_refused_whole_and_its_contents_are_not_judged(operator_api, local_node):
    text = json.dumps(pd_body())
    spec = json.dumps(pd_body()["spec"])
    text = text.replace(f'"spec": {spec}', f'"spec": {spec}, "spec": {{"roles": 1}}')

    errors = post_json(operator_api, "/api/recipes/", text).json()

    [message] = errors.pop("spec")
    assert message.startswith('is given 2 times ({"model": ') and message.endswith(', {"roles": 1}): give it once')
    assert errors == {}


def test_a_repeated_key_is_named_beside_a_number_that_is_not_finite(operator_api, sim_recipe):
    body = '{"description": "x", "description": "y", "expected_version": 1e400}'

    response = post_json(operator_api, f"/api/recipes/{sim_recipe.pk}/", body, method="PATCH")

    assert response.status_code == 400
    assert response.json() == {"description": ['is given 2 times ("x", "y"): give it once'],
                               "expected_version": ["1e400 is not a finite number"]}


@pytest.mark.parametrize("url, body, key", [
    ("/api/secrets/", '{"name": "a", "value": "b", "name": "c"}', "name"),
    ("/api/kernel-jobs/", '{"package": "p", "node": "n", "node": "m"}', "node"),
    ("/api/sweeps/", '{"deployment": 1, "grid": {"concurrency": [1], "concurrency": [2]}}', "grid.concurrency"),
    ("/api/auth/token/", '{"username": "vera-viewer", "password": "x", "username": "alice-admin"}', "username"),
])
def test_every_json_body_of_the_api_refuses_a_repeated_key(admin_api, url, body, key):
    response = post_json(admin_api, url, body)

    assert response.status_code == 400, response.content
    [message] = response.json()[key]
    assert message.startswith("is given 2 times (") and message.endswith("): give it once"), message


# --- the pages' JSON text fields ---------------------------------------------------------------


def test_the_recipe_form_refuses_a_repeated_spec_key_at_its_path(operator, client, local_node):
    client.force_login(operator)
    ex = example_recipe("local-sim-pd")
    spec = json.dumps(ex["spec"], indent=2).replace('"port": 31001', '"port": 31001,\n "port": 31002')
    form = {"name": "form-copy", "description": "", "engine": ex["engine"], "topology": ex["topology"],
            "node": str(local_node.pk), "spec": spec}

    response = client.post("/recipes/new/", form)

    assert response.status_code == 400
    message = "spec.roles.decode.port is given 2 times (31001, 31002): give it once"
    assert html.escape(message) in response.content.decode()
    assert not Recipe.objects.filter(name="form-copy").exists()

