"""A recipe that gives no ``served_model_name`` serves under its model's name (or the path's last
segment) whatever the model becomes: the default is not stored with the spec, so a later change
of the model (API PATCH or PUT, the edit form) changes the name clients use too; a name the recipe
gives stays. A patch that gives the model's path while the stored spec names the model is refused
saying that the stored name is merged in and how to clear it. Recipes stored before keep a name
other than their model's default and lose one equal to it (migration 0011)."""
from __future__ import annotations

import importlib
import json

import pytest
from django.apps import apps
from django.urls import reverse

from controlplane.errors import InvalidInput
from deployments import services
from deployments.models import Deployment, Recipe
from deployments.tests.factories import cpu_node_create, recipe_row_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_roots")]


def _sim_spec(**extra) -> dict:
    return {"model": {"name": "a/b"}, "roles": {"single": {"cpus": "0", "port": 31500}},
            "sim": {"profile": "demo-fast"}, **extra}


def _created(api, spec: dict, name: str = "follows") -> dict:
    node = cpu_node_create()
    response = api.post("/api/recipes/", {"name": name, "engine": "sim", "topology": "single", "node": node.name,
                                          "spec": spec}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _plan(api, pk: int) -> dict:
    response = api.get(f"/api/recipes/{pk}/dry-run/")
    assert response.status_code == 200, response.json()
    return response.json()["plan"]


def _model_name_arg(plan: dict) -> str:
    argv = plan["processes"][0]["argv"]
    return argv[argv.index("--model-name") + 1]


def test_a_default_served_name_follows_the_model_through_a_patch(operator_api):
    created = _created(operator_api, _sim_spec())
    assert "served_model_name" not in created["spec"]
    plan = _plan(operator_api, created["id"])
    assert (plan["served_model_name"], _model_name_arg(plan)) == ("a/b", "a/b")

    patched = operator_api.patch(f"/api/recipes/{created['id']}/",
                                 {"spec": {"model": {"name": None, "path": "/models/x"}}}, format="json")

    assert patched.status_code == 200, patched.json()
    assert patched.json()["spec"]["model"] == {"path": "/models/x", "name": None}
    assert "served_model_name" not in patched.json()["spec"]
    plan = _plan(operator_api, created["id"])
    assert (plan["served_model_name"], _model_name_arg(plan)) == ("x", "x")
    # what a deploy runs: the snapshot holds the name in use
    deployment = Deployment.objects.get(pk=operator_api.post("/api/deployments/", {"recipe": created["id"]},
                                                             format="json").json()["id"])
    assert deployment.spec_snapshot["served_model_name"] == "x"


def test_a_served_name_the_recipe_gives_stays_when_the_model_changes(operator_api):
    created = _created(operator_api, _sim_spec(served_model_name="public-name"))
    assert created["spec"]["served_model_name"] == "public-name"

    patched = operator_api.patch(f"/api/recipes/{created['id']}/",
                                 {"spec": {"model": {"name": None, "path": "/models/x.gguf"}}}, format="json")

    assert patched.status_code == 200, patched.json()
    assert patched.json()["spec"]["served_model_name"] == "public-name"
    assert _model_name_arg(_plan(operator_api, created["id"])) == "public-name"
    # null takes it out again: the default applies and follows the model
    operator_api.patch(f"/api/recipes/{created['id']}/", {"spec": {"served_model_name": None}}, format="json")
    assert _model_name_arg(_plan(operator_api, created["id"])) == "x"


def test_a_put_without_a_served_name_follows_the_new_model(operator_api):
    created = _created(operator_api, _sim_spec())
    body = {key: created[key] for key in ("name", "engine", "topology", "node")}

    response = operator_api.put(f"/api/recipes/{created['id']}/",
                                {**body, "spec": _sim_spec(model={"path": "/models/deep/y.gguf"})}, format="json")

    assert response.status_code == 200, response.json()
    assert _model_name_arg(_plan(operator_api, created["id"])) == "y"


def test_the_edit_form_shows_no_default_name_and_its_save_follows_the_model(operator_client, operator_api):
    created = _created(operator_api, _sim_spec())
    url = reverse("deployments:recipe-edit", args=[created["id"]])
    form = operator_client.get(url).context["form"]
    values = {bf.html_name: bf.value() for bf in form if bf.value() is not None}
    assert "served_model_name" not in values["spec"]

    values["spec"] = json.dumps({**json.loads(values["spec"]), "model": {"path": "/models/x"}})
    response = operator_client.post(url, values)

    assert response.status_code == 302, response.content.decode()[:2000]
    recipe = Recipe.objects.get(pk=created["id"])
    assert recipe.version == 2 and "served_model_name" not in recipe.spec
    assert _model_name_arg(_plan(operator_api, created["id"])) == "x"
    page = operator_client.get(reverse("deployments:recipe-dry-run", args=[created["id"]])).content.decode()
    assert "--model-name x " in page and "a/b" not in page


def test_the_form_and_the_api_store_the_same_spec(operator_client, operator_api):
    by_api = _created(operator_api, _sim_spec(), name="by-api")
    response = operator_client.post(reverse("deployments:recipe-create"), {
        "name": "by-form", "description": "", "engine": "sim", "topology": "single",
        "node": Recipe.objects.get(pk=by_api["id"]).node_id,
        "spec": '{"model": {"name": "a/b"}, "roles": {"single": {"cpus": "0", "port": 31500}}, '
                '"sim": {"profile": "demo-fast"}}',
    })

    assert response.status_code == 302, response.content.decode()[:2000]
    assert Recipe.objects.get(name="by-form").spec == Recipe.objects.get(name="by-api").spec


def test_a_patch_of_the_path_says_the_stored_name_is_merged_in(operator_api):
    created = _created(operator_api, _sim_spec())

    response = operator_api.patch(f"/api/recipes/{created['id']}/", {"spec": {"model": {"path": "/models/x"}}},
                                  format="json")

    assert response.status_code == 400
    assert response.json()["spec.model"] == [
        "give exactly one of path or name: this patch gives path, and the stored name 'a/b' is merged in (a merge "
        'patch keeps every key it leaves out); send "name": null beside the path to clear it, or send the whole '
        "spec with PUT"]
    assert Recipe.objects.get(pk=created["id"]).version == 1


def test_a_spec_with_both_still_reads_the_plain_rule(operator_api):
    created = _created(operator_api, _sim_spec())

    response = operator_api.patch(f"/api/recipes/{created['id']}/",
                                  {"spec": {"model": {"path": "/models/x", "name": "c/d"}}}, format="json")

    assert response.json()["spec.model"] == ["give exactly one of path or name"]


def test_the_migration_drops_only_a_stored_default(operator):
    node = cpu_node_create()
    default = recipe_row_create(node=node, name="old-default", spec={**_sim_spec(), "served_model_name": "a/b"})
    given = recipe_row_create(node=node, name="old-given", spec={**_sim_spec(), "served_model_name": "public"})
    services.recipe_update(recipe=given, user=operator, description="a history row holding the given name")
    migration = importlib.import_module("deployments.migrations.0011_served_model_name_follows_model")

    migration.drop_stored_defaults(apps, None)

    assert "served_model_name" not in Recipe.objects.get(pk=default.pk).spec
    assert [row.spec for row in default.history.all()] == [_sim_spec()]
    assert Recipe.objects.get(pk=given.pk).spec["served_model_name"] == "public"
    assert [row.spec["served_model_name"] for row in given.history.all()] == ["public", "public"]


def test_the_service_says_the_same_for_a_patch_of_the_name(operator_api, operator):
    created = _created(operator_api, _sim_spec(model={"path": "/models/x"}))
    recipe = Recipe.objects.get(pk=created["id"])

    with pytest.raises(InvalidInput) as refused:
        services.recipe_update(recipe=recipe, user=operator, spec_patch={"model": {"name": "c/d"}})

    assert refused.value.errors["spec.model"] == [
        "give exactly one of path or name: this patch gives name, and the stored path '/models/x' is merged in (a "
        'merge patch keeps every key it leaves out); send "path": null beside the name to clear it, or send the '
        "whole spec with PUT"]
